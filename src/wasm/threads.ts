// Threads for the 'wasm' backend: N − 1 workers, each with an instance of the shared-memory module
// per kernel instance of the engine (opened by id on the same WebAssembly.Memory), and the calling
// thread as the N-th. A pass is split into N lists of kernel calls (rows of a GEMM, heads of the
// attention) that write disjoint parts of the memory; the caller runs list 0 while the workers run
// theirs, and the pass ends when all have answered.
// Workers are Node's worker_threads, or in a browser Web Workers started from a Blob URL of the same
// small source (no file to serve), where the page is cross-origin isolated (SharedArrayBuffer);
// elsewhere one thread, and resolveThreads says why (threadSupport) in the engine's threadsNote.
//
// How a pass reaches a worker: by postMessage, or, right after a pass (a decode step's passes come
// every few hundred µs), through shared memory. After each pass a worker waits a while (LINGER_MS) in
// Atomics.wait on its slot of the pool's control block; a pass written into its job area then costs a
// store and a notify instead of a message's ~35 µs round trip, and the caller waits for its answer in
// the same block (Atomics.wait where the thread may block, a spin on a browser's main thread), up to
// a bound, then by message. Messages (open, close, a pass by message) go first: the caller writes a
// pass into memory only when the worker has handled every message sent to it (SENT = HANDLED) and is
// waiting (its STATE moved LISTENING → JOB by compare-exchange); sending a message wakes a waiting
// worker back to its event loop.

import { AttentionError, DisposedError } from '../errors.ts';
import { importNodeOnly } from '../node-only.ts';

/** One call of a kernel export: its name and its arguments. */
export type KernelCall = [name: string, ...args: number[]];

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
type WorkerMessage = { ready: true } | { seq: number; error?: string };

/** A worker's slot in the control block (Int32, one 64-byte line each): */
const SLOT = 16;
/** AWAY (in its event loop), LISTENING (in Atomics.wait), JOB (a pass written into its area). */
const STATE = 0;
/** The seq of the last pass it finished, and of the last that failed. */
const DONE = 1;
const FAILED = 2;
/** 1 when the caller stopped waiting in memory: the worker then answers the pass by message too. */
const WAITING = 3;
/** Messages the pool has sent it, and messages it has handled. */
const SENT = 4;
const HANDLED = 5;
const [AWAY, LISTENING, JOB] = [0, 1, 2];
/** A worker's job area, in float64s: [instance id, seq, calls, then each call's export index, argument count, arguments]. */
const AREA = 4096;
/** How long a worker waits in memory for the next pass before it goes back to its event loop. */
const LINGER_MS = 250;
/** How long a worker (and the caller, for an answer) spins before it blocks in Atomics.wait. */
const SPIN_MS = 0.1;
/** The longest the caller waits for a worker's answer in memory (blocking, or spinning on a browser's main thread). */
const MAX_WAIT_MS = 5;

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
      Atomics.wait(ctl, at + STATE, LISTENING, LINGER_MS);
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
const START_TIMEOUT_MS = 30_000;

const DISPOSED = 'the engine was disposed';

export class ThreadPool {
  private seq = 0;
  private readonly pending = new Map<number, { resolve: () => void; reject: (e: Error) => void }>();
  private busy = 0;
  /** Why the pool can run nothing more (a worker died, or the engine was disposed); null while it can. */
  private broken: string | null = null;
  /** Resolves when every worker has said it is ready; rejects if one fails first. */
  private readonly started: Promise<void>;
  /** The control block: a slot of SLOT int32s a worker (see STATE … HANDLED). */
  private readonly ctl: Int32Array;
  /** Each worker's job area. */
  private readonly areas: Float64Array[];
  /** The export names of the calls passed in memory, by index (the workers hold the same list). */
  private readonly names: string[] = [];
  private readonly nameIndex = new Map<string, number>();
  /** Each worker's part of a pass, by how it went: through memory, by message, and those of memory answered by message (the caller stopped waiting). */
  readonly handoffs = { memory: 0, message: 0, answeredByMessage: 0 };

