// The CPU reference: the same three passes as the WebGPU kernels, in float64.
// It is the oracle of every test and the backend used when there is no WebGPU adapter.
//
//   pass 1  qkvProjection     X [B, S, E] · W_inᵀ + b_in      → Q [B, H, S, Dh], K, V [B, G, S, Dh]
//   pass 2  attention         softmax(Q·Kᵀ/√Dh) · V per head → O [B, H, S, Dh]
//   pass 3  outputProjection  concat(O) [B, S, E] · W_Oᵀ + b_O → Y [B, S, E]
//
// Pass 2 works row by row, so it needs O(Skv) scratch, not O(S²): the fused kernel never stores the
// scores either. Ask for `keepScores` to get the scores and probabilities [B, H, Sq, Skv] as well
// (tests and learners do; the backend does not).

import { type ForwardPlan, type LayerWeights, resolveForwardPlan, resolveLayerSpec, resolveWeights } from '../plan.ts';
import type { ForwardOptions, MultiHeadAttentionConfig, StateDict } from '../types.ts';

export interface ReferenceResult {
  q: Float64Array;       // [B, H, Sq, Dh]
  k: Float64Array;       // [B, G, Skv, Dh]
  v: Float64Array;       // [B, G, Skv, Dh]
  /** Q·Kᵀ/√Dh, masked entries −Infinity; only with keepScores. [B, H, Sq, Skv] */
  scores: Float64Array | null;
  /** softmax of the scores; a row with no visible key is all 0; only with keepScores. [B, H, Sq, Skv] */
  probs: Float64Array | null;
  attention: Float64Array; // O [B, H, Sq, Dh]
  output: Float64Array;    // Y [B, Sq, E]
}

/** Pass 1: X·Wᵀ + b with the store split into heads. */
export function qkvProjection(plan: ForwardPlan, weights: LayerWeights, x: Float32Array): { q: Float64Array; k: Float64Array; v: Float64Array } {
  const { batchSize: B, seqLen: S } = plan;
  const { embedDim: E, numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const W = weights.inProjWeight; // [(H + 2G)·Dh, E]
  const bias = weights.inProjBias;
  const q = new Float64Array(B * H * S * Dh);
  const k = new Float64Array(B * G * S * Dh);
  const v = new Float64Array(B * G * S * Dh);
  const N = (H + 2 * G) * Dh;
  for (let b = 0; b < B; b++) {
    for (let s = 0; s < S; s++) {
      const xRow = (b * S + s) * E;
      for (let n = 0; n < N; n++) {
        let sum = bias ? bias[n] : 0;
        const wRow = n * E;
        for (let e = 0; e < E; e++) sum += x[xRow + e] * W[wRow + e];
        // column n → head slot n / Dh among H query, G key, G value heads; lane d
        const slot = Math.floor(n / Dh);
        const d = n % Dh;
        if (slot < H) q[((b * H + slot) * S + s) * Dh + d] = sum;
        else if (slot < H + G) k[((b * G + slot - H) * S + s) * Dh + d] = sum;
        else v[((b * G + slot - H - G) * S + s) * Dh + d] = sum;
      }
    }
  }
  return { q, k, v };
}

/**
 * Pass 2: for each (b, h, i), scores_j = q_i·k_j / √Dh over the visible keys, p = softmax, o_i = Σ p_j v_j.
 * Causal: row i sees keys j ≤ i + (Skv − Sq). A row that sees no key gets p = 0 and o = 0.
 */
export function attention(
  plan: ForwardPlan,
  q: Float64Array,
  k: Float64Array,
  v: Float64Array,
  keep?: { scores: Float64Array; probs: Float64Array },
): Float64Array {
  const { batchSize: B, seqLen: Sq, kvSeqLen: Skv, isCausal } = plan;
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const scale = 1 / Math.sqrt(Dh);
  const out = new Float64Array(B * H * Sq * Dh);
  const row = new Float64Array(Skv); // scores, then probabilities, of one query row
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const kvHead = Math.floor(h / (H / G));
      const kvBase = (b * G + kvHead) * Skv * Dh;
      for (let i = 0; i < Sq; i++) {
        const qBase = ((b * H + h) * Sq + i) * Dh;
        const visibleEnd = isCausal ? Math.max(0, Math.min(Skv, i + (Skv - Sq) + 1)) : Skv;
        let max = -Infinity;
        for (let j = 0; j < Skv; j++) {
          if (j >= visibleEnd) {
            row[j] = -Infinity;
            continue;
          }
          let dot = 0;
          for (let d = 0; d < Dh; d++) dot += q[qBase + d] * k[kvBase + j * Dh + d];
          row[j] = dot * scale;
          if (row[j] > max) max = row[j];
        }
        const rowBase = ((b * H + h) * Sq + i) * Skv;
        if (keep) keep.scores.set(row, rowBase);
        let sum = 0;
        for (let j = 0; j < Skv; j++) {
          row[j] = j < visibleEnd ? Math.exp(row[j] - max) : 0;
          sum += row[j];
        }
        const inv = sum > 0 ? 1 / sum : 0; // no visible key: probabilities and output 0, not NaN
        for (let j = 0; j < Skv; j++) row[j] *= inv;
        if (keep) keep.probs.set(row, rowBase);
        for (let j = 0; j < visibleEnd; j++) {
          const p = row[j];
          if (p === 0) continue;
          const vRow = kvBase + j * Dh;
          for (let d = 0; d < Dh; d++) out[qBase + d] += p * v[vRow + d];
        }
      }
    }
  }
  return out;
}

