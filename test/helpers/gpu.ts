// WebGPU for tests: a real device or a loud failure (never a skip), and error scopes around GPU work.

import { createAttentionEngine, type AttentionEngine, type EngineOptions } from '../../src/index.ts';

const HOW_TO_GET_AN_ADAPTER =
  'GPU tests need a WebGPU adapter and never skip. In Node this engine uses the "webgpu" npm package (Dawn), ' +
  'which needs a Vulkan driver: on Debian 12 run `bash scripts/setup-system.sh` (installs lavapipe, ' +
  'mesa-vulkan-drivers from bookworm-backports) or `npm test`, which runs it.';

// Uncaptured WebGPU errors on any device a test engine ran on; test/setup.ts fails the test that
// caused one (afterEach), so no GPU test passes with an error nobody looked at.
const uncaptured: string[] = [];
const watched = new WeakSet<GPUDevice>();

/** Starts collecting uncaptured errors of `device` (idempotent). */
export function watchDevice(device: GPUDevice): void {
  if (watched.has(device)) return;
  watched.add(device);
  device.addEventListener('uncapturederror', (ev) => uncaptured.push((ev as GPUUncapturedErrorEvent).error.message));
}

/** The uncaptured errors since the last call. */
export function takeUncapturedErrors(): string[] {
  return uncaptured.splice(0);
}

/**
 * An engine on the WebGPU backend; throws with set-up instructions when there is no adapter. Unless
 * `options` say otherwise it does not tune: it runs the built-in variants for the adapter kind, the
 * same in every run (test/tuning.test.ts covers sweeping; test/kernel-variants.test.ts every variant).
 */
export async function createGpuEngine(options: EngineOptions = {}): Promise<AttentionEngine> {
  let engine: AttentionEngine;
  try {
    engine = await createAttentionEngine({ backend: 'webgpu', tuning: { mode: 'off' }, ...options });
  } catch (e) {
    throw new Error(`${(e as Error).message}\n${HOW_TO_GET_AN_ADAPTER}`);
  }
  watchDevice(engine.device!);
  return engine;
}

/**
 * Runs `fn` inside validation and out-of-memory error scopes and fails if either catches an error,
 * or if an uncaptured error reaches the device meanwhile.
 */
export async function withErrorScopes<T>(device: GPUDevice, fn: () => Promise<T>): Promise<T> {
  watchDevice(device);
  const uncaptured: string[] = [];
  const onError = (ev: Event) => uncaptured.push((ev as GPUUncapturedErrorEvent).error.message);
  device.addEventListener('uncapturederror', onError);
  device.pushErrorScope('out-of-memory');
  device.pushErrorScope('validation');
  let result: T;
  try {
    result = await fn();
  } finally {
    const validation = await device.popErrorScope();
    const oom = await device.popErrorScope();
    device.removeEventListener('uncapturederror', onError);
    const problems = [
      validation && `validation error: ${validation.message}`,
      oom && `out-of-memory error: ${oom.message}`,
      ...uncaptured.map((m) => `uncaptured error: ${m}`),
    ].filter(Boolean);
    // biome-ignore lint/correctness/noUnsafeFinally: deliberate: a WebGPU error is the cause of whatever fn() threw, so it is the error reported
    if (problems.length) throw new Error(`WebGPU reported:\n${problems.join('\n')}`);
  }
  return result;
}
