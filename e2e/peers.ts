// The page Playwright drives for the benchmark's peer systems (e2e/peers.html): each system
// (demo/bench/systems/{naive,tfjs,ort,wasm,ort-wasm,tfjs-wasm}.ts) prepares a layer with seeded weights, runs it on a seeded
// query, and the page hands back its output beside the float64 CPU reference; the test compares.
// This engine runs the same shape too, for timings side by side (its correctness is
// e2e/correctness.spec.ts's business).
//
// Vite serves this file, the systems and the libraries they import (TensorFlow.js, ONNX Runtime Web,
// protobufjs, pre-bundled by Vite) from the repo root.

import type { BenchSystem, PreparedSystem } from '../demo/bench/types.ts';
import { createAttentionEngine, referenceMultiHeadAttention } from '../src/index.ts';
import { randomLayerInputs } from '../test/helpers/random.ts';

/**
 * The peers on WebGPU, the WASM ones on the CPU ('wasm': this engine's 'wasm' backend on 1 thread);
 * 'ort-attention' and 'ort-standard' force the ONNX graph that 'ort' picks per adapter.
 */
export type PeerId = 'naive' | 'tfjs' | 'ort' | 'wasm' | 'ort-wasm' | 'tfjs-wasm' | 'ort-attention' | 'ort-standard' | 'engine';

export interface PeerCase {
  system: PeerId;
  batchSize: number;
  seqLen: number;
  embedDim: number;
  numHeads: number;
  isCausal: boolean;
  seed: number;
  /** Forwards to run and time (the first one's output is returned). Default 1. */
  runs?: number;
}

export interface PeerResult {
  /** The system's label once prepared (it names the library version that loaded). */
  label: string | null;
  /** First run's output [B, S, E]; null when something threw. */
  output: number[] | null;
  /** referenceMultiHeadAttention(...).output, float64. */
  reference: number[];
  /** What threw, and where. */
  thrown: string | null;
  stage: 'load' | 'prepare' | 'run' | 'dispose' | null;
  prepareMs: number;
  /** Wall time of each run (upload, forward, readback); the first includes shader compilation. */
  runsMs: number[];
}

declare global {
  interface Window {
    peersReady: boolean;
    /** Imports every system module and library; null per entry that loaded, else its error. */
    preloadPeers(): Promise<Record<string, string | null>>;
    runPeer(c: PeerCase): Promise<PeerResult>;
  }
}

function describe(e: unknown): string {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}

let enginePromise: ReturnType<typeof createAttentionEngine> | null = null;

const engineSystem: BenchSystem = {
  id: 'engine',
  label: 'webgpu-attention (WebGPU)',
  async prepare({ shape, stateDict }) {
    enginePromise ??= createAttentionEngine({ backend: 'webgpu' });
    const engine = await enginePromise;
    const layer = engine.createMultiHeadAttention({ embedDim: shape.embedDim, numHeads: shape.numHeads }, stateDict);
    const options = { batchSize: shape.batchSize, seqLen: shape.seqLen, isCausal: shape.isCausal };
    return { run: async (q) => (await layer.forward(q, options)).output, dispose: () => layer.dispose() };
  },
};

// Literal import() calls, so that Vite sees (and pre-bundles) what each one needs.
const SYSTEMS: Record<PeerId, () => Promise<BenchSystem>> = {
  naive: async () => (await import('../demo/bench/systems/naive.ts')).naiveSystem,
  tfjs: async () => (await import('../demo/bench/systems/tfjs.ts')).tfjsSystem,
  ort: async () => (await import('../demo/bench/systems/ort.ts')).ortSystem,
  'ort-attention': async () => (await import('../demo/bench/systems/ort.ts')).createOrtSystem({ graph: 'attention' }),
  'ort-standard': async () => (await import('../demo/bench/systems/ort.ts')).createOrtSystem({ graph: 'standard' }),
  wasm: async () => (await import('../demo/bench/systems/wasm.ts')).wasmSystem,
  'ort-wasm': async () => (await import('../demo/bench/systems/ort-wasm.ts')).ortWasmSystem,
  'tfjs-wasm': async () => (await import('../demo/bench/systems/tfjs-wasm.ts')).tfjsWasmSystem,
  engine: async () => engineSystem,
};

const PRELOADS: Record<string, () => Promise<unknown>> = {
  'demo/bench/systems/naive.ts': SYSTEMS.naive,
  'demo/bench/systems/tfjs.ts': SYSTEMS.tfjs,
  'demo/bench/systems/ort.ts': SYSTEMS.ort,
  'demo/bench/systems/wasm.ts': SYSTEMS.wasm,
  'demo/bench/systems/ort-wasm.ts': SYSTEMS['ort-wasm'],
  'demo/bench/systems/tfjs-wasm.ts': SYSTEMS['tfjs-wasm'],
  '@tensorflow/tfjs-core': () => import('@tensorflow/tfjs-core'),
  '@tensorflow/tfjs-backend-webgpu': () => import('@tensorflow/tfjs-backend-webgpu'),
  '@tensorflow/tfjs-backend-wasm': () => import('@tensorflow/tfjs-backend-wasm'),
  'onnxruntime-web/webgpu': () => import('onnxruntime-web/webgpu'),
  'onnxruntime-web/wasm': () => import('onnxruntime-web/wasm'),
  protobufjs: () => import('protobufjs'),
};

window.preloadPeers = async () => {
  const entries = await Promise.all(
    Object.entries(PRELOADS).map(async ([name, load]) => {
      try {
        await load();
        return [name, null] as const;
      } catch (e) {
        return [name, describe(e)] as const;
      }
    }),
  );
  return Object.fromEntries(entries);
};

window.runPeer = async (c: PeerCase): Promise<PeerResult> => {
  const config = { embedDim: c.embedDim, numHeads: c.numHeads };
  const { stateDict, query } = randomLayerInputs(config, c.batchSize * c.seqLen, c.seed);
  const shape = { batchSize: c.batchSize, seqLen: c.seqLen, embedDim: c.embedDim, numHeads: c.numHeads, isCausal: c.isCausal };
  const options = { batchSize: c.batchSize, seqLen: c.seqLen, isCausal: c.isCausal };
  const reference = referenceMultiHeadAttention(config, stateDict, query, options).output;
  const result: PeerResult = {
    label: null,
    output: null,
    reference: Array.from(reference),
    thrown: null,
    stage: null,
    prepareMs: 0,
    runsMs: [],
  };

  let stage: PeerResult['stage'] = 'load';
  let prepared: PreparedSystem | null = null;
  try {
    const system = await SYSTEMS[c.system]();
    stage = 'prepare';
    const t0 = performance.now();
    // A copy of the weights: a system must not depend on (or change) the caller's arrays.
    prepared = await system.prepare({ shape, stateDict: Object.fromEntries(Object.entries(stateDict).map(([k, v]) => [k, v.slice()])) });
    result.prepareMs = performance.now() - t0;
    result.label = system.label;
    stage = 'run';
    for (let r = 0; r < (c.runs ?? 1); r++) {
      const t = performance.now();
      const out = await prepared.run(query);
      result.runsMs.push(performance.now() - t);
      if (r === 0) result.output = Array.from(out);
    }
    stage = 'dispose';
    const p = prepared;
    prepared = null;
    await p.dispose();
  } catch (e) {
    result.thrown = describe(e);
    result.stage = stage;
    result.output = null;
    if (prepared) await Promise.resolve(prepared.dispose()).catch(() => undefined);
  }
  return result;
};

window.peersReady = true;
document.getElementById('status')!.textContent = 'ready';
