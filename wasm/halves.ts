// AssemblyScript, compiled with the other kernels by scripts/build-wasm.mjs. A row of an 'f16' KV cache
// written by the 'wasm' backend (src/wasm/kv-cache.ts appendHalves): each float32 rounded to f16 as
// src/util/f16.ts's halfBitsOfFloat32Bits rounds it (to nearest, ties to even; subnormals, ±∞ and NaN
// as it gives them), the same bits.
//
//   toHalves  K [Dh] f32 at k → f16 at kt, kt + stride, … (a column of a Kᵀ block: stride 128 bytes),
//             V [Dh] f32 at v → f16 at vo (a row); returns 1 where a half written is ±∞ or NaN, else 0
//
// Four lanes at a time where all four are in a half's normal range (the common case); the general
// rule (halfOf) one at a time otherwise.

// Vector constants, each a word of memory read as a splat where it is used (gemm.ts: "Constants in memory").
const C_MAGNITUDE = memory.data<u32>([0x7fffffff]);
const C_H_SIGN = memory.data<u32>([0x8000]);
const C_ONE = memory.data<u32>([1]);
const C_REBIAS = memory.data<u32>([0xfff - 0x38000000]); // the exponent 127 → 15 and the rounding's 0xfff
const C_NORMAL_MIN = memory.data<u32>([0x38800000]); // 2^−14, f16's least normal
const C_NORMAL_SPAN = memory.data<u32>([0x477ff000 - 0x38800000]); // up to the first float that rounds to ∞
const C_H_EXP = memory.data<u32>([0x7c00]);

/** halfBitsOfFloat32Bits (src/util/f16.ts) of float32 bits x: the same branches, the same bits. */
function halfOf(x: u32): u32 {
  const sign = (x >> 16) & 0x8000;
  const a = x & 0x7fffffff;
  if (a >= 0x38800000 && a < 0x477ff000) return sign | ((a - 0x38000000 + 0xfff + ((a >> 13) & 1)) >> 13);
  const exp = (x >> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0); // Inf or NaN
  const e = <i32>exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow → Inf
  if (e <= 0) {
    // subnormal half (or zero): the implicit bit in, rounded to nearest even
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = <u32>(14 - e);
    const half = mant >> shift;
    const rest = mant & (((<u32>1) << shift) - 1);
    const mid = (<u32>1) << (shift - 1);
    return sign | (half + (rest > mid || (rest === mid && (half & 1) !== 0) ? 1 : 0));
  }
  const half = ((<u32>e) << 10) | (mant >> 13);
  const rest = mant & 0x1fff;
  return sign | (half + (rest > 0x1000 || (rest === 0x1000 && (half & 1) !== 0) ? 1 : 0));
}

/** Four float32s (bits in x's lanes) as f16 bits in i32 lanes: the normal-range rule, where `normal` says every lane is in it. */
function halves4(x: v128, out: usize, normal: bool): v128 {
  if (normal) {
    const a = v128.and(x, v128.load32_splat(C_MAGNITUDE));
    const sign = v128.and(i32x4.shr_u(x, 16), v128.load32_splat(C_H_SIGN));
    const odd = v128.and(i32x4.shr_u(a, 13), v128.load32_splat(C_ONE));
    return v128.or(sign, i32x4.shr_u(i32x4.add(i32x4.add(a, v128.load32_splat(C_REBIAS)), odd), 13));
  }
  store<u32>(out, halfOf(i32x4.extract_lane(x, 0)));
  store<u32>(out, halfOf(i32x4.extract_lane(x, 1)), 4);
  store<u32>(out, halfOf(i32x4.extract_lane(x, 2)), 8);
  store<u32>(out, halfOf(i32x4.extract_lane(x, 3)), 12);
  return v128.load(out);
}

/** Whether every lane of x (float32 bits) is in a half's normal range, where halves4's vector rule holds. */
function allNormal(x: v128): bool {
  const a = v128.and(x, v128.load32_splat(C_MAGNITUDE));
  // a ≥ 0x38800000 and a < 0x477ff000: a − 0x38800000 (unsigned) < 0x477ff000 − 0x38800000
  const inRange = i32x4.lt_u(i32x4.sub(a, v128.load32_splat(C_NORMAL_MIN)), v128.load32_splat(C_NORMAL_SPAN));
  return i32x4.all_true(inRange);
}

/** See the top of this file. scratch: 16 bytes (16-byte aligned) for the general rule's lanes. */
export function toHalves(k: usize, kt: usize, stride: i32, v: usize, vo: usize, Dh: i32, scratch: usize): i32 {
  let special = i32x4.splat(0);
  const exp = v128.load32_splat(C_H_EXP);
  let any: u32 = 0;
  // Dh past the last whole 4: one at a time.
  for (let d = Dh & ~3; d < Dh; d++) {
    const hk = halfOf(load<u32>(k + ((<usize>d) << 2)));
    const hv = halfOf(load<u32>(v + ((<usize>d) << 2)));
    store<u16>(kt + <usize>d * <usize>stride, <u16>hk);
    store<u16>(vo + ((<usize>d) << 1), <u16>hv);
    any |= <u32>((hk & 0x7c00) === 0x7c00 || (hv & 0x7c00) === 0x7c00);
  }
  for (let d = 0; d + 4 <= Dh; d += 4) {
    const off = (<usize>d) << 2;
    const xk = v128.load(k + off);
    const xv = v128.load(v + off);
    const hk = halves4(xk, scratch, allNormal(xk));
    const hv = halves4(xv, scratch, allNormal(xv));
    special = v128.or(special, v128.or(i32x4.eq(v128.and(hk, exp), exp), i32x4.eq(v128.and(hv, exp), exp)));
    const ka = kt + <usize>d * <usize>stride;
    store<u16>(ka, <u16>i32x4.extract_lane(hk, 0));
    store<u16>(ka + <usize>stride, <u16>i32x4.extract_lane(hk, 1));
    store<u16>(ka + 2 * <usize>stride, <u16>i32x4.extract_lane(hk, 2));
    store<u16>(ka + 3 * <usize>stride, <u16>i32x4.extract_lane(hk, 3));
    v128.store64_lane(vo + ((<usize>d) << 1), i16x8.narrow_i32x4_u(hv, hv), 0);
  }
  return v128.any_true(special) || any !== 0 ? 1 : 0;
}
