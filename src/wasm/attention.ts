// The attention pass of the 'wasm' backend: per (sequence, head) Kᵀ of its key/value head (O(Skv·Dh),
// small beside the attention's O(Sq·Skv·Dh); a KV cache keeps its keys so already, and skips it), then
// wasm/attention.ts's attend (at a decode step, attendHeads for the query heads of one key/value head
// together when their rule is the same), and probabilities() after it for needWeights. The score rule's per-head values are set with setRule, from the plan
// exactly as src/cpu/score-rule.ts reads them.

import { attention } from '../cpu/reference.ts';
import type { ForwardPlan } from '../plan/index.ts';
import type { WasmKernels } from './kernels.ts';
import { listsFor, sizeClass } from './thread-choice.ts';
import type { KernelCall } from './threads.ts';

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

/** Keys already in Kᵀ blocks [⌈Skv/64⌉, Dh, 64] (a KV cache's): the byte address of (batch b, key/value head g)'s. */
export interface TransposedKeys {
  kt: (b: number, g: number) => number;
  /**
   * A cache stored as 'f16', 'q8_0' or 'q4_0' (wasm/attention.ts's kinds 1 … 3): kt's blocks hold that
   * dtype, and V is read from here (the V view is not used); absent for float32 Kᵀ and V.
   */
  stored?: StoredKv;
}

/** How a KV cache of a dtype other than f32 lies in kernel memory (src/wasm/kv-cache.ts; wasm/attention.ts reads it). */
export interface StoredKv {
  /** wasm/attention.ts's kind: 1 f16, 2 q8_0, 3 q4_0. */
  kind: number;
  /** Byte address of (b, g)'s K scales (q-dtypes; 0 for f16). */
  ks: (b: number, g: number) => number;
  /** Byte address of (b, g)'s V row 0. */
  v: (b: number, g: number) => number;
  /** Bytes from one V row to the next. */
  vRowBytes: number;
  /** f16: no ±∞ or NaN half was written (the kernels may skip their check for them). */
  finite: boolean;
}

function at(v: HeadView, b: number, h: number, row: number): number {
  return v.ptr + 4 * (b * v.batch + h * v.head + row * v.ld);
}

const KEYS_PER_BLOCK = 64; // wasm/attention.ts's BC
const ROWS_PER_PASS = 32; // wasm/attention.ts's RG

/**
 * O = attention(Q, K, V) for every (sequence, head) of the plan (softmax attention; not linear),
 * the (sequence, head) pairs dealt round-robin over the kernels' threads. Resolves to the address
 * of the probabilities [B, H, Sq, Skv] when plan.needWeights, else 0.
 */
