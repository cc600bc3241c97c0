// The public nouns' shapes. Names follow PyTorch's nn.MultiheadAttention (batch_first=True).

import type { KvCache } from './kv-cache.ts';
import type { PagedKvCache } from './paged-kv-cache.ts';
import type { RotaryOptions, ScoreMod } from './layer-config.ts';
import type { TuningOptions } from './tuning-types.ts';

export type {
  ProjectionVariant,
  AttentionVariant,
  TuningOptions,
  TuningStore,
  TuningChoice,
  TuningReport,
  BackendChoice,
  BackendChoiceReport,
  WarmupOptions,
} from './tuning-types.ts';

/** Which backend runs the layers: WebGPU, float32 WebAssembly SIMD kernels on the CPU, or the float64 reference. */
export type BackendKind = 'webgpu' | 'wasm' | 'cpu';

/** The adapter behind an engine's device (GPUAdapterInfo's strings; empty where the browser hides them). */
export interface AdapterInfo {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
}

/** createAttentionEngine's options; each may be left out. */
export interface EngineOptions {
  /**
   * 'webgpu' (fail if no adapter), 'wasm' (float32 WebAssembly SIMD kernels on the CPU, `threads`),
   * 'cpu' (float64 reference), or leave out: WebGPU on a GPU; on a software adapter (SwiftShader,
   * lavapipe) 'wasm' first and WebGPU for the call shapes where it measures clearly faster
   * (engine.tuning.backends); without an adapter 'wasm' (engine.fallbackReason says why).
   */
  backend?: BackendKind;
  /** Run on this device (the caller keeps owning it: the engine's dispose() does not destroy it). */
  device?: GPUDevice;
  /**
   * Limits to obey as if they were the device's (a device may grant more than asked). Calls whose
   * buffers or dispatches exceed them are split over the batch (or groups of whole sequences of a cuSeqlens batch).
   */
  limits?: { maxStorageBufferBindingSize?: number; maxBufferSize?: number; maxComputeWorkgroupsPerDimension?: number };
  /**
   * 'f16': weights, activations and KV caches stored in float16 on the GPU (half the memory and
   * bandwidth), arithmetic, softmax statistics and accumulators in float32. Needs the adapter feature
   * shader-f16; without it the engine runs in f32 and engine.precisionNote says so. Default 'f32'.
   */
  precision?: 'f32' | 'f16';
  /**
   * backend 'wasm' only: the threads a forward is split over (rows of the projections, heads of the
   * attention). Default: the number of cores. Threads run in Node (worker_threads) and in pages that
   * are cross-origin isolated (Web Workers; the page must be served with Cross-Origin-Opener-Policy:
   * same-origin and Cross-Origin-Embedder-Policy: require-corp); elsewhere one thread, and
   * engine.threadsNote says why.
   */
  threads?: number;
  /**
   * backend 'wasm' only: which build of its kernels runs. 'relaxed' adds WebAssembly's relaxed SIMD,
   * whose 8-bit dot product speeds up 4-bit weights with `activations: 'q8'` (V8 ≥ 11.4: Chromium ≥ 114,
   * Node ≥ 22; Node 20 with `--experimental-wasm-relaxed-simd`; elsewhere the probe decides); 'simd128' is
   * 128-bit SIMD alone; 'auto' (the default) takes 'relaxed' where the platform runs it right (a probe
   * checks its result), else 'simd128'. Both give the same results, bit for bit; engine.wasmSimd says
   * which runs. 'relaxed' where the platform lacks it is refused (UnsupportedError).
   */
  wasmSimd?: 'auto' | 'relaxed' | 'simd128';
  /**
   * Time each kernel on the GPU with timestamp queries, where the adapter has 'timestamp-query':
   * every forward's result then has `timings` (engine.profiling says whether it does). Each kernel
   * gets its own compute pass, so leave it off when not measuring. Default false.
   */
  profile?: boolean;
  /**
   * How kernel variants are chosen (src/webgpu/variants.ts). Default: a sweep in the background on first use per
   * adapter and shape class (each candidate of the adapter kind checked against the float64 reference first, then
   * timed; calls never wait for it), remembered in localStorage (browser) or `~/.cache/webgpu-attention/tuning.json` (Node).
   */
  tuning?: TuningOptions;
}

export type { MultiHeadAttentionConfig, QuantizedStateDict, RotaryOptions, ScoreMod, StateDict } from './layer-config.ts';

