// AssemblyScript, compiled with the other wasm/*.ts into src/wasm/module.ts. The projections of the
// 'wasm' backend for packed weights with `activations: 'q8'` (src/quant/activations.ts): x [M, K] is
// quantized per block of 32 along K as ggml's quantize_row_q8_0_ref (int8 q, f16 scale d), and
//   y = b + Σ_g ( s_g · Σ_{units u in g} d_u·H_u  −  o_g · Σ_{units u in g} d_u·S_u )
// with H_u = Σ quant·q and S_u = Σ q over a unit of min(group, 32) weights along K, in exact integers
// (i32x4.dot_i16x8_s, 8 products an instruction), scaled in float32: llama.cpp's vec_dot_q4_0_q8_0 and
// friends. A unit lies in one activation block (group 16: two units a block) and in one weight group
// (group > 32: group/32 units a group); the weights are wasm/qgemm.ts's layout (wq, so), unchanged.
//
//   quantizeQ8  x rows → q as i16 (padded with zeros to Kp = ⌈K/8⌉·8) in one of three layouts, and
//               per unit (d, d·S) as two f32 (d·S is exact: an f16 times |S| ≤ 4064)
//   qgemv8      M ≤ 8 rows (decode): qgemv's loop with only its "h" half (x is already integer):
//               half the integer work a word, the same touchAhead streaming of the panels
//   qgemm8      more rows (prefill): a tiled integer GEMM. Per chunk of 64 rows, x quantized once
//               (natural order: (q_k, q_k+1) pairs); per panel of 8 columns the weight quants unpacked
//               once into an i16 pair panel [Kp/2, 8, 2]; a 4 rows × 8 columns micro-kernel keeps 8
//               i32x4 accumulators over a unit (one splat of a row's pair against 2 column vectors),
//               then scales them into a float32 tile [4, 8] that stays in L1
//
// Figures: scripts/bench-q8.ts, one thread, the kernels alone, K = 2048, against qgemv / qgemm on the
// same packed weights (2-core AMD EPYC VM with AVX-512, Node 20, other jobs running beside: medians of
// 11 interleaved runs, ns a weight and row, ratio q8 / f32):
//   q4_0 prefill 512 rows, N 2048 / 3072: 0.029 / 0.028 ns (qgemm 0.043 / 0.043): 0.67× / 0.67×
//   q4_0 decode, one row (weights in L2/L3), N 2048 / 3072: 0.059 / 0.063 ns (qgemv 0.085 / 0.092): 0.69× / 0.69×
//   q8_0, q4_k, q6_k prefill 0.62–0.80×, decode 0.53–0.78× (q6_k, groups of 16: prefill 0.80×, decode 0.73×)
//   decode from memory (24 layers of N 3072 + 2048 stepped through, touchAhead as qgemv): q4_0 1.51 →
//   1.02 ms a layer (0.68×), q8_0 2.03 → 1.53 ms (0.76×)
// The prefill loop is bound by its i32x4.dot_i16x8_s + add pairs (8 products for 2 instructions, where
// gemm's float loop has 4 for 2: 0.5× at best); the scaling per unit (4 rows × 8 columns, into the tile) about a
// seventh of its work. Tried: the micro-kernel's loop unrolled to two pairs a step (0.78–0.90×: slower);
// x in rows of four interleaved [pairs, 4 rows] so that one pointer moves instead of four (0.55–0.68×
// against 0.60–0.69× in the same runs: within the noise, so not kept).
//
// The host guarantees what wasm/qgemm.ts's kernels need (bits 4 or 8, group a power of two ≥ 16,
// ldx ≥ K, ldy ≥ N, bias ⌈N/8⌉·8 floats), and the scratch qgemv8's and qgemm8's comments size
// (src/wasm/projection.ts's scratchFloats computes the same).

import { Q } from './qgemm';

const MC: i32 = 64; // rows of x per chunk (as gemm.ts, qgemm.ts)
/** The relaxed build (scripts/build-wasm.mjs: --enable relaxed-simd): 4-bit weights take Q8.rdot's 16 products an instruction. */
const RELAXED: bool = ASC_FEATURE_RELAXED_SIMD;
/** flags' f16 scales alone: wasm/qgemm.ts's HALF_SCALES (see there), the same value. */
const HALF_SCALES: i32 = 0x100;
/**
 * qgemm8's flag for the relaxed build's 4-bit loop: i32x4.relaxed_dot_i8x16_i7x16_add_s (Q8.rdotAdd, one
 * instruction for 16 products and their sum where the CPU has one: x86's AVX-VNNI vpdpbusd, Arm's sdot)
 * in place of Q8.rdot's two i16 dots and adds, and no widening of the i16 sums each unit. The same
 * integers, so the same bits. The host sets it where src/wasm/dot-add.ts measured it faster and right
 * (Node 20's baseline compiler drops the addend; without VNNI it lowers to 3 slower instructions).
 */
const DOT_ADD: i32 = 0x200;
let gHalf: f32 = 0; // this call's offset factor 2^(bits−1) with HALF_SCALES, else 0 (f32 scales and offsets)
const ROWS: i32 = 2; // qgemv8's rows per pass over a panel (as qgemv)

// Vector constants, each a word of memory read as a splat where it is used (gemm.ts: "Constants in memory").
const C_HALF = memory.data<f32>([0.5]);
const C_ONE = memory.data<f32>([1]);
const C_INFINITY = memory.data<f32>([Infinity]);
const C_SIGN = memory.data<u32>([0x80000000]);
const C_LOW16 = memory.data<u32>([0xffff]);
const C_NIBBLE = memory.data<u32>([0x0f0f0f0f]); // 15 in each byte (not an export of attention.ts: a module export)
const C_NIBBLES16 = memory.data<u32>([0x000f000f]); // a 4-bit field in each i16 lane
const C_BYTES16 = memory.data<u32>([0x00ff00ff]); // an 8-bit field in each i16 lane
const C_LO4 = memory.data<u32>([0xf]);
const C_HI4 = memory.data<u32>([0xf0000]);
const C_LO8 = memory.data<u32>([0xff]);
const C_HI8 = memory.data<u32>([0xff0000]);

// The panel streaming of wasm/qgemm.ts's touchAhead (its comment has the figures), for qgemv8's loop.
const WQ_AHEAD: usize = 2048;
const SO_AHEAD: usize = 1024;
let gTouched: u32 = 0;
let gTouchLimit: usize = 0;

