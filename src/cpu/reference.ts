// The CPU reference: the same three passes as the WebGPU kernels, in float64.
// It is the oracle of every test and the backend used when there is no WebGPU adapter.
//
//   pass 1  qkvProjection     X [B, S, E] · W_inᵀ + b_in      → Q [B, H, S, Dh], K, V [B, G, S, Dh]
//   pass 2  attention         softmax(Q·Kᵀ/√Dh) · V per head → O [B, H, S, Dh]
//   pass 3  outputProjection  concat(O) [B, S, H·Dh] · W_Oᵀ + b_O → Y [B, S, E]
//
// Pass 2 works row by row, so it needs O(Skv) scratch, not O(S²): the fused kernel never stores the
// scores either. Ask for `keepScores` to get the scores and probabilities [B, H, Sq, Skv] as well
// (tests and learners do; the backend does not).

import { asKvRows, type KvRows } from './kv-rows.ts';
import { roundActivationsQ8 } from '../quant/activations.ts';
import { linearAttention } from './linear.ts';
import { type ForwardPlan, floatLayerWeights, type LayerWeights, resolveForwardPlan, resolveLayerSpec, resolveWeights } from '../plan/index.ts';
import { normValues, transformHeads } from './head-transform.ts';
import { headScale, keyBand, keyBias, modifyScore } from './score-rule.ts';
import type { ForwardOptions, MultiHeadAttentionConfig, QuantizedStateDict, StateDict } from '../types.ts';

export interface ReferenceResult {
  q: Float64Array; // [B, H, Sq, Dh]
  k: Float64Array; // [B, G, Skv, Dh]
  v: Float64Array; // [B, G, Skv, Dh]
  /** Q·Kᵀ/√Dh, masked entries −Infinity; only with keepScores. [B, H, Sq, Skv] */
  scores: Float64Array | null;
  /** softmax of the scores; a row with no visible key is all 0; only with keepScores. [B, H, Sq, Skv] */
  probs: Float64Array | null;
  attention: Float64Array; // O [B, H, Sq, Dh]
  output: Float64Array; // Y [B, Sq, E]
}

/** x [batches·rows, inDim] · Wᵀ + b → heads [batches, heads, rows, Dh] (W has heads·Dh rows). */
function project(
  x: Float32Array,
  inDim: number,
  W: Float32Array,
  bias: Float32Array | null,
  biasOffset: number,
  batches: number,
  rows: number,
  heads: number,
  Dh: number,
): Float64Array {
  const out = new Float64Array(batches * heads * rows * Dh);
  for (let b = 0; b < batches; b++) {
    for (let s = 0; s < rows; s++) {
      const xRow = (b * rows + s) * inDim;
      for (let n = 0; n < heads * Dh; n++) {
        let sum = bias ? bias[biasOffset + n] : 0;
        const wRow = n * inDim;
        for (let e = 0; e < inDim; e++) sum += x[xRow + e] * W[wRow + e];
        const h = Math.floor(n / Dh);
        out[((b * heads + h) * rows + s) * Dh + (n % Dh)] = sum;
      }
    }
  }
  return out;
}