/** How scores are made before the softmax: options of MultiHeadAttention.forward and scaledDotProductAttention. */
export interface ScoreOptions {
  /** Multiplies q·k in place of 1/√Dh (PyTorch's `scale`). Finite, > 0. */
  scale?: number;
  /** > 0: each scaled score s becomes softcap·tanh(s / softcap), before masks and additive biases (Gemma 2; ONNX Runtime's `softcap`). */
  softcap?: number;
  /**
   * Float32Array [H]: a logit per head that joins every row's softmax as one more key whose value is 0: the
   * denominator gains exp(sinks[h]) and the row's maximum includes it; it is not scaled, soft-capped
   * or biased (gpt-oss's learned sinks; ONNX Runtime's `head_sink`; zeros are "smooth softmax").
   * With needWeights the probabilities leave the sink out (rows sum to less than 1).
   */
  sinks?: Float32Array;
  /** Float32Array [H]: adds −slope·|i' − j| to head h's scores (ALiBi; FlashAttention-2's `alibi_slopes`; i' = i + Skv − Sq). */
  alibiSlopes?: Float32Array;
}

/** Masks shared by MultiHeadAttention.forward and scaledDotProductAttention. A row left with no key gives 0. */
export interface MaskOptions {
  /** Query i sees keys j ≤ i + (Skv − Sq) (queries aligned to the end of the keys). Default false. */
  isCausal?: boolean;
  /** [B, Skv], 1 = ignore this key (PyTorch's key_padding_mask convention). */
  keyPaddingMask?: Uint8Array;
  /**
   * [Sq, Skv] or [B·H, Sq, Skv]. Float32Array: added to QKᵀ/√Dh (−Infinity masks). Uint8Array:
   * 1 = not allowed (PyTorch's bool attn_mask).
   */
  attnMask?: Float32Array | Uint8Array;
  /** Sliding window: query i sees keys i' − window < j ≤ i', i' = i + (Skv − Sq). */
  window?: number;
  /** [H] or [B, H]: multiplies each head's probabilities (and so its output before W_O). */
  headMask?: Float32Array;
}

/**
 * A Float16Array (ES2025; Node 20 has none), typed by shape so that this package compiles without
 * the ES2025 library: any real Float16Array fits it.
 */
export interface Float16ArrayLike extends ArrayBufferView {
  readonly length: number;
  readonly [Symbol.toStringTag]: 'Float16Array';
  [index: number]: number;
}

/**
 * A tensor given as an array: float32, or float16 as a Uint16Array of IEEE binary16 bits or a
 * Float16Array where the runtime has one. Half inputs are widened to float32 exactly, whatever the
 * engine's precision.
 */
export type TensorArray = Float32Array | Uint16Array | Float16ArrayLike;

/** How outputs read back are returned: 'f32' (Float32Array, the default) or 'f16' (Uint16Array of IEEE binary16 bits). */
export interface OutputTypeOption {
  /**
   * 'f16': `output` is a Uint16Array of IEEE binary16 bits, rounded to nearest even (view it as
   * `new Float16Array(output.buffer)` where the runtime has Float16Array); with precision 'f16' the
   * GPU's float16 values are returned as they are. Probabilities (needWeights) stay Float32Array.
   * Not with returnBuffer (a returned buffer holds the engine's precision). Default 'f32'.
   */
  outputType?: 'f32' | 'f16';
}

/** A batch of sequences of one length, [B, S, E]; self-attention, or cross-attention with key and value. */
export interface BatchedForwardOptions extends MaskOptions, ScoreOptions, OutputTypeOption {
  /** B. */
  batchSize: number;
  /** Sq. */
  seqLen: number;
  /** Cross-attention: [B, Skv, kdim]; with `value`. */
  key?: TensorArray;
  /** Cross-attention: [B, Skv, vdim]; with `key`. */
  value?: TensorArray;
  /** Skv for cross-attention. Default seqLen. */
  kvSeqLen?: number;
  /**
   * Decoding: append these positions' keys and values to the cache and attend over all it holds
   * (queries aligned to its end, so `isCausal: true` gives the usual decoder). From mha.createKvCache.
   */
  kvCache?: KvCache;
  /**
   * Also return the attention probabilities, per head: PyTorch's need_weights=True with
   * average_attn_weights=False. They take B·H·Sq·Skv floats; the output does not need them. Default false.
   */
  needWeights?: boolean;
  /**
   * Leave the output [B, S, E] (and, with needWeights, the weights) in new GPUBuffers and resolve to
   * `{ outputBuffer, attentionWeightsBuffer? }` without reading back: for chaining layers or handing
   * the result to other WebGPU code. The caller owns the returned buffers (destroy() them). WebGPU only.
   */
  returnBuffer?: boolean;
  /** Refused unless 0: this engine is inference only. */
  dropout?: number;
  /** With config.rotary: each token's position, Int32Array [B, Sq] (left-padded batches, say). Default 0 … Sq − 1 after the cache's length. */
  positionIds?: Int32Array;
  /**
   * Speculative decoding: the call's seqLen = k new tokens are a tree of drafts, not a sequence
   * (batchSize 1, with kvCache). Int32Array [k]: −1 where a token's parent is the cached context (a
   * root), else the index (< i) of its parent among the new tokens. Token i sees every cached position,
   * its ancestors and itself; its rotary position is cache.length + its depth (a root at depth 0).
   * Implies isCausal. Not with attnMask, positionIds, window, alibiSlopes or a layer's scoreMod. Then
   * cache.acceptPath(path) keeps one root-to-node path (docs/DECODING.md).
   */
  treeParents?: Int32Array;
  /** Left out here: a packed batch is PackedForwardOptions. */
  cuSeqlens?: undefined;
  /** Left out here: a call on a PagedKvCache is PagedForwardOptions. */
  sequences?: undefined;
}

