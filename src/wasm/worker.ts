// The workers of the 'wasm' backend's thread pool (threads.ts): their code, run by Node's worker_threads
// or, in a browser, by a Web Worker started from a Blob URL of the same small source (no file to
// serve); the control block they share with the pool (a slot of SLOT int32s a worker) and the job
// area; and how one is started. A worker holds an instance of the shared-memory module per kernel
// instance (opened by id) and takes part in the passes offered to it (threads.ts says how): it claims
// the pass's lists of calls one at a time, with the caller and the other workers, until none is left.

import { importNodeOnly } from '../node-only.ts';

/** A worker as the pool sees it, in Node or in a browser. */
export interface ThreadPort {
  post(message: unknown): void;
  /** Calls onMessage with each message it sends, onFailure once if it fails or exits. */
  listen(onMessage: (message: WorkerMessage) => void, onFailure: (why: string) => void): void;
  /** Whether it keeps the process alive (Node; nothing in a browser). */
  hold(on: boolean): void;
  terminate(): void;
}

/** What a worker sends: once ready, then one answer per run. */
export type WorkerMessage = { ready: true } | { seq: number; error?: string };

/** A worker's slot in the control block (Int32, one 64-byte line each): */
export const SLOT = 16;
/** AWAY (in its event loop) or LISTENING (in listen(): offers reach it through memory). */
export const STATE = 0;
/** The seq of the last pass it finished, and of the last that failed. */
export const DONE = 1;
export const FAILED = 2;
/** 1 when the caller stopped waiting in memory: the worker then answers the pass by message too. */
export const WAITING = 3;
/** Messages the pool has sent it, and messages it has handled. */
export const SENT = 4;
export const HANDLED = 5;
/** A pass offered to it: seq > 0 offered, −seq taken by the worker, 0 (or an older −seq) none; a compare-exchange decides between the worker's take and the caller's revoke. */
export const OFFER = 6;
export const [AWAY, LISTENING] = [0, 1];
/**
 * The pass's job area, shared by every worker, in float64s: [instance id, seq, lists n, where each
 * list starts (n entries), then each list: its call count, then each call's export index, argument
 * count and arguments]. The lists are claimed one at a time by an Atomics.add on the pool's claim
 * counter (after the workers' slots), by the caller and by each worker that took the offer.
 */
export const AREA = 1 << 16;
/** How long a worker waits in memory for the next pass before it goes back to its event loop. */
export const LINGER_MS = 250;
/** How long a worker (and the caller, for an answer) spins before it blocks in Atomics.wait. */
export const SPIN_MS = 0.1;
/** The workers' code after a prelude that defines post(message) and calls handle(message) for each one received. */
const WORKER_BODY = `
const [SLOT, STATE, DONE, FAILED, WAITING, SENT, HANDLED, OFFER, AWAY, LISTENING, LINGER_MS, SPIN_MS] =
  [${SLOT}, ${STATE}, ${DONE}, ${FAILED}, ${WAITING}, ${SENT}, ${HANDLED}, ${OFFER}, ${AWAY}, ${LISTENING}, ${LINGER_MS}, ${SPIN_MS}];
const instances = new Map();
let ctl = null, area = null, at = 0, claim = 0, names = [], handled = 0;
// Pass seq: claims lists until none is left, runs each; then DONE (and FAILED), and an answer by message if asked.
function runPass(seq) {
  let error = null;
  try {
    const id = area[0];
    const inst = instances.get(id);
    if (!inst) throw new Error('no kernel instance ' + id + ' on this worker');
    // The caller may have grown the shared memory just before the offer: grow(0) brings this thread's
    // instance up to its size now (V8 tells other threads of a growth by an interrupt they handle later).
    inst.memory.grow(0);
    const k = inst.exports;
    const n = area[2];
    for (let i = Atomics.add(ctl, claim, 1); i < n; i = Atomics.add(ctl, claim, 1)) {
      let p = area[3 + i];
      for (let c = area[p++]; c > 0; c--) {
        const name = names[area[p]];
        const argc = area[p + 1];
        const f = k[name];
        if (typeof f !== 'function') throw new Error('no kernel ' + name + ' in instance ' + id);
        f.apply(null, area.subarray(p + 2, p + 2 + argc));
        p += 2 + argc;
      }
    }
  } catch (e) {
    error = String(e && e.stack || e);
  }
  if (error) Atomics.store(ctl, at + FAILED, seq);
  Atomics.store(ctl, at + DONE, seq);
  const answer = error || Atomics.load(ctl, at + WAITING) === 1; // after DONE: see ThreadPool.settleWorker
  Atomics.notify(ctl, at + DONE);
  if (answer) post(error ? { seq, error } : { seq });
}
// The pass offered, taken (the offer turned to −seq), or 0; never before every message sent is handled
// (an offer may call an instance or an export name that a message brings).
function take() {
  if (Atomics.load(ctl, at + SENT) !== handled) return 0;
  const offer = Atomics.load(ctl, at + OFFER);
  return offer > 0 && Atomics.compareExchange(ctl, at + OFFER, offer, -offer) === offer ? offer : 0;
}
// Takes the passes offered until none comes within LINGER_MS or a message is sent, then back to the event loop.
function listen() {
  Atomics.store(ctl, at + STATE, LISTENING);
  for (;;) {
    let seq = take();
    if (!seq && Atomics.load(ctl, at + SENT) === handled) {
      // A spin first: the next pass of a step comes within tens of µs, and a wake-up from Atomics.wait costs ~20.
      for (const until = performance.now() + SPIN_MS; performance.now() < until && Atomics.load(ctl, at + OFFER) <= 0 && Atomics.load(ctl, at + SENT) === handled; );
      // Until LINGER_MS have passed on this clock: under load Atomics.wait was seen to return 'timed-out'
      // within the millisecond it began.
      for (const until = performance.now() + LINGER_MS; Atomics.load(ctl, at + SENT) === handled; ) {
        const offer = Atomics.load(ctl, at + OFFER);
        const left = until - performance.now();
        if (offer > 0 || left <= 0) break;
        Atomics.wait(ctl, at + OFFER, offer, left);
      }
      seq = take();
    }
    if (seq) {
      runPass(seq);
      continue;
    }
    // Away (a message waits, or no pass came): say so first, then look once more, for an offer made
    // before the caller could see this worker away (it sends a message to one it sees away).
    Atomics.store(ctl, at + STATE, AWAY);
    seq = take();
    if (!seq) return;
    Atomics.store(ctl, at + STATE, LISTENING);
    runPass(seq);
  }
}
function handle(m) {
  if (m.type === 'control') {
    ctl = new Int32Array(m.control);
    area = new Float64Array(m.area);
    at = m.slot * SLOT;
    claim = m.claim;
  } else if (m.type === 'names') names = m.names;
  else if (m.type === 'open') instances.set(m.id, { exports: new WebAssembly.Instance(m.module, { env: { memory: m.memory } }).exports, memory: m.memory });
  else if (m.type === 'close') instances.delete(m.id);
  Atomics.store(ctl, at + HANDLED, ++handled);
  listen(); // 'join' (a pass offered while this was away) comes here for no more than this
}
post({ ready: true });
`;

