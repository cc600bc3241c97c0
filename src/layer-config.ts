// A layer's config and weights: engine.createMultiHeadAttention's two arguments (re-exported by
// types.ts with the other public nouns).

import type { QuantizedTensor } from './quant/types.ts';

/** A layer's sizes and what it computes: engine.createMultiHeadAttention's first argument. */
export interface MultiHeadAttentionConfig {
  /** E: model width. */
  embedDim: number;
  /** Channels of `key` for cross-attention. Default embedDim. */
  kdim?: number;
  /** Channels of `value` for cross-attention. Default embedDim. */
  vdim?: number;
  /** H: query heads; embedDim must be divisible by it unless headDim is given. */
  numHeads: number;
  /**
   * Dh: the size of each query/key/value head. Default embedDim / numHeads. When given, H·Dh may differ
   * from E (Qwen3, Gemma 3, gpt-oss): in_proj_weight is [(H + 2·G)·Dh, E] and out_proj.weight [E, H·Dh].
   */
  headDim?: number;
  /** G: key/value heads (grouped-query attention); divides numHeads. Default numHeads. */
  numKvHeads?: number;
  /** Whether the layer has in_proj_bias and out_proj.bias. Default true. */
  bias?: boolean;
  /** Refused unless 0: this engine is inference only. */
  dropout?: number;
  /**
   * Rotary position embeddings of every query and key head, after the projection and bias and before
   * K enters a KV cache: the first `dim` features (default the head size; even) rotate by
   * position·θ_i, θ_i = base^(−2i/dim) (base default 10000), as halves (i, i + dim/2: Llama,
   * GPT-NeoX) or with `interleaved: true` as pairs (2i, 2i + 1: GPT-J). `cos`/`sin` [maxPositions,
   * dim/2] replace the computed angles (Llama 3, YaRN, NTK scaling). Positions: 0 … S − 1, after a
   * KV cache's length, within each sequence with cuSeqlens, or forward's `positionIds`.
   */
  rotary?: RotaryOptions;
  /** A custom score modification for every call of the layer (see ScoreMod). */
  scoreMod?: ScoreMod;
  /**
   * An RMS norm of the queries and keys after the projection and before rotary. `over` 'head'
   * (default; Qwen3, Gemma 3): of every head, weights [headDim]. 'all' (OLMo 2): of a token's whole
   * projection before it is split into heads, weights query [H·headDim], key [G·headDim], the mean
   * over all H·headDim (G·headDim) features. eps default 1e-6.
   */
  qkNorm?: { query: Float32Array; key: Float32Array; eps?: number; over?: 'head' | 'all' };
  /**
   * A weightless RMS norm of every value head, x·rsqrt(mean(x²) + eps) over its headDim features,
   * after the projection and before V enters a KV cache (Gemma 4's v_norm). `true` = `{}`; eps
   * default 1e-6.
   */
  vNorm?: boolean | { eps?: number };
  /**
   * K = V (Gemma 4's full-attention layers, `attention_k_eq_v`): the values are the key projection's
   * output, taken before the key norm and rotary (then vNorm, if any). The state dict has no v
   * weights: q_proj_weight [H·headDim, E] and k_proj_weight [G·headDim, kdim], or in_proj_weight
   * [(H + G)·headDim, E]; in_proj_bias [(H + G)·headDim]. Needs vdim = kdim; cross-attention takes
   * value = key (the same array). Default false.
   */
  kEqV?: boolean;
  /**
   * An output gate (Qwen3-Next, Qwen3.5): out = W_O·(attention ⊙ sigmoid(x·W_gᵀ + b_g)), elementwise
   * over the H·headDim features of each token's concatenated heads, before the output projection.
   * The state dict then has gate_proj_weight [H·headDim, E] (and gate_proj_bias [H·headDim] when
   * the layer has bias). Qwen3-Next's q_proj [H·2·headDim, E] holds per head h the query rows
   * h·2·headDim … + headDim − 1, then the gate rows. Default false.
   */
  outputGate?: boolean;
  /**
   * 'softmax' (default): softmax(q·kᵀ·scale)·v. 'linear': linear attention with φ(x) = elu(x) + 1 on
   * the projected queries and keys (see AttentionEngine.linearAttention; ε 1e-6), O(S·Dh²) rather
   * than O(S²·Dh); isCausal, keyPaddingMask, KV caches, GQA, rotary and QK-norm apply, the options
   * that shape a softmax (attnMask, window, scale, softcap, sinks, ALiBi, scoreMod, needWeights) do not.
   */
  attention?: 'softmax' | 'linear';
  /**
   * How the projections with quantized weights multiply. 'f32' (default): the input in float32 times
   * the weights' exact float values. 'q8': llama.cpp's arithmetic — each projection input with packed
   * weights is first quantized as ggml's Q8_0 (every row in blocks of 32 along K: d = max|x|/127 as
   * f16, q = round(x/d) in int8; src/quant/activations.ts), and the products are integer dot products
   * per block, scaled in float: the result is y = (d·q)·Wᵀ + b. Faster on the 'wasm' backend (integer
   * SIMD), off from 'f32' by the activations' rounding (about 0.4 % of a block's largest element).
   * Projections with float32 weights are unaffected; a layer with no quantized weight refuses 'q8'.
   */
  activations?: 'f32' | 'q8';
}

