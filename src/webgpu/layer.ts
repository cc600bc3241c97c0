// A MultiHeadAttention layer on the WebGPU backend: its weights (a host copy, and the GPU copy of the
// current device generation), its KV caches' storage, and its forward, one way through, each step
// called here in order (runtime.ts): plan → prepare (padded when its sizes are not multiples of 4,
// padding.ts; split to the device's limits) → begin → each piece's kernels chosen → encode → submit →
// read (forward.ts, call.ts) → pieces merged → end. The layer holds the runtime the backend handed it,
// never the backend, and hands nothing down to run later.

import type { BackendLayer } from '../backend.ts';
import type { ForwardPlan, LayerSpec, LayerWeights, PagedPlan } from '../plan/index.ts';
import type { BufferForwardResult, ForwardResult } from '../types.ts';
import { mergeResults } from './chunking.ts';
import type { DeviceState } from './device.ts';
import { forwardWebGPU } from './forward.ts';
import { WebGPUKvCache } from './kv-cache.ts';
import { WebGPUPagedStorage } from './paged-kv-cache.ts';
import { forwardPagedWebGPU, pagedCallTooBig, pagedProjectionPlan } from './paged.ts';
import type { KvCacheDtype } from '../types.ts';
import { type FormattedSpec, hasPacked } from './kernels/packed-weight.ts';
import { padForwardPlan, paddedSpec, type Unpadded, unpaddedOf } from './padding.ts';
import type { GpuRuntime } from './runtime.ts';
import { KERNEL_NAMES } from './variants.ts';
import { GpuLayerWeights, type HostLayerWeights, hostFormats, hostWeights } from './weights.ts';

const WHERE = 'MultiHeadAttention.forward';

export class WebGPULayer implements BackendLayer {
  /** The host copy (padded; quantized weights packed) outlives a device loss; the GPU copy is made for each device generation. */
  private readonly weights: HostLayerWeights;
  /** The layer as the kernels see it: sizes rounded up to multiples of 4 (the caller's spec when they are), with its weights' formats where some are packed. */
  private readonly padded: FormattedSpec;
  /** The caller's sizes when padded, else null. */
  private readonly unpadded: Unpadded | null;
  private gpu: GpuLayerWeights;
  private generation: number;

  constructor(
    private readonly runtime: GpuRuntime,
    private readonly spec: LayerSpec,
    weights: LayerWeights,
  ) {
    this.unpadded = unpaddedOf(spec);
    this.weights = hostWeights(spec, weights); // quantized weights packed, never expanded (weights.ts)
    const formats = hostFormats(this.weights);
    // Plans carry the formats (packed-weight.ts formatsOf): pipelines, tiers, sweeps and gates follow them.
    this.padded = hasPacked(formats) ? { ...paddedSpec(spec), projectionFormats: formats } : paddedSpec(spec);
    const { pool, generation } = runtime.current();
    this.gpu = new GpuLayerWeights(pool, this.padded, this.weights);
    this.generation = generation;
  }

  /** The engine's precision. */
  get defaultCacheDtype(): KvCacheDtype {
    return this.runtime.current().pool.elementBytes === 2 ? 'f16' : 'f32';
  }

  /** Any dtype (src/plan/kv-cache.ts checked it: q-dtypes need headDim % 32 = 0): kv-cache.ts keeps each its own way. */
  createCacheStorage(batchSize: number, maxSeqLen: number, dtype: KvCacheDtype): WebGPUKvCache {
    return new WebGPUKvCache(this.runtime, batchSize, this.spec.numKvHeads, maxSeqLen, this.spec.headDim, dtype);
  }

  /** A PagedKvCache's pool for this layer (paged-kv-cache.ts), at the engine's precision. */
  createPagedStorage(blockSize: number, maxBlocks: number, dtype: KvCacheDtype): WebGPUPagedStorage {
    return new WebGPUPagedStorage(this.runtime, blockSize, maxBlocks, this.spec.numKvHeads, this.spec.headDim, dtype);
  }

  /** A call on a PagedKvCache: every sequence in one submission (paged.ts). */
  async forwardPaged(paged: PagedPlan): Promise<ForwardResult> {
    const projection = pagedProjectionPlan(paged);
    const formats = this.padded.projectionFormats;
    const plan = formats ? { ...projection, layer: { ...projection.layer, projectionFormats: formats } } : projection;
    const kernels = ['qkv_projection', 'output_projection'] as const;
    const call = this.runtime.prepare(WHERE, plan, kernels, { mod: null, argument: 'config.scoreMod' });
    if (call.parts.length > 1) throw pagedCallTooBig(call.parts.length);
    const state = await this.runtime.begin(call);
    try {
      const choice = await this.runtime.chooseKernels(state, plan, kernels);
      const storage = paged.cache.storage as WebGPUPagedStorage;
      return await forwardPagedWebGPU(state, this.weightsOn(state), paged, plan, storage, choice, this.unpadded);
    } catch (e) {
      throw await this.runtime.lostDuring(WHERE, state, e);
    } finally {
      this.runtime.end();
    }
  }

  async forward(callPlan: ForwardPlan): Promise<ForwardResult | BufferForwardResult> {
    const padded = padForwardPlan(callPlan);
    const formats = this.padded.projectionFormats;
    const plan = formats ? { ...padded, layer: { ...padded.layer, projectionFormats: formats } } : padded;
    const call = this.runtime.prepare(WHERE, plan, KERNEL_NAMES, { mod: this.spec.scoreMod, argument: 'config.scoreMod' });
    const profile = this.runtime.profiling && call.parts.length === 1;
    const state = await this.runtime.begin(call); // in flight until end() below
    try {
      const results: (ForwardResult | BufferForwardResult)[] = [];
      for (const part of call.parts) {
        const choice = await this.runtime.chooseKernels(state, part, call.kernels);
        const cache = part.cache ? (part.cache.cache.storage as WebGPUKvCache).live(state.generation) : null;
        results.push(await forwardWebGPU(state.pool, this.weightsOn(state), part, cache, profile, choice, this.unpadded));
      }
      return mergeResults(results);
    } catch (e) {
      throw await this.runtime.lostDuring(WHERE, state, e);
    } finally {
      this.runtime.end();
    }
  }

  dispose(): void {
    const { pool, generation } = this.runtime.current();
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
