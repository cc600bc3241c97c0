// Whether the 'wasm' backend's threads can run here and how many it takes (createAttentionEngine's
// options.threads): the environment (Node, or a cross-origin isolated page with Web Workers and
// SharedArrayBuffer), the reason when they cannot (the engine's threadsNote, with the fix), and the
// pool (threads.ts) started for the number asked, or the cores.

import { importNodeOnly } from '../node-only.ts';
import { ThreadPool } from './threads.ts';
import { inNode, startWorker, type ThreadPort } from './worker.ts';

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