/**
 * A packed variable-length batch (FlashAttention's varlen layout): sequences back to back in query
 * [T, E], cuSeqlens an Int32Array [n + 1] of offsets from 0 to T. Attention stays within each
 * sequence; no work is spent on padding.
 */
export interface PackedForwardOptions extends Pick<MaskOptions, 'isCausal' | 'window' | 'headMask'>, ScoreOptions, OutputTypeOption {
  /** Offsets [n + 1], 0 … T: sequence i is rows cuSeqlens[i] … cuSeqlens[i + 1] − 1 of query. */
  cuSeqlens: Int32Array;
  /** Refused unless 0: this engine is inference only. */
  dropout?: number;
  /** Left out here: a call on a PagedKvCache is PagedForwardOptions. */
  sequences?: undefined;
}

/** One sequence of a call on a PagedKvCache (PagedForwardOptions.sequences). */
export interface PagedSequence {
  /** The sequence's id (PagedKvCache.addSequence or fork). */
  id: number;
  /** Its new tokens in this call (≥ 1): the next `length` rows of x. */
  length: number;
  /**
   * Its new tokens are a tree of drafts (speculative decoding), as BatchedForwardOptions.treeParents:
   * Int32Array [length], −1 for a root, else the index (< i) of the parent. Then paged.acceptPath(id, path).
   */
  treeParents?: Int32Array;
}

/**
 * A call on a PagedKvCache (continuous batching): x [T, E] packs the new tokens of several sequences in
 * the order of `sequences` (T = Σ length). Each sequence's tokens are appended to its own blocks, sit at
 * rotary positions lengthOf(id) + i, and attend causally to its own past and themselves; the output is
 * [T, E], each sequence's rows equal to its run alone. Prefills and single-token steps mix in one call.
 */
export interface PagedForwardOptions extends Pick<MaskOptions, 'isCausal' | 'window'>, ScoreOptions, OutputTypeOption {
  /** From mha.createPagedKvCache (this layer's). */
  kvCache: PagedKvCache;
  /** The sequences whose new tokens x holds, in row order; each id at most once. */
  sequences: readonly PagedSequence[];
  /** Refused unless 0: this engine is inference only. */
  dropout?: number;
  /** Left out here: a packed batch is PackedForwardOptions. */
  cuSeqlens?: undefined;
}

/** mha.createPagedKvCache's options. */
export interface PagedKvCacheOptions {
  /** Positions per block (16 is usual; a power of two from 1 to 1024). Taken from `sharing` when given. */
  blockSize?: number;
  /** Blocks in the pool (every sequence's positions together, rounded up to whole blocks per sequence). Taken from `sharing` when given. */
  maxBlocks?: number;
  /** How K and V are stored (KvCacheDtype), default the engine's precision. Taken from `sharing` when given. */
  dtype?: KvCacheDtype;
  /**
   * Another layer's paged cache: this layer's pool joins its block table (one table serves every layer
   * of a model; its sequences, blocks and free list are shared, each layer keeps its own K and V).
   */
  sharing?: PagedKvCache;
}

/** MultiHeadAttention.forward's options: a batch of sequences of one length, or a packed batch (cuSeqlens). A call on a PagedKvCache takes PagedForwardOptions. */
export type ForwardOptions = BatchedForwardOptions | PackedForwardOptions;

/** The sizes of projected tensors: query [B, H, Sq, Dh], key and value [B, G, Skv, Dh]. */
export interface HeadShapeOptions {
  /** B. */
  batchSize: number;
  /** H: query heads. */
  numHeads: number;
  /** Key/value heads; query head h uses h / (numHeads / numKvHeads). Default numHeads. */
  numKvHeads?: number;
  /** Sq: query positions. */
  seqLen: number;
  /** Skv: key positions. Default seqLen. */
  kvSeqLen?: number;
  /** Dh. */
  headDim: number;
}