/** Pass 1: the three projections, stored split into heads (the kernel does them as one GEMM when key = value = query); then QK-norm and rotary, if any. */
export function qkvProjection(plan: ForwardPlan, layerWeights: LayerWeights): { q: Float64Array; k: Float64Array; v: Float64Array } {
  const weights = floatLayerWeights(layerWeights); // quantized weights dequantized exactly (ggml / ONNX Runtime)
  const { numHeads: H, numKvHeads: G, headDim: Dh, embedDim: E, kdim, vdim } = plan.layer;
  const { batches, qRows, kvRows } = plan.geometry;
  const bias = weights.inProjBias; // [(H + 2G)·Dh]: q, then k, then v
  // config.activations 'q8': a projection with quantized weights sees its input as ggml's Q8_0 rounds it.
  const q8 = plan.layer.activations === 'q8';
  const input = (x: Float32Array, rows: number, K: number, quantized = false) => (q8 && quantized ? roundActivationsQ8(x, rows, K) : x);
  const q = project(input(plan.query, batches * qRows, E, weights.quantized?.q), E, weights.qProjWeight, bias, 0, batches, qRows, H, Dh);
  const k = project(input(plan.key, batches * kvRows, kdim, weights.quantized?.k), kdim, weights.kProjWeight, bias, H * Dh, batches, kvRows, G, Dh);
  // QK-norm and rotary, if the layer has them (head-transform.ts), before K is attended or cached.
  transformHeads(plan, q, 'query', H, qRows);
  transformHeads(plan, k, 'key', G, kvRows);
  const v = project(input(plan.value, batches * kvRows, vdim, weights.quantized?.v), vdim, weights.vProjWeight, bias, (H + G) * Dh, batches, kvRows, G, Dh);
  normValues(plan.layer, v); // config.vNorm, if any
  return { q, k, v };
}

/**
 * Pass 2: for each (b, h, i), scores_j = modifyScore(scale·q_i·k_j) + keyBias over the keys row i sees
 * (the score rule, score-rule.ts: scale, softcap, ALiBi, masks), p = softmax (with the head's sink,
 * if any, in its denominator; × headMask), o_i = Σ p_j v_j. A row that sees no key gets p = 0
 * and o = 0. Varlen sequences attend within themselves. NaN and ±Infinity propagate as in PyTorch (masking adds −∞ to a computed score; P·V
 * multiplies zeros too). The fused kernel skips masked keys instead; WGSL may assume no NaN anyway.
 * `keep` (not for varlen plans) receives the scores (−Infinity where masked) and p.
 * K and V are head-split arrays [batches, G, kvRows, Dh], or KvRows that hand one row at a time (a CPU
 * KV cache read in place, its f16 / q8_0 / q4_0 rows decoded row by row: kv-rows.ts); the arithmetic is the same.
 */
export function attention(
  plan: ForwardPlan,
  q: Float64Array,
  k: Float64Array | KvRows,
  v: Float64Array | KvRows,
  keep?: { scores: Float64Array; probs: Float64Array },
): Float64Array {
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const { qRows, kvRows, longestSequence } = plan.geometry;
  const kr = asKvRows(k, kvRows, Dh);
  const vr = asKvRows(v, kvRows, Dh);
  if (plan.layer.attention === 'linear') return linearAttention(plan, q, kr, vr); // linear.ts: no scores, no softmax
  const varlen = plan.mode === 'varlen';
  const { scale, sinks } = plan.score;
  const out = new Float64Array(q.length);
  const row = new Float64Array(varlen ? longestSequence : plan.kvSeqLen);
  const seen = new Uint8Array(row.length);
  for (let b = 0; b < plan.batchSize; b++) {
    // Where sequence b's rows start in the [batches, heads, rows, Dh] layout, and how many it has.
    const start = varlen ? plan.cuSeqlens![b] : 0;
    const Sq = varlen ? plan.cuSeqlens![b + 1] - start : plan.seqLen;
    const Skv = varlen ? Sq : plan.kvSeqLen;
    const batch = varlen ? 0 : b;
    for (let h = 0; h < H; h++) {
      const bg = batch * G + Math.floor(h / (H / G)); // the (batch, kv head) block
      const hm = headScale(plan, b, h);
      for (let i = 0; i < Sq; i++) {
        const qBase = ((batch * H + h) * qRows + start + i) * Dh;
        const band = keyBand(plan, i, Sq, Skv);
        let max = -Infinity;
        for (let j = 0; j < Skv; j++) {
          // As PyTorch does: every score is computed and a masked one gets −∞ added, so a NaN or
          // ±Infinity in a masked key still poisons the row (NaN + −∞ = NaN).
          const kAt = kr.row(bg, start + j);
          const kd = kr.data;
          let dot = 0;
          for (let d = 0; d < Dh; d++) dot += q[qBase + d] * kd[kAt + d];
          const s = modifyScore(plan, dot * scale, b, h, i + Skv - Sq, j) + keyBias(plan, band, b, h, i, j, Sq, Skv);
          row[j] = s;
          seen[j] = s === -Infinity ? 0 : 1;
          if (s > max) max = s;
        }
        const rowBase = ((b * H + h) * Sq + i) * Skv;
        if (keep) keep.scores.set(row.subarray(0, Skv), rowBase);
        // A sink joins the softmax as one more logit (value 0): in the max and the sum, not in the row.
        if (sinks) max = Math.max(max, sinks[h]);
        let sum = sinks ? Math.exp(sinks[h] - max) : 0;
        for (let j = 0; j < Skv; j++) {
          row[j] = seen[j] ? Math.exp(row[j] - max) : 0;
          sum += row[j];
        }
        // No visible key: probabilities and output 0, not NaN (PyTorch ≥ 2.5's choice). A NaN sum (a NaN
        // or +∞ score) makes the whole row NaN, as PyTorch's softmax does.
        const inv = Number.isNaN(sum) ? NaN : sum > 0 ? hm / sum : 0;
        for (let j = 0; j < Skv; j++) row[j] *= inv;
        if (keep) keep.probs.set(row.subarray(0, Skv), rowBase);
        for (let j = 0; j < Skv; j++) {
          const p = row[j]; // all keys, zeros included: 0·NaN in V is NaN, as in PyTorch's P·V
          const vAt = vr.row(bg, start + j);
          const vd = vr.data;
          for (let d = 0; d < Dh; d++) out[qBase + d] += p * vd[vAt + d];
        }
      }
    }
  }
  return out;
}

