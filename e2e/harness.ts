// The page Playwright drives (e2e/harness.html). It runs one layer on the WebGPU backend and on the
// CPU (float64 reference) backend with the same seeded weights and input, and hands plain numbers
// back to the test, which does the comparison. GPU work runs inside validation and out-of-memory
// error scopes; uncaptured device errors are recorded for the whole life of the page.
//
// Vite serves this file and the engine's TypeScript (and `?raw` WGSL) straight from the repo root;
// the relative import below is the URL /src/index.ts, the package entry.

import { type AttentionEngine, createAttentionEngine, type KvCacheDtype, type MultiHeadAttention, quantizeWeights } from '../src/index.ts';
import { randomLayerInputs } from '../test/helpers/random.ts';
import { prefillThenDecode } from './decode-steps.ts';

export interface CaseParams {
  embedDim: number;
  numHeads: number;
  /** G (grouped-query attention); default numHeads. */
  numKvHeads?: number;
  batchSize: number;
  seqLen: number;
  isCausal: boolean;
  bias: boolean;
  seed: number;
  /** Projection weights quantized to this type (quantizeWeights), float32 when left out. */
  weights?: 'q4_0' | 'q8_0' | 'q4_k' | 'nbits';
  /** The last decodeSteps tokens of each sequence as one-token decode steps over a KV cache (the rest its prefill). */
  decodeSteps?: number;
  /** That cache's dtype (default: the backend's). */
  cacheDtype?: KvCacheDtype;
}

/** runWasmCase's result: the 'wasm' backend (its own engine, one thread) against the CPU backend. */
export interface WasmCaseResult {
  /** engine.wasmSimd: which build of the kernels ran. */
  wasmSimd: string | null;
  wasm: number[] | null;
  cpu: number[];
  thrown: string | null;
}

export interface CaseResult {
  /** WebGPU output [B, S, E] as a plain array; null when the GPU forward threw. */
  gpu: number[] | null;
  /** CPU backend (float64 reference, rounded to f32) output [B, S, E]. */
  cpu: number[];
  /** What the GPU forward threw, if anything. */
  thrown: string | null;
  /** Errors caught by the scopes around the GPU layer creation and forward. */
  validationError: string | null;
  outOfMemoryError: string | null;
  /** Uncaptured device errors that arrived during this case. */
  uncapturedErrors: string[];
  /** Wall time of the GPU forward (first run of this shape: includes pipeline compilation). */
  gpuMs: number;
  /** engine.stats() before the layer was made and after it was disposed. */
  buffersBefore: number;
  buffersAfter: number;
}

export interface AdapterReport {
  backend: string | null;
  adapterInfo: { vendor: string; architecture: string; device: string; description: string } | null;
  /** Set when no WebGPU engine could be made: what createAttentionEngine threw. */
  error: string | null;
  hasNavigatorGpu: boolean;
  isSecureContext: boolean;
  userAgent: string;
}

declare global {
  interface Window {
    harnessReady: boolean;
    runCase(params: CaseParams): Promise<CaseResult>;
    /** The case on the 'wasm' backend ('auto' build, one thread) and on the CPU backend: no WebGPU. */
    runWasmCase(params: CaseParams): Promise<WasmCaseResult>;
    adapterInfo(): Promise<AdapterReport>;
    /** Uncaptured WebGPU errors since the page loaded. */
    uncapturedErrors(): string[];
    /** The WebGPU engine's background work: whether it runs here (engine.tuning.background), what is pending, what was compiled and swept. */
    backgroundWork(): Promise<{ enabled: boolean; why: string; pending: number; compiled: number; swept: number; defaultsAreTier0: boolean } | null>;
  }
}

interface Engines {
  gpu: AttentionEngine;
  cpu: AttentionEngine;
}

const uncaptured: string[] = [];
let enginesPromise: Promise<Engines> | null = null;

/** The two engines, made once per page and cached (a rejection is cached too: it will not change). */
function engines(): Promise<Engines> {
  enginesPromise ??= (async () => {
    const gpu = await createAttentionEngine({ backend: 'webgpu' });
    const cpu = await createAttentionEngine({ backend: 'cpu' });
    const device = gpu.device;
    if (!device) throw new Error(`createAttentionEngine({ backend: 'webgpu' }) gave an engine without a device (backend ${gpu.backend})`);
    device.addEventListener('uncapturederror', (ev) => {
      const message = (ev as GPUUncapturedErrorEvent).error.message;
      uncaptured.push(message);
    });
    void device.lost.then((info) => {
      // An engine's device is only destroyed by dispose(), which this page never calls.
      uncaptured.push(`device lost (${info.reason}): ${info.message}`);
    });
    return { gpu, cpu };
  })();
  return enginesPromise;
}

