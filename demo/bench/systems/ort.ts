// Peer "ort": ONNX Runtime Web on its WebGPU execution provider, running an ONNX model of the layer
// that the page writes for the chosen shape (onnx-model.ts). ORT picks its own kernels and owns its
// own GPUDevice.
//
// Which graph. Normally com.microsoft.Attention + MatMul + Add, ORT's fused attention. But ORT 1.30's
// WebGPU Attention is wrong on adapters whose subgroups have fewer than 8 lanes, such as SwiftShader
// (4): from S = 32 on it runs its "FlashAttention" shader, which steps through the keys in
// subgroup-sized blocks yet always reads 8 (or 16) lanes with subgroupShuffle, so lanes 4..7 are
// undefined (measured: errors ~0.1 on outputs ~0.1 for every S ≥ 32, exact below; causal rows 0..3
// stay right). Newer ORT sources guard that shader with a minimum subgroup size. On such an adapter
// this peer runs the 'standard' graph instead (MatMul, Split, Reshape, Transpose, Softmax: ai.onnx ops
// only) and says so in its label; createOrtSystem({ graph }) forces either.
//
// Loading. 'onnxruntime-web/webgpu' resolves to dist/ort.webgpu.bundle.min.mjs, which carries the
// Emscripten glue of its WebAssembly module inline but fetches the .wasm itself (ORT 1.30's WebGPU
// build: ort-wasm-simd-threaded.asyncify.wasm, 26 MB). Its default location, next to the script's
// import.meta.url, is wrong once a bundler moves the script (Vite's dev server pre-bundles it into
// node_modules/.vite/deps/), so env.wasm.wasmPaths names the file explicitly, through Vite's `?url`:
// the dev server serves it from node_modules, and `vite build` copies it into the build's assets.
//
// Every node must run on the WebGPU EP: session.disable_cpu_ep_fallback = 1 makes session creation
// fail instead of quietly running an op on the CPU (WASM) EP, which would not be a WebGPU figure.
// Outputs come back on the CPU (preferredOutputLocation defaults to 'cpu'); run() checks it.

import wasmUrl from 'onnxruntime-web/ort-wasm-simd-threaded.asyncify.wasm?url';
import type { BenchLayer, BenchSystem, PreparedSystem } from '../types.ts';
import { ONNX_INPUT_NAME, ONNX_OUTPUT_NAME, type OnnxGraph, buildAttentionModel } from './onnx-model.ts';

type Ort = typeof import('onnxruntime-web/webgpu');

/** The version installed (package.json pins it); the label is corrected if another one loads. */
const PINNED_VERSION = '1.30.0';

let ortPromise: Promise<Ort> | null = null;

/** ONNX Runtime Web's WebGPU build, configured (once per page); also used by e2e/interop.ts. */
export function loadOrt(): Promise<Ort> {
  ortPromise ??= (async () => {
    const gpu = (globalThis as { navigator?: { gpu?: GPU } }).navigator?.gpu;
    if (!gpu) {
      throw new Error('ONNX Runtime Web WebGPU EP: no navigator.gpu (WebGPU needs a secure context; on Linux Chromium also needs --enable-unsafe-webgpu)');
    }
    const mod = (await import('onnxruntime-web/webgpu')) as Ort & { default?: Ort };
    const ort = typeof mod.InferenceSession === 'function' ? mod : mod.default!;
    ort.env.wasm.wasmPaths = { wasm: new URL(wasmUrl, globalThis.location?.href).href };
    // Threads need SharedArrayBuffer, which needs a cross-origin isolated page; the WebGPU EP does its
    // work on the GPU either way.
    ort.env.wasm.numThreads = globalThis.crossOriginIsolated ? Math.min(4, navigator.hardwareConcurrency || 1) : 1;
    ort.env.wasm.proxy = false;
    ort.env.logLevel = 'error';
    return ort;
  })();
  ortPromise.catch(() => {
    ortPromise = null;
  });
  return ortPromise;
}

