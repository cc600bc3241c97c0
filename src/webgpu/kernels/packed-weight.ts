// How a projection's weight is stored on the GPU and read by the GEMM/GEMV cores: float (the engine's
// precision, one `w` binding, shaders/weights_float.wgsl) or packed (src/quant/types.ts PackedWeight:
// `quants` u32 words and a (scale, offset) vec2<f32> per group, shaders/weights_packed.wgsl, which
// dequantizes as it loads). The projections' host modules (qkv-projection.ts, output-projection.ts)
// take their bindings and their weights' WGSL from here, so every core runs on either.
//
// A layer's formats travel on its plan (plan.layer, see formatsOf): the scheduler, the tuner's shape
// classes, trials and gate read them there, so a quantized layer's pipelines are tiered, swept and
// gated like the float ones, keyed by (variant, precision, bits); the group size is a uniform.

import weightsFloat from '../../../shaders/weights_float.wgsl?raw';
import weightsPacked from '../../../shaders/weights_packed.wgsl?raw';
import type { LayerSpec } from '../../plan/index.ts';
import type { BindingDecl } from '../bindings.ts';

/** A packed weight's geometry as the kernels see it: quant bits and weights per (scale, offset) group. */
export interface WeightFormat {
  readonly bits: 4 | 8;
  readonly group: number;
}

/** A weight on the GPU: a float buffer [N, K] at the engine's precision, or the packed layout's two buffers. */
export type GpuWeight = GPUBuffer | PackedGpuWeight;

export interface PackedGpuWeight {
  readonly format: WeightFormat;
  /** [N, wordsPerRow] u32. */
  readonly quants: GPUBuffer;
  /** [N, groups] (scale, offset) f32 pairs. */
  readonly scaleOffset: GPUBuffer;
}

export function isPacked(w: GpuWeight): w is PackedGpuWeight {
  return 'quants' in w;
}

/** The format of a GPU weight (null: float). */
export function formatOf(w: GpuWeight): WeightFormat | null {
  return isPacked(w) ? w.format : null;
}

/** What a pipeline's cache key gains for a format ('' for float, so float keys are as before): its bits (the group is a uniform). */
export function formatKey(format: WeightFormat | null): string {
  return format ? `|q${format.bits}` : '';
}

/** The weights' WGSL (wIndex, loadB) and the sizes it needs, for packed weights of `bits` (undefined: float). */
export function weightSource(bits: WeightFormat['bits'] | undefined): { source: string; sizes: Record<string, number> } {
  return bits ? { source: weightsPacked, sizes: { WBITS: bits } } : { source: weightsFloat, sizes: {} };
}

/** The uniform weights_packed.wgsl reads the group size from: log2(group / 4) (0 for float weights, which ignore it). */
export function groupShift(format: WeightFormat | null): number {
  return format ? Math.log2(format.group / 4) : 0;
}

/** The uniform's declaration, in the Params of both projections. */
export const GROUP_SHIFT_PARAM = ['wGroupShift', 'u32', 'packed weights: log2(group / 4) (weights_packed.wgsl); 0 for float ones'] as const;

/** The weight's binding declarations (in place of a kernel's `w`). */
export function weightDecls(meaning: string): { float: readonly BindingDecl[]; packed: readonly BindingDecl[] } {
  return {
    float: [['w', 'read-only-storage', 'array<ST4>', meaning]],
    packed: [
      ['quants', 'read-only-storage', 'array<u32>', `${meaning}, packed: [·, wordsPerRow] u32 (weights_packed.wgsl)`],
      ['scaleOffset', 'read-only-storage', 'array<vec2<f32>>', '(scale, offset) per group of W [·, groups]'],
    ],
  };
}

/** The bind group entries of a weight: `w`, or `quants` and `scaleOffset`. */
export function weightEntries(w: GpuWeight): { w: GPUBuffer } | { quants: GPUBuffer; scaleOffset: GPUBuffer } {
  return isPacked(w) ? { quants: w.quants, scaleOffset: w.scaleOffset } : { w };
}

/** The formats of a layer's projection weights: in_proj (or q, k, v) and out_proj; null entries are float. */
export interface ProjectionFormats {
  /** One entry for in_proj_weight; three (q, k, v) when they are apart. */
  readonly qkv: readonly (WeightFormat | null)[];
  readonly out: WeightFormat | null;
}

/** A layer spec with its weights' formats (webgpu/layer.ts sets it on its plans when a weight is packed). */
export type FormattedSpec = LayerSpec & { readonly projectionFormats?: ProjectionFormats };

const FLOAT: ProjectionFormats = { qkv: [null], out: null };

/** The formats of the weights a plan's layer holds (float unless the layer said otherwise). */
export function formatsOf(layer: LayerSpec): ProjectionFormats {
  return (layer as FormattedSpec).projectionFormats ?? FLOAT;
}

/** Whether any projection weight of the layer is packed. */
export function hasPacked(formats: ProjectionFormats): boolean {
  return formats.out !== null || formats.qkv.some((f) => f !== null);
}

/** The distinct formats among `list` (by bits and group). */
export function distinctFormats(list: readonly (WeightFormat | null)[]): (WeightFormat | null)[] {
  const seen = new Map<string, WeightFormat | null>();
  for (const f of list) seen.set(formatKey(f), f);
  return [...seen.values()];
}

/** What a tuner shape class gains for a kernel's weights ('' for float: float classes keep their names). */
export function formatClass(formats: readonly (WeightFormat | null)[]): string {
  const keys = distinctFormats(formats)
    .map(formatKey)
    .filter((k) => k !== '');
  return keys.length ? ` w${keys.join('').replaceAll('|', ',').slice(1)}` : '';
}
