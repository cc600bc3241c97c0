// Peer "ort-wasm": ONNX Runtime Web on its WASM (CPU) execution provider, one thread, running the
// same ONNX model of the layer as the "ort" peer (onnx-model.ts), with its 'attention' graph:
// com.microsoft.Attention + MatMul + Add. The contrib op has a CPU kernel, so the whole graph runs on
// the WASM EP (ORT's fused attention, MLAS GEMMs with WASM SIMD).
//
// Loading. 'onnxruntime-web/wasm' resolves to dist/ort.wasm.bundle.min.mjs: the WASM-only build, its
// Emscripten glue inline, which fetches ort-wasm-simd-threaded.wasm (14 MB) itself. In a browser its
// default location (next to the script) is wrong once Vite pre-bundles the script, so env.wasm.wasmPaths
// names the file through Vite's `?url`, as ort.ts does for its WebGPU build. In Node the same build
// reads the file from its own dist/ folder, and the `?url` string is not used.
//
// This is a second copy of ONNX Runtime beside the WebGPU build of "ort": its own module, its own env
// (numThreads 1 here, whatever the other one uses).

import wasmUrl from 'onnxruntime-web/ort-wasm-simd-threaded.wasm?url';
import type { BenchLayer, BenchSystem, PreparedSystem } from '../types.ts';
import { buildAttentionModel, ONNX_INPUT_NAME, ONNX_OUTPUT_NAME } from './onnx-model.ts';

type Ort = typeof import('onnxruntime-web/wasm');

/** The version installed (package.json pins it); the label is corrected if another one loads. */
const PINNED_VERSION = '1.30.0';
const THREADS = 1;

let ortPromise: Promise<Ort> | null = null;

/** ONNX Runtime Web's WASM build, configured for one thread (once per page). */
function loadOrtWasm(): Promise<Ort> {
  ortPromise ??= (async () => {
    const mod = (await import('onnxruntime-web/wasm')) as Ort & { default?: Ort };
    const ort = typeof mod.InferenceSession === 'function' ? mod : mod.default!;
    const location = (globalThis as { location?: Location }).location;
    if (location) ort.env.wasm.wasmPaths = { wasm: new URL(wasmUrl, location.href).href };
    ort.env.wasm.numThreads = THREADS;
    ort.env.wasm.proxy = false;
    ort.env.logLevel = 'error';
    return ort;
  })();
  ortPromise.catch(() => {
    ortPromise = null;
  });
  return ortPromise;
}

const label = (version: string) => `ONNX Runtime Web ${version} (WASM, ${THREADS} thread)`;

async function prepare(layer: BenchLayer): Promise<PreparedSystem> {
  const { batchSize: B, seqLen: S, embedDim: E } = layer.shape;
  const ort = await loadOrtWasm();
  ortWasmSystem.label = label(ort.env.versions?.web ?? PINNED_VERSION);
  const model = await buildAttentionModel(layer, 'attention');
  let session: import('onnxruntime-web/wasm').InferenceSession;
  try {
    session = await ort.InferenceSession.create(model, { executionProviders: ['wasm'], graphOptimizationLevel: 'all' });
  } catch (e) {
    throw new Error(`ONNX Runtime Web could not create a WASM session for the layer (B=${B} S=${S} E=${E}): ${(e as Error).message ?? String(e)}`);
  }
  let disposed = false;
  let chain: Promise<unknown> = Promise.resolve(); // one session.run at a time

  async function forward(query: Float32Array): Promise<Float32Array> {
    if (disposed) throw new Error('ort-wasm: run() after dispose()');
    if (query.length !== B * S * E) throw new Error(`ort-wasm: query.length must be B·S·E = ${B * S * E}; got ${query.length}`);
    const input = new ort.Tensor('float32', query, [B, S, E]);
    try {
      const out = (await session.run({ [ONNX_INPUT_NAME]: input }))[ONNX_OUTPUT_NAME];
      if (!(out.data instanceof Float32Array)) throw new Error(`ort-wasm: output is ${out.type}, expected float32`);
      return out.data;
    } finally {
      input.dispose();
    }
  }

  return {
    run(query: Float32Array): Promise<Float32Array> {
      const result = chain.then(() => forward(query));
      chain = result.catch(() => undefined);
      return result;
    },
    threads: THREADS,
    async dispose(): Promise<void> {
      if (disposed) return;
      disposed = true;
      await chain;
      await session.release();
    },
  };
}

export const ortWasmSystem: BenchSystem = {
  id: 'ort-wasm',
  label: label(PINNED_VERSION),
  prepare,
};
