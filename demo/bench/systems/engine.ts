// System under test "engine": this library on WebGPU. One engine (one GPUDevice) is shared by the
// whole page, so shader pipelines compile once and the page can watch the device for errors.

import { type AttentionEngine, createAttentionEngine } from 'webgpu-attention';
import type { BenchLayer, BenchSystem, PreparedSystem } from '../types.ts';

let shared: Promise<AttentionEngine> | null = null;

/**
 * The page's engine: WebGPU when an adapter exists, else the CPU backend (engine.fallbackReason says
 * why). Made once; a rejection is kept too (it will not change on retry).
 */
export function sharedEngine(): Promise<AttentionEngine> {
  shared ??= createAttentionEngine();
  return shared;
}

let profiled: Promise<AttentionEngine> | null = null;

/** A second engine with timestamp queries on, for one run's kernel timings (kept apart, so the timed runs pay nothing for them). */
function profiledEngine(): Promise<AttentionEngine> {
  profiled ??= createAttentionEngine({ backend: 'webgpu', profile: true });
  return profiled;
}

export const engineSystem: BenchSystem = {
  id: 'engine',
  label: 'webgpu-attention (this engine, WebGPU)',
  async prepare({ shape, stateDict }: BenchLayer): Promise<PreparedSystem> {
    const engine = await sharedEngine();
    if (engine.backend !== 'webgpu') {
      throw new Error(`no WebGPU here, so this engine runs on its CPU backend and is not benchmarked as "engine": ${engine.fallbackReason ?? 'unknown reason'}`);
    }
    const layer = engine.createMultiHeadAttention({ embedDim: shape.embedDim, numHeads: shape.numHeads }, stateDict);
    const options = { batchSize: shape.batchSize, seqLen: shape.seqLen, isCausal: shape.isCausal };
    return {
      run: async (query) => (await layer.forward(query, options)).output,
      kernelTimings: async (query) => {
        const timed = await profiledEngine().catch(() => null);
        if (!timed?.profiling) return null; // no timestamp-query on this adapter
        const probe = timed.createMultiHeadAttention({ embedDim: shape.embedDim, numHeads: shape.numHeads }, stateDict);
        try {
          await probe.forward(query, options); // compiles its pipelines
          return (await probe.forward(query, options)).timings ?? null;
        } finally {
          probe.dispose();
        }
      },
      dispose: () => layer.dispose(),
    };
  },
};
