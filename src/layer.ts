// MultiHeadAttention: a layer's sizes and weights on one backend. forward() validates the call,
// resolves a plan, and hands it to the backend.

import type { BackendLayer } from './backend.ts';
import { DisposedError, UnsupportedError } from './errors.ts';
import { KvCache } from './kv-cache.ts';
import { isPagedCall, type LayerSpec, resolveForwardPlan, resolvePagedCacheOptions, resolvePagedPlan } from './plan/index.ts';
import { PagedKvCache } from './paged-kv-cache.ts';
import { resolveKvCacheOptions } from './plan/index.ts';
import type {
  BatchedForwardOptions,
  BufferForwardResult,
  ForwardOptions,
  ForwardResult,
  HalfForwardResult,
  KvCacheOptions,
  PagedForwardOptions,
  PagedKvCacheOptions,
  TensorArray,
} from './types.ts';
import { toF16 } from './util/f16.ts';

/** The result as options.outputType asks (checked with the plan): 'f16' narrows the output to binary16 bits. */
export function withOutputType(result: ForwardResult | BufferForwardResult, options: unknown): ForwardResult | HalfForwardResult | BufferForwardResult {
  if ((options as { outputType?: unknown }).outputType !== 'f16' || !('output' in result)) return result;
  return { ...result, output: toF16(result.output) };
}

/** A multi-head attention layer with its weights uploaded once; made by engine.createMultiHeadAttention(). */
export class MultiHeadAttention {
  /** E */
  readonly embedDim: number;
  /** H */
  readonly numHeads: number;
  /** G */
  readonly numKvHeads: number;
  /** Dh: config.headDim, default E / H (H·Dh may differ from E) */
  readonly headDim: number;
  /** Whether the layer has in_proj_bias and out_proj.bias. */
  readonly bias: boolean;
  private impl: BackendLayer | null;

  /** @internal Made by AttentionEngine.createMultiHeadAttention. */
  constructor(
    private readonly spec: LayerSpec,
    impl: BackendLayer,
    private readonly onDispose: (layer: MultiHeadAttention) => void,
  ) {
    this.impl = impl;
    this.embedDim = spec.embedDim;
    this.numHeads = spec.numHeads;
    this.numKvHeads = spec.numKvHeads;
    this.headDim = spec.headDim;
    this.bias = spec.bias;
  }

  /**
   * Attention over `query` [B, S, E] (batch first; a Float32Array, half precision as a Uint16Array of
   * binary16 bits or a Float16Array, or a GPUBuffer on the engine's device that the caller keeps
   * owning). Resolves to `{ output }` [B, S, E] (a Float32Array; binary16 bits with `outputType: 'f16'`),
   * plus `attentionWeights` [B, H, S, S] (per-head probabilities) with `needWeights: true`.
   * Rejects with a typed error, before any GPU work, when an argument is wrong.
   */
  forward(query: TensorArray | GPUBuffer, options: ForwardOptions & { outputType: 'f16'; returnBuffer?: false }): Promise<HalfForwardResult>;
  forward(
    query: TensorArray | GPUBuffer,
    options: BatchedForwardOptions & { returnBuffer: true; needWeights: true },
  ): Promise<BufferForwardResult & { attentionWeightsBuffer: GPUBuffer }>;
  forward(query: TensorArray | GPUBuffer, options: BatchedForwardOptions & { returnBuffer: true }): Promise<BufferForwardResult>;
  forward(
    query: TensorArray | GPUBuffer,
    options: BatchedForwardOptions & { needWeights: true; returnBuffer?: false },
  ): Promise<ForwardResult & { attentionWeights: Float32Array }>;
  forward(query: TensorArray, options: PagedForwardOptions & { outputType: 'f16' }): Promise<HalfForwardResult>;
  forward(query: TensorArray, options: PagedForwardOptions): Promise<ForwardResult>;
  forward(query: TensorArray | GPUBuffer, options: ForwardOptions): Promise<ForwardResult>;
  async forward(query: TensorArray | GPUBuffer, options: ForwardOptions | PagedForwardOptions): Promise<ForwardResult | HalfForwardResult | BufferForwardResult> {
    if (!this.impl) {
      throw new DisposedError('MultiHeadAttention.forward: this layer', 'Create a new layer with engine.createMultiHeadAttention().');
    }
    if (isPagedCall(options)) return this.forwardPaged(this.impl, query, options);
    const plan = resolveForwardPlan(this.spec, query, options, this);
    if (!plan.cache) return withOutputType(await this.impl.forward(plan), options);
    const cache = plan.cache.cache;
    cache.busy = true;
    try {
      const result = await this.impl.forward(plan);
      cache.advance(plan.seqLen, plan.cache.tree ?? null);
      return withOutputType(result, options);
    } finally {
      cache.busy = false;
    }
  }