/** Pass 3: O read as concat(heads) [B·S, H·Dh] (column h·Dh + d), times W_Oᵀ [E, H·Dh], plus b_O. */
export function outputProjection(plan: ForwardPlan, layerWeights: LayerWeights, o: Float64Array): Float64Array {
  const weights = floatLayerWeights(layerWeights);
  const { batches: B, qRows: S } = plan.geometry;
  const { embedDim: E, numHeads: H, headDim: Dh } = plan.layer;
  const W = weights.outProjWeight; // [E, H·Dh]
  const bias = weights.outProjBias;
  const HD = H * Dh; // E unless config.headDim made it differ
  const q8 = plan.layer.activations === 'q8' && weights.quantized?.out === true;
  const y = new Float64Array(B * S * E);
  const concat = new Float64Array(HD); // one row of concat(heads)
  for (let b = 0; b < B; b++) {
    for (let s = 0; s < S; s++) {
      for (let h = 0; h < H; h++) {
        for (let d = 0; d < Dh; d++) concat[h * Dh + d] = o[((b * H + h) * S + s) * Dh + d];
      }
      if (weights.gateProjWeight) gateRow(concat, plan.query, (b * S + s) * E, E, weights.gateProjWeight, weights.gateProjBias ?? null, H * Dh);
      if (q8) concat.set(roundActivationsQ8(concat, 1, HD)); // config.activations 'q8' on a quantized W_O (float32, then Q8_0)
      const yRow = (b * S + s) * E;
      for (let n = 0; n < E; n++) {
        let sum = bias ? bias[n] : 0;
        const wRow = n * HD;
        for (let e = 0; e < HD; e++) sum += concat[e] * W[wRow + e];
        y[yRow + n] = sum;
      }
    }
  }
  return y;
}

/**
 * config.outputGate on one token: row[n] *= sigmoid(x·W_g[n]ᵀ + b_g[n]) for its n < HD = H·Dh features
 * (concatenated heads), x = input[x0 … x0 + E − 1], in float64. Shared by the wasm backend (float32 rows).
 */
export function gateRow(
  row: Float64Array | Float32Array,
  input: Float32Array,
  x0: number,
  E: number,
  W: Float32Array,
  bias: Float32Array | null,
  HD: number,
  r0 = 0,
): void {
  for (let n = 0; n < HD; n++) {
    let g = bias ? bias[n] : 0;
    for (let e = 0; e < E; e++) g += input[x0 + e] * W[n * E + e];
    row[r0 + n] *= 1 / (1 + Math.exp(-g));
  }
}