function touchAhead(wp: usize, sp: usize): void {
  const a = min(wp + WQ_AHEAD, gTouchLimit);
  const b = min(sp + SO_AHEAD, gTouchLimit);
  gTouched ^=
    load<u32>(a) ^
    load<u32>(a, 64) ^
    load<u32>(a, 128) ^
    load<u32>(a, 192) ^
    load<u32>(a, 256) ^
    load<u32>(a, 320) ^
    load<u32>(a, 384) ^
    load<u32>(a, 448) ^
    load<u32>(a, 512) ^
    load<u32>(a, 576) ^
    load<u32>(a, 640) ^
    load<u32>(a, 704) ^
    load<u32>(a, 768) ^
    load<u32>(a, 832) ^
    load<u32>(a, 896) ^
    load<u32>(a, 960) ^
    load<u32>(b) ^
    load<u32>(b, 64) ^
    load<u32>(b, 128) ^
    load<u32>(b, 192) ^
    load<u32>(b, 256) ^
    load<u32>(b, 320) ^
    load<u32>(b, 384) ^
    load<u32>(b, 448);
}

/** f16(f) round to nearest even, widened back to f32 (f ≥ 0 or NaN): what src/util/f16.ts's floatToHalfBits then halfToFloat give. */
function halfRound(f: f32): f32 {
  // 65504 (the largest half) + half its ulp and more: ∞ (65520 is a tie, to even); a NaN stays
  if (!(f < 65520)) return f >= 65520 ? <f32>Infinity : f;
  const e = <i32>((reinterpret<u32>(f) >> 23) & 0xff);
  const quantum = reinterpret<f32>((<u32>max(e - 10, 127 - 24)) << 23); // the half's ulp at f (subnormals: 2⁻²⁴)
  return nearest<f32>(f / quantum) * quantum; // both exact: a power of two
}

/** C roundf (half away from zero) of a float as an integer; NaN and ±∞ → 0. */
function roundf(v: f32): i32 {
  const t = trunc<f32>(v);
  const r = abs<f32>(v - t) >= 0.5 ? t + copysign<f32>(1, v) : t;
  return abs<f32>(r) < Infinity ? <i32>r : 0; // NaN and ±∞ (x·id when 1/d overflowed) → 0, as Int8Array stores them
}

/**
 * Byte offset of element k of a quantized row in layout 0 (natural), 4 or 8 (qgemv8's i16 pairs for that
 * many bits), or 12 (relaxed SIMD, 4-bit weights: i8, each 8 values as the even ones then the odd ones).
 */
function position(layout: i32, k: i32): usize {
  if (layout === 12) return <usize>(((k >> 3) << 3) + ((k & 1) << 2) + ((k & 7) >> 1));
  if (layout === 4) return <usize>(((k >> 3) << 4) + ((k & 3) << 2) + ((k >> 2) & 1) * 2);
  if (layout === 8) return <usize>(((k >> 2) << 3) + ((k & 1) << 2) + ((k >> 1) & 1) * 2);
  return (<usize>k) << 1;
}

/**
 * The helpers AssemblyScript inlines (`@inline`), their constant arguments (R, B) folded away: static
 * methods, because the linter does not parse a decorator on a plain function.
 */
// biome-ignore lint/complexity/noStaticOnlyClass: @inline needs a method here (see above)
class Q8 {
  /** roundf of each lane (half away from zero; f32x4.nearest is ties-to-even) as i32; NaN and ±∞ → 0. */
  @inline
  static round(v: v128): v128 {
    const t = f32x4.trunc(v);
    const up = f32x4.ge(f32x4.abs(f32x4.sub(v, t)), v128.load32_splat(C_HALF));
    const one = v128.or(v128.load32_splat(C_ONE), v128.and(v, v128.load32_splat(C_SIGN))); // ±1, v's sign
    const finite = f32x4.lt(f32x4.abs(v), v128.load32_splat(C_INFINITY)); // ±∞ (x·id when 1/d overflowed) → 0, as Int8Array stores it
    return v128.and(i32x4.trunc_sat_f32x4_s(f32x4.add(t, v128.and(one, up))), finite);
  }

  /** The 8 quantized values qa ++ qb (i32 lanes) stored at `at` in `layout` (16 bytes in each). */
  @inline
  static store8(layout: i32, at: usize, qa: v128, qb: v128): void {
    const low = v128.load32_splat(C_LOW16);
    if (layout === 4) {
      v128.store(at, v128.or(v128.and(qa, low), i32x4.shl(qb, 16))); // (q_j, q_{j+4}), j = 0 … 3
    } else if (layout === 8) {
      // each word of 4: (q_0, q_2), (q_1, q_3)
      v128.store64_lane(at, v128.or(v128.and(qa, low), i32x4.shl(v128.shuffle<i32>(qa, qa, 2, 3, 2, 3), 16)), 0);
      v128.store64_lane(at + 8, v128.or(v128.and(qb, low), i32x4.shl(v128.shuffle<i32>(qb, qb, 2, 3, 2, 3), 16)), 0);
    } else {
      v128.store(at, i16x8.narrow_i32x4_s(qa, qb));
    }
  }

  /** The sum of the 4 i32 lanes. */
  @inline
  static hsum(a: v128): i32 {
    return i32x4.extract_lane(a, 0) + i32x4.extract_lane(a, 1) + i32x4.extract_lane(a, 2) + i32x4.extract_lane(a, 3);
  }

  /** The 16 values qa ++ qb ++ qc ++ qd (i32 lanes, |q| ≤ 127) as i8 at `at` in layout 12 (even then odd, each 8). */
  @inline
  static store16i8(at: usize, qa: v128, qb: v128, qc: v128, qd: v128): void {
    const n = i8x16.narrow_i16x8_s(i16x8.narrow_i32x4_s(qa, qb), i16x8.narrow_i32x4_s(qc, qd));
    v128.store(at, v128.shuffle<i8>(n, n, 0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15));
  }