/**
 * PyTorch nn.MultiheadAttention state_dict names → row-major Float32Array:
 *   in_proj_weight [(H + 2·G)·Dh, E]  (= [3E, E] when G = H), in_proj_bias [(H + 2·G)·Dh],
 *   out_proj.weight [E, E], out_proj.bias [E]. Linear layers compute y = x·Wᵀ + b.
 */
export type StateDict = Record<string, Float32Array>;

/**
 * A state_dict whose projection weights (in_proj_weight, q/k/v_proj_weight, out_proj.weight) may also
 * be quantized tensors: GGUF blocks (q4_0, q8_0, q4_k, q6_k) or ONNX MatMulNBits (src/quant/types.ts).
 * Biases stay Float32Array. A layer with q/k/v biases may leave out_proj.bias out (Qwen2): it is zero.
 */
export type QuantizedStateDict = Record<string, Float32Array | QuantizedTensor>;

/**
 * A custom score modification (what FlexAttention's score_mod is to PyTorch): applied to every score
 * after scale, softcap and ALiBi and before masks. `wgsl` defines
 * `fn scoreMod(score: f32, b: u32, h: u32, i: u32, j: u32) -> f32`, compiled into the attention
 * kernels; `reference` computes the same in JavaScript for the CPU backend. i is the query's position
 * i' = i + Skv − Sq (the cache included; 0 if negative), j the key's; both within the sequence with
 * cuSeqlens; b the batch element (the sequence with cuSeqlens), h the query head.
 */
export interface ScoreMod {
  wgsl: string;
  reference: (score: number, b: number, h: number, i: number, j: number) => number;
}

/** Rotary position embeddings (MultiHeadAttentionConfig.rotary, ScaledDotProductAttentionOptions.rotary). */
export interface RotaryOptions {
  /** Features rotated, from the first: even, ≤ the head size. Default the head size. */
  dim?: number;
  /** θ_i = base^(−2i/dim). Default 10000. */
  base?: number;
  /** true: pairs (2i, 2i + 1) (GPT-J); false (default): halves (i, i + dim/2) (Llama, GPT-NeoX). */
  interleaved?: boolean;
  /**
   * θ_i for each pair i, [dim/2], in place of base^(−2i/dim): any position works, no table. Every rope
   * of today's families is a set of inverse frequencies (a zero leaves its pair unrotated) and one
   * attention factor: Llama 3's frequency factors, YaRN, linear scaling (θ_i / factor), Gemma 4's
   * proportional rope, per-layer bases. Hugging Face's `inv_freq` of the layer's rotary embedding.
   * Finite, ≥ 0. Not with `base` or `cos`/`sin`.
   */
  invFreq?: Float32Array | Float64Array;
  /**
   * Multiplies cos and sin of every angle (YaRN's attention factor, Hugging Face's `attention_scaling`).
   * Finite, > 0. Default 1. Not with `cos`/`sin` (tables carry their own).
   */
  attentionFactor?: number;
  /** cos and sin of position·θ_i, [maxPositions, dim/2] each, in place of the computed angles (for what invFreq cannot express). */
  cos?: Float32Array;
  sin?: Float32Array;
}