window.adapterInfo = async () => {
  const base = {
    hasNavigatorGpu: 'gpu' in navigator && !!navigator.gpu,
    isSecureContext: window.isSecureContext,
    userAgent: navigator.userAgent,
  };
  try {
    const { gpu } = await engines();
    return { ...base, backend: gpu.backend, adapterInfo: gpu.adapterInfo, error: null };
  } catch (e) {
    return { ...base, backend: null, adapterInfo: null, error: `${(e as Error).name}: ${(e as Error).message}` };
  }
};

window.uncapturedErrors = () => [...uncaptured];

window.backgroundWork = async () => {
  const t = (await engines()).gpu.tuning;
  if (!t) return null;
  const defaultsAreTier0 = JSON.stringify(t.defaults) === JSON.stringify(t.tier0);
  return { ...t.background, pending: t.pending, compiled: t.compiled.length, swept: t.choices.filter((c) => c.source === 'sweep').length, defaultsAreTier0 };
};

/** The layer's output [B, S, E] for the case: one forward, or a prefill then decodeSteps one-token steps over a KV cache. */
async function runLayer(layer: MultiHeadAttention, x: Float32Array, p: CaseParams): Promise<Float32Array> {
  const steps = p.decodeSteps ?? 0;
  if (steps === 0) return (await layer.forward(x, { batchSize: p.batchSize, seqLen: p.seqLen, isCausal: p.isCausal })).output;
  return prefillThenDecode(layer, x, p.batchSize, p.seqLen, p.embedDim, steps, p.isCausal, p.cacheDtype);
}

window.runCase = async (p: CaseParams): Promise<CaseResult> => {
  const { gpu, cpu } = await engines();
  const device = gpu.device!;
  const config = { embedDim: p.embedDim, numHeads: p.numHeads, numKvHeads: p.numKvHeads, bias: p.bias };
  const inputs = randomLayerInputs(config, p.batchSize * p.seqLen, p.seed);
  const { query } = inputs;
  const stateDict = p.weights ? quantizeWeights(inputs.stateDict, { dtype: p.weights }) : inputs.stateDict;

  const cpuLayer = cpu.createMultiHeadAttention(config, stateDict);
  const cpuOut = await runLayer(cpuLayer, query, p);
  cpuLayer.dispose();

  const buffersBefore = gpu.stats().buffers;
  const uncapturedBefore = uncaptured.length;
  let gpuOut: Float32Array | null = null;
  let thrown: string | null = null;
  let gpuMs = 0;
  device.pushErrorScope('out-of-memory');
  device.pushErrorScope('validation');
  try {
    const layer = gpu.createMultiHeadAttention(config, stateDict);
    try {
      const t0 = performance.now();
      gpuOut = await runLayer(layer, query, p);
      gpuMs = performance.now() - t0;
    } finally {
      layer.dispose();
    }
  } catch (e) {
    thrown = `${(e as Error).name}: ${(e as Error).message}`;
  }
  const validation = await device.popErrorScope();
  const oom = await device.popErrorScope();
  // Uncaptured errors are delivered as events; give the event loop a turn so late ones land here.
  await new Promise((r) => setTimeout(r, 0));

  return {
    gpu: gpuOut ? Array.from(gpuOut) : null,
    cpu: Array.from(cpuOut),
    thrown,
    validationError: validation ? validation.message : null,
    outOfMemoryError: oom ? oom.message : null,
    uncapturedErrors: uncaptured.slice(uncapturedBefore),
    gpuMs,
    buffersBefore,
    buffersAfter: gpu.stats().buffers,
  };
};

window.runWasmCase = async (p: CaseParams): Promise<WasmCaseResult> => {
  const config = { embedDim: p.embedDim, numHeads: p.numHeads, numKvHeads: p.numKvHeads, bias: p.bias };
  const inputs = randomLayerInputs(config, p.batchSize * p.seqLen, p.seed);
  const stateDict = p.weights ? quantizeWeights(inputs.stateDict, { dtype: p.weights }) : inputs.stateDict;
  const cpu = await createAttentionEngine({ backend: 'cpu' });
  const wasm = await createAttentionEngine({ backend: 'wasm', threads: 1 });
  try {
    const cpuOut = await runLayer(cpu.createMultiHeadAttention(config, stateDict), inputs.query, p);
    let out: Float32Array | null = null;
    let thrown: string | null = null;
    try {
      out = await runLayer(wasm.createMultiHeadAttention(config, stateDict), inputs.query, p);
    } catch (e) {
      thrown = `${(e as Error).name}: ${(e as Error).message}`;
    }
    return { wasmSimd: wasm.wasmSimd, wasm: out ? Array.from(out) : null, cpu: Array.from(cpuOut), thrown };
  } finally {
    cpu.dispose();
    wasm.dispose();
  }
};

window.harnessReady = true;
document.getElementById('status')!.textContent = 'ready';
