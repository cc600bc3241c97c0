// Host side of shaders/activations_q8.wgsl: config.activations 'q8' on WebGPU, a projection's input
// replaced by x̂ = d·q (ggml's Q8_0 of each row, in blocks of 32 along K, exact: src/quant/activations.ts)
// before a projection with quantized weights reads it. The projection then multiplies in float.

import rounding from '../../../shaders/kv_rounding.wgsl?raw';
import source from '../../../shaders/activations_q8.wgsl?raw';
import { kernelBindings } from '../bindings.ts';
import { defineKernel, encodeKernel } from '../kernel.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams } from '../shader.ts';

/** activations_q8.wgsl's uniforms. */
export const ACTIVATIONS_Q8_PARAMS = defineParams([
  ['count', 'u32', 'invocations: rows · perRow'],
  ['perRow', 'u32', '⌈K/32⌉ blocks, + 1 where the layout has padding to zero'],
  ['K', 'u32', "a row's features (the caller's: padding excluded)"],
  ['ld', 'u32', 'rows layout: elements from one row to the next'],
  ['heads', 'u32', '0: rows layout; else H of the heads layout O [B, H, S, Dh]'],
  ['S', 'u32', 'heads layout: rows per batch'],
  ['Dh', 'u32', 'heads layout: lanes a head (padded)'],
  ['uDh', 'u32', "heads layout: the caller's head size"],
  ['zero', 'u32', '0 (kv_rounding.wgsl productRN)'],
]);

/** Where x is: rows [rows, ld] (K features a row), or the heads of an attention output [B, H, S, Dh] (K = H·uDh). */
export type ActivationsLayout = { rows: number; K: number; ld: number } | { batches: number; S: number; heads: number; Dh: number; uDh: number };

interface RoundArgs {
  src: GPUBuffer;
  dst: GPUBuffer;
  layout: ActivationsLayout;
}

const BINDINGS = kernelBindings('ActivationsQ8', [
  ['src', 'read-only-storage', 'array<ST>', 'x'],
  ['dst', 'storage', 'array<ST>', 'x̂, in the same layout'],
]);

/** The rounding as a kernel (kernel.ts): one specialisation. */
export const ACTIVATIONS_Q8 = defineKernel({
  name: 'ActivationsQ8',
  params: ACTIVATIONS_Q8_PARAMS,
  specialise: () => ({}),
  bindings: () => BINDINGS,
  shader: () => ({ sources: [rounding, source] }),
  run({ src, dst, layout }: RoundArgs) {
    const heads = 'heads' in layout;
    const rows = heads ? layout.batches * layout.S : layout.rows;
    const K = heads ? layout.heads * layout.uDh : layout.K;
    const padded = heads ? layout.Dh > layout.uDh : layout.ld > layout.K;
    const perRow = Math.ceil(K / 32) + (padded ? 1 : 0);
    const count = rows * perRow;
    const groups = Math.ceil(count / 64);
    return {
      uniforms: {
        count,
        perRow,
        K,
        ld: heads ? 0 : layout.ld,
        heads: heads ? layout.heads : 0,
        S: heads ? layout.S : 1,
        Dh: heads ? layout.Dh : 1,
        uDh: heads ? layout.uDh : 1,
        zero: 0,
      },
      buffers: { src, dst },
      groups: [Math.min(groups, 65535), Math.ceil(groups / 65535)],
    };
  },
});

/** Writes x̂ (the 'q8' rounding of `src` in `layout`) to a new scratch buffer of the same size, and returns it. */
export function encodeActivationsQ8(pass: GPUComputePassEncoder, scratch: CallScratch, src: GPUBuffer, layout: ActivationsLayout, role: string): GPUBuffer {
  const elements = 'heads' in layout ? layout.batches * layout.heads * layout.S * layout.Dh : layout.rows * layout.ld;
  const dst = scratch.storage(elements * scratch.elementBytes, role);
  encodeKernel(pass, scratch, ACTIVATIONS_Q8, { src, dst, layout });
  return dst;
}
