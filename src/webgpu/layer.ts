// A MultiHeadAttention layer on the WebGPU backend: its weights (a host copy, and the GPU copy of the
// current device generation), its KV caches' storage, and its forward: padded when its sizes are not
// multiples of 4 (padding.ts), split to the device's limits, kernel variants chosen, then encoded (forward.ts).

import type { BackendLayer } from '../backend.ts';
import { DeviceLimitError } from '../errors.ts';
import { copyWeights, type ForwardPlan, type LayerSpec, type LayerWeights } from '../plan/index.ts';
import type { BufferForwardResult, ForwardResult } from '../types.ts';
import { type EngineLimits, mergeResults, splitPlan } from './chunking.ts';
import type { DeviceState } from './device.ts';
import { forwardWebGPU } from './forward.ts';
import { type CacheHost, WebGPUKvCache } from './kv-cache.ts';
import { checkScoreMod } from './score-mod.ts';
import type { KernelChoice } from './variants.ts';
import { padForwardPlan, paddedSpec, padWeights, type Unpadded, unpaddedOf } from './padding.ts';
import { GpuLayerWeights } from './weights.ts';

/** What a layer needs of its backend. */
export interface LayerHost extends CacheHost {
  limits(): EngineLimits;
  /** Whether forwards report kernel timings. */
  readonly profiling: boolean;
  /** Runs `work` on the live device (recovering from a loss first); a loss meanwhile rejects with DeviceLostError. */
  run<T>(where: string, work: (state: DeviceState) => Promise<T>): Promise<T>;
  /** The kernel variants a call of this plan runs, chosen before anything is encoded. */
  chooseKernels(state: DeviceState, plan: ForwardPlan): Promise<KernelChoice>;
  /** Runs a call, counted as in flight (background work waits for calls). */
  call<T>(work: () => Promise<T>): Promise<T>;
}

export class WebGPULayer implements BackendLayer {
  /** The host copy (padded) outlives a device loss; the GPU copy is made for each device generation. */
  private readonly weights: LayerWeights;
  /** The layer as the kernels see it: sizes rounded up to multiples of 4 (the caller's spec when they are). */
  private readonly padded: LayerSpec;
  /** The caller's sizes when padded, else null. */
  private readonly unpadded: Unpadded | null;
  private gpu: GpuLayerWeights;
  private generation: number;

  constructor(
    private readonly backend: LayerHost,
    private readonly spec: LayerSpec,
    weights: LayerWeights,
  ) {
    this.padded = paddedSpec(spec);
    this.unpadded = unpaddedOf(spec);
    this.weights = this.unpadded ? padWeights(spec, weights) : copyWeights(weights);
    const { pool, generation } = backend.current();
    this.gpu = new GpuLayerWeights(pool, this.padded, this.weights);
    this.generation = generation;
  }

  createCacheStorage(batchSize: number, maxSeqLen: number): WebGPUKvCache {
    return new WebGPUKvCache(this.backend, batchSize, this.spec.numKvHeads, maxSeqLen, this.spec.headDim);
  }

  forward(callPlan: ForwardPlan): Promise<ForwardResult | BufferForwardResult> {
    const plan = padForwardPlan(callPlan);
    const parts = splitPlan(plan, this.backend.limits());
    if ((plan.cache || plan.gpu || plan.returnBuffer) && parts.length > 1) {
      const what = plan.cache ? 'a call with kvCache' : 'a call with GPU buffers (inputs or returnBuffer)';
      throw new DeviceLimitError({
        where: 'MultiHeadAttention.forward',
        argument: what,
        expected: 'within the device limits in one piece',
        given: `a batch that would need ${parts.length} pieces`,
        fix: `Split the batch yourself (${what} is not split).`,
      });
    }
    return this.backend.call(() => this.run(plan, parts));
  }

  private run(plan: ForwardPlan, parts: ForwardPlan[]): Promise<ForwardResult | BufferForwardResult> {
    return this.backend.run('MultiHeadAttention.forward', async (state) => {
      await checkScoreMod(state.device, state.pool.precision, this.spec.scoreMod, 'MultiHeadAttention.forward', 'config.scoreMod');
      const gpu = this.weightsOn(state);
      const cache = plan.cache ? (plan.cache.cache.storage as WebGPUKvCache).live(state.generation) : null;
      if (parts.length === 1) {
        return forwardWebGPU(state.pool, gpu, parts[0], cache, this.backend.profiling, await this.backend.chooseKernels(state, parts[0]), this.unpadded);
      }
      const results: ForwardResult[] = [];
      for (const p of parts) {
        results.push((await forwardWebGPU(state.pool, gpu, p, cache, false, await this.backend.chooseKernels(state, p), this.unpadded)) as ForwardResult);
      }
      return mergeResults(results);
    });
  }

  dispose(): void {
    const { pool, generation } = this.backend.current();
    if (this.generation === generation) this.gpu.destroy();
    pool.trim(); // idle scratch goes too, so stats() returns to what it was before the layer
  }

  /** The weights on the device of `state`, uploaded again after a device loss. */
  private weightsOn(state: DeviceState): GpuLayerWeights {
    if (this.generation !== state.generation) {
      this.gpu = new GpuLayerWeights(state.pool, this.padded, this.weights);
      this.generation = state.generation;
    }
    return this.gpu;
  }
}
