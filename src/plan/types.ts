// The resolved forms of a layer and of one call: what every backend and kernel reads. They are built
// by the checks in this folder (layer.ts, forward.ts, kv-cache.ts, attention.ts, linear.ts, shape.ts)
// and by nothing else, a ForwardPlan always through make-plan.ts's makePlan (which fills in the
// defaults); nothing below them checks arguments again.

import type { KvCache } from '../kv-cache.ts';
import type { PagedKvCache } from '../paged-kv-cache.ts';
import type { ScoreMod } from '../types.ts';
import type { WeightTensor } from '../quant/types.ts';

/** Rotary embeddings, resolved (head-transform.ts): rotate the first `dim` features of each head by position·θ_i. */
export interface RotaryPlan {
  /** Features rotated (even, ≤ Dh). */
  dim: number;
  /** θ_i = base^(−2i/dim), when no tables are given. */
  base: number;
  /** false: halves (i, i + dim/2), Llama / GPT-NeoX; true: pairs (2i, 2i + 1), GPT-J. */
  interleaved: boolean;
  /** θ_i given for each pair [dim/2] (config.rotary.invFreq), or null: θ_i = base^(−2i/dim). */
  invFreq: Float64Array | null;
  /** Multiplies cos and sin of computed angles (YaRN's attention factor); 1 by default. */
  attentionFactor: number;
  /** Given tables [maxPositions, dim/2] (what frequencies cannot express), or null: computed angles. */
  cos: Float32Array | null;
  sin: Float32Array | null;
}

/** QK-norm, resolved (head-transform.ts): an RMS norm of every query and key head with these weights [Dh]. */
export interface QkNormPlan {
  /** [Dh] ('head'), or [H·Dh] ('all'). */
  query: Float32Array;
  /** [Dh] ('head'), or [G·Dh] ('all'). */
  key: Float32Array;
  eps: number;
  /** 'head': one RMS norm per head (Qwen3, Gemma 3); 'all': one over a token's whole projection, all its heads (OLMo 2). */
  over: 'head' | 'all';
  /** Features the mean of squares runs over: Dh (the GPU's padded heads have more lanes, zeros). */
  dim: number;
}

/** config.vNorm resolved: x·rsqrt(mean(x²) + eps) over each value head's `dim` = Dh features, no weights. */
export interface VNormPlan {
  eps: number;
  /** Features the mean runs over: Dh (the GPU's padded heads have more lanes, zeros). */
  dim: number;
}

/** The sizes of one multi-head attention layer. */
export interface LayerSpec {
  embedDim: number; // E
  numHeads: number; // H
  numKvHeads: number; // G, divides H
  headDim: number; // Dh: config.headDim, default E / H (H·Dh may differ from E)
  kdim: number; // channels of `key` (E unless given)
  vdim: number; // channels of `value` (E unless given)
  bias: boolean;
  /** Rotary embeddings of every query and key head (config.rotary), or null. */
  rotary: RotaryPlan | null;
  /** RMS norm of every query and key head (config.qkNorm), or null. */
  qkNorm: QkNormPlan | null;
  /** Weightless RMS norm of every value head (config.vNorm; Gemma 4), or null / absent. */
  vNorm?: VNormPlan | null;
  /** config.kEqV: V is the k projection's output (the weights hold v rows copied from k: resolveWeights). */
  kEqV?: boolean;
  /** config.outputGate: attention ⊙ sigmoid(x·W_gᵀ + b_g) before the output projection (LayerWeights.gateProjWeight). */
  outputGate?: boolean;
  /** A custom score modification (config.scoreMod, or scaledDotProductAttention's option), or null. */
  scoreMod: ScoreMod | null;
  /** softmax(q·kᵀ·scale)·v, or linear attention with φ = elu + 1 (config.attention; engine.linearAttention). */
  attention: 'softmax' | 'linear';
  /** config.activations: 'q8' quantizes the input of every projection with packed weights (src/quant/activations.ts); absent = 'f32'. */
  activations?: 'f32' | 'q8';
  /** Set on the GPU's padded copy of a spec only (webgpu/padding.ts): the caller's head size, headDim being rounded up. */
  unpaddedHeadDim?: number;
}

