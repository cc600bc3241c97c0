// Threads for the 'wasm' backend: N − 1 workers, each with an instance of the shared-memory module
// per kernel instance of the engine (opened by id on the same WebAssembly.Memory), and the calling
// thread as the N-th. A pass is split into N lists of kernel calls (rows of a GEMM, heads of the
// attention) that write disjoint parts of the memory; the caller runs list 0 while the workers run
// theirs, and the pass ends when all have answered.
// Workers are Node's worker_threads, or in a browser Web Workers started from a Blob URL of the same
// small source (no file to serve), where the page is cross-origin isolated (SharedArrayBuffer);
// elsewhere one thread, and resolveThreads says why (threadSupport) in the engine's threadsNote.

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

/** The workers' code after a prelude that defines post(message) and calls handle(message) for each one received. */
const WORKER_BODY = `
const instances = new Map();
function handle(m) {
  if (m.type === 'open') instances.set(m.id, new WebAssembly.Instance(m.module, { env: { memory: m.memory } }).exports);
  else if (m.type === 'close') instances.delete(m.id);
  else if (m.type === 'run') {
    try {
      const k = instances.get(m.id);
      for (const [name, ...args] of m.calls) k[name](...args);
      post({ seq: m.seq });
    } catch (e) {
      post({ seq: m.seq, error: String(e && e.stack || e) });
    }
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

  private constructor(private readonly workers: ThreadPort[]) {
    let ready = 0;
    let failed: (why: string) => void = () => {};
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
    for (const w of this.workers) w.post({ type: 'open', id, module, memory });
  }

  close(id: number): void {
    for (const w of this.workers) w.post({ type: 'close', id });
  }

  /** Runs lists[1 …] on the workers (instance `id`) and lists[0] with `local`; resolves when all are done. */
  async run(id: number, lists: KernelCall[][], local: (calls: KernelCall[]) => void): Promise<void> {
    if (this.broken) throw this.failure(this.broken);
    const done: Promise<void>[] = [];
    for (let t = 1; t < lists.length; t++) {
      if (lists[t].length === 0) continue;
      const seq = this.seq++;
      done.push(new Promise<void>((resolve, reject) => this.pending.set(seq, { resolve, reject })));
      if (this.busy++ === 0) for (const w of this.workers) w.hold(true); // keep the process alive while a pass runs
      this.workers[t - 1].post({ type: 'run', id, seq, calls: lists[t] });
    }
    local(lists[0]);
    await Promise.all(done);
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
