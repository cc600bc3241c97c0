// Systems under test "wasm" and "wasm-threads": this library's 'wasm' backend (float32 on the CPU,
// WebAssembly SIMD kernels; src/wasm/). "wasm" runs one thread, to compare with the WASM peers' one
// thread; "wasm-threads" runs the engine's default thread count (engine.threads: the cores where
// threads are available), and its label says how many ran and, when fewer than the cores, why
// (engine.threadsNote: e.g. a browser page without threads). Each keeps one engine for the page
// (its module compiled and its worker threads started once), made on its first prepare().

import { type AttentionEngine, createAttentionEngine } from 'webgpu-attention';
import type { BenchLayer, BenchSystem, PreparedSystem } from '../types.ts';
import { layerRun } from './layer-run.ts';

function threadsLabel(engine: AttentionEngine): string {
  const n = engine.threads;
  return `webgpu-attention 'wasm' (${n} thread${n === 1 ? '' : 's'}${engine.threadsNote ? `: ${engine.threadsNote}` : ''})`;
}

/** A 'wasm' system: `threads` 1, or undefined for the engine's default. */
function createWasmSystem(id: string, threads: 1 | undefined, label: string): BenchSystem {
  let enginePromise: Promise<AttentionEngine> | null = null;
  const system: BenchSystem = {
    id,
    label,
    kvCache: true,
    async prepare({ shape, stateDict, past }: BenchLayer): Promise<PreparedSystem> {
      enginePromise ??= createAttentionEngine({ backend: 'wasm', ...(threads ? { threads } : {}) });
      enginePromise.catch(() => {
        enginePromise = null; // a later prepare() may try again
      });
      const engine = await enginePromise;
      system.label = threadsLabel(engine);
      const layer = engine.createMultiHeadAttention({ embedDim: shape.embedDim, numHeads: shape.numHeads }, stateDict);
      const run = layerRun(layer, { shape, past });
      return {
        run: run.run,
        threads: engine.threads,
        dispose: () => {
          run.dispose();
          layer.dispose();
        },
      };
    },
  };
  return system;
}

export const wasmSystem = createWasmSystem('wasm', 1, "webgpu-attention 'wasm' (1 thread)");
export const wasmThreadsSystem = createWasmSystem('wasm-threads', undefined, "webgpu-attention 'wasm' (default threads)");