  private constructor(private readonly workers: ThreadPort[]) {
    let ready = 0;
    let failed: (why: string) => void = () => {};
    this.ctl = new Int32Array(new SharedArrayBuffer(4 * SLOT * Math.max(1, workers.length)));
    this.areas = workers.map(() => new Float64Array(new SharedArrayBuffer(8 * AREA)));
    this.started = new Promise<void>((resolve, reject) => {
      failed = (why) => reject(new Error(why));
      if (workers.length === 0) resolve();
      for (const w of workers) {
        w.listen(
          (m) => {
            if ('ready' in m) {
              if (++ready === workers.length) resolve();
            } else this.settle(m.seq, m.error);
          },
          (why) => {
            failed(why);
            this.break(why);
          },
        );
      }
    });
    this.started.catch(() => {}); // create() reports it
    for (let t = 0; t < workers.length; t++) this.send(t, { type: 'control', control: this.ctl.buffer, area: this.areas[t].buffer, slot: t });
  }

  /** A pool of `threads` threads in all (threads − 1 workers), once every worker has started. */
  static async create(threads: number, start: () => ThreadPort | Promise<ThreadPort> = startWorker): Promise<ThreadPool> {
    const workers: ThreadPort[] = [];
    try {
      for (let i = 1; i < threads; i++) workers.push(await start());
    } catch (e) {
      for (const w of workers) w.terminate();
      throw e;
    }
    const pool = new ThreadPool(workers);
    for (const w of workers) w.hold(true); // until they are ready (Node: the process waits for them)
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`they did not start within ${START_TIMEOUT_MS / 1000} s`)), START_TIMEOUT_MS);
    });
    try {
      await Promise.race([pool.started, timeout]);
    } catch (e) {
      pool.dispose();
      throw e;
    } finally {
      clearTimeout(timer);
      for (const w of workers) w.hold(false); // idle workers do not keep the process alive
    }
    return pool;
  }

  /** Threads in all, the caller's included. */
  get size(): number {
    return this.workers.length + 1;
  }

  /** Instantiates `module` on `memory` in every worker, as kernel instance `id`. */
  open(id: number, module: WebAssembly.Module, memory: WebAssembly.Memory): void {
    for (let t = 0; t < this.workers.length; t++) this.send(t, { type: 'open', id, module, memory });
  }

  close(id: number): void {
    for (let t = 0; t < this.workers.length; t++) this.send(t, { type: 'close', id });
  }

  /** Runs lists[1 …] on the workers (instance `id`) and lists[0] with `local`; resolves when all are done. */
  async run(id: number, lists: KernelCall[][], local: (calls: KernelCall[]) => void): Promise<void> {
    if (this.broken) throw this.failure(this.broken);
    const done: Promise<void>[] = [];
    const inMemory: [t: number, seq: number][] = [];
    for (let t = 1; t < lists.length; t++) {
      if (lists[t].length === 0) continue;
      this.seq = (this.seq + 1) | 0;
      const seq = this.seq;
      if (this.writeJob(t - 1, id, seq, lists[t])) inMemory.push([t - 1, seq]);
      else {
        this.handoffs.message++;
        done.push(this.answer(seq));
        this.send(t - 1, { type: 'run', id, seq, calls: lists[t] });
      }
    }
    const t0 = performance.now();
    try {
      local(lists[0]);
    } catch (e) {
      for (const p of done) p.catch(() => {}); // the caller's error is the pass's; the workers' answers still come
      throw e;
    }
    if (inMemory.length > 0) {
      // The workers' lists are about as long as the caller's: wait for them in memory about as long again,
      // and at most MAX_WAIT_MS (this blocks the thread's event loop), then by message.
      const t1 = performance.now();
      const until = t1 + Math.min(MAX_WAIT_MS, 1 + 2 * (t1 - t0));
      for (const [w, seq] of inMemory) {
        const i = w * SLOT;
        for (let now = performance.now(); Atomics.load(this.ctl, i + DONE) !== seq && now < until; now = performance.now()) {
          if (canBlock() && now > t1 + SPIN_MS) Atomics.wait(this.ctl, i + DONE, Atomics.load(this.ctl, i + DONE), until - now);
        }
        if (Atomics.load(this.ctl, i + DONE) === seq && Atomics.load(this.ctl, i + FAILED) !== seq) continue;
        // Not done yet (or failed: the worker sends its error by message): wait by message. The worker
        // reads WAITING after storing DONE, and this reads DONE after storing WAITING: one of them sees the other.
        done.push(this.answer(seq));
        this.handoffs.answeredByMessage++;
        Atomics.store(this.ctl, i + WAITING, 1);
        if (Atomics.load(this.ctl, i + DONE) === seq && Atomics.load(this.ctl, i + FAILED) !== seq) this.settle(seq);
      }
    }
    await Promise.all(done);
  }

  /** Writes a pass into worker w's area and hands it over, if w is waiting in memory and has handled every message; else false. */
  private writeJob(w: number, id: number, seq: number, calls: KernelCall[]): boolean {
    const i = w * SLOT;
    if (Atomics.load(this.ctl, i + STATE) !== LISTENING || Atomics.load(this.ctl, i + SENT) !== Atomics.load(this.ctl, i + HANDLED)) return false;
    const area = this.areas[w];
    let at = 3;
    for (const call of calls) at += 1 + call.length;
    if (at > AREA) return false;
    if (calls.some(([name]) => !this.nameIndex.has(name))) {
      for (const [name] of calls) if (!this.nameIndex.has(name)) this.nameIndex.set(name, this.names.push(name) - 1);
      for (let t = 0; t < this.workers.length; t++) this.send(t, { type: 'names', names: this.names });
      return false; // this pass by message, after the names
    }
    area[0] = id;
    area[1] = seq;
    area[2] = calls.length;
    at = 3;
    for (const [name, ...args] of calls) {
      area[at] = this.nameIndex.get(name)!;
      area[at + 1] = args.length;
      area.set(args, at + 2);
      at += 2 + args.length;
    }
    Atomics.store(this.ctl, i + WAITING, 0);
    if (Atomics.compareExchange(this.ctl, i + STATE, LISTENING, JOB) !== LISTENING) return false; // it stopped waiting
    Atomics.notify(this.ctl, i + STATE);
    this.handoffs.memory++;
    return true;
  }

  /** Posts a message to worker w, counted in SENT, and wakes it if it waits in memory. */
  private send(w: number, message: unknown): void {
    const i = w * SLOT;
    Atomics.add(this.ctl, i + SENT, 1);
    this.workers[w].post(message);
    if (Atomics.compareExchange(this.ctl, i + STATE, LISTENING, AWAY) === LISTENING) Atomics.notify(this.ctl, i + STATE);
  }

  /** Resolves when pass `seq` is answered by message (rejects if it failed or the pool broke). */
  private answer(seq: number): Promise<void> {
    if (this.busy++ === 0) for (const w of this.workers) w.hold(true); // keep the process alive while a pass runs
    return new Promise<void>((resolve, reject) => this.pending.set(seq, { resolve, reject }));
  }

  dispose(): void {
    this.break(DISPOSED);
    for (const w of this.workers) w.terminate();
  }

  /** Fails the passes in flight and every later one. */
  private break(why: string): void {
    this.broken ??= why;
    for (const seq of [...this.pending.keys()]) this.settle(seq, why);
  }

  private settle(seq: number, error?: string): void {
    const p = this.pending.get(seq);
    if (!p) return;
    this.pending.delete(seq);
    if (--this.busy === 0) for (const w of this.workers) w.hold(false);
    if (error) p.reject(this.failure(error));
    else p.resolve();
  }

  private failure(why: string): AttentionError {
    return why === DISPOSED
      ? new DisposedError("AttentionEngine (backend 'wasm'): this engine", 'Create a new one with createAttentionEngine().')
      : new AttentionError(`'wasm' backend threads: ${why}. Create a new engine (threads: 1 runs without workers).`);
  }
}

