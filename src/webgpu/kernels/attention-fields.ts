// What the attention kernels (flash-attention.ts, attention-probs.ts, linear-attention.ts, and in part
// decode-merge.ts and the projections) read Q, K and V by, declared once: the uniform fields of the
// attention's geometry (heads, rows, head size, where K and V sit in their buffer) with their values
// for a call, and the bindings of Q and of K ++ V. A kernel spreads them into its own declarations
// (shader.ts pick and omit where it reads only some), so a field means the same in every shader.

import type { ForwardPlan } from '../../plan/index.ts';
import type { BindingDecl } from '../bindings.ts';

/** The attention's geometry as uniforms: heads, rows, the head size, and where K and V are in the kv binding. */
export const ATTENTION_FIELDS = [
  ['H', 'u32', 'query heads'],
  ['G', 'u32', 'key/value heads'],
  ['Sq', 'u32', 'query rows (per sequence; varlen: unused, from cuSeqlens)'],
  ['Skv', 'u32', 'keys (per sequence; varlen: unused)'],
  ['Dh4', 'u32', 'head size / 4 (DH4, as a value the compiler does not unroll loops over)'],
  ['kBase4', 'u32', 'where K starts in kv, in vec4s'],
  ['vBase4', 'u32', 'where V starts in kv, in vec4s'],
  ['kvStride', 'u32', "rows per (b, g) block of K and V (Skv, or a KV cache's maxSeqLen)"],
] as const;

/** The softmax kernels' score scale (flash_attention.wgsl, attention_probs.wgsl): scores are kept in log2 units. */
export const SCALE_FIELD = ['scaleLog2e', 'f32', "scale · log2(e) (scale: the caller's, else 1/√Dh)"] as const;

/** The values of ATTENTION_FIELDS for a call whose K and V are where `kv` says (qkv-projection.ts KvTarget, in elements). */
export function attentionFields(plan: ForwardPlan, kv: { kBase: number; vBase: number; stride: number }): Record<(typeof ATTENTION_FIELDS)[number][0], number> {
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  return { H, G, Sq: plan.seqLen, Skv: plan.kvSeqLen, Dh4: Dh / 4, kBase4: kv.kBase / 4, vBase4: kv.vBase / 4, kvStride: kv.stride };
}

/** Q, as the QKV projection wrote it (K and V after it when there is no KV cache). */
export const QKV_BINDING = ['qkv', 'read-only-storage', 'array<ST4>', 'Q [B, H, Sq, Dh/4] (++ K ++ V)'] as const satisfies BindingDecl;

/** K and V, read from where ATTENTION_FIELDS say (kBase4, vBase4, kvStride). */
export const KV_BINDING = ['kv', 'read-only-storage', 'array<ST4>', 'K ++ V [B, G, kvStride, Dh/4] (the qkv buffer, or a KV cache)'] as const satisfies BindingDecl;

/** The attention output O, written. */
export const OUT_BINDING = ['out', 'storage', 'array<ST4>', 'O [B, H, Sq, Dh/4]'] as const satisfies BindingDecl;