/** All three passes, with the intermediates. */
export function referenceForward(plan: ForwardPlan, layerWeights: LayerWeights, options: { keepScores?: boolean } = {}): ReferenceResult {
  const weights = floatLayerWeights(layerWeights); // once for both projections
  const { q, k, v } = qkvProjection(plan, weights);
  const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
  const H = plan.layer.numHeads;
  // Linear attention forms no scores or probabilities: nothing to keep.
  const keep =
    options.keepScores && plan.mode !== 'varlen' && plan.layer.attention === 'softmax'
      ? { scores: new Float64Array(B * H * Sq * Skv), probs: new Float64Array(B * H * Sq * Skv) }
      : undefined;
  const o = attention(plan, q, k, v, keep);
  const output = outputProjection(plan, weights, o);
  return { q, k, v, scores: keep?.scores ?? null, probs: keep?.probs ?? null, attention: o, output };
}

/** A layer's weights (dequantized, if quantized) and a call's plan, from the public arguments, checked as createMultiHeadAttention and forward check them. */
function resolveCall(
  config: MultiHeadAttentionConfig,
  stateDict: StateDict | QuantizedStateDict,
  query: Float32Array,
  options: ForwardOptions,
): { plan: ForwardPlan; weights: LayerWeights } {
  const spec = resolveLayerSpec(config);
  const weights = floatLayerWeights(resolveWeights(spec, stateDict));
  return { plan: resolveForwardPlan(spec, query, options), weights };
}

/**
 * The reference for a whole layer, from the same arguments as createMultiHeadAttention and forward,
 * checked the same way. For learners and tests: returns Q, K, V, the scores and probabilities
 * [B, H, Sq, Skv] (these grow as S², so keep S small), the attention output and the layer output.
 * Quantized weights are dequantized exactly first (as ggml and ONNX Runtime do). For the output
 * alone, at any length, see {@link referenceOutput}.
 */
export function referenceMultiHeadAttention(
  config: MultiHeadAttentionConfig,
  stateDict: StateDict | QuantizedStateDict,
  query: Float32Array,
  options: ForwardOptions,
): ReferenceResult {
  const { plan, weights } = resolveCall(config, stateDict, query, options);
  return referenceForward(plan, weights, { keepScores: true });
}

/**
 * The float64 reference's layer output alone, Y [B, Sq, E], from the same arguments as
 * createMultiHeadAttention and forward, checked the same way. It runs the passes
 * {@link referenceMultiHeadAttention} runs and returns its `output`, equal bit for bit, but keeps no
 * scores or probabilities (those are [B, H, Sq, Skv] float64, twice: 537 MB at S = 2048, H = 8), so it
 * serves long sequences: what a benchmark's correctness gate needs.
 *
 * @param onPass - Awaited after each pass (1: the QKV projection, 2: attention, 3: the output
 *   projection), so that a page can show progress and paint between them; each pass runs on the
 *   calling thread without yielding.
 *
 * @example
 * ```ts
 * const y = await referenceOutput({ embedDim: 64, numHeads: 4 }, stateDict, x, { batchSize: 1, seqLen: 2048, isCausal: true });
 * ```
 */
export async function referenceOutput(
  config: MultiHeadAttentionConfig,
  stateDict: StateDict | QuantizedStateDict,
  query: Float32Array,
  options: ForwardOptions,
  onPass?: (passDone: 1 | 2 | 3) => Promise<void> | void,
): Promise<Float64Array> {
  const { plan, weights } = resolveCall(config, stateDict, query, options);
  const { q, k, v } = qkvProjection(plan, weights);
  await onPass?.(1);
  const o = attention(plan, q, k, v);
  await onPass?.(2);
  const y = outputProjection(plan, weights, o);
  await onPass?.(3);
  return y;
}