  /**
   * acc + one word's products (relaxed SIMD), as i16 lanes: i16 lane 2c + t of column c gets the products
   * of the row's even values e (4 i8, splat) with lo (the column's even nibbles as bytes, 0 … 15: the
   * 7-bit operand) and of its odd ones o with hi, 8 a column; i32x4.extadd_pairwise_i16x8_s of the unit's
   * sum gives the column's H. Exact: a nibble is below 2⁷, so i16x8.relaxed_dot_i8x16_i7x16_s is defined,
   * and every lowering (pmaddubsw, sdot) gives the same integers; a lane adds at most 2 products a dot,
   * 4 dots a word pair, so a unit of 32 values (4 words) sums at most 8·2·15·127 = 30480 < 2¹⁵: no wrap.
   * Only the relaxed build reaches it (the guard keeps the instruction out of the other build).
   */
  @inline
  static rdot(e: v128, o: v128, lo: v128, hi: v128, acc: v128): v128 {
    if (ASC_FEATURE_RELAXED_SIMD) return i16x8.add(acc, i16x8.add(i16x8.relaxed_dot_i8x16_i7x16_s(e, lo), i16x8.relaxed_dot_i8x16_i7x16_s(o, hi)));
    return acc;
  }

  /**
   * Q8.rdot's products summed straight into i32 lanes (DOT_ADD): lane c of acc gets column c's 8 (its
   * 4 even values' with lo, its 4 odd ones' with hi), the H that Q8.rdot's i16 pair sums widen to.
   */
  @inline
  static rdotAdd(e: v128, o: v128, lo: v128, hi: v128, acc: v128): v128 {
    if (ASC_FEATURE_RELAXED_SIMD) return i32x4.relaxed_dot_i8x16_i7x16_add_s(o, hi, i32x4.relaxed_dot_i8x16_i7x16_add_s(e, lo, acc));
    return acc;
  }

  /**
   * One panel of 4 columns (wq, so at the panel) for R ≤ 2 rows of q8 activations in layout B (xq, row
   * stride xqStride; their (d, d·S) per unit at ds, row stride dsStride), B bits: per unit the integer
   * H = Σ quant·q (a word's fields (j, j + perWord/2) as i16 pairs against the row's splat pair), then
   * in float32 y += s·(d·H) − o·(d·S) when a unit is the group (ONE: group ≤ 32), else t += d·H and
   * ts += d·S over the group's units and y += s·t − o·ts per group. Tried: the nested loops of the
   * second form for both: q4_0 decode 0.83× → 0.6–0.7× of qgemv's time with ONE.
   * RX (relaxed SIMD, B 4): xq in layout 12, and H a word from its even and odd nibbles with Q8.rdot
   * (with DA, DOT_ADD: Q8.rdotAdd).
   */
  @inline
  static panel(
    R: i32,
    B: i32,
    ONE: bool,
    RX: bool,
    DA: bool,
    xq: usize,
    xqStride: usize,
    ds: usize,
    dsStride: usize,
    wq: usize,
    so: usize,
    W: i32,
    group: i32,
    unit: i32,
    nUnits: i32,
    b: v128,
    y: usize,
    yStride: usize,
    cols: i32,
  ): void {
    const perWord = 32 / B;
    const half = gHalf;
    const mask = v128.load32_splat(B === 4 ? C_NIBBLES16 : C_BYTES16);
    const wordsPerUnit = unit / perWord;
    const unitsPerGroup = group / unit;
    let A0 = f32x4.splat(0);
    let A1 = A0;
    let B0 = A0;
    let B1 = A0;
    let p0 = xq; // row r's pairs at the current word: 16 bytes a word (4 bits) or 8 (8 bits)
    let p1 = xq + xqStride;
    let dp = ds;
    let sp = so;
    let t0 = A0; // with several units a group: Σ d·H over the group's units so far, and ts Σ d·S
    let t1 = A0;
    let ts0: f32 = 0;
    let ts1: f32 = 0;
    let left = unitsPerGroup; // units left in the group
    for (let un = 0; un < nUnits; un++) {
      const w0 = un * wordsPerUnit;
      let wp = wq + ((<usize>w0) << 4);
      const wEnd = wq + ((<usize>min(w0 + wordsPerUnit, W)) << 4);
      if ((w0 & 63) === 0) touchAhead(wp, sp); // every 1 KiB of words (a unit's words: a power of two ≤ 8)
      let h0 = i32x4.splat(0);
      let h1 = h0;
      if (B === 4 && RX) {
        const nib = v128.load32_splat(C_NIBBLE);
        for (; wp < wEnd; wp += 16) {
          const u = v128.load(wp);
          const lo = v128.and(u, nib); // fields 0, 2, 4, 6 of each column's word, a byte each
          const hi = v128.and(i32x4.shr_u(u, 4), nib); // fields 1, 3, 5, 7
          if (DA) {
            h0 = Q8.rdotAdd(v128.load32_splat(p0), v128.load32_splat(p0 + 4), lo, hi, h0);
            if (R > 1) h1 = Q8.rdotAdd(v128.load32_splat(p1), v128.load32_splat(p1 + 4), lo, hi, h1);
          } else {
            h0 = Q8.rdot(v128.load32_splat(p0), v128.load32_splat(p0 + 4), lo, hi, h0);
            if (R > 1) h1 = Q8.rdot(v128.load32_splat(p1), v128.load32_splat(p1 + 4), lo, hi, h1);
          }
          p0 += 8;
          if (R > 1) p1 += 8;
        }
        if (!DA) {
          h0 = i32x4.extadd_pairwise_i16x8_s(h0); // the unit's i16 pair sums → H a column
          if (R > 1) h1 = i32x4.extadd_pairwise_i16x8_s(h1);
        }
      } else if (B === 4) {
        for (; wp < wEnd; wp += 16) {
          const u = v128.load(wp); // one word of the 4 columns
          const q0 = v128.and(u, mask);
          const q1 = v128.and(i32x4.shr_u(u, 4), mask);
          const q2 = v128.and(i32x4.shr_u(u, 8), mask);
          const q3 = v128.and(i32x4.shr_u(u, 12), mask);
          h0 = i32x4.add(h0, Q.dots4(q0, q1, q2, q3, p0));
          if (R > 1) h1 = i32x4.add(h1, Q.dots4(q0, q1, q2, q3, p1));
          p0 += 16;
          if (R > 1) p1 += 16;
        }
      } else {
        for (; wp < wEnd; wp += 16) {
          const u = v128.load(wp);
          const q0 = v128.and(u, mask);
          const q1 = v128.and(i32x4.shr_u(u, 8), mask);
          h0 = i32x4.add(h0, Q.dots2(q0, q1, p0));
          if (R > 1) h1 = i32x4.add(h1, Q.dots2(q0, q1, p1));
          p0 += 8;
          if (R > 1) p1 += 8;
        }
      }
      if (ONE) {
        // the unit is the group: y += s·(d·H) − o·(d·S)
        const s = Q.scales(sp, half);
        const o = Q.offsets(sp, half, s);
        sp += Q.scaleBytes(half);
        A0 = f32x4.add(A0, f32x4.mul(s, f32x4.mul(v128.load32_splat(dp), f32x4.convert_i32x4_s(h0))));
        B0 = f32x4.add(B0, f32x4.mul(o, v128.load32_splat(dp + 4)));
        if (R > 1) {
          A1 = f32x4.add(A1, f32x4.mul(s, f32x4.mul(v128.load32_splat(dp + dsStride), f32x4.convert_i32x4_s(h1))));
          B1 = f32x4.add(B1, f32x4.mul(o, v128.load32_splat(dp + dsStride + 4)));
        }
      } else {
        t0 = f32x4.add(t0, f32x4.mul(v128.load32_splat(dp), f32x4.convert_i32x4_s(h0)));
        ts0 += load<f32>(dp, 4);
        if (R > 1) {
          t1 = f32x4.add(t1, f32x4.mul(v128.load32_splat(dp + dsStride), f32x4.convert_i32x4_s(h1)));
          ts1 += load<f32>(dp + dsStride, 4);
        }
        if (--left === 0 || un === nUnits - 1) {
          // the group's end: y += s·Σ d·H − o·Σ d·S
          const s = Q.scales(sp, half);
          const o = Q.offsets(sp, half, s);
          sp += Q.scaleBytes(half);
          A0 = f32x4.add(A0, f32x4.mul(s, t0));
          B0 = f32x4.add(B0, f32x4.mul(o, f32x4.splat(ts0)));
          t0 = f32x4.splat(0);
          ts0 = 0;
          if (R > 1) {
            A1 = f32x4.add(A1, f32x4.mul(s, t1));
            B1 = f32x4.add(B1, f32x4.mul(o, f32x4.splat(ts1)));
            t1 = t0;
            ts1 = 0;
          }
          left = unitsPerGroup;
        }
      }
      dp += 8;
    }
    Q.store4(y, f32x4.sub(f32x4.add(b, A0), B0), cols);
    if (R > 1) Q.store4(y + yStride, f32x4.sub(f32x4.add(b, A1), B1), cols);
  }