/** engine.linearAttention's options. */
export interface LinearAttentionOptions extends HeadShapeOptions {
  /** Row i sums keys j ≤ i' = i + Skv − Sq only. */
  isCausal?: boolean;
  /** [B, Skv], nonzero = leave this key out of both sums. */
  keyPaddingMask?: Uint8Array;
  /** Added to the denominator φ(q)·Σφ(k). Default 1e-6. */
  eps?: number;
  /** Refused when true: linear attention never forms probabilities. */
  needWeights?: boolean;
}

/** engine.scaledDotProductAttention's options: the head shapes, masks, score options and output type. */
export interface ScaledDotProductAttentionOptions extends MaskOptions, ScoreOptions, HeadShapeOptions, OutputTypeOption {
  /** Also return attentionWeights [B, H, Sq, Skv], each head's probabilities. Default false. */
  needWeights?: boolean;
  /** Refused unless 0: this engine is inference only. */
  dropout?: number;
  /**
   * Rotates the queries and the last Sq keys by their positions (positionIds [B, Sq], default
   * Skv − Sq + i); keys before them are taken as already rotated (ONNX Runtime's GroupQueryAttention,
   * Hugging Face's past_key_values). Needs kvSeqLen ≥ seqLen.
   */
  rotary?: RotaryOptions;
  /** With rotary: each query's position, Int32Array [B, Sq]. */
  positionIds?: Int32Array;
  /**
   * Leave the output [B, H, Sq, Dh] (and, with needWeights, the probabilities) in new GPUBuffers the
   * caller owns, without a readback: resolves to { outputBuffer, attentionWeightsBuffer? }. WebGPU only.
   */
  returnBuffer?: boolean;
  /** A custom score modification (see ScoreMod). */
  scoreMod?: ScoreMod;
}

import type { KvCacheDtype } from './quant/kv.ts';

export type { KvCacheDtype } from './quant/kv.ts';

/** mha.createKvCache's options. */
export interface KvCacheOptions {
  /** B. */
  batchSize: number;
  /** The most positions it can hold. */
  maxSeqLen: number;
  /**
   * How K and V are stored (KvCacheDtype); default the engine's precision ('f32' on 'cpu' and 'wasm').
   * 'q8_0' and 'q4_0' need a head size that is a multiple of 32. Queries stay float.
   */
  dtype?: KvCacheDtype;
  /** A past to start from: keys [B, G, length, Dh] (as the layer computes them), with `value`. */
  key?: Float32Array;
  /** A past to start from: values [B, G, length, Dh], with `key`. */
  value?: Float32Array;
  /** Positions in `key` and `value`; default their length / (B·G·Dh). At most maxSeqLen. */
  length?: number;
}

/** What forward resolves to with `returnBuffer: true`. The caller owns (and destroys) these buffers. */
export interface BufferForwardResult {
  /** [B, S, E] float32, usage STORAGE | COPY_SRC | COPY_DST, on the engine's device. */
  outputBuffer: GPUBuffer;
  /** [B, H, Sq, Skv] float32, with needWeights. */
  attentionWeightsBuffer?: GPUBuffer;
}

/** What forward and scaledDotProductAttention resolve to with `outputType: 'f16'`. */
export interface HalfForwardResult extends Omit<ForwardResult, 'output'> {
  /** IEEE binary16 bits. */
  output: Uint16Array;
}

/** What forward, scaledDotProductAttention and linearAttention resolve to (without returnBuffer or outputType 'f16'). */
export interface ForwardResult {
  /** [B, S, E], batch first. */
  output: Float32Array;
  /** Probabilities [B, H, Sq, Skv]: softmax(Q·Kᵀ/√Dh) of each head; 0 where a key is masked. Only with needWeights. */
  attentionWeights?: Float32Array;
  /**
   * With createAttentionEngine({ profile: true }) on an adapter with timestamp-query: GPU milliseconds
   * of each stage it ran (qkv_projection, head_transform, flash_attention or linear_attention, attention_probs,
   * output_projection, …) and `gpu`, from the first kernel's start to the last one's end. Not for calls split to fit device limits.
   */
  timings?: Record<string, number>;
}

/** engine.stats(): the GPU memory the engine holds. */
export interface EngineStats {
  /** GPU buffers the engine holds (weights, scratch, staging); 0 on the CPU backend. */
  buffers: number;
  /** Their total size in bytes. */
  bytes: number;
  /**
   * The most bytes the engine held at once since it was created: the high-water mark of `bytes`,
   * sampled at every buffer the engine allocates, so it includes the scratch (inputs, Q/K/V,
   * attention output, staging for the readback) that a call frees or that is trimmed afterwards.
   * It never decreases (a device loss included); for the peak of one layer or call, run it on an
   * engine of its own (`createAttentionEngine({ device })` shares the device and its pipelines).
   * Buffers returned with `returnBuffer` are the caller's and are not counted. 0 on the CPU backend.
   */
  peakBytes: number;
}
