// Host side of shaders/kv_store.wgsl and shaders/kv_quantize.wgsl: a call's new K and V rows, which
// the projection (and the head transform) wrote in float to the call's scratch, stored into a KV cache
// kept as another type than the engine's (attention-fields.ts KvFormat): converted ('f32', 'f16x2') or
// quantized as ggml's blocks ('q8_0', 'q4_0'), exactly as src/quant/kv.ts encodeKvRow rounds; and
// shaders/kv_move_scales.wgsl, the block scales of such a cache's rows moved (acceptPath).

import moveScalesSource from '../../../shaders/kv_move_scales.wgsl?raw';
import quantizeBlockSource from '../../../shaders/kv_quantize_block.wgsl?raw';
import quantizeSource from '../../../shaders/kv_quantize.wgsl?raw';
import rounding from '../../../shaders/kv_rounding.wgsl?raw';
import storeSource from '../../../shaders/kv_store.wgsl?raw';
import type { ForwardPlan } from '../../plan/index.ts';
import { kernelBindings } from '../bindings.ts';
import { defineKernel, encodeKernel, singleKernel } from '../kernel.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams } from '../shader.ts';
import { type KvFormat, kvBinding } from './attention-fields.ts';
import type { KvTarget } from './qkv-projection.ts';

/** kv_store.wgsl's and kv_quantize.wgsl's uniforms. */
export const KV_STORE_PARAMS = defineParams([
  ['n', 'u32', 'new rows per (b, g)'],
  ['blocks', 'u32', 'B·G'],
  ['Dh4', 'u32', 'head size / 4'],
  ['srcK4', 'u32', 'where the new K rows start in src, in vec4s ([B, G, n, Dh/4])'],
  ['srcV4', 'u32', 'where the new V rows start in src, in vec4s'],
  ['stride', 'u32', "the cache's rows per (b, g): its maxSeqLen"],
  ['row0', 'u32', "the cache's row of the first new token"],
  ['dstV4', 'u32', 'where V starts in the cache, as the index of a vec4 of values (B·G·stride·Dh/4)'],
  ['scales', 'u32', 'q8_0/q4_0: the word where the block scales start'],
  ['zero', 'u32', '0 (kv_rounding.wgsl productRN)'],
]);

/** Its bindings: src (the scratch, ST4) read, dst (the cache, as its format keeps it) written. */
function storeBindings(format: KvFormat) {
  const [, , type, meaning] = kvBinding(format);
  return kernelBindings('KvStore', [
    ['src', 'read-only-storage', 'array<ST4>', 'the new K and V rows [B, G, n, Dh/4] each'],
    ['dst', 'storage', type, meaning],
  ]);
}

const STORE_BINDINGS = { f32: storeBindings('f32'), f16x2: storeBindings('f16x2'), q8_0: storeBindings('q8_0'), q4_0: storeBindings('q4_0') } as const;

/** How kv_store.wgsl writes one vec4 of values, per float format. */
const STORE_VALUE: Record<'f32' | 'f16x2', string> = {
  f32: 'fn storeValue(i: u32, v: vec4<f32>) {\n  dst[i] = v;\n}',
  f16x2: 'fn storeValue(i: u32, v: vec4<f32>) {\n  dst[i] = vec2<u32>(halfBits(v.x) | (halfBits(v.y) << 16u), halfBits(v.z) | (halfBits(v.w) << 16u));\n}',
};

const WG = 64; // both shaders' @workgroup_size

/** One store: the plan, where the rows are (the scratch: stride = the call's rows, row0 = 0), the cache they go to. */
interface StoreArgs {
  plan: ForwardPlan;
  src: KvTarget;
  dst: KvTarget & { format: KvFormat };
}