  /**
   * R ≤ 4 rows × 8 columns of qgemm8: xq rows in natural order (row stride xqStride bytes), their (d, d·S)
   * per unit at ds (row stride dsStride), the panel's i16 pairs wp [Kp/2, 8, 2], scales and offsets of the
   * two 4-column halves at so0, so1; the sums go into tile [R, 8] f32 (holding the bias), then y (n columns).
   * RX (relaxed SIMD, 4-bit weights): xq in layout 12, the panel unpackPanelRelaxed's [words, lo/hi, 8, 4]
   * bytes, `steps` its words (else the pairs), and Q8.rdot's i16 sums within a unit; with DA (DOT_ADD)
   * Q8.rdotAdd's i32 sums.
   */
  @inline
  static micro(
    R: i32,
    RX: bool,
    DA: bool,
    xq: usize,
    xqStride: usize,
    ds: usize,
    dsStride: usize,
    wpanel: usize,
    so0: usize,
    so1: usize,
    steps: i32,
    group: i32,
    unit: i32,
    nUnits: i32,
    bias: usize,
    tile: usize,
    y: usize,
    yStride: usize,
    n: i32,
  ): void {
    const b0 = v128.load(bias);
    const b1 = v128.load(bias, 16);
    for (let r = 0; r < R; r++) {
      v128.store(tile + ((<usize>r) << 5), b0);
      v128.store(tile + ((<usize>r) << 5), b1, 16);
    }
    const stepsPerUnit = RX ? unit >> 3 : unit >> 1; // words of 8 values, or pairs
    const stepShift: usize = RX ? 6 : 5; // panel bytes a step: 64 or 32
    const unitsPerGroup = group / unit;
    let x0 = xq;
    let x1 = xq + xqStride;
    let x2 = xq + 2 * xqStride;
    let x3 = xq + 3 * xqStride;
    let wp = wpanel;
    for (let un = 0; un < nUnits; un++) {
      const kEnd = wp + ((<usize>min(stepsPerUnit, steps - un * stepsPerUnit)) << stepShift);
      let a00 = i32x4.splat(0);
      let a01 = a00;
      let a10 = a00;
      let a11 = a00;
      let a20 = a00;
      let a21 = a00;
      let a30 = a00;
      let a31 = a00;
      if (RX) {
        for (; wp < kEnd; wp += 64) {
          const la = v128.load(wp); // columns 0 … 3: the word's even nibbles
          const lb = v128.load(wp, 16); // columns 4 … 7
          const ha = v128.load(wp, 32); // the odd ones
          const hb = v128.load(wp, 48);
          const e0 = v128.load32_splat(x0); // row 0's even values of the word, then its odd ones
          const o0 = v128.load32_splat(x0 + 4);
          a00 = DA ? Q8.rdotAdd(e0, o0, la, ha, a00) : Q8.rdot(e0, o0, la, ha, a00);
          a01 = DA ? Q8.rdotAdd(e0, o0, lb, hb, a01) : Q8.rdot(e0, o0, lb, hb, a01);
          x0 += 8;
          if (R > 1) {
            const e1 = v128.load32_splat(x1);
            const o1 = v128.load32_splat(x1 + 4);
            a10 = DA ? Q8.rdotAdd(e1, o1, la, ha, a10) : Q8.rdot(e1, o1, la, ha, a10);
            a11 = DA ? Q8.rdotAdd(e1, o1, lb, hb, a11) : Q8.rdot(e1, o1, lb, hb, a11);
            x1 += 8;
          }
          if (R > 2) {
            const e2 = v128.load32_splat(x2);
            const o2 = v128.load32_splat(x2 + 4);
            a20 = DA ? Q8.rdotAdd(e2, o2, la, ha, a20) : Q8.rdot(e2, o2, la, ha, a20);
            a21 = DA ? Q8.rdotAdd(e2, o2, lb, hb, a21) : Q8.rdot(e2, o2, lb, hb, a21);
            x2 += 8;
          }
          if (R > 3) {
            const e3 = v128.load32_splat(x3);
            const o3 = v128.load32_splat(x3 + 4);
            a30 = DA ? Q8.rdotAdd(e3, o3, la, ha, a30) : Q8.rdot(e3, o3, la, ha, a30);
            a31 = DA ? Q8.rdotAdd(e3, o3, lb, hb, a31) : Q8.rdot(e3, o3, lb, hb, a31);
            x3 += 8;
          }
        }
        if (!DA) {
          a00 = i32x4.extadd_pairwise_i16x8_s(a00); // the unit's i16 pair sums → H a column
          a01 = i32x4.extadd_pairwise_i16x8_s(a01);
          if (R > 1) a10 = i32x4.extadd_pairwise_i16x8_s(a10);
          if (R > 1) a11 = i32x4.extadd_pairwise_i16x8_s(a11);
          if (R > 2) a20 = i32x4.extadd_pairwise_i16x8_s(a20);
          if (R > 2) a21 = i32x4.extadd_pairwise_i16x8_s(a21);
          if (R > 3) a30 = i32x4.extadd_pairwise_i16x8_s(a30);
          if (R > 3) a31 = i32x4.extadd_pairwise_i16x8_s(a31);
        }
      }
      for (; !RX && wp < kEnd; wp += 32) {
        const wa = v128.load(wp); // columns 0 … 3: (w_k, w_k+1) each
        const wb = v128.load(wp, 16); // columns 4 … 7
        const v0 = v128.load32_splat(x0); // row 0's (q_k, q_k+1)
        a00 = i32x4.add(a00, i32x4.dot_i16x8_s(wa, v0));
        a01 = i32x4.add(a01, i32x4.dot_i16x8_s(wb, v0));
        x0 += 4;
        if (R > 1) {
          const v1 = v128.load32_splat(x1);
          a10 = i32x4.add(a10, i32x4.dot_i16x8_s(wa, v1));
          a11 = i32x4.add(a11, i32x4.dot_i16x8_s(wb, v1));
          x1 += 4;
        }
        if (R > 2) {
          const v2 = v128.load32_splat(x2);
          a20 = i32x4.add(a20, i32x4.dot_i16x8_s(wa, v2));
          a21 = i32x4.add(a21, i32x4.dot_i16x8_s(wb, v2));
          x2 += 4;
        }
        if (R > 3) {
          const v3 = v128.load32_splat(x3);
          a30 = i32x4.add(a30, i32x4.dot_i16x8_s(wa, v3));
          a31 = i32x4.add(a31, i32x4.dot_i16x8_s(wb, v3));
          x3 += 4;
        }
      }
      const g = <usize>(un / unitsPerGroup);
      const s0 = v128.load(so0 + (g << 5));
      const o0 = v128.load(so0 + (g << 5), 16);
      const s1 = v128.load(so1 + (g << 5));
      const o1 = v128.load(so1 + (g << 5), 16);
      const dp = ds + ((<usize>un) << 3);
      Q8.scaleRow(tile, dp, s0, o0, s1, o1, a00, a01);
      if (R > 1) Q8.scaleRow(tile + 32, dp + dsStride, s0, o0, s1, o1, a10, a11);
      if (R > 2) Q8.scaleRow(tile + 64, dp + 2 * dsStride, s0, o0, s1, o1, a20, a21);
      if (R > 3) Q8.scaleRow(tile + 96, dp + 3 * dsStride, s0, o0, s1, o1, a30, a31);
    }
    for (let r = 0; r < R; r++) {
      const t = tile + ((<usize>r) << 5);
      const out = y + <usize>r * yStride;
      Q.store4(out, v128.load(t), n);
      if (n > 4) Q.store4(out + 16, v128.load(t, 16), n - 4);
    }
  }