/** ORT 1.30's FlashAttention shader reads 8 subgroup lanes at least (see the top of this file). */
const MIN_SUBGROUP_SIZE_FOR_ATTENTION = 8;

/** 'attention' unless this adapter's subgroups are too narrow for ORT's fused Attention shader. */
async function autoGraph(): Promise<{ graph: OnnxGraph; why: string }> {
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
  const min = adapter?.info?.subgroupMinSize;
  if (adapter?.features.has('subgroups') && min !== undefined && min < MIN_SUBGROUP_SIZE_FOR_ATTENTION) {
    return { graph: 'standard', why: `subgroup size ${min} < ${MIN_SUBGROUP_SIZE_FOR_ATTENTION}` };
  }
  return { graph: 'attention', why: '' };
}

function label(version: string, graph: OnnxGraph, why: string): string {
  return graph === 'attention' ? `ONNX Runtime Web ${version} (WebGPU EP)` : `ONNX Runtime Web ${version} (WebGPU EP, standard-op graph${why ? `: ${why}` : ''})`;
}

export interface OrtSystemOptions {
  /** 'auto' (default): com.microsoft.Attention unless the adapter's subgroups are too narrow for it. */
  graph?: 'auto' | OnnxGraph;
}

async function prepare(system: BenchSystem, options: OrtSystemOptions, layer: BenchLayer): Promise<PreparedSystem> {
  const { batchSize: B, seqLen: S, embedDim: E } = layer.shape;
  const ort = await loadOrt();
  const { graph, why } = !options.graph || options.graph === 'auto' ? await autoGraph() : { graph: options.graph, why: '' };
  const model = await buildAttentionModel(layer, graph);
  system.label = label(ort.env.versions?.web ?? PINNED_VERSION, graph, why);

  let session: import('onnxruntime-web').InferenceSession;
  try {
    session = await ort.InferenceSession.create(model, {
      executionProviders: ['webgpu'],
      graphOptimizationLevel: 'all',
      extra: { session: { disable_cpu_ep_fallback: '1' } },
    });
  } catch (e) {
    throw new Error(`ONNX Runtime Web could not create a WebGPU session for the layer (${graph} graph, B=${B} S=${S} E=${E}): ` + `${(e as Error).message ?? String(e)}`);
  }
  let disposed = false;
  let chain: Promise<unknown> = Promise.resolve(); // one session.run at a time

  async function forward(query: Float32Array): Promise<Float32Array> {
    if (disposed) throw new Error('ort: run() after dispose()');
    if (query.length !== B * S * E) throw new Error(`ort: query.length must be B·S·E = ${B * S * E}; got ${query.length}`);
    const input = new ort.Tensor('float32', query, [B, S, E]);
    const results = await session.run({ [ONNX_INPUT_NAME]: input });
    const out = results[ONNX_OUTPUT_NAME];
    try {
      // 'cpu' by default; a GPU-resident output would be downloaded here.
      const data = out.location === 'cpu' ? out.data : await out.getData(true);
      if (!(data instanceof Float32Array)) throw new Error(`ort: output is ${out.type}, expected float32`);
      return data;
    } finally {
      input.dispose();
      if (out.location !== 'cpu') out.dispose();
    }
  }

  return {
    run(query: Float32Array): Promise<Float32Array> {
      const result = chain.then(() => forward(query));
      chain = result.catch(() => undefined);
      return result;
    },
    async dispose(): Promise<void> {
      if (disposed) return;
      disposed = true;
      await chain;
      await session.release();
    },
  };
}

/** The "ort" peer, with its graph chosen by `options.graph`. */
export function createOrtSystem(options: OrtSystemOptions = {}): BenchSystem {
  const system: BenchSystem = {
    id: 'ort',
    label: label(PINNED_VERSION, 'attention', ''),
    prepare: (layer) => prepare(system, options, layer),
  };
  return system;
}

export const ortSystem: BenchSystem = createOrtSystem();