/** A layer's weights, in PyTorch's layout. */
export interface LayerWeights {
  /**
   * [(H + 2·G)·Dh, E] when kdim = vdim = E (given so, or packed from float q/k/v_proj_weight); else null.
   * A weight is a Float32Array or a quantized tensor (src/quant/types.ts), kept as given: each backend
   * reads it its own way (cpu dequantizes exactly; WebGPU and wasm keep it packed).
   */
  inProjWeight: WeightTensor | null;
  qProjWeight: WeightTensor; // [H·Dh, E]     (a view into inProjWeight when packed)
  kProjWeight: WeightTensor; // [G·Dh, kdim]
  vProjWeight: WeightTensor; // [G·Dh, vdim]
  inProjBias: Float32Array | null; // [(H + 2·G)·Dh]
  outProjWeight: WeightTensor; // [E, H·Dh]
  outProjBias: Float32Array | null; // [E]
  /** config.outputGate's W_g [H·Dh, E] (float32), else absent or null. */
  gateProjWeight?: Float32Array | null;
  /** config.outputGate's b_g [H·Dh] when the layer has bias, else absent or null. */
  gateProjBias?: Float32Array | null;
}

/** LayerWeights whose weights are all float32 (what floatLayerWeights returns). */
export interface FloatLayerWeights extends LayerWeights {
  inProjWeight: Float32Array | null;
  qProjWeight: Float32Array;
  kProjWeight: Float32Array;
  vProjWeight: Float32Array;
  outProjWeight: Float32Array;
  /** Which projections were quantized before floatLayerWeights dequantized them (config.activations 'q8' quantizes their inputs); absent = none. */
  quantized?: { q: boolean; k: boolean; v: boolean; out: boolean };
}

/** What masks a score, resolved. Additive masks hold −Infinity where a bool mask said "not allowed". */
export interface MaskPlan {
  /** Added to QKᵀ/√Dh: [Sq, Skv] (shared) or [B·H, Sq, Skv]; −Infinity = masked. */
  attnMask: Float32Array | null;
  attnMaskPerHead: boolean;
  /** [B, Skv], 1 = ignore this key. */
  keyPaddingMask: Uint8Array | null;
  /** Keys i' − w < j ≤ i' only (i' = i + Skv − Sq); 0 = no window. */
  window: number;
  /** Multiplies each head's probabilities: [B·H]. */
  headMask: Float32Array | null;
}

export type PlanMode = 'self' | 'cross' | 'varlen';

/**
 * Where a call's rows live, in the head-split layout [batches, heads, rows, Dh] of Q, K, V and O that
 * every kernel uses. A varlen batch (cuSeqlens) is one batch of all T tokens, its sequences told apart
 * by the offsets; otherwise batches = B. Built once per call (geometryOf), read by every kernel.
 */
export interface Geometry {
  /** Sequences in the call: B, or the number of sequences packed with cuSeqlens (the attention kernels' workgroup z). */
  sequences: number;
  /** Batches of the head-split layout: B, or 1 for varlen. */
  batches: number;
  /** Query rows per (batch, head): Sq, or T for varlen. */
  qRows: number;
  /** Key/value rows per (batch, key/value head): Skv, or T for varlen. */
  kvRows: number;
  /** Token rows of the projections: batches · qRows. */
  tokens: number;
  /** Query rows of the longest sequence: Sq, or the longest of cuSeqlens. */
  longestSequence: number;
}