  /** tile row [8] += s·(d·H) − o·(d·S) for the two column halves, (d, d·S) at dp. */
  @inline
  static scaleRow(t: usize, dp: usize, s0: v128, o0: v128, s1: v128, o1: v128, h0: v128, h1: v128): void {
    const d = v128.load32_splat(dp);
    const dS = v128.load32_splat(dp + 4);
    v128.store(t, f32x4.add(v128.load(t), f32x4.sub(f32x4.mul(s0, f32x4.mul(d, f32x4.convert_i32x4_s(h0))), f32x4.mul(o0, dS))));
    v128.store(t, f32x4.add(v128.load(t, 16), f32x4.sub(f32x4.mul(s1, f32x4.mul(d, f32x4.convert_i32x4_s(h1))), f32x4.mul(o1, dS))), 16);
  }
}

/**
 * x [M, K] (row stride ldx floats) quantized per block of 32 as src/quant/activations.ts's
 * quantizeActivationsQ8, bit for bit: row r's values as i16 at q + r·ldq (bytes), in `layout` 0 (natural
 * order), 4 or 8 (qgemv8's pairs for 4- or 8-bit words), or as i8 in layout 12 (the relaxed build's, for
 * 4-bit words: each 8 values as the even ones then the odd ones), padded with zeros to Kp = ⌈K/8⌉·8; and for each
 * unit of `unit` (16 or 32) values (d, d·S) at ds + (r·⌈K/unit⌉ + u)·8, d the block's f16 scale widened.
 */
