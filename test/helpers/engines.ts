// The engines a test file shares: created once before its tests (beforeAll), disposed after them
// (afterAll). A file calls useEngines() at its top level and reads `engines.gpu` / `engines.cpu` /
// `engines.wasm` inside its tests and hooks.

import { afterAll, beforeAll } from 'vitest';
import { createAttentionEngine, type AttentionEngine } from '../../src/index.ts';
import { createGpuEngine } from './gpu.ts';

type Backend = 'webgpu' | 'wasm' | 'cpu';

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
 * not asked for throws, naming it.
 */
export function useEngines(...backends: Backend[]): Engines {
  const wanted: readonly Backend[] = backends.length ? backends : ['webgpu', 'cpu'];
  const made: Partial<Record<Backend, AttentionEngine>> = {};
  beforeAll(async () => {
    if (wanted.includes('webgpu')) made.webgpu = await createGpuEngine();
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