/** Pass 3: O read as concat(heads) [B·S, E] (column h·Dh + d), times W_Oᵀ, plus b_O. */
export function outputProjection(plan: ForwardPlan, weights: LayerWeights, o: Float64Array): Float64Array {
  const { batchSize: B, seqLen: S } = plan;
  const { embedDim: E, numHeads: H, headDim: Dh } = plan.layer;
  const W = weights.outProjWeight; // [E, E]
  const bias = weights.outProjBias;
  const y = new Float64Array(B * S * E);
  const concat = new Float64Array(E); // one row of concat(heads)
  for (let b = 0; b < B; b++) {
    for (let s = 0; s < S; s++) {
      for (let h = 0; h < H; h++) {
        for (let d = 0; d < Dh; d++) concat[h * Dh + d] = o[((b * H + h) * S + s) * Dh + d];
      }
      const yRow = (b * S + s) * E;
      for (let n = 0; n < E; n++) {
        let sum = bias ? bias[n] : 0;
        const wRow = n * E;
        for (let e = 0; e < E; e++) sum += concat[e] * W[wRow + e];
        y[yRow + n] = sum;
      }
    }
  }
  return y;
}

/** All three passes, with the intermediates. */
export function referenceForward(
  plan: ForwardPlan,
  weights: LayerWeights,
  query: Float32Array,
  options: { keepScores?: boolean } = {},
): ReferenceResult {
  const { q, k, v } = qkvProjection(plan, weights, query);
  const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
  const H = plan.layer.numHeads;
  const keep = options.keepScores
    ? { scores: new Float64Array(B * H * Sq * Skv), probs: new Float64Array(B * H * Sq * Skv) }
    : undefined;
  const o = attention(plan, q, k, v, keep);
  const output = outputProjection(plan, weights, o);
  return { q, k, v, scores: keep?.scores ?? null, probs: keep?.probs ?? null, attention: o, output };
}

/**
 * The reference for a whole layer, from the same arguments as createMultiHeadAttention and forward,
 * checked the same way. For learners and tests: returns Q, K, V, the scores and probabilities
 * [B, H, Sq, Skv] (these grow as S², so keep S small), the attention output and the layer output.
 */
export function referenceMultiHeadAttention(
  config: MultiHeadAttentionConfig,
  stateDict: StateDict,
  query: Float32Array,
  options: ForwardOptions,
): ReferenceResult {
  const spec = resolveLayerSpec(config);
  const weights = resolveWeights(spec, stateDict);
  const plan = resolveForwardPlan(spec, query, options);
  return referenceForward(plan, weights, query, { keepScores: true });
}