export function quantizeQ8(x: usize, ldx: i32, M: i32, K: i32, unit: i32, layout: i32, q: usize, ldq: i32, ds: usize): void {
  const nUnits = (K + unit - 1) / unit;
  const Kp = ((K + 7) >> 3) << 3;
  for (let r = 0; r < M; r++) {
    const from = x + <usize>r * ((<usize>ldx) << 2);
    const to = q + <usize>r * <usize>ldq;
    const dsRow = ds + ((<usize>(r * nUnits)) << 3);
    for (let k0 = 0; k0 < Kp; k0 += 32) {
      const n = min(32, K - k0); // this block's values (a last one may be partial)
      const dsBlock = dsRow + ((<usize>(k0 / unit)) << 3);
      if (n === 32) {
        const p = from + ((<usize>k0) << 2);
        const v0 = v128.load(p);
        const v1 = v128.load(p, 16);
        const v2 = v128.load(p, 32);
        const v3 = v128.load(p, 48);
        const v4 = v128.load(p, 64);
        const v5 = v128.load(p, 80);
        const v6 = v128.load(p, 96);
        const v7 = v128.load(p, 112);
        const m = f32x4.max(
          f32x4.max(f32x4.max(f32x4.abs(v0), f32x4.abs(v1)), f32x4.max(f32x4.abs(v2), f32x4.abs(v3))),
          f32x4.max(f32x4.max(f32x4.abs(v4), f32x4.abs(v5)), f32x4.max(f32x4.abs(v6), f32x4.abs(v7))),
        ); // a NaN stays (as Math.max)
        const amax = max(max(f32x4.extract_lane(m, 0), f32x4.extract_lane(m, 1)), max(f32x4.extract_lane(m, 2), f32x4.extract_lane(m, 3)));
        const scale: f32 = amax / 127;
        const id = f32x4.splat(scale > 0 ? <f32>1 / scale : 0); // 0 and NaN: 0 (as ggml's `d ? 1/d : 0` in the reference)
        const q0 = Q8.round(f32x4.mul(v0, id));
        const q1 = Q8.round(f32x4.mul(v1, id));
        const q2 = Q8.round(f32x4.mul(v2, id));
        const q3 = Q8.round(f32x4.mul(v3, id));
        const q4 = Q8.round(f32x4.mul(v4, id));
        const q5 = Q8.round(f32x4.mul(v5, id));
        const q6 = Q8.round(f32x4.mul(v6, id));
        const q7 = Q8.round(f32x4.mul(v7, id));
        const at = to + ((<usize>k0) << 1);
        if (layout === 12) {
          Q8.store16i8(to + <usize>k0, q0, q1, q2, q3);
          Q8.store16i8(to + <usize>k0 + 16, q4, q5, q6, q7);
        } else if (layout === 4) {
          Q8.store8(4, at, q0, q1);
          Q8.store8(4, at + 16, q2, q3);
          Q8.store8(4, at + 32, q4, q5);
          Q8.store8(4, at + 48, q6, q7);
        } else if (layout === 8) {
          Q8.store8(8, at, q0, q1);
          Q8.store8(8, at + 16, q2, q3);
          Q8.store8(8, at + 32, q4, q5);
          Q8.store8(8, at + 48, q6, q7);
        } else {
          Q8.store8(0, at, q0, q1);
          Q8.store8(0, at + 16, q2, q3);
          Q8.store8(0, at + 32, q4, q5);
          Q8.store8(0, at + 48, q6, q7);
        }
        const d = halfRound(scale);
        const Sa = Q8.hsum(i32x4.add(i32x4.add(q0, q1), i32x4.add(q2, q3)));
        const Sb = Q8.hsum(i32x4.add(i32x4.add(q4, q5), i32x4.add(q6, q7)));
        store<f32>(dsBlock, d);
        if (unit === 32) {
          store<f32>(dsBlock, d * <f32>(Sa + Sb), 4);
        } else {
          store<f32>(dsBlock, d * <f32>Sa, 4);
          store<f32>(dsBlock, d, 8);
          store<f32>(dsBlock, d * <f32>Sb, 12);
        }
      } else {
        // The last, partial block: the same arithmetic one value at a time, zeros from K to Kp.
        let amax: f32 = 0;
        for (let k = k0; k < K; k++) amax = max(amax, abs<f32>(load<f32>(from + ((<usize>k) << 2))));
        const scale: f32 = amax / 127;
        const id: f32 = scale > 0 ? <f32>1 / scale : 0;
        const d = halfRound(scale);
        let S = 0;
        for (let k = k0; k < Kp; k++) {
          const v = k < K ? roundf(load<f32>(from + ((<usize>k) << 2)) * id) : 0;
          if (layout === 12) store<i8>(to + position(12, k), <i8>v);
          else store<i16>(to + position(layout, k), <i16>v);
          S += v;
          if (k < K && ((k + 1) % unit === 0 || k + 1 === K)) {
            // the end of a unit: (d, d·S)
            const du = dsRow + ((<usize>(k / unit)) << 3);
            store<f32>(du, d);
            store<f32>(du, d * <f32>S, 4);
            S = 0;
          }
        }
      }
    }
  }
}

/** Bytes of the (d, d·S) pairs of M rows, rounded up to a whole v128: where the rows' i16 values start in the scratch. */
function dsBytes(M: i32, K: i32, group: i32): usize {
  const nUnits = (K + min(group, 32) - 1) / min(group, 32);
  return ((<usize>(M * nUnits * 8) + 15) >> 4) << 4; // bytes of ds, to a whole v128
}

/**
 * Q8.panel() for a run-time R ≤ 2, bits, and group ≤ 32 (one unit a group) or not: a copy per (R, bits,
 * ONE); with `relaxed` (4 bits, the relaxed build only) a copy per (R, ONE) of its relaxed loop.
 */
