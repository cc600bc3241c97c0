// Linear attention in float64 (Katharopoulos et al. 2020, "Transformers are RNNs"), the twin of
// shaders/linear_*.wgsl. With the feature map φ(x) = elu(x) + 1 (positive, so every weight is too):
//
//   out_i = φ(q_i)ᵀ · Σ_j φ(k_j) v_jᵀ  /  (φ(q_i) · Σ_j φ(k_j) + eps)
//
// over the keys row i sees: all of them, or j ≤ i' (i' = i + Skv − Sq) when causal, padded keys
// never. No 1/√Dh scaling and no softmax. Here the sums are kept as running totals while the keys go
// by in order (O(Skv·Dh²), an RNN's view); the GPU kernels sum chunks in parallel instead.

import type { ForwardPlan } from '../plan/index.ts';
import type { KvRows } from './kv-rows.ts';

/** elu(x) + 1: x + 1 above 0, eˣ below. */
export function linearFeature(x: number): number {
  return x > 0 ? x + 1 : Math.exp(x);
}

/** The attention output [batches, H, Sq, Dh] of a linear-attention plan from head-split Q and K, V read row by row (as reference.ts's attention()). */
export function linearAttention(plan: ForwardPlan, q: Float64Array, k: KvRows, v: KvRows): Float64Array {
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const { qRows } = plan.geometry;
  const { seqLen: Sq, kvSeqLen: Skv, isCausal } = plan;
  const padding = plan.masks.keyPaddingMask;
  const eps = plan.score.eps;
  const out = new Float64Array(q.length);
  const kv = new Float64Array(Dh * Dh); // Σ φ(k_j) v_jᵀ, row a = feature a of φ(k)
  const z = new Float64Array(Dh); // Σ φ(k_j)
  const fq = new Float64Array(Dh);
  const fk = new Float64Array(Dh);
  for (let b = 0; b < plan.batchSize; b++) {
    for (let h = 0; h < H; h++) {
      const bg = b * G + Math.floor(h / (H / G)); // the (batch, kv head) block
      kv.fill(0);
      z.fill(0);
      let added = 0; // keys 0 … added − 1 are in the sums
      const addUpTo = (last: number) => {
        for (; added <= last; added++) {
          if (padding?.[b * Skv + added]) continue;
          const kAt = k.row(bg, added);
          for (let a = 0; a < Dh; a++) fk[a] = linearFeature(k.data[kAt + a]);
          const vAt = v.row(bg, added);
          const vd = v.data;
          for (let a = 0; a < Dh; a++) {
            z[a] += fk[a];
            for (let d = 0; d < Dh; d++) kv[a * Dh + d] += fk[a] * vd[vAt + d];
          }
        }
      };
      if (!isCausal) addUpTo(Skv - 1);
      for (let i = 0; i < Sq; i++) {
        if (isCausal) addUpTo(Math.min(i + Skv - Sq, Skv - 1)); // rows go up in i', so the sums only grow
        const qBase = ((b * H + h) * qRows + i) * Dh;
        for (let a = 0; a < Dh; a++) fq[a] = linearFeature(q[qBase + a]);
        let den = eps;
        for (let a = 0; a < Dh; a++) den += fq[a] * z[a];
        for (let d = 0; d < Dh; d++) {
          let num = 0;
          for (let a = 0; a < Dh; a++) num += fq[a] * kv[a * Dh + d];
          out[qBase + d] = num / den;
        }
      }
    }
  }
  return out;
}
