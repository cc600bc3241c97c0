// The engines a test file shares: created once before its tests (beforeAll), disposed after them
// (afterAll). A file calls useEngines() at its top level and reads `engines.gpu` / `engines.cpu` /
// `engines.wasm` inside its tests and hooks.

import { afterAll, beforeAll } from 'vitest';
import { createAttentionEngine, type AttentionEngine, type EngineOptions } from '../../src/index.ts';
import { createGpuEngine } from './gpu.ts';

type Backend = 'webgpu' | 'wasm' | 'cpu';

/**
 * WebGPU engine options for a file whose subject is not the GEMM or the attention kernel (a copy, a
 * head transform): the variants that compile fastest (tier 0) forced, so that the file spends its time
 * on the kernel it tests, not on compiling the slow-to-compile final ones.
 */
export const FAST_COMPILING: EngineOptions = {
  tuning: { mode: 'off', kernels: { qkv_projection: 'register-4x4', flash_attention: 'rows32-keys32-loop', output_projection: 'register-4x4' } },
};

export interface Engines {
  /** The WebGPU engine (createGpuEngine: fails loudly, never skips, without an adapter). */
  readonly gpu: AttentionEngine;
  /** The CPU (float64 reference) engine. */
  readonly cpu: AttentionEngine;
  /** The WebAssembly (float32 SIMD) engine. */
  readonly wasm: AttentionEngine;
  /** `gpu` or `cpu` by backend name. */
  of(backend: Backend): AttentionEngine;
}

/**
 * Registers beforeAll/afterAll hooks that create an engine per backend in `backends` (default webgpu and cpu)
 * and dispose them. Reading an engine before beforeAll has run (at collection time) or one that was
 * not asked for throws, naming it. A first argument `{ webgpu: options }` is passed to createGpuEngine.
 */
export function useEngines(...args: [{ webgpu: EngineOptions }, ...Backend[]] | Backend[]): Engines {
  const gpuOptions = typeof args[0] === 'object' ? args[0].webgpu : {};
  const backends = (args as unknown[]).filter((a): a is Backend => typeof a === 'string');
  const wanted: readonly Backend[] = backends.length ? backends : ['webgpu', 'cpu'];
  const made: Partial<Record<Backend, AttentionEngine>> = {};
  beforeAll(async () => {
    if (wanted.includes('webgpu')) made.webgpu = await createGpuEngine(gpuOptions);
    if (wanted.includes('cpu')) made.cpu = await createAttentionEngine({ backend: 'cpu' });
    if (wanted.includes('wasm')) made.wasm = await createAttentionEngine({ backend: 'wasm' });
  });
  afterAll(() => {
    made.webgpu?.dispose();
    made.cpu?.dispose();
    made.wasm?.dispose();
  });
  const of = (backend: Backend): AttentionEngine => {
    const engine = made[backend];
    if (engine) return engine;
    throw new Error(
      wanted.includes(backend)
        ? `the ${backend} engine of useEngines() is read before its beforeAll hook ran (read it inside a test or hook)`
        : `useEngines(${wanted.map((b) => `'${b}'`).join(', ')}) makes no ${backend} engine`,
    );
  };
  return {
    get gpu() {
      return of('webgpu');
    },
    get cpu() {
      return of('cpu');
    },
    get wasm() {
      return of('wasm');
    },
    of,
  };
}
