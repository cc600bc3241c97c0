// WebGPU's error scopes around one piece of synchronous work: the one way the engine asks WebGPU whether
// it accepted what a call (call.ts), a tuning trial (tuning/trial.ts) or a KV cache's readback
// (kv-cache.ts) did. Error scopes are a per-device stack and calls run concurrently, so the scopes are
// pushed, the work runs and the scopes are popped with no `await` in between; what the scopes caught
// is then a promise, to be awaited beside the work's own (mapAsync, onSubmittedWorkDone).

import type { WebGPUErrorScope } from '../errors.ts';

/** The scopes every piece of work runs in, in the order they are popped. */
export const ERROR_SCOPES: readonly WebGPUErrorScope[] = ['validation', 'out-of-memory', 'internal'];

/** What one scope caught. */
export interface CaughtError {
  scope: WebGPUErrorScope;
  message: string;
}

/** The outcome of `inErrorScopes`: the work's value, or what it threw; and the first error a scope caught (null: none). */
export interface Scoped<T> {
  ok: boolean;
  value: T | undefined;
  thrown: unknown;
  caught: Promise<CaughtError | null>;
}

/** Runs `work` (synchronous) inside validation, out-of-memory and internal error scopes of `device`. */
export function inErrorScopes<T>(device: GPUDevice, work: () => T): Scoped<T> {
  for (const scope of [...ERROR_SCOPES].reverse()) device.pushErrorScope(scope);
  let value: T | undefined;
  let thrown: unknown = null;
  let ok = false;
  try {
    value = work();
    ok = true;
  } catch (e) {
    thrown = e;
  }
  const pops = ERROR_SCOPES.map((scope) => device.popErrorScope().then((error) => (error ? { scope, message: error.message } : null)));
  const caught = Promise.all(pops).then((errors) => errors.find((e) => e !== null) ?? null);
  return { ok, value, thrown, caught };
}
