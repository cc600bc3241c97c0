// System under test "engine": this library on WebGPU. One GPUDevice (the shared engine's) serves the
// whole page, so shader pipelines compile once and the page can watch the device for errors. Each
// prepared layer runs in an engine of its own on that device, so that its engine.stats().peakBytes
// is this shape's peak GPU memory (weights + one call's scratch), untouched by earlier shapes. Its
// first call starts the background compiles and tuning for the shape, which the runner awaits
// (settled) before timing anything; the kernel timings come from
// one more engine on the device with timestamp queries on and those same variants forced.

import { type AttentionEngine, createAttentionEngine, type MultiHeadAttention, WebGPUUnavailableError } from 'webgpu-attention';
import type { BenchLayer, BenchSystem, PreparedSystem } from '../types.ts';
import { layerRun } from './layer-run.ts';

let shared: Promise<AttentionEngine> | null = null;

/**
 * The page's engine: WebGPU whenever an adapter exists (a software one included: the page shows the
 * WebGPU kernels; left to choose, an engine there would answer on 'wasm'), else what
 * createAttentionEngine() gives without one (engine.fallbackReason says why). Made once; a rejection
 * is kept too (it will not change on retry).
 */
export function sharedEngine(): Promise<AttentionEngine> {
  shared ??= createAttentionEngine({ backend: 'webgpu' }).catch((e) => {
    if (!(e instanceof WebGPUUnavailableError)) throw e;
    return createAttentionEngine();
  });
  return shared;
}

export const engineSystem: BenchSystem = {
  id: 'engine',
  label: 'webgpu-attention (this engine, WebGPU)',
  kvCache: true,
  async prepare({ shape, stateDict, past }: BenchLayer): Promise<PreparedSystem> {
    const engine = await sharedEngine();
    if (engine.backend !== 'webgpu') {
      throw new Error(
        `no WebGPU here, so this engine runs on its ${engine.backend} backend and is not benchmarked as "engine": ${engine.fallbackReason ?? 'unknown reason'}`,
      );
    }
    // An engine on the shared device: same pipelines (cached per device), its own buffer pool and peak.
    const own = await createAttentionEngine({ device: engine.device! });
    let layer: MultiHeadAttention;
    try {
      layer = own.createMultiHeadAttention({ embedDim: shape.embedDim, numHeads: shape.numHeads }, stateDict);
    } catch (e) {
      own.dispose();
      throw e;
    }
    const weightBytes = own.stats().bytes;
    const run = layerRun(layer, { shape, past });
    return {
      run: run.run,
      settled: () => own.settled(),
      gpuMemory: () => {
        const { peakBytes } = own.stats();
        return { peakBytes, weightBytes, scratchPeakBytes: peakBytes - weightBytes }; // a KV cache counts as scratch
      },
      kernelVariants: () => own.tuning?.choices ?? null,
      kernelTimings: async (query) => {
        const kernels = Object.fromEntries((own.tuning?.choices ?? []).map((c) => [c.kernel, c.variant]));
        const timed = await createAttentionEngine({ device: engine.device!, profile: true, tuning: { mode: 'off', kernels } });
        try {
          if (!timed.profiling) return null; // no timestamp-query on this device
          const probe = layerRun(timed.createMultiHeadAttention({ embedDim: shape.embedDim, numHeads: shape.numHeads }, stateDict), { shape, past });
          await probe.forward(query); // warms up
          return (await probe.forward(query)).timings ?? null;
        } finally {
          timed.dispose();
        }
      },
      dispose: () => {
        run.dispose();
        layer.dispose();
        own.dispose(); // leaves the shared device alive (the engine did not create it)
      },
    };
  },
};
