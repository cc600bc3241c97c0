// Host side of the kernels that write a PagedKvCache's pool: shaders/paged_write.wgsl (the call's new
// K and V rows into their sequences' blocks, as floats), paged_quantize.wgsl (q8_0/q4_0 rows, by the
// plain caches' quantizer kv_quantize_block.wgsl), and paged_move_scales.wgsl (a q-dtype pool's scales
// moved word by word: copy-on-write and acceptPath). paged-attention.ts reads the pool.

import quantizeBlockSource from '../../../shaders/kv_quantize_block.wgsl?raw';
import rounding from '../../../shaders/kv_rounding.wgsl?raw';
import moveScalesSource from '../../../shaders/paged_move_scales.wgsl?raw';
import quantizeSource from '../../../shaders/paged_quantize.wgsl?raw';
import writeSource from '../../../shaders/paged_write.wgsl?raw';
import { kernelBindings } from '../bindings.ts';
import { defineKernel, encodeKernel, singleKernel } from '../kernel.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams } from '../shader.ts';
import { type KvFormat, kvBinding } from './attention-fields.ts';

/** paged_write.wgsl's uniforms. */
export const PAGED_WRITE_PARAMS = defineParams([
  ['G', 'u32', 'key/value heads'],
  ['T', 'u32', "the call's tokens"],
  ['kBase4', 'u32', 'where K starts in src, in vec4s'],
  ['vBase4', 'u32', 'where V starts in src, in vec4s'],
  ['blockSize', 'u32', 'positions per block'],
  ['poolV4', 'u32', 'where V starts in the pool, in vec4s'],
  ['zero', 'u32', '0 (kv_rounding.wgsl, f16 pools)'],
]);

/** paged_write.wgsl's bindings for a pool of `format` (undefined: the engine's ST4; 'f32', 'f16x2' as kv-cache.ts keeps them). */
function writeBindings(format: 'f32' | 'f16x2' | undefined) {
  const type = format === undefined ? 'array<ST4>' : kvBinding(format)[2];
  return kernelBindings('PagedWrite', [
    ['src', 'read-only-storage', 'array<ST4>', "the call's K [G, T, Dh/4] and V [G, T, Dh/4] (the qkv buffer)"],
    ['pool', 'storage', type, "the layer's pool: K, V [maxBlocks, G, blockSize, Dh/4]"],
    ['dest', 'read-only-storage', 'array<u32>', "[T]: each token's pool row (head 0)"],
  ]);
}

export const PAGED_WRITE_BINDINGS = writeBindings(undefined);
const WRITE_BINDINGS = { st: PAGED_WRITE_BINDINGS, f32: writeBindings('f32'), f16x2: writeBindings('f16x2') } as const;

/** How paged_write.wgsl stores one vec4, per pool format (f16: rounded as src/quant/kv.ts encodeKvRow, kv_rounding.wgsl halfBits). */
const STORE_POOL: Record<'st' | 'f32' | 'f16x2', string> = {
  st: 'fn storePool(i: u32, v: ST4) {\n  pool[i] = v;\n}',
  f32: 'fn storePool(i: u32, v: ST4) {\n  pool[i] = vec4<f32>(v);\n}',
  f16x2:
    'fn storePool(i: u32, s: ST4) {\n  let v = vec4<f32>(s);\n  pool[i] = vec2<u32>(halfBits(v.x) | (halfBits(v.y) << 16u), halfBits(v.z) | (halfBits(v.w) << 16u));\n}',
};

/** One write: the call's sizes, where K and V are, the pool (its format, its scales' word for q-dtypes), each token's pool row. */
interface WriteArgs {
  G: number;
  T: number;
  headDim: number;
  blockSize: number;
  src: { buffer: GPUBuffer; kBase: number; vBase: number };
  pool: { buffer: GPUBuffer; vBase: number; format?: KvFormat; scales?: number };
  dest: GPUBuffer;
}

/** The write of a call's new K and V rows into a float pool as a kernel (kernel.ts): an invocation per vec4, specialised by the head size and the pool's format. */
export const PAGED_WRITE = defineKernel({
  name: 'PagedWrite',
  params: PAGED_WRITE_PARAMS,
  specialise: (args: WriteArgs) => ({ headDim: args.headDim, format: (args.pool.format ?? 'st') as 'st' | 'f32' | 'f16x2' }),
  bindings: (s) => WRITE_BINDINGS[s.format],
  label: (s) => (s.format === 'st' ? 'PagedWrite' : `PagedWrite.${s.format}`),
  shader: (s) => ({ sizes: { DH4: s.headDim / 4 }, sources: s.format === 'f16x2' ? [rounding, STORE_POOL[s.format], writeSource] : [STORE_POOL[s.format], writeSource] }),
  run(args) {
    const { G, T, headDim: Dh } = args;
    const groups = Math.ceil((2 * G * T * Dh) / 4 / 256);
    return {
      uniforms: { G, T, kBase4: args.src.kBase / 4, vBase4: args.src.vBase / 4, blockSize: args.blockSize, poolV4: args.pool.vBase / 4, zero: 0 },
      buffers: { src: args.src.buffer, pool: args.pool.buffer, dest: args.dest },
      groups: [Math.min(groups, 65535), Math.ceil(groups / 65535)],
    };
  },
});

