// ggml's reference quantizers of one block of 32 (quantize_row_q4_0_ref, quantize_row_q8_0_ref), in
// float32 arithmetic (Math.fround) in the C order, the f16 scale rounded to nearest even: the rule of
// quantized weights (quantize.ts) and of quantized KV caches (kv.ts).

import { floatToHalfBits } from '../util/f16.ts';

const f = Math.fround;

/** quantize_row_q4_0_ref on one block of 32: { f16 d; u8 qs[16] } at `at`. */
export function quantizeBlockQ4_0(x: Float32Array, out: Uint8Array, at: number): void {
  let amax = 0;
  let max = 0;
  for (let j = 0; j < 32; j++) {
    if (amax < Math.abs(x[j])) {
      amax = Math.abs(x[j]);
      max = x[j];
    }
  }
  const d = f(max / -8);
  const id = d ? f(1 / d) : 0;
  const bits = floatToHalfBits(d);
  out[at] = bits & 0xff;
  out[at + 1] = bits >> 8;
  for (let j = 0; j < 16; j++) {
    // (int8_t)(x·id + 8.5f) truncates; the sum is ≥ 0.5 (|x·id| ≤ 8), so truncation is floor
    const xi0 = Math.min(15, Math.trunc(f(f(x[j] * id) + 8.5)));
    const xi1 = Math.min(15, Math.trunc(f(f(x[j + 16] * id) + 8.5)));
    out[at + 2 + j] = xi0 | (xi1 << 4);
  }
}

/** C roundf: half away from zero. */
export function roundf(v: number): number {
  return Math.sign(v) * Math.floor(Math.abs(v) + 0.5);
}

/** quantize_row_q8_0_ref on one block of 32: { f16 d; i8 qs[32] } at `at`. */
export function quantizeBlockQ8_0(x: Float32Array, out: Uint8Array, at: number): void {
  let amax = 0;
  for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[j]));
  const d = f(amax / 127);
  const id = d ? f(1 / d) : 0;
  const bits = floatToHalfBits(d);
  out[at] = bits & 0xff;
  out[at + 1] = bits >> 8;
  for (let j = 0; j < 32; j++) out[at + 2 + j] = roundf(f(x[j] * id)) & 0xff;
}
