// Threads for the 'wasm' backend: N − 1 workers, each with an instance of the shared-memory module
// per kernel instance of the engine (opened by id on the same WebAssembly.Memory), and the calling
// thread as the N-th. A pass is split into N lists of kernel calls (rows of a GEMM, heads of the
// attention) that write disjoint parts of the memory; the caller runs list 0 while the workers run
// theirs, and the pass ends when all have answered.
// The workers (worker.ts) are Node's worker_threads, or in a browser Web Workers, where the page is
// cross-origin isolated (SharedArrayBuffer); elsewhere one thread, and resolveThreads says why
// (threadSupport) in the engine's threadsNote.
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
import {
  AREA,
  AWAY,
  DONE,
  FAILED,
  HANDLED,
  inNode,
  JOB,
  LISTENING,
  SENT,
  SLOT,
  SPIN_MS,
  START_TIMEOUT_MS,
  STATE,
  startWorker,
  type ThreadPort,
  WAITING,
} from './worker.ts';

export type { ThreadPort };

/** One call of a kernel export: its name and its arguments. */
export type KernelCall = [name: string, ...args: number[]];

/** The longest the caller waits for a worker's answer in memory (blocking, or spinning on a browser's main thread). */
const MAX_WAIT_MS = 5;

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

  /** Whether worker w waits in memory with every message handled: its next pass would go through memory (diagnostics, tests). */
  waitingInMemory(w: number): boolean {
    const i = w * SLOT;
    return Atomics.load(this.ctl, i + STATE) === LISTENING && Atomics.load(this.ctl, i + SENT) === Atomics.load(this.ctl, i + HANDLED);
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
