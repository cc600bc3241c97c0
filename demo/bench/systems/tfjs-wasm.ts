// Peer "tfjs-wasm": the same layer as the "tfjs" peer (tfjs-layer.ts), on TensorFlow.js's WASM
// backend (@tensorflow/tfjs-backend-wasm, XNNPACK kernels, SIMD where the runtime has it) with one
// thread: setThreadsCount(1) before the backend starts, so it compares with the 'wasm' system's
// 1 thread and ONNX Runtime Web's 1 thread.
//
// Loading. The backend's Emscripten module fetches one of three .wasm files (plain, SIMD, threaded
// SIMD; which one depends on what the runtime supports) from next to its script, which is wrong once
// Vite pre-bundles the script into node_modules/.vite/deps/. So in a browser setWasmPaths names each
// file through Vite's `?url` (served from node_modules by the dev server, copied into a build's
// assets): nothing is fetched from anywhere else. In Node the package's Node build reads the files
// from its own dist/ folder, and the `?url` strings are not used.
//
// TF.js's active backend is global to the page: tfjs-layer.ts switches to 'wasm' before each run, so
// this peer and the WebGPU one can follow each other on one page.

import plainUrl from '@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm.wasm?url';
import simdUrl from '@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm-simd.wasm?url';
import threadedSimdUrl from '@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm-threaded-simd.wasm?url';
import type { BenchLayer, BenchSystem, PreparedSystem } from '../types.ts';
import { prepareTfjsLayer } from './tfjs-layer.ts';

type Tf = typeof import('@tensorflow/tfjs-core');

/** The version installed (package.json pins it); the label is corrected if another one loads. */
const PINNED_VERSION = '4.22.0';
const THREADS = 1;

let tfPromise: Promise<{ tf: Tf; simd: boolean }> | null = null;

/** TF.js core with its WASM backend registered and initialised on one thread. Loaded once per page. */
function loadTfWasm(): Promise<{ tf: Tf; simd: boolean }> {
  tfPromise ??= (async () => {
    const tf = await import('@tensorflow/tfjs-core');
    const wasm = await import('@tensorflow/tfjs-backend-wasm'); // registers the 'wasm' backend on import
    const location = (globalThis as { location?: Location }).location;
    if (location) {
      const abs = (url: string) => new URL(url, location.href).href;
      wasm.setWasmPaths({
        'tfjs-backend-wasm.wasm': abs(plainUrl),
        'tfjs-backend-wasm-simd.wasm': abs(simdUrl),
        'tfjs-backend-wasm-threaded-simd.wasm': abs(threadedSimdUrl),
      });
    }
    wasm.setThreadsCount(THREADS); // before the backend starts: it sizes its thread pool once
    let ok: boolean;
    try {
      ok = await tf.setBackend('wasm');
    } catch (e) {
      throw new Error(`TensorFlow.js could not start its WASM backend: ${(e as { message?: string }).message ?? String(e)}`);
    }
    if (!ok || tf.getBackend() !== 'wasm') {
      throw new Error(`TensorFlow.js could not start its WASM backend (setBackend('wasm') returned ${ok}, active backend ${tf.getBackend()})`);
    }
    const simd = Boolean(await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT'));
    return { tf, simd };
  })();
  // A failed load may be retried by the next prepare() (a reload of the page may fix a module fetch).
  tfPromise.catch(() => {
    tfPromise = null;
  });
  return tfPromise;
}

function label(version: string, simd: boolean): string {
  return `TensorFlow.js ${version} (WASM, ${THREADS} thread${simd ? '' : ', no SIMD'})`;
}

async function prepare(layer: BenchLayer): Promise<PreparedSystem> {
  const { tf, simd } = await loadTfWasm();
  tfjsWasmSystem.label = label(tf.version_core, simd);
  return { ...(await prepareTfjsLayer(tf, 'wasm', 'tfjs-wasm', layer)), threads: THREADS };
}

export const tfjsWasmSystem: BenchSystem = {
  id: 'tfjs-wasm',
  label: label(PINNED_VERSION, true),
  prepare,
};
