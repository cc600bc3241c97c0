// The rule of `activations: 'q8'` (MultiHeadAttentionConfig): the input of a projection with packed
// weights is quantized as llama.cpp quantizes it before its integer dot products (ggml's
// quantize_row_q8_0_ref, blocks.ts): each row of x [rows, K] in blocks of 32 along K, d = max|x| / 127
// in float32, q = roundf(x · (1/d)) in [−127, 127], d stored as f16. The product then stands for
// Σ_k w_k · f16(d)·q_k. A last block of K % 32 elements is quantized over its own elements (what
// ggml's zero padding gives). x is float32; a float64 input is rounded to float32 first, as the
// backends hold it.

import { floatToHalfBits, halfToFloat } from '../util/f16.ts';
import { roundf } from './blocks.ts';

/** Activations per quantization block along K. */
export const Q8_BLOCK = 32;

/** x [rows, K] quantized per block of 32: q [rows, K] int8 and each block's scale d (as f16, widened) [rows, ⌈K/32⌉]. */
export function quantizeActivationsQ8(x: ArrayLike<number>, rows: number, K: number): { q: Int8Array; d: Float32Array } {
  const f = Math.fround;
  const blocks = Math.ceil(K / Q8_BLOCK);
  const q = new Int8Array(rows * K);
  const d = new Float32Array(rows * blocks);
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < blocks; b++) {
      const k0 = r * K + b * Q8_BLOCK;
      const k1 = r * K + Math.min(K, (b + 1) * Q8_BLOCK);
      let amax = 0;
      for (let k = k0; k < k1; k++) amax = Math.max(amax, Math.abs(f(x[k])));
      const scale = f(amax / 127);
      const inv = scale ? f(1 / scale) : 0;
      d[r * blocks + b] = halfToFloat(floatToHalfBits(scale));
      for (let k = k0; k < k1; k++) q[k] = roundf(f(f(x[k]) * inv));
    }
  }
  return { q, d };
}

/** x [rows, K] as the 'q8' rule sees it: f16(d)·q per element (exact in float32), for references and tests. */
export function roundActivationsQ8(x: ArrayLike<number>, rows: number, K: number): Float32Array {
  const { q, d } = quantizeActivationsQ8(x, rows, K);
  const blocks = Math.ceil(K / Q8_BLOCK);
  const out = new Float32Array(rows * K);
  for (let r = 0; r < rows; r++) {
    for (let k = 0; k < K; k++) out[r * K + k] = d[r * blocks + Math.floor(k / Q8_BLOCK)] * q[r * K + k];
  }
  return out;
}