/** paged_quantize.wgsl's uniforms. */
export const PAGED_QUANTIZE_PARAMS = defineParams([
  ['G', 'u32', 'key/value heads'],
  ['T', 'u32', "the call's tokens"],
  ['kBase4', 'u32', 'where K starts in src, in vec4s'],
  ['vBase4', 'u32', 'where V starts in src, in vec4s'],
  ['blockSize', 'u32', 'positions per block'],
  ['poolRows', 'u32', "K's rows in the pool (maxBlocks·G·blockSize): V's first row"],
  ['scales', 'u32', 'the word of the pool where the block scales start'],
  ['parity', 'u32', 'the blocks this dispatch quantizes: those of index ≡ parity (mod 2)'],
  ['zero', 'u32', '0 (kv_rounding.wgsl productRN)'],
]);

/** paged_quantize.wgsl's bindings. */
const PAGED_QUANTIZE_BINDINGS = kernelBindings('PagedQuantize', [
  ['src', 'read-only-storage', 'array<ST4>', "the call's K [G, T, Dh/4] and V [G, T, Dh/4] (the qkv buffer)"],
  ['dst', 'storage', 'array<u32>', "the layer's pool: quants, then scales"],
  ['dest', 'read-only-storage', 'array<u32>', "[T]: each token's pool row (head 0)"],
]);

/** The quantized write (paged_quantize.wgsl) as a kernel, specialised by the head size and the dtype. */
export const PAGED_QUANTIZE = defineKernel({
  name: 'PagedQuantize',
  params: PAGED_QUANTIZE_PARAMS,
  specialise: (args: WriteArgs & { parity: number }) => ({ headDim: args.headDim, format: args.pool.format as 'q8_0' | 'q4_0' }),
  bindings: () => PAGED_QUANTIZE_BINDINGS,
  label: (s) => `PagedQuantize.${s.format}`,
  shader: (s) => ({ sizes: { DH4: s.headDim / 4, Q4: s.format === 'q4_0' ? 1 : 0 }, sources: [rounding, quantizeBlockSource, quantizeSource] }),
  run(args) {
    const { G, T, headDim: Dh } = args;
    const groups = Math.ceil((2 * G * T * Dh) / 32 / 64);
    return {
      uniforms: {
        G,
        T,
        kBase4: args.src.kBase / 4,
        vBase4: args.src.vBase / 4,
        blockSize: args.blockSize,
        poolRows: args.pool.vBase / Dh,
        scales: args.pool.scales ?? 0,
        parity: args.parity,
        zero: 0,
      },
      buffers: { src: args.src.buffer, dst: args.pool.buffer, dest: args.dest },
      groups: [Math.min(groups, 65535), Math.ceil(groups / 65535)],
    };
  },
});

/** paged_move_scales.wgsl's uniforms. */
export const PAGED_MOVE_SCALES_PARAMS = defineParams([
  ['n', 'u32', 'scale words written'],
  ['scales', 'u32', 'the word of the pool where the block scales start'],
]);

/** The block scales of a q-dtype pool moved (copyBlock, acceptPath): paged_move_scales.wgsl. */
export const PAGED_MOVE_SCALES = singleKernel({
  name: 'PagedMoveScales',
  params: PAGED_MOVE_SCALES_PARAMS,
  bindings: kernelBindings('PagedMoveScales', [
    ['moves', 'read-only-storage', 'array<u32>', '[n] (word, low half from, high half from)'],
    ['old', 'read-only-storage', 'array<u32>', 'a copy of the scale plane'],
    ['dst', 'storage', 'array<u32>', 'the pool'],
  ]),
  source: moveScalesSource,
  run(args: { moves: GPUBuffer; old: GPUBuffer; dst: GPUBuffer; n: number; scales: number }) {
    return { uniforms: { n: args.n, scales: args.scales }, buffers: { moves: args.moves, old: args.old, dst: args.dst }, groups: [Math.ceil(args.n / 64)] };
  },
});

/** Writes the call's new K and V rows into the pool: as floats (paged_write.wgsl), or quantized (paged_quantize.wgsl, twice: even blocks, then odd). */
export function encodePagedWrite(pass: GPUComputePassEncoder, scratch: CallScratch, args: WriteArgs): void {
  const format = args.pool.format;
  if (format === 'q8_0' || format === 'q4_0') {
    for (const parity of [0, 1]) encodeKernel(pass, scratch, PAGED_QUANTIZE, { ...args, parity });
  } else encodeKernel(pass, scratch, PAGED_WRITE, args);
}

/** Moves a q-dtype pool's scales as `moves` says (triples: paged_move_scales.wgsl), `old` a copy of the plane. */
export function encodePagedMoveScales(pass: GPUComputePassEncoder, scratch: CallScratch, args: Parameters<typeof PAGED_MOVE_SCALES.run>[0]): void {
  encodeKernel(pass, scratch, PAGED_MOVE_SCALES, args);
}
