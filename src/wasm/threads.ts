// Threads for the 'wasm' backend, in Node (worker_threads): N − 1 workers, each with an instance of
// the shared-memory module per kernel instance of the engine (opened by id on the same
// WebAssembly.Memory), and the calling thread as the N-th. A pass is split into N lists of kernel
// calls (rows of a GEMM, heads of the attention) that write disjoint parts of the memory; the caller
// runs list 0 while the workers run theirs, and the pass ends when all have answered.
// Browsers run one thread for now (a worker there needs a script URL and cross-origin isolation);
// resolveThreads says why in the engine's threadsNote.

import { AttentionError, DisposedError } from '../errors.ts';
import { importNodeOnly } from '../node-only.ts';

/** One call of a kernel export: its name and its arguments. */
export type KernelCall = [name: string, ...args: number[]];

/** What the pool needs of a node:worker_threads Worker. */
interface NodeWorker {
  postMessage(message: unknown): void;
  on(event: 'message' | 'error' | 'exit', listener: (value: never) => void): void;
  ref(): void;
  unref(): void;
  terminate(): Promise<number>;
}

/** The workers' code (CommonJS, run by `new Worker(code, { eval: true })`). */
const WORKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
const instances = new Map();
parentPort.on('message', (m) => {
  if (m.type === 'open') instances.set(m.id, new WebAssembly.Instance(m.module, { env: { memory: m.memory } }).exports);
  else if (m.type === 'close') instances.delete(m.id);
  else if (m.type === 'run') {
    try {
      const k = instances.get(m.id);
      for (const [name, ...args] of m.calls) k[name](...args);
      parentPort.postMessage({ seq: m.seq });
    } catch (e) {
      parentPort.postMessage({ seq: m.seq, error: String(e && e.stack || e) });
    }
  }
});
`;

const DISPOSED = 'the engine was disposed';

export class ThreadPool {
  private seq = 0;
  private readonly pending = new Map<number, { resolve: () => void; reject: (e: Error) => void }>();
  private busy = 0;
  /** Why the pool can run nothing more (a worker died, or the engine was disposed); null while it can. */
  private broken: string | null = null;

  private constructor(private readonly workers: NodeWorker[]) {
    for (const w of workers) {
      w.unref(); // idle workers do not keep the process alive
      w.on('message', (m: { seq: number; error?: string }) => this.settle(m.seq, m.error));
      w.on('error', (e: Error) => this.break(`a worker failed: ${e.message}`));
      w.on('exit', (code: number) => this.break(`a worker exited (code ${code})`));
    }
  }

  /** A pool of `threads` threads in all (threads − 1 workers). */
  static async create(threads: number): Promise<ThreadPool> {
    const { Worker } = (await importNodeOnly('node:worker_threads')) as { Worker: new (code: string, options: { eval: true }) => NodeWorker };
    return new ThreadPool(Array.from({ length: threads - 1 }, () => new Worker(WORKER_SOURCE, { eval: true })));
  }

  /** Threads in all, the caller's included. */
  get size(): number {
    return this.workers.length + 1;
  }

  /** Instantiates `module` on `memory` in every worker, as kernel instance `id`. */
  open(id: number, module: WebAssembly.Module, memory: WebAssembly.Memory): void {
    for (const w of this.workers) w.postMessage({ type: 'open', id, module, memory });
  }

  close(id: number): void {
    for (const w of this.workers) w.postMessage({ type: 'close', id });
  }

  /** Runs lists[1 …] on the workers (instance `id`) and lists[0] with `local`; resolves when all are done. */
  async run(id: number, lists: KernelCall[][], local: (calls: KernelCall[]) => void): Promise<void> {
    if (this.broken) throw this.failure(this.broken);
    const done: Promise<void>[] = [];
    for (let t = 1; t < lists.length; t++) {
      if (lists[t].length === 0) continue;
      const seq = this.seq++;
      done.push(new Promise<void>((resolve, reject) => this.pending.set(seq, { resolve, reject })));
      if (this.busy++ === 0) for (const w of this.workers) w.ref(); // keep the process alive while a pass runs
      this.workers[t - 1].postMessage({ type: 'run', id, seq, calls: lists[t] });
    }
    local(lists[0]);
    await Promise.all(done);
  }

  dispose(): void {
    this.break(DISPOSED);
    for (const w of this.workers) void w.terminate();
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
    if (--this.busy === 0) for (const w of this.workers) w.unref();
    if (error) p.reject(this.failure(error));
    else p.resolve();
  }

  private failure(why: string): AttentionError {
    return why === DISPOSED
      ? new DisposedError("AttentionEngine (backend 'wasm'): this engine", 'Create a new one with createAttentionEngine().')
      : new AttentionError(`'wasm' backend threads: ${why}. Create a new engine (threads: 1 runs without workers).`);
  }
}

/** Whether this is Node (worker_threads available). */
function inNode(): boolean {
  return typeof process !== 'undefined' && typeof process.versions?.node === 'string';
}

/**
 * The threads the 'wasm' backend will run: `requested`, or the number of cores, where threads are
 * available; else 1, with the reason.
 */
export async function resolveThreads(requested: number | undefined): Promise<{ pool: ThreadPool | null; note: string | null }> {
  if (requested === 1) return { pool: null, note: null };
  if (!inNode()) {
    return { pool: null, note: "the 'wasm' backend runs threads in Node only for now (worker_threads); here it runs on one thread" };
  }
  if (typeof SharedArrayBuffer === 'undefined') return { pool: null, note: 'SharedArrayBuffer is not available here: one thread' };
  let threads = requested;
  if (threads === undefined) {
    const os = (await importNodeOnly('node:os')) as { availableParallelism?: () => number; cpus: () => unknown[] };
    threads = os.availableParallelism?.() ?? os.cpus().length;
  }
  if (threads <= 1) return { pool: null, note: null };
  try {
    return { pool: await ThreadPool.create(threads), note: null };
  } catch (e) {
    return { pool: null, note: `worker threads could not be started (${(e as Error).message}): one thread` };
  }
}
