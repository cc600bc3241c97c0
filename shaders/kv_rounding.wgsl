// The roundings a KV cache's stores do exactly as the host's rule (src/quant/kv.ts, util/f16.ts, ggml's
// quantize_row_q8_0_ref / q4_0_ref) does them, with integer arithmetic where WGSL's float operations
// promise less: `/` is within 2.5 ULP only, and a conversion to f16 (pack2x16float) need not round to
// nearest even nor keep subnormals. Prepended to kv_store.wgsl and kv_quantize.wgsl.

// The f16 bits nearest to v (round to nearest, ties to even; subnormal halves kept; ±Infinity past
// 65504; NaN stays NaN): util/f16.ts floatToHalfBits, line for line.
fn halfBits(v: f32) -> u32 {
  let x = bitcast<u32>(v);
  let sign = (x >> 16u) & 0x8000u;
  let exponent = i32((x >> 23u) & 0xffu);
  var mant = x & 0x7fffffu;
  if (exponent == 255) {
    return sign | 0x7c00u | select(0u, 0x200u, mant != 0u);
  }
  let e = exponent - 127 + 15;
  if (e >= 31) {
    return sign | 0x7c00u;
  }
  if (e <= 0) {
    if (e < -10) {
      return sign;
    }
    mant |= 0x800000u;
    let shift = u32(14 - e);
    let half = mant >> shift;
    let rest = mant & ((1u << shift) - 1u);
    let mid = 1u << (shift - 1u);
    return sign | (half + select(0u, 1u, rest > mid || (rest == mid && (half & 1u) == 1u)));
  }
  let half = (u32(e) << 10u) | (mant >> 13u);
  let rest = mant & 0x1fffu;
  return sign | (half + select(0u, 1u, rest > 0x1000u || (rest == 0x1000u && (half & 1u) == 1u)));  // a carry into the exponent is right
}

// a / b correctly rounded (to nearest, ties to even), as C's float division: a ≥ 0 and b > 0 normal,
// the quotient normal (0 where it would be subnormal: |values| below 2^-100 or so, which a cache does
// not meet). The significands' long division, one quotient bit a step, then the remainder decides.
fn divRN(a: f32, b: f32) -> f32 {
  if (a == 0.0) {
    return 0.0;
  }
  let ua = bitcast<u32>(a);
  let ub = bitcast<u32>(b);
  let ma = (ua & 0x7fffffu) | 0x800000u;
  let mb = (ub & 0x7fffffu) | 0x800000u;
  var e = i32(ua >> 23u) - i32(ub >> 23u) + 127;
  var r = ma;
  if (ma < mb) {
    r = ma << 1u;
    e -= 1;
  }
  var q = 0u;  // r in [mb, 2·mb): 24 quotient bits, the first 1
  for (var k = 0u; k < 24u; k++) {
    q <<= 1u;
    if (r >= mb) {
      r -= mb;
      q |= 1u;
    }
    r <<= 1u;
  }
  // r is twice the remainder: above mb rounds up, mb itself is a tie (to even)
  if (r > mb || (r == mb && (q & 1u) == 1u)) {
    q += 1u;
  }
  if (q == 0x1000000u) {
    q = 0x800000u;
    e += 1;
  }
  if (e <= 0) {
    return 0.0;
  }
  return bitcast<f32>((u32(e) << 23u) | (q & 0x7fffffu));
}

// x · y rounded to f32 and kept so: the uniform `zero` (always 0) hides the product from the compiler,
// which may not then fuse it with the addition that follows (ggml rounds x·id before adding 8.5).
fn productRN(x: f32, y: f32) -> f32 {
  return bitcast<f32>(bitcast<u32>(x * y) ^ params.zero);
}
