// Every system the benchmark knows, in display order: on the GPU this engine, the naive per-head
// loop, TensorFlow.js, ONNX Runtime Web; on the CPU this engine's 'wasm' backend (1 thread, then the
// default threads), ONNX Runtime Web's and TensorFlow.js's WASM backends (1 thread), and this engine's
// float64 CPU backend.
//
// The peers are loaded with dynamic import() so that one that cannot load (a missing file, a library
// that throws on import) shows up as a failed system with its error, instead of breaking the page.

import { cpuSystem } from './systems/cpu.ts';
import { engineSystem } from './systems/engine.ts';
import type { BenchSystem } from './types.ts';

function unavailable(id: string, label: string, file: string, error: unknown): BenchSystem {
  const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return {
    id,
    label: `${label} (failed to load)`,
    async prepare() {
      throw new Error(`${file} failed to load: ${message}`);
    },
  };
}

async function peer(id: string, label: string, file: string, load: () => Promise<Record<string, unknown>>, exportName: string): Promise<BenchSystem> {
  try {
    const mod = await load();
    const system = mod[exportName] as BenchSystem | undefined;
    if (!system || typeof system.prepare !== 'function') {
      throw new Error(`it has no export "${exportName}" (a BenchSystem)`);
    }
    return system;
  } catch (e) {
    return unavailable(id, label, file, e);
  }
}

export async function benchSystems(): Promise<BenchSystem[]> {
  // The import() calls stay literal so that bundlers (Vite) see and bundle each module.
  const [naive, tfjs, ort, wasm, wasmThreads, ortWasm, tfjsWasm] = await Promise.all([
    peer('naive', 'naive per-head loop', 'demo/bench/systems/naive.ts', () => import('./systems/naive.ts'), 'naiveSystem'),
    peer('tfjs', 'TensorFlow.js', 'demo/bench/systems/tfjs.ts', () => import('./systems/tfjs.ts'), 'tfjsSystem'),
    peer('ort', 'ONNX Runtime Web', 'demo/bench/systems/ort.ts', () => import('./systems/ort.ts'), 'ortSystem'),
    peer('wasm', "webgpu-attention 'wasm'", 'demo/bench/systems/wasm.ts', () => import('./systems/wasm.ts'), 'wasmSystem'),
    peer('wasm-threads', "webgpu-attention 'wasm' (threads)", 'demo/bench/systems/wasm.ts', () => import('./systems/wasm.ts'), 'wasmThreadsSystem'),
    peer('ort-wasm', 'ONNX Runtime Web (WASM EP)', 'demo/bench/systems/ort-wasm.ts', () => import('./systems/ort-wasm.ts'), 'ortWasmSystem'),
    peer('tfjs-wasm', 'TensorFlow.js (WASM)', 'demo/bench/systems/tfjs-wasm.ts', () => import('./systems/tfjs-wasm.ts'), 'tfjsWasmSystem'),
  ]);
  return [engineSystem, naive, tfjs, ort, wasm, wasmThreads, ortWasm, tfjsWasm, cpuSystem];
}