/** Whether this thread may block in Atomics.wait (not a browser's main thread). */
let blocking: boolean | undefined;
function canBlock(): boolean {
  if (blocking === undefined) {
    try {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 1, 0); // "not-equal" at once where it may block; throws where it may not
      blocking = true;
    } catch {
      blocking = false;
    }
  }
  return blocking;
}

/** What a Node worker_threads Worker offers the pool. */
interface NodeWorker {
  postMessage(message: unknown): void;
  on(event: 'message' | 'error' | 'exit', listener: (value: never) => void): void;
  ref(): void;
  unref(): void;
  terminate(): Promise<number>;
}

/** One worker: worker_threads in Node, else a Web Worker from a Blob URL. */
async function startWorker(): Promise<ThreadPort> {
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
function inNode(): boolean {
  return typeof process !== 'undefined' && typeof process.versions?.node === 'string';
}

/** What decides whether threads can run here. */
export interface ThreadEnvironment {
  node: boolean;
  /** The page's crossOriginIsolated (browsers; undefined where there is none). */
  crossOriginIsolated: boolean | undefined;
  sharedArrayBuffer: boolean;
  /** Web Workers (browsers). */
  workers: boolean;
}

export function threadEnvironment(): ThreadEnvironment {
  return {
    node: inNode(),
    crossOriginIsolated: (globalThis as { crossOriginIsolated?: boolean }).crossOriginIsolated,
    sharedArrayBuffer: typeof SharedArrayBuffer !== 'undefined',
    workers: typeof Worker !== 'undefined',
  };
}

/** Why threads cannot run in `env` (the engine's threadsNote, with the fix), or null when they can. */
export function threadSupport(env: ThreadEnvironment): string | null {
  const one = "the 'wasm' backend runs on one thread";
  if (!env.node) {
    if (env.crossOriginIsolated !== true) {
      return (
        `this page is not cross-origin isolated (crossOriginIsolated is false, so there is no SharedArrayBuffer): ${one}. ` +
        'For threads, serve the page with the headers Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp'
      );
    }
    if (!env.workers) return `Web Workers are not available here: ${one}`;
  }
  if (!env.sharedArrayBuffer) return `SharedArrayBuffer is not available here: ${one}`;
  return null;
}

/** The number of cores: os.availableParallelism() in Node, navigator.hardwareConcurrency in a browser. */
async function cores(node: boolean): Promise<number> {
  if (node) {
    const os = (await importNodeOnly('node:os')) as { availableParallelism?: () => number; cpus: () => unknown[] };
    return os.availableParallelism?.() ?? os.cpus().length;
  }
  return (globalThis as { navigator?: { hardwareConcurrency?: number } }).navigator?.hardwareConcurrency ?? 1;
}

/**
 * The threads the 'wasm' backend will run: `requested`, or the number of cores, where threads are
 * available; else 1, with the reason.
 */
export async function resolveThreads(
  requested: number | undefined,
  env = threadEnvironment(),
  start: () => ThreadPort | Promise<ThreadPort> = startWorker,
): Promise<{ pool: ThreadPool | null; note: string | null }> {
  if (requested === 1) return { pool: null, note: null };
  const unsupported = threadSupport(env);
  if (unsupported) return { pool: null, note: unsupported };
  const threads = requested ?? (await cores(env.node));
  if (threads <= 1) return { pool: null, note: null };
  try {
    return { pool: await ThreadPool.create(threads, start), note: null };
  } catch (e) {
    const fix = env.node ? '' : '. A Content-Security-Policy that forbids blob: workers does this: allow them with worker-src blob:';
    return { pool: null, note: `worker threads could not be started (${(e as Error).message}): the 'wasm' backend runs on one thread${fix}` };
  }
}
