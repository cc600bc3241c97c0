// What the attention kernels (flash-attention.ts, attention-probs.ts, linear-attention.ts, and in part
// decode-merge.ts and the projections) read Q, K and V by, declared once: the uniform fields of the
// attention's geometry (heads, rows, head size, where K and V sit in their buffer) with their values
// for a call, and the bindings of Q and of K ++ V. A kernel spreads them into its own declarations
// (shader.ts pick and omit where it reads only some), so a field means the same in every shader.
// How K and V are stored (a KV cache's dtype, kv-cache.ts) is the kv binding's type and the loader
// (shaders/kv_*.wgsl) every kernel that reads the cache reads them through: part of its specialisation.

import kvF16Packed from '../../../shaders/kv_f16_packed.wgsl?raw';
import kvFloat from '../../../shaders/kv_float.wgsl?raw';
import kvQ4_0 from '../../../shaders/kv_q4_0.wgsl?raw';
import kvQ8_0 from '../../../shaders/kv_q8_0.wgsl?raw';

import type { ForwardPlan } from '../../plan/index.ts';
import type { KvCacheDtype } from '../../types.ts';
import type { BindingDecl } from '../bindings.ts';
import type { Precision } from '../buffers.ts';

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
  ['kvScales', 'u32', 'a q8_0/q4_0 cache: the word of kv where the f16 block scales start (kv_q8_0.wgsl)'],
] as const;

/** The softmax kernels' score scale (flash_attention.wgsl, attention_probs.wgsl): scores are kept in log2 units. */
export const SCALE_FIELD = ['scaleLog2e', 'f32', "scale · log2(e) (scale: the caller's, else 1/√Dh)"] as const;

/** The values of ATTENTION_FIELDS for a call whose K and V are where `kv` says (qkv-projection.ts KvTarget, in elements). */
export function attentionFields(
  plan: ForwardPlan,
  kv: { kBase: number; vBase: number; stride: number; scales?: number },
): Record<(typeof ATTENTION_FIELDS)[number][0], number> {
  const { numHeads: H, numKvHeads: G, headDim: Dh } = plan.layer;
  return { H, G, Sq: plan.seqLen, Skv: plan.kvSeqLen, Dh4: Dh / 4, kBase4: kv.kBase / 4, vBase4: kv.vBase / 4, kvStride: kv.stride, kvScales: kv.scales ?? 0 };
}

/**
 * How K and V are stored where an attention kernel reads them, when not as the engine's ST4 (undefined:
 * the qkv scratch, or a cache of the engine's precision): 'f32' vec4<f32> (an f32 cache of an f16
 * engine), 'f16x2' four halves in two words (an f16 cache of an f32 engine), 'q8_0' and 'q4_0' ggml's
 * blocks as quants and scales apart (kv-cache.ts). A kernel reading K and V is specialised by it.
 */
export type KvFormat = 'f32' | 'f16x2' | 'q8_0' | 'q4_0';

/** The format a cache of `dtype` keeps on an engine of `precision` (undefined: ST4, as the engine stores tensors). */
export function kvFormatOf(dtype: KvCacheDtype, precision: Precision): KvFormat | undefined {
  if (dtype === precision) return undefined;
  return dtype === 'f16' ? 'f16x2' : dtype;
}

const KV_TYPES: Record<KvFormat, string> = { f32: 'array<vec4<f32>>', f16x2: 'array<vec2<u32>>', q8_0: 'array<u32>', q4_0: 'array<u32>' };

/** The kv binding for K and V stored as `format` (KV_BINDING where undefined). */
export function kvBinding(format: KvFormat | undefined): readonly ['kv', 'read-only-storage', string, string] {
  return format === undefined ? KV_BINDING : ['kv', 'read-only-storage', KV_TYPES[format], `K ++ V [B, G, kvStride, Dh/4] as ${format} (the kv loader reads them)`];
}

/** The loader (shaders/kv_*.wgsl: loadKey, loadValue) of K and V stored as `format`. */
export function kvLoader(format: KvFormat | undefined): string {
  if (format === 'q8_0') return kvQ8_0;
  if (format === 'q4_0') return kvQ4_0;
  if (format === 'f16x2') return kvF16Packed;
  return kvFloat;
}

/** Q, as the QKV projection wrote it (K and V after it when there is no KV cache). */
export const QKV_BINDING = ['qkv', 'read-only-storage', 'array<ST4>', 'Q [B, H, Sq, Dh/4] (++ K ++ V)'] as const satisfies BindingDecl;

/** K and V, read from where ATTENTION_FIELDS say (kBase4, vBase4, kvStride). */
export const KV_BINDING = ['kv', 'read-only-storage', 'array<ST4>', 'K ++ V [B, G, kvStride, Dh/4] (the qkv buffer, or a KV cache)'] as const satisfies BindingDecl;

/** The attention output O, written. */
export const OUT_BINDING = ['out', 'storage', 'array<ST4>', 'O [B, H, Sq, Dh/4]'] as const satisfies BindingDecl;
