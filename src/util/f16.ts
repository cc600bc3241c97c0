// float32 ⇄ IEEE half (binary16), the one implementation: precision 'f16' uploads and readbacks
// (Node 20 has no Float16Array), the quantizers' block scales, GGUF and safetensors F16 tensors.
// To half: round to nearest even, subnormals included, overflow to ±Infinity, NaN kept (quiet): what a
// float16 store on the GPU, ggml's GGML_FP32_TO_FP16 (F16C's vcvtps2ph) and numpy's astype(float16)
// of a float32 do. From half: exact (float32 holds every half value).

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The float16 bits nearest to `value` (first rounded to float32); ±Infinity past 65504, NaN kept. */
export function floatToHalfBits(value: number): number {
  f32[0] = value;
  return halfBitsOfFloat32Bits(u32[0]);
}

/** floatToHalfBits of the float32 whose bits are `x` (an unsigned or signed 32-bit integer): for callers that read a Uint32Array view of float32 data. */
export function halfBitsOfFloat32Bits(x: number): number {
  const sign = (x >>> 16) & 0x8000;
  const a = x & 0x7fffffff;
  // A half's normal range, below 65520 (which rounds to Infinity): the exponent rebased (127 → 15) and
  // the 13 bits below the half's last rounded to nearest, ties to even; a carry into the exponent is right.
  if (a >= 0x38800000 && a < 0x477ff000) return sign | ((a - 0x38000000 + 0xfff + ((a >>> 13) & 1)) >>> 13);
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0); // Inf or NaN
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow → Inf
  if (e <= 0) {
    // subnormal half (or zero): shift the implicit bit in, round to nearest even
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    return sign | (half + (rest > mid || (rest === mid && half & 1) ? 1 : 0));
  }
  const half = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  // rounding may carry into the exponent, which is right (up to Inf)
  return sign | (half + (rest > 0x1000 || (rest === 0x1000 && half & 1) ? 1 : 0));
}

/**
 * The value of float16 bits `h` (exact in float32). A normal half's bits are moved into a float32's
 * (the exponent rebased 15 → 127, the mantissa's 10 bits on top of its 23): the same value as
 * (1 + mant/1024)·2^(exp−15), without a power per call (a q4_0 layer's creation calls this once a block).
 */
export function halfToFloat(h: number): number {
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return h & 0x8000 ? -mant * 2 ** -24 : mant * 2 ** -24; // zero (−0 kept) and subnormals
  if (exp === 0x1f) return mant ? Number.NaN : h & 0x8000 ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY;
  u32[0] = ((h & 0x8000) << 16) | ((exp + 112) << 23) | (mant << 13);
  return f32[0];
}

/** float32 values → their nearest float16, as bits. */
export function toF16(values: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = floatToHalfBits(values[i]);
  return out;
}

let table: Float32Array | null = null;

/**
 * float16 bits → float32 values (exact). Long arrays (a weight file's tensors, large readbacks) look each
 * value up in a table of all 65536 (made once, about the cost of converting 65536 values, then ×4
 * faster); short ones, a first call's readback, convert directly.
 */
export function fromF16(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  if (bits.length < 65536 && !table) {
    for (let i = 0; i < bits.length; i++) out[i] = halfToFloat(bits[i]);
    return out;
  }
  if (!table) {
    table = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) table[h] = halfToFloat(h);
  }
  for (let i = 0; i < bits.length; i++) out[i] = table[bits[i]];
  return out;
}
