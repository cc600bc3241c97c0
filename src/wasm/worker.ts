// The workers of the 'wasm' backend's thread pool (threads.ts): their code, run by Node's worker_threads
// or, in a browser, by a Web Worker started from a Blob URL of the same small source (no file to
// serve); the control block they share with the pool (a slot of SLOT int32s a worker) and their job
// areas; and how one is started. A worker holds an instance of the shared-memory module per kernel
// instance (opened by id), runs the passes it is given (by message, or through its job area while it
// waits after a pass: threads.ts says how) and answers each.

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
/** AWAY (in its event loop), LISTENING (in Atomics.wait), JOB (a pass written into its area). */
export const STATE = 0;
/** The seq of the last pass it finished, and of the last that failed. */
export const DONE = 1;
export const FAILED = 2;
/** 1 when the caller stopped waiting in memory: the worker then answers the pass by message too. */
export const WAITING = 3;
/** Messages the pool has sent it, and messages it has handled. */
export const SENT = 4;
export const HANDLED = 5;
export const [AWAY, LISTENING, JOB] = [0, 1, 2];
/** A worker's job area, in float64s: [instance id, seq, calls, then each call's export index, argument count, arguments]. */
export const AREA = 4096;
/** How long a worker waits in memory for the next pass before it goes back to its event loop. */
export const LINGER_MS = 250;
/** How long a worker (and the caller, for an answer) spins before it blocks in Atomics.wait. */
export const SPIN_MS = 0.1;
/** The workers' code after a prelude that defines post(message) and calls handle(message) for each one received. */
const WORKER_BODY = `
const [SLOT, STATE, DONE, FAILED, WAITING, SENT, HANDLED, AWAY, LISTENING, JOB, LINGER_MS, SPIN_MS] =
  [${SLOT}, ${STATE}, ${DONE}, ${FAILED}, ${WAITING}, ${SENT}, ${HANDLED}, ${AWAY}, ${LISTENING}, ${JOB}, ${LINGER_MS}, ${SPIN_MS}];
const instances = new Map();
let ctl = null, area = null, at = 0, names = [], handled = 0;
function runCalls(id, calls) {
  try {
    const k = instances.get(id);
    if (!k) throw new Error('no kernel instance ' + id + ' on this worker');
    for (const [name, ...args] of calls) {
      if (typeof k[name] !== 'function') throw new Error('no kernel ' + name + ' in instance ' + id);
      k[name](...args);
    }
  } catch (e) {
    return String(e && e.stack || e);
  }
}
// Waits (STATE is LISTENING) for passes in memory until none comes within LINGER_MS or a message is sent.
function listen() {
  for (;;) {
    if (Atomics.load(ctl, at + SENT) === handled) {
      // A spin first: the next pass of a step comes within tens of µs, and a wake-up from Atomics.wait costs ~20.
      for (const until = performance.now() + SPIN_MS; performance.now() < until && Atomics.load(ctl, at + STATE) === LISTENING; );
      // Until LINGER_MS have passed on this clock: under load Atomics.wait was seen to return 'timed-out'
      // within the millisecond it began.
      for (const until = performance.now() + LINGER_MS; Atomics.load(ctl, at + STATE) === LISTENING && Atomics.load(ctl, at + SENT) === handled; ) {
        const left = until - performance.now();
        if (left <= 0) break;
        Atomics.wait(ctl, at + STATE, LISTENING, left);
      }
    }
    if (Atomics.compareExchange(ctl, at + STATE, LISTENING, AWAY) !== JOB) return;
    const seq = area[1];
    const calls = [];
    for (let c = 0, i = 3; c < area[2]; c++, i += 2 + area[i + 1]) calls.push([names[area[i]], ...area.subarray(i + 2, i + 2 + area[i + 1])]);
    const error = runCalls(area[0], calls);
    if (error) Atomics.store(ctl, at + FAILED, seq);
    Atomics.store(ctl, at + DONE, seq);
    const answer = error || Atomics.load(ctl, at + WAITING) === 1; // after DONE: see ThreadPool.run
    Atomics.store(ctl, at + STATE, LISTENING); // before the notify: the caller's next pass finds this waiting
    Atomics.notify(ctl, at + DONE);
    if (answer) post(error ? { seq, error } : { seq });
  }
}
function handle(m) {
  if (m.type === 'control') {
    ctl = new Int32Array(m.control);
    area = new Float64Array(m.area);
    at = m.slot * SLOT;
  } else if (m.type === 'names') names = m.names;
  else if (m.type === 'open') instances.set(m.id, new WebAssembly.Instance(m.module, { env: { memory: m.memory } }).exports);
  else if (m.type === 'close') instances.delete(m.id);
  Atomics.store(ctl, at + HANDLED, ++handled);
  if (m.type === 'run') {
    const error = runCalls(m.id, m.calls);
    Atomics.store(ctl, at + STATE, LISTENING); // before the answer: the caller's next pass finds this waiting
    post(error ? { seq: m.seq, error } : { seq: m.seq });
    listen();
  } else if (m.type !== 'control') {
    Atomics.store(ctl, at + STATE, LISTENING); // the next pass through memory too
    listen();
  }
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