/** CommonJS, run by node:worker_threads' `new Worker(code, { eval: true })`. */
const NODE_WORKER = `const { parentPort } = require('node:worker_threads');
const post = (m) => parentPort.postMessage(m);
parentPort.on('message', (m) => handle(m));
${WORKER_BODY}`;

/** A classic Web Worker script. */
const BROWSER_WORKER = `const post = (m) => self.postMessage(m);
self.onmessage = (e) => handle(e.data);
${WORKER_BODY}`;

/** How long workers may take to start before the engine runs on one thread instead. */
export const START_TIMEOUT_MS = 30_000;

/** What a Node worker_threads Worker offers the pool. */
interface NodeWorker {
  postMessage(message: unknown): void;
  on(event: 'message' | 'error' | 'exit', listener: (value: never) => void): void;
  ref(): void;
  unref(): void;
  terminate(): Promise<number>;
}

/** One worker: worker_threads in Node, else a Web Worker from a Blob URL. */
export async function startWorker(): Promise<ThreadPort> {
  if (inNode()) {
    const { Worker } = (await importNodeOnly('node:worker_threads')) as { Worker: new (code: string, options: { eval: true }) => NodeWorker };
    const w = new Worker(NODE_WORKER, { eval: true });
    return {
      post: (m) => w.postMessage(m),
      listen(onMessage, onFailure) {
        w.on('message', onMessage);
        w.on('error', (e: Error) => onFailure(`a worker failed: ${e.message}`));
        w.on('exit', (code: number) => onFailure(`a worker exited (code ${code})`));
      },
      hold: (on) => (on ? w.ref() : w.unref()),
      terminate: () => void w.terminate(),
    };
  }
  const url = URL.createObjectURL(new Blob([BROWSER_WORKER], { type: 'text/javascript' }));
  let w: Worker;
  try {
    w = new Worker(url, { name: 'webgpu-attention wasm thread' });
  } finally {
    setTimeout(() => URL.revokeObjectURL(url), START_TIMEOUT_MS); // after it has loaded (revoking at once can race the fetch)
  }
  return {
    post: (m) => w.postMessage(m),
    listen(onMessage, onFailure) {
      w.onmessage = (e) => onMessage(e.data);
      w.onerror = (e) => {
        e.preventDefault();
        onFailure(`a worker failed: ${e.message || 'its script could not be loaded or run'}`);
      };
      w.onmessageerror = () => onFailure('a worker could not receive a message (the memory or module could not be shared)');
    },
    hold: () => {},
    terminate: () => w.terminate(),
  };
}

/** Whether this is Node (worker_threads available). */
export function inNode(): boolean {
  return typeof process !== 'undefined' && typeof process.versions?.node === 'string';
}
