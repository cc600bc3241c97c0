// The attention pass of the 'wasm' backend: per (sequence, key/value head) Kᵀ once, then
// wasm/attention.ts's attend for each query head that reads it (H/G of them), and probabilities()
// after it for needWeights. The score rule's per-head values are set with setRule, from the plan
// exactly as src/cpu/score-rule.ts reads them.

import type { ForwardPlan } from '../plan/index.ts';
import type { WasmKernels } from './kernels.ts';

/**
 * Where the rows of a head live in kernel memory: row `r` of head `h` of batch `b` starts at byte
 * ptr + 4·(b·batch + h·head + r·ld). Token-major [batches, rows, heads·Dh] (the projections' output)
 * and head-split [batches, heads, rows, Dh] (scaledDotProductAttention's) are both views.
 */
export interface HeadView {
  ptr: number;
  ld: number;
  head: number;
  batch: number;
}

/** [batches, rows, heads·Dh]: the projections' layout. */
export function tokenMajor(ptr: number, rows: number, heads: number, Dh: number): HeadView {
  return { ptr, ld: heads * Dh, head: Dh, batch: rows * heads * Dh };
}

/** [batches, heads, rows, Dh]: the layout of scaledDotProductAttention's tensors and of KV caches. */
export function headSplit(ptr: number, rows: number, heads: number, Dh: number): HeadView {
  return { ptr, ld: Dh, head: rows * Dh, batch: heads * rows * Dh };
}

function at(v: HeadView, b: number, h: number, row: number): number {
  return v.ptr + 4 * (b * v.batch + h * v.head + row * v.ld);
}

const KEYS_PER_BLOCK = 64; // wasm/attention.ts's BC
const ROWS_PER_PASS = 16; // wasm/attention.ts's RG

/**
 * O = attention(Q, K, V) for every (sequence, head) of the plan (softmax attention; not linear).
 * Returns the address of the probabilities [B, H, Sq, Skv] when plan.needWeights, else 0.
 */
export function runAttention(kernels: WasmKernels, plan: ForwardPlan, q: HeadView, k: HeadView, v: HeadView, o: HeadView): number {
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const varlen = plan.mode === 'varlen';
  const { batchSize: B } = plan;
  const longest = varlen ? plan.geometry.longestSequence : plan.kvSeqLen;
  const { scale, softcap, sinks, alibiSlopes } = plan.score;
  const { attnMask, attnMaskPerHead, keyPaddingMask, headMask, window } = plan.masks;
  const kk = kernels.k;

  const kt = kernels.alloc(Math.ceil(longest / KEYS_PER_BLOCK) * Dh * KEYS_PER_BLOCK); // Kᵀ [⌈Skv/64⌉, Dh, 64] of one (sequence, key/value head)
  const scratch = kernels.alloc(ROWS_PER_PASS * (KEYS_PER_BLOCK + Dh + 3 + 5)); // what attend() asks for
  const stats = plan.needWeights ? kernels.alloc(2 * (varlen ? plan.geometry.longestSequence : plan.seqLen)) : 0;
  const probs = plan.needWeights ? kernels.alloc(B * H * plan.seqLen * plan.kvSeqLen) : 0;
  const pad = keyPaddingMask ? kernels.putBytes(keyPaddingMask) : 0;
  const mask = attnMask ? kernels.put(attnMask) : 0;

  for (let b = 0; b < B; b++) {
    // As reference.ts: where sequence b's rows start, and how many it has.
    const start = varlen ? plan.cuSeqlens![b] : 0;
    const Sq = varlen ? plan.cuSeqlens![b + 1] - start : plan.seqLen;
    const Skv = varlen ? Sq : plan.kvSeqLen;
    const batch = varlen ? 0 : b;
    for (let g = 0; g < G; g++) {
      kk.transpose(at(k, batch, g, start), k.ld, Skv, Dh, kt);
      for (let h = g * (H / G); h < (g + 1) * (H / G); h++) {
        kk.setRule(
          scale,
          softcap,
          alibiSlopes ? alibiSlopes[h] : 0,
          sinks ? sinks[h] : 0,
          sinks ? 1 : 0,
          headMask ? headMask[b * H + h] : 1,
          plan.isCausal ? 1 : 0,
          window,
          pad ? pad + b * Skv : 0,
          mask ? mask + 4 * (attnMaskPerHead ? b * H + h : 0) * Sq * Skv : 0,
        );
        const qAt = at(q, batch, h, start);
        kk.attend(qAt, q.ld, kt, at(v, batch, g, start), v.ld, at(o, batch, h, start), o.ld, Sq, Skv, Dh, stats, scratch);
        if (probs) kk.probabilities(qAt, q.ld, kt, Sq, Skv, Dh, stats, probs + 4 * (b * H + h) * Sq * Skv, Skv);
      }
    }
  }
  return probs;
}