/** How scores are made before the softmax, resolved (types.ts ScoreOptions; the score rule applies it). */
export interface ScorePlan {
  /** Multiplies q·k: the caller's `scale`, else 1/√Dh. */
  scale: number;
  /** > 0: s ← softcap·tanh(s / softcap); 0: none. */
  softcap: number;
  /** [H] logits joining each row's softmax with value 0; null: none. */
  sinks: Float32Array | null;
  /** [H] ALiBi slopes: −slope·|i' − j| added to the scores; null: none. */
  alibiSlopes: Float32Array | null;
  /** Linear attention: added to the denominator φ(q)·Σφ(k) (1e-6 unless engine.linearAttention's eps). */
  eps: number;
}

/** One forward call, resolved. */
export interface ForwardPlan {
  layer: LayerSpec;
  /** 'self': key = value = query. 'cross': key and value given. 'varlen': cuSeqlens, sequences back to back. */
  mode: PlanMode;
  batchSize: number; // B (varlen: the number of sequences)
  seqLen: number; // Sq (varlen: T, all tokens)
  kvSeqLen: number; // Skv (= Sq unless cross)
  isCausal: boolean;
  /** Return the probabilities [B, H, Sq, Skv] too. */
  needWeights: boolean;
  masks: MaskPlan;
  score: ScorePlan;
  /** With rotary: each query token's position (batch-major, the projections' row order); else null. */
  positions: Int32Array | null;
  /** varlen: [n + 1] offsets, 0 … T; else null. */
  cuSeqlens: Int32Array | null;
  /** Where the call's rows live, built once (geometry.ts). */
  geometry: Geometry;
  query: Float32Array; // [B, Sq, E] (varlen: [T, E])
  key: Float32Array; // [B, Skv, kdim] (= query unless cross)
  value: Float32Array; // [B, Skv, vdim] (= query unless cross)
  /**
   * With a KV cache: the new tokens' K and V are appended at rows `start` … start + Sq − 1 of the
   * cache, and the queries attend over rows 0 … Skv − 1 (Skv = start + Sq).
   */
  cache: {
    cache: KvCache;
    start: number;
    /** The call's treeParents (types.ts), kept by the cache for acceptPath. */
    tree?: Int32Array;
  } | null;
  /**
   * GPU-resident inputs: where a GPUBuffer was passed, it is here and the array above is empty.
   * The caller keeps owning these buffers.
   */
  gpu: { query: GPUBuffer | null; key: GPUBuffer | null; value: GPUBuffer | null } | null;
  /** Leave the output (and weights) in new GPU buffers the caller owns, without a readback. */
  returnBuffer: boolean;
}

/** One sequence's part of a call on a PagedKvCache. */
export interface PagedSequencePlan {
  id: number;
  /** Its first row in the call's query [T, E] (and output). */
  row: number;
  /** Positions this layer held of it before the call: its new tokens go to start … start + length − 1. */
  start: number;
  /** New tokens. */
  length: number;
  /**
   * Its blocks after the call's reservation: position p is row p mod blockSize of block blocks[⌊p / blockSize⌋]
   * in the layer's pool; enough for start + length positions, none shared where the call writes.
   */
  blocks: Int32Array;
  /** Its treeParents, or null. */
  tree: Int32Array | null;
  /**
   * The sequence run alone on a plain cache of `start` positions: B 1, Sq length, Skv start + length,
   * isCausal, its rotary positions, its tree's mask (masks.attnMask [length, Skv]), the call's window and
   * score options; query = its rows of the call's query; cache null (the pool is the cache).
   */
  plan: ForwardPlan;
}

/** A call on a PagedKvCache (forward with sequences), resolved and its blocks reserved. Output [T, E]. */
export interface PagedPlan {
  layer: LayerSpec;
  cache: PagedKvCache;
  /** [T, E]: the sequences' new tokens back to back, in the order of `sequences`. */
  query: Float32Array;
  /** T = Σ length. */
  tokens: number;
  sequences: PagedSequencePlan[];
}
