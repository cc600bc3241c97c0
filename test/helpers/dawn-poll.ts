// Dawn's Node binding (the `webgpu` package) waits for GPU work by polling: while any promise of its
// own is pending (mapAsync, onSubmittedWorkDone, createComputePipelineAsync, popErrorScope) it calls
// the global `setImmediate` with a native callback that ticks the device and queues itself again, so
// the test process's main thread spins at 100% of a core for as long as a kernel compiles or runs.
// On this 2-core machine that core is taken from lavapipe's compiler and execution threads, and from
// the other test file running beside it (measured: one cold compile, 32 s of wall time, took 60 s of
// CPU spinning and 35 s not).
//
// For the tests only, Dawn's poll runs at most once a millisecond (setTimeout) instead of at once:
// a GPU result is seen up to 1 ms later, and the core is free meanwhile. Other setImmediate callers
// (JavaScript functions, vitest's own) are untouched. The engine itself does not do this: patching a
// global is not a library's business, and a Node user who wants it can do the same.

const immediate = globalThis.setImmediate;
const sourceOf = Function.prototype.toString;

function isNative(fn: unknown): boolean {
  return typeof fn === 'function' && fn.name === '' && sourceOf.call(fn).endsWith('{ [native code] }');
}

/** Makes Dawn's native poll callbacks wait a millisecond (idempotent). */
export function throttleDawnPolling(): void {
  if ((globalThis.setImmediate as { throttled?: boolean }).throttled) return;
  const throttled = ((fn: (...args: unknown[]) => void, ...args: unknown[]) =>
    isNative(fn) ? setTimeout(fn, 1, ...args) : immediate(fn, ...args)) as unknown as typeof setImmediate & { throttled: boolean };
  throttled.throttled = true;
  globalThis.setImmediate = throttled;
}
