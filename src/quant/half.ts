// float32 → IEEE float16 bits, rounding to nearest even: what ggml's GGML_FP32_TO_FP16 (F16C's
// vcvtps2ph, or its portable fallback) and numpy's astype(float16) do. The quantizers store their
// block scales with it; pack.ts's halfToFloat goes the other way.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** Round half to even of a non-negative double. */
function roundEven(x: number): number {
  const fl = Math.floor(x);
  const diff = x - fl;
  if (diff > 0.5) return fl + 1;
  if (diff < 0.5) return fl;
  return fl % 2 === 0 ? fl : fl + 1;
}

/** The float16 bits nearest to `value` (first rounded to float32); ±Infinity past 65504, NaN kept. */
export function floatToHalfBits(value: number): number {
  f32[0] = value;
  const bits = u32[0];
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  if (exp === 0xff) return sign | 0x7c00 | (bits & 0x7fffff ? 0x200 : 0);
  const a = Math.abs(f32[0]);
  if (a < 2 ** -14) return sign | roundEven(a * 2 ** 24); // subnormal (1024 rounds up to the smallest normal, 0x400)
  let e = exp - 127;
  let m = roundEven((a / 2 ** e - 1) * 1024); // exact: a / 2^e is a float32 mantissa in [1, 2)
  if (m === 1024) {
    m = 0;
    e++;
  }
  if (e > 15) return sign | 0x7c00;
  return sign | ((e + 15) << 10) | m;
}
