// Peer "tfjs": the layer composed from TensorFlow.js ops on its WebGPU backend, as a TF.js user
// would write it. TF.js picks its own kernels (its matMul, softmax, transpose shaders) and owns its
// own GPUDevice.
//
// The layer's ops are in tfjs-layer.ts, shared with the "tfjs-wasm" peer (the same layer on TF.js's
// WASM backend).
//
// The library is imported dynamically in prepare(): a page that never runs this peer never loads it.

import type { BenchLayer, BenchSystem, PreparedSystem } from '../types.ts';
import { prepareTfjsLayer } from './tfjs-layer.ts';

type Tf = typeof import('@tensorflow/tfjs-core');

/** The version installed (package.json pins it); the label is corrected if another one loads. */
const PINNED_VERSION = '4.22.0';

let tfPromise: Promise<Tf> | null = null;

/** TF.js core with its WebGPU backend registered and selected. Loaded once per page. */
function loadTf(): Promise<Tf> {
  tfPromise ??= (async () => {
    const tf = await import('@tensorflow/tfjs-core');
    await import('@tensorflow/tfjs-backend-webgpu'); // registers the 'webgpu' backend on import
    const ok = await tf.setBackend('webgpu');
    await tf.ready();
    if (!ok || tf.getBackend() !== 'webgpu') {
      throw new Error(
        `TensorFlow.js could not initialise its WebGPU backend (setBackend('webgpu') returned ${ok}, active backend ` +
          `${tf.getBackend()}). It needs navigator.gpu with an adapter: a secure context, and on Linux Chromium --enable-unsafe-webgpu.`,
      );
    }
    return tf;
  })();
  // A failed load may be retried by the next prepare() (a reload of the page may fix a module fetch).
  tfPromise.catch(() => {
    tfPromise = null;
  });
  return tfPromise;
}

async function prepare(layer: BenchLayer): Promise<PreparedSystem> {
  const tf = await loadTf();
  if (tf.version_core !== PINNED_VERSION) tfjsSystem.label = `TensorFlow.js ${tf.version_core} (WebGPU backend)`;
  return prepareTfjsLayer(tf, 'webgpu', 'tfjs', layer);
}

export const tfjsSystem: BenchSystem = {
  id: 'tfjs',
  label: `TensorFlow.js ${PINNED_VERSION} (WebGPU backend)`,
  prepare,
};