export async function runAttention(kernels: WasmKernels, plan: ForwardPlan, q: HeadView, k: HeadView | TransposedKeys, v: HeadView, o: HeadView): Promise<number> {
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const varlen = plan.mode === 'varlen';
  const { batchSize: B } = plan;
  const longest = varlen ? plan.geometry.longestSequence : plan.kvSeqLen;
  const { scale, softcap, sinks, alibiSlopes } = plan.score;
  const { attnMask, attnMaskPerHead, keyPaddingMask, headMask, window } = plan.masks;

  const probs = plan.needWeights ? kernels.alloc(B * H * plan.seqLen * plan.kvSeqLen) : 0;
  const pad = keyPaddingMask ? kernels.putBytes(keyPaddingMask) : 0;
  const mask = attnMask ? kernels.put(attnMask) : 0;
  const work = varlen ? plan.geometry.tokens * longest * H * Dh : B * H * plan.seqLen * plan.kvSeqLen * Dh; // Q·Kᵀ's multiply-adds (varlen: a bound)
  // A decode step's query heads of one key/value head go to attendHeads together (each K and V block
  // read once for the group) where the rule is the same for all of them.
  const perKv = H / G;
  const grouped = perKv > 1 && !varlen && plan.seqLen === 1 && !plan.needWeights && !alibiSlopes && !sinks && !attnMaskPerHead;
  const stored = 'kt' in k ? k.stored : undefined;
  // The kind of pass, for ThreadChoice (one thread: no choice to make, no name needed).
  const kind =
    kernels.threads > 1 ? `attend:${grouped ? 'heads' : 'rows'}:${B}x${H}/${G}:${sizeClass(plan.seqLen)}x${sizeClass(longest)}:${Dh}:${stored?.kind ?? 0}` : undefined;
  const threads = kind === undefined ? 1 : Math.min(listsFor(kernels, work, kind), grouped ? B * G : B * H); // lists; one task a (sequence, head) or a group
  // Each list's own Kᵀ [⌈Skv/64⌉, Dh, 64], scratch and row statistics (and, for a cache of another
  // dtype than f32, the tile one K and V block is decoded into: 2 · 64 · Dh floats).
  const own = Array.from({ length: threads }, () => ({
    kt: 'kt' in k ? 0 : kernels.alloc(Math.ceil(longest / KEYS_PER_BLOCK) * Dh * KEYS_PER_BLOCK),
    scratch: kernels.alloc(ROWS_PER_PASS * (KEYS_PER_BLOCK + Dh + 3 + 5)), // what attend() asks for
    stats: plan.needWeights ? kernels.alloc(2 * (varlen ? plan.geometry.longestSequence : plan.seqLen)) : 0,
    dec: stored ? kernels.alloc(2 * KEYS_PER_BLOCK * Dh) : 0,
  }));
  const lists: KernelCall[][] = own.map(() => []);

  let task = 0;
  for (let b = 0; b < B; b++) {
    // As reference.ts: where sequence b's rows start, and how many it has.
    const start = varlen ? plan.cuSeqlens![b] : 0;
    const Sq = varlen ? plan.cuSeqlens![b + 1] - start : plan.seqLen;
    const Skv = varlen ? Sq : plan.kvSeqLen;
    const batch = varlen ? 0 : b;
    const rule = (h: number, dec: number) =>
      [
        'setRule',
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
        stored ? stored.kind : 0,
        stored ? stored.ks(batch, Math.floor(h / perKv)) : 0,
        stored ? stored.vRowBytes : 0,
        dec,
        stored?.finite ? 1 : 0,
      ] as KernelCall;
    for (let h = 0; h < H; ) {
      const t = task++ % threads;
      const { scratch, stats, dec } = own[t];
      const g = Math.floor(h / perKv);
      const vAt = stored ? stored.v(batch, g) : at(v, batch, g, start);
      const qAt = at(q, batch, h, start);
      let kt = own[t].kt;
      if ('kt' in k) kt = k.kt(batch, g);
      else lists[t].push(['transpose', at(k, batch, g, start), k.ld, Skv, Dh, kt]);
      const together = grouped && h % perKv === 0 && (!headMask || headMask.slice(b * H + h, b * H + h + perKv).every((x) => x === headMask[b * H + h]));
      if (together) {
        lists[t].push(rule(h, dec), ['attendHeads', qAt, q.head, kt, vAt, v.ld, at(o, batch, h, start), o.head, perKv, Skv, Dh, scratch]);
        h += perKv;
        continue;
      }
      lists[t].push(rule(h, dec), ['attend', qAt, q.ld, kt, vAt, v.ld, at(o, batch, h, start), o.ld, Sq, Skv, Dh, stats, scratch]);
      if (probs) lists[t].push(['probabilities', qAt, q.ld, kt, Sq, Skv, Dh, stats, probs + 4 * (b * H + h) * Sq * Skv, Skv]);
      h++;
    }
  }
  await kernels.run(lists, kind);
  return probs;
}

/**
 * The attention pass on the float64 reference (cpu/reference.ts's attention(), linear attention
 * included), for layers the kernels do not cover: Q, K, V gathered from kernel memory into
 * head-split float64 arrays, O written back through its view. Returns the probabilities with
 * plan.needWeights (softmax layers only), else null.
 */
export function referenceAttention(kernels: WasmKernels, plan: ForwardPlan, q: HeadView, k: HeadView, v: HeadView, o: HeadView): Float32Array | null {
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  const { batches, qRows, kvRows } = plan.geometry;
  const f32 = kernels.f32;
  const gather = (view: HeadView, heads: number, rows: number) => {
    const out = new Float64Array(batches * heads * rows * Dh); // [batches, heads, rows, Dh]
    for (let b = 0; b < batches; b++) {
      for (let h = 0; h < heads; h++) {
        for (let r = 0; r < rows; r++) {
          const from = at(view, b, h, r) >> 2;
          for (let d = 0; d < Dh; d++) out[((b * heads + h) * rows + r) * Dh + d] = f32[from + d];
        }
      }
    }
    return out;
  };
  const size = plan.batchSize * H * plan.seqLen * plan.kvSeqLen;
  const keep = plan.needWeights ? { scores: new Float64Array(size), probs: new Float64Array(size) } : undefined;
  const out = attention(plan, gather(q, H, qRows), gather(k, G, kvRows), gather(v, G, kvRows), keep); // [batches, H, qRows, Dh]
  for (let b = 0; b < batches; b++) {
    for (let h = 0; h < H; h++) {
      for (let r = 0; r < qRows; r++) {
        const to = at(o, b, h, r) >> 2;
        for (let d = 0; d < Dh; d++) f32[to + d] = out[((b * H + h) * qRows + r) * Dh + d];
      }
    }
  }
  return keep ? Float32Array.from(keep.probs) : null;
}