function panelAny(
  R: i32,
  bits: i32,
  relaxed: bool,
  dotAdd: bool,
  xq: usize,
  xqStride: usize,
  ds: usize,
  dsStride: usize,
  wq: usize,
  so: usize,
  W: i32,
  group: i32,
  unit: i32,
  nUnits: i32,
  b: v128,
  y: usize,
  yStride: usize,
  cols: i32,
): void {
  if (ASC_FEATURE_RELAXED_SIMD) {
    if (relaxed && dotAdd) {
      if (group <= 32) {
        if (R === 1) Q8.panel(1, 4, true, true, true, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
        else Q8.panel(2, 4, true, true, true, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
      } else {
        if (R === 1) Q8.panel(1, 4, false, true, true, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
        else Q8.panel(2, 4, false, true, true, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
      }
      return;
    }
    if (relaxed) {
      if (group <= 32) {
        if (R === 1) Q8.panel(1, 4, true, true, false, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
        else Q8.panel(2, 4, true, true, false, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
      } else {
        if (R === 1) Q8.panel(1, 4, false, true, false, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
        else Q8.panel(2, 4, false, true, false, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
      }
      return;
    }
  }
  if (group <= 32) {
    if (bits === 4) {
      if (R === 1) Q8.panel(1, 4, true, false, false, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
      else Q8.panel(2, 4, true, false, false, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
    } else {
      if (R === 1) Q8.panel(1, 8, true, false, false, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
      else Q8.panel(2, 8, true, false, false, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
    }
  } else {
    if (bits === 4) {
      if (R === 1) Q8.panel(1, 4, false, false, false, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
      else Q8.panel(2, 4, false, false, false, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
    } else {
      if (R === 1) Q8.panel(1, 8, false, false, false, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
      else Q8.panel(2, 8, false, false, false, xq, xqStride, ds, dsStride, wq, so, W, group, unit, nUnits, b, y, yStride, cols);
    }
  }
}

/**
 * y [M, N] = q8(x) [M, K] · Wᵀ + bias for 1 ≤ M ≤ 8 (more rows: qgemm8), W packed as wasm/qgemm.ts's
 * (flags: its bits, | HALF_SCALES where `so` holds f16 scales alone, | DOT_ADD as qgemm8's). scratch: 2·M·⌈K/unit⌉ floats (rounded up to 4), then M·Kp/2 (the rows as i16), unit = min(group, 32).
 */
export function qgemv8(x: usize, ldx: i32, M: i32, K: i32, wq: usize, so: usize, N: i32, bias: usize, y: usize, ldy: i32, flags: i32, group: i32, scratch: usize): void {
  const bits = flags & 0xff;
  gHalf = (flags & HALF_SCALES) !== 0 ? <f32>(1 << (bits - 1)) : 0;
  const yStride = (<usize>ldy) << 2;
  const unit = min(group, 32);
  const nUnits = (K + unit - 1) / unit;
  const W = (K * bits + 31) >> 5;
  const Kp = ((K + 7) >> 3) << 3;
  const relaxed = RELAXED && bits === 4;
  const dotAdd = relaxed && (flags & DOT_ADD) !== 0;
  const xqStride = relaxed ? <usize>Kp : (<usize>Kp) << 1; // i8 or i16 values
  const dsStride = (<usize>nUnits) << 3;
  const ds = scratch;
  const xq = scratch + dsBytes(M, K, group);
  quantizeQ8(x, ldx, M, K, unit, relaxed ? 12 : bits, xq, <i32>xqStride, ds);
  const panelBytes = (<usize>W) << 4;
  const panelScales = <usize>((K + group - 1) / group) * Q.scaleBytes(gHalf); // a panel's scales (and offsets)
  gTouchLimit = ((<usize>memory.size()) << 16) - 1024;
  for (let c = 0; c < N; c += 4) {
    const p = <usize>(c >> 2);
    const b = v128.load(bias + ((<usize>c) << 2));
    const out = y + ((<usize>c) << 2);
    for (let r = 0; r < M; r += ROWS) {
      const rs = <usize>r;
      panelAny(
        min(ROWS, M - r),
        bits,
        relaxed,
        dotAdd,
        xq + rs * xqStride,
        xqStride,
        ds + rs * dsStride,
        dsStride,
        wq + p * panelBytes,
        so + p * panelScales,
        W,
        group,
        unit,
        nUnits,
        b,
        out + rs * yStride,
        yStride,
        N - c,
      );
    }
  }
  store<u32>(scratch, gTouched); // the touches' one use, so that no optimizer drops them (ds is spent)
}

/**
 * The two 4-column panels wqA, wqB (W words a row) as one i16 pair panel out [Kp/2, 8, 2]: pair kp holds
 * (w_2kp, w_2kp+1) of columns 0 … 3 (from wqA) then 4 … 7 (wqB), the quants as they are (unsigned);
 * zeros past the words.
 */
function unpackPanel(bits: i32, W: i32, Kp: i32, wqA: usize, wqB: usize, out: usize): void {
  let dst = out;
  if (bits === 4) {
    const lo = v128.load32_splat(C_LO4);
    const hi = v128.load32_splat(C_HI4);
    for (let w = 0; w < W; w++) {
      const ua = v128.load(wqA + ((<usize>w) << 4));
      const ub = v128.load(wqB + ((<usize>w) << 4));
      for (let i = 0; i < 4; i++) {
        // fields 2i, 2i + 1 of each column's word: bits 8i … 8i + 3 and 8i + 4 … 8i + 7
        const ta = i32x4.shr_u(ua, 8 * i);
        const tb = i32x4.shr_u(ub, 8 * i);
        v128.store(dst, v128.or(v128.and(ta, lo), v128.and(i32x4.shl(ta, 12), hi)));
        v128.store(dst, v128.or(v128.and(tb, lo), v128.and(i32x4.shl(tb, 12), hi)), 16);
        dst += 32;
      }
    }
  } else {
    const lo = v128.load32_splat(C_LO8);
    const hi = v128.load32_splat(C_HI8);
    for (let w = 0; w < W; w++) {
      const ua = v128.load(wqA + ((<usize>w) << 4));
      const ub = v128.load(wqB + ((<usize>w) << 4));
      for (let i = 0; i < 2; i++) {
        const ta = i32x4.shr_u(ua, 16 * i);
        const tb = i32x4.shr_u(ub, 16 * i);
        v128.store(dst, v128.or(v128.and(ta, lo), v128.and(i32x4.shl(ta, 8), hi)));
        v128.store(dst, v128.or(v128.and(tb, lo), v128.and(i32x4.shl(tb, 8), hi)), 16);
        dst += 32;
      }
    }
  }
  const end = out + ((<usize>Kp) << 4);
  for (; dst < end; dst += 16) v128.store(dst, i32x4.splat(0));
}

/**
 * The relaxed build's panel for 4-bit words: per word w of the two 4-column panels wqA, wqB, 64 bytes
 * out[w]: the even fields of columns 0 … 3 (a byte each, 4 a column: fields 0, 2, 4, 6), of columns
 * 4 … 7, then the odd fields of 0 … 3 and of 4 … 7: the order of layout 12's even and odd values.
 */
function unpackPanelRelaxed(W: i32, wqA: usize, wqB: usize, out: usize): void {
  const nib = v128.load32_splat(C_NIBBLE);
  for (let w = 0; w < W; w++) {
    const ua = v128.load(wqA + ((<usize>w) << 4));
    const ub = v128.load(wqB + ((<usize>w) << 4));
    const dst = out + ((<usize>w) << 6);
    v128.store(dst, v128.and(ua, nib));
    v128.store(dst, v128.and(ub, nib), 16);
    v128.store(dst, v128.and(i32x4.shr_u(ua, 4), nib), 32);
    v128.store(dst, v128.and(i32x4.shr_u(ub, 4), nib), 48);
  }
}

/** Q8.micro() for a run-time R ≤ 4: a copy per R (and per RX and DA where the build is relaxed). */
function microAny(
  R: i32,
  relaxed: bool,
  dotAdd: bool,
  xq: usize,
  xqStride: usize,
  ds: usize,
  dsStride: usize,
  wpanel: usize,
  so0: usize,
  so1: usize,
  steps: i32,
  group: i32,
  unit: i32,
  nUnits: i32,
  bias: usize,
  tile: usize,
  y: usize,
  yStride: usize,
  n: i32,
): void {
  if (ASC_FEATURE_RELAXED_SIMD) {
    if (relaxed && dotAdd) {
      if (R >= 4) Q8.micro(4, true, true, xq, xqStride, ds, dsStride, wpanel, so0, so1, steps, group, unit, nUnits, bias, tile, y, yStride, n);
      else if (R === 3) Q8.micro(3, true, true, xq, xqStride, ds, dsStride, wpanel, so0, so1, steps, group, unit, nUnits, bias, tile, y, yStride, n);
      else if (R === 2) Q8.micro(2, true, true, xq, xqStride, ds, dsStride, wpanel, so0, so1, steps, group, unit, nUnits, bias, tile, y, yStride, n);
      else Q8.micro(1, true, true, xq, xqStride, ds, dsStride, wpanel, so0, so1, steps, group, unit, nUnits, bias, tile, y, yStride, n);
      return;
    }
    if (relaxed) {
      if (R >= 4) Q8.micro(4, true, false, xq, xqStride, ds, dsStride, wpanel, so0, so1, steps, group, unit, nUnits, bias, tile, y, yStride, n);
      else if (R === 3) Q8.micro(3, true, false, xq, xqStride, ds, dsStride, wpanel, so0, so1, steps, group, unit, nUnits, bias, tile, y, yStride, n);
      else if (R === 2) Q8.micro(2, true, false, xq, xqStride, ds, dsStride, wpanel, so0, so1, steps, group, unit, nUnits, bias, tile, y, yStride, n);
      else Q8.micro(1, true, false, xq, xqStride, ds, dsStride, wpanel, so0, so1, steps, group, unit, nUnits, bias, tile, y, yStride, n);
      return;
    }
  }
  if (R >= 4) Q8.micro(4, false, false, xq, xqStride, ds, dsStride, wpanel, so0, so1, steps, group, unit, nUnits, bias, tile, y, yStride, n);
  else if (R === 3) Q8.micro(3, false, false, xq, xqStride, ds, dsStride, wpanel, so0, so1, steps, group, unit, nUnits, bias, tile, y, yStride, n);
  else if (R === 2) Q8.micro(2, false, false, xq, xqStride, ds, dsStride, wpanel, so0, so1, steps, group, unit, nUnits, bias, tile, y, yStride, n);
  else Q8.micro(1, false, false, xq, xqStride, ds, dsStride, wpanel, so0, so1, steps, group, unit, nUnits, bias, tile, y, yStride, n);
}

/**
 * y [M, N] = q8(x) [M, K] · Wᵀ + bias for any M (fastest for M > 8), W packed as wasm/qgemm.ts's (flags: as qgemv8's,
 * | DOT_ADD for the relaxed build's 4-bit loop: see there).
 * scratch: 32 floats (the tile [4, 8]), 4·Kp (the pair panel [Kp/2, 8, 2] i16), 16·⌈K/group⌉ (a panel's
 * scales and offsets, HALF_SCALES), then for a chunk of
 * R = min(M, 64) rows 2·R·⌈K/unit⌉ (rounded up to 4) and R·Kp/2 (its rows as i16).
 */
export function qgemm8(x: usize, ldx: i32, M: i32, K: i32, wq: usize, so: usize, N: i32, bias: usize, y: usize, ldy: i32, flags: i32, group: i32, scratch: usize): void {
  const bits = flags & 0xff;
  gHalf = (flags & HALF_SCALES) !== 0 ? <f32>(1 << (bits - 1)) : 0;
  const xStride = (<usize>ldx) << 2;
  const yStride = (<usize>ldy) << 2;
  const unit = min(group, 32);
  const nUnits = (K + unit - 1) / unit;
  const W = (K * bits + 31) >> 5;
  const Kp = ((K + 7) >> 3) << 3;
  const relaxed = RELAXED && bits === 4;
  const dotAdd = relaxed && (flags & DOT_ADD) !== 0;
  const xqStride = relaxed ? <usize>Kp : (<usize>Kp) << 1; // i8 or i16 values
  const dsStride = (<usize>nUnits) << 3;
  const panelBytes = (<usize>W) << 4;
  const panelScales = <usize>((K + group - 1) / group) * Q.scaleBytes(gHalf); // a panel's scales (and offsets)
  const groups = (K + group - 1) / group;
  const tile = scratch; // [4, 8] f32
  const wpanel = scratch + 128; // [Kp/2, 8, 2] i16
  const scales = wpanel + ((<usize>Kp) << 4); // HALF_SCALES: the 8-column panel's scales and offsets as f32, [2, groups, 8]
  const ds = scales + ((<usize>groups) << 6); // [MC, nUnits, 2] f32
  const xq = ds + dsBytes(min(M, MC), K, group); // [min(M, MC), Kp] i16
  for (let m0 = 0; m0 < M; m0 += MC) {
    const rows = min(MC, M - m0);
    quantizeQ8(x + <usize>m0 * xStride, ldx, rows, K, unit, relaxed ? 12 : 0, xq, <i32>xqStride, ds);
    for (let c = 0; c < N; c += 8) {
      const p = <usize>(c >> 2); // the first of this 8-column panel's two 4-column panels
      if (relaxed) unpackPanelRelaxed(W, wq + p * panelBytes, wq + (p + 1) * panelBytes, wpanel);
      else unpackPanel(bits, W, Kp, wq + p * panelBytes, wq + (p + 1) * panelBytes, wpanel);
      let so0 = so + p * panelScales;
      let so1 = so0 + panelScales;
      if (gHalf !== 0) {
        // f16 scales → the f32 (scales, offsets) layout, once a panel for all its rows
        const s1 = scales + ((<usize>groups) << 5);
        for (let g = 0; g < groups; g++) {
          const a = Q.halfScales(so0 + ((<usize>g) << 3));
          const b = Q.halfScales(so1 + ((<usize>g) << 3));
          v128.store(scales + ((<usize>g) << 5), a);
          v128.store(scales + ((<usize>g) << 5), f32x4.mul(a, f32x4.splat(gHalf)), 16);
          v128.store(s1 + ((<usize>g) << 5), b);
          v128.store(s1 + ((<usize>g) << 5), f32x4.mul(b, f32x4.splat(gHalf)), 16);
        }
        so0 = scales;
        so1 = s1;
      }
      const n = min(8, N - c);
      const yc = y + <usize>m0 * yStride + ((<usize>c) << 2);
      for (let r = 0; r < rows; r += 4) {
        const rs = <usize>r;
        microAny(
          rows - r,
          relaxed,
          dotAdd,
          xq + rs * xqStride,
          xqStride,
          ds + rs * dsStride,
          dsStride,
          wpanel,
          so0,
          so1,
          relaxed ? W : Kp >> 1, // words (W = Kp/8 for 4 bits) or pairs
          group,
          unit,
          nUnits,
          bias + ((<usize>c) << 2),
          tile,
          yc + rs * yStride,
          yStride,
          n,
        );
      }
    }
  }
}