/** The store as a kernel (kernel.ts), specialised by the cache's format. */
export const KV_STORE = defineKernel({
  name: 'KvStore',
  params: KV_STORE_PARAMS,
  specialise: (args: StoreArgs): { format: KvFormat } => ({ format: args.dst.format }),
  bindings: (s) => STORE_BINDINGS[s.format],
  label: (s) => `KvStore.${s.format}`,
  shader: (s) =>
    s.format === 'q8_0' || s.format === 'q4_0'
      ? { sizes: { Q4: s.format === 'q4_0' ? 1 : 0 }, sources: [rounding, quantizeBlockSource, quantizeSource] }
      : { sources: [rounding, STORE_VALUE[s.format], storeSource] },
  run({ plan, src, dst }, _scratch, s) {
    const { numKvHeads: G, headDim: Dh } = plan.layer;
    const blocks = plan.batchSize * G;
    const n = plan.seqLen;
    const quantized = s.format === 'q8_0' || s.format === 'q4_0';
    const groups = Math.ceil((2 * blocks * n * Dh) / 4 / WG);
    return {
      uniforms: {
        n,
        blocks,
        Dh4: Dh / 4,
        srcK4: src.kBase / 4,
        srcV4: src.vBase / 4,
        stride: dst.stride,
        row0: dst.row0,
        dstV4: dst.vBase / 4,
        scales: dst.scales ?? 0,
        zero: 0,
      },
      buffers: { src: src.buffer, dst: dst.buffer },
      groups: quantized ? [Math.ceil((Math.floor((n * Dh) / 64) + 1) / WG), 2 * blocks] : [Math.min(groups, 65535), Math.ceil(groups / 65535)],
    };
  },
});

/** Stores the call's new K and V rows (`src`, the scratch the projection wrote) into the cache `dst`; returns `dst`, where attention reads them. */
export function encodeKvStore(pass: GPUComputePassEncoder, scratch: CallScratch, plan: ForwardPlan, src: KvTarget, dst: KvTarget & { format: KvFormat }): KvTarget {
  encodeKernel(pass, scratch, KV_STORE, { plan, src, dst });
  return dst;
}

/** kv_move_scales.wgsl's uniforms. */
export const MOVE_SCALES_PARAMS = defineParams([
  ['n', 'u32', 'rows moved per (b, g)'],
  ['nb', 'u32', 'blocks a row (Dh / 32)'],
  ['blocks', 'u32', 'B·G'],
  ['stride', 'u32', "the cache's rows per (b, g)"],
  ['to', 'u32', 'the row the first moved row goes to'],
  ['perHalf', 'u32', "K's blocks (B·G·stride·nb): V's first block"],
  ['scales', 'u32', 'the word of dst where the scales start'],
]);

/** The scales of a q-dtype cache's rows, moved (KvCache.acceptPath: kv-cache.ts moveRows). */
export const KV_MOVE_SCALES = singleKernel({
  name: 'KvMoveScales',
  params: MOVE_SCALES_PARAMS,
  bindings: kernelBindings('KvMoveScales', [
    ['rows', 'read-only-storage', 'array<u32>', 'the rows moved, in order [n]'],
    ['old', 'read-only-storage', 'array<u32>', 'a copy of the scale plane'],
    ['dst', 'storage', 'array<u32>', 'the cache'],
  ]),
  source: moveScalesSource,
  run(args: { rows: GPUBuffer; old: GPUBuffer; dst: GPUBuffer; n: number; nb: number; blocks: number; stride: number; to: number; scales: number }) {
    const { rows, old, dst, ...uniforms } = args;
    return {
      uniforms: { ...uniforms, perHalf: uniforms.blocks * uniforms.stride * uniforms.nb },
      buffers: { rows, old, dst },
      groups: [Math.ceil((Math.floor((uniforms.n * uniforms.nb) / 2) + 1) / WG), 2 * uniforms.blocks],
    };
  },
});

/** Moves the block scales of rows `rows` to rows to … (the quants are the caller's copies); `old` a copy of the scale plane. */
export function encodeMoveScales(pass: GPUComputePassEncoder, scratch: CallScratch, args: Parameters<typeof KV_MOVE_SCALES.run>[0]): void {
  encodeKernel(pass, scratch, KV_MOVE_SCALES, args);
}
