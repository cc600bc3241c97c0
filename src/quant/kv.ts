// The storage types of a KV cache (KvCacheDtype) and their rows, the same on every backend: a row is
// one position of one key/value head, Dh values. 'q8_0' and 'q4_0' rows are Dh/32 blocks written by
// ggml's reference quantizers (quantize.ts: quantizeBlockQ8_0, quantizeBlockQ4_0), { f16 d; qs }:
//   q8_0  34 bytes a block: d, then 32 int8           value j = d · qs[j]
//   q4_0  18 bytes a block: d, then 16 bytes          value j = d · ((qs[j % 16] >> 4·(j ≥ 16)) & 15) − 8)
// A backend may lay the blocks out its own way (scales apart from the quants), never round differently:
// these functions are the rule its reads and writes are tested against.

import { floatToHalfBits, halfToFloat } from '../util/f16.ts';
import { quantizeBlockQ4_0, quantizeBlockQ8_0 } from './blocks.ts';

/**
 * How a KV cache stores its keys and values. 'f32' and 'f16': floats. 'q8_0' and 'q4_0': blocks of 32
 * along the head dimension exactly as ggml's reference quantizers write them (quantize_row_q8_0_ref,
 * quantize_row_q4_0_ref: their rounding, the scale an f16), read in place by the attention.
 */
export type KvCacheDtype = 'f32' | 'f16' | 'q8_0' | 'q4_0';

/** The cache dtypes, in the order the docs list them. */
export const KV_CACHE_DTYPES: readonly KvCacheDtype[] = ['f32', 'f16', 'q8_0', 'q4_0'];

/** Whether a dtype stores blocks of 32 (needs Dh % 32 = 0). */
export function isBlockDtype(dtype: KvCacheDtype): dtype is 'q8_0' | 'q4_0' {
  return dtype === 'q8_0' || dtype === 'q4_0';
}

/** Bytes of one block of 32 values. */
export const KV_BLOCK_BYTES = { q8_0: 34, q4_0: 18 } as const;

/** Bytes of one row of Dh values (f32 4·Dh, f16 2·Dh, q-dtypes Dh/32 blocks). */
export function kvRowBytes(dtype: KvCacheDtype, Dh: number): number {
  if (dtype === 'f32') return 4 * Dh;
  if (dtype === 'f16') return 2 * Dh;
  return (Dh / 32) * KV_BLOCK_BYTES[dtype];
}

/** Writes row x [Dh] (float32 values) as `dtype` at out[at …] (kvRowBytes bytes; f32/f16 little-endian). */
export function encodeKvRow(dtype: KvCacheDtype, x: Float32Array, out: Uint8Array, at: number): void {
  const Dh = x.length;
  if (dtype === 'f32') {
    new Uint8Array(out.buffer, out.byteOffset + at, 4 * Dh).set(new Uint8Array(x.buffer, x.byteOffset, 4 * Dh));
  } else if (dtype === 'f16') {
    for (let d = 0; d < Dh; d++) {
      const h = floatToHalfBits(x[d]);
      out[at + 2 * d] = h & 0xff;
      out[at + 2 * d + 1] = h >> 8;
    }
  } else {
    const quantize = dtype === 'q8_0' ? quantizeBlockQ8_0 : quantizeBlockQ4_0;
    const bytes = KV_BLOCK_BYTES[dtype];
    for (let b = 0; b < Dh / 32; b++) quantize(x.subarray(32 * b, 32 * b + 32), out, at + b * bytes);
  }
}

/** Reads a row of Dh values stored as `dtype` at data[at …] into out[outAt …] (exact: f16 and the blocks' values are float32 numbers). */
export function decodeKvRow(dtype: KvCacheDtype, data: Uint8Array, at: number, Dh: number, out: Float32Array | Float64Array, outAt: number): void {
  if (dtype === 'f32') {
    const view = new DataView(data.buffer, data.byteOffset);
    for (let d = 0; d < Dh; d++) out[outAt + d] = view.getFloat32(at + 4 * d, true);
  } else if (dtype === 'f16') {
    for (let d = 0; d < Dh; d++) out[outAt + d] = halfToFloat(data[at + 2 * d] | (data[at + 2 * d + 1] << 8));
  } else if (dtype === 'q8_0') {
    for (let b = 0; b < Dh / 32; b++) {
      const p = at + 34 * b;
      const scale = halfToFloat(data[p] | (data[p + 1] << 8));
      for (let j = 0; j < 32; j++) out[outAt + 32 * b + j] = Math.fround(scale * ((data[p + 2 + j] << 24) >> 24));
    }
  } else {
    for (let b = 0; b < Dh / 32; b++) {
      const p = at + 18 * b;
      const scale = halfToFloat(data[p] | (data[p + 1] << 8));
      for (let j = 0; j < 16; j++) {
        const byte = data[p + 2 + j];
        out[outAt + 32 * b + j] = Math.fround(scale * ((byte & 15) - 8));
        out[outAt + 32 * b + j + 16] = Math.fround(scale * ((byte >> 4) - 8));
      }
    }
  }
}

/** x [n, Dh] rounded to what a cache of `dtype` holds (float32 values; 'f32' returns a copy). */
export function roundToKvDtype(dtype: KvCacheDtype, x: Float32Array, Dh: number): Float32Array {
  const out = new Float32Array(x.length);
  const row = new Uint8Array(kvRowBytes(dtype, Dh));
  for (let r = 0; r < x.length / Dh; r++) {
    encodeKvRow(dtype, x.subarray(r * Dh, (r + 1) * Dh), row, 0);
    decodeKvRow(dtype, row, 0, Dh, out, r * Dh);
  }
  return out;
}

/** Rows x [n, Dh] encoded as `dtype`: [n] rows of kvRowBytes(dtype, Dh) bytes. */
export function encodeKvRows(dtype: KvCacheDtype, x: Float32Array, Dh: number): Uint8Array {
  const rowBytes = kvRowBytes(dtype, Dh);
  const n = x.length / Dh;
  const out = new Uint8Array(n * rowBytes);
  for (let r = 0; r < n; r++) encodeKvRow(dtype, x.subarray(r * Dh, (r + 1) * Dh), out, r * rowBytes);
  return out;
}

/** The values of encoded rows [n] of kvRowBytes(dtype, Dh) bytes, as float32 [n, Dh]. */
export function decodeKvRows(dtype: KvCacheDtype, data: Uint8Array, Dh: number): Float32Array {
  const rowBytes = kvRowBytes(dtype, Dh);
  const n = data.length / rowBytes;
  const out = new Float32Array(n * Dh);
  for (let r = 0; r < n; r++) decodeKvRow(dtype, data, r * rowBytes, Dh, out, r * Dh);
  return out;
}