  /**
   * A KV cache for decoding: keys and values of up to `maxSeqLen` positions for `batchSize` sequences
   * (GPU buffers on WebGPU, arrays on the CPU). Pass it as `forward(x, { batchSize, seqLen, kvCache,
   * isCausal: true })`: the new positions' K and V are appended and the queries attend over every
   * position cached so far. With `key` and `value` [B, G, length, Dh] it starts from that past
   * (cache.read() of another cache, ONNX Runtime's past_key/past_value, Hugging Face's past_key_values).
   */
  createKvCache(options: KvCacheOptions): KvCache {
    if (!this.impl) {
      throw new DisposedError('MultiHeadAttention.createKvCache: this layer', 'Create a new layer with engine.createMultiHeadAttention().');
    }
    const { batchSize, maxSeqLen, dtype: asked, past } = resolveKvCacheOptions(this.spec, options);
    const dtype = asked ?? this.impl.defaultCacheDtype;
    const cache = new KvCache(batchSize, maxSeqLen, dtype, this.impl.createCacheStorage(batchSize, maxSeqLen, dtype), this);
    if (past) {
      cache.storage.write(past.key, past.value, past.length);
      cache.advance(past.length);
    }
    return cache;
  }

  /**
   * A paged KV cache for serving many sequences at once (continuous batching, parallel sampling,
   * speculative decoding per sequence): `blockSize` positions a block, `maxBlocks` blocks in a pool,
   * every sequence's positions in blocks of it. `paged.addSequence()` gives an id; then
   * `forward(x, { kvCache: paged, sequences: [{ id, length }, …] })`. For a model's further layers,
   * `createPagedKvCache({ sharing: first })` joins the first layer's block table (docs/DECODING.md).
   */
  createPagedKvCache(options: PagedKvCacheOptions): PagedKvCache {
    const where = 'MultiHeadAttention.createPagedKvCache';
    const impl = this.impl;
    if (!impl) throw new DisposedError(`${where}: this layer`, 'Create a new layer with engine.createMultiHeadAttention().');
    const { blockSize, maxBlocks, dtype: asked, sharing } = resolvePagedCacheOptions(this.spec, options);
    if (!impl.createPagedStorage) {
      throw new UnsupportedError({
        where,
        argument: 'this layer',
        expected: 'a layer on a backend with paged attention',
        given: 'a backend without it',
        fix: 'Use mha.createKvCache per sequence.',
      });
    }
    const dtype = asked ?? impl.defaultCacheDtype;
    return new PagedKvCache(sharing ?? { blockSize, maxBlocks, dtype }, impl.createPagedStorage(blockSize, maxBlocks, dtype), this);
  }

  private async forwardPaged(impl: BackendLayer, query: TensorArray | GPUBuffer, options: PagedForwardOptions): Promise<ForwardResult | HalfForwardResult> {
    if (!impl.forwardPaged) {
      throw new UnsupportedError({
        where: 'MultiHeadAttention.forward',
        argument: 'options.sequences',
        expected: 'a layer on a backend with paged attention',
        given: 'a backend without it',
        fix: 'Run each sequence on a plain KvCache.',
      });
    }
    const plan = resolvePagedPlan(this.spec, query, options, this);
    const cache = plan.cache;
    cache.busy = true;
    try {
      const result = await impl.forwardPaged(plan);
      cache.advance(plan.sequences);
      return withOutputType(result, options) as ForwardResult | HalfForwardResult;
    } finally {
      cache.busy = false;
    }
  }

  /** Releases the layer's GPU memory at once. Calling it twice is harmless; forward() afterwards throws. */
  dispose(): void {
    if (!this.impl) return;
    this.impl.dispose();
    this.impl = null;
    this.onDispose(this);
  }

  /** True after dispose(). */
  get disposed(): boolean {
    return this.impl === null;
  }
}
