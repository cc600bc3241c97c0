// AssemblyScript, compiled to WebAssembly (128-bit SIMD, and again with relaxed SIMD, where the
// multiply-adds are fused: F.madd in gemm.ts) by scripts/build-wasm.mjs into
// src/wasm/module.ts. The attention of the 'wasm' backend, for one (sequence, head) per call:
//
//   setRule        the call's score rule (src/cpu/score-rule.ts, the float64 twin): scale, softcap,
//                  ALiBi slope, sink, head-mask factor, causal, window, key padding, attnMask
//   attend         O [Sq, Dh] = softmax(rule(Q·Kᵀ)) · V, tiled: 32 query rows × 64 keys at a time
//                  (scores and P·V 4 rows per micro-kernel step), online softmax (running max m and
//                  sum l per row), never an Sq × Skv buffer
//   attendHeads    attend for a decode step's query heads of one key/value head (GQA), taken as its rows:
//                  each K and V block read once for the group, not once a head
//   probabilities  P [Sq, Skv] from Q, Kᵀ and attend's (m, l): only for needWeights
//
// Layouts: Q [Sq, Dh] row stride ldq; Kᵀ in blocks of 64 keys, [⌈Skv/64⌉, Dh, 64], zero past Skv,
// from gemm.ts's transpose (a block is one contiguous 16 KB panel at Dh 64: a row-major Kᵀ of a long
// sequence would spread each block over as many pages as Dh, and miss the TLB);
// V [Skv, Dh] row stride ldv; O [Sq, Dh] row stride ldo; the key padding [Skv] u8 (1 = ignore);
// attnMask [Sq, Skv] f32 (added; −∞ = masked); stats [Sq, 2] f32 (m, l). Pointer 0 = none.
// Row i sees key j when first(i) ≤ j ≤ last(i) (causal, window, as keyBand) and j is not padded.
// scratch: ≥ RG·BC + RG·(Dh + 3) + 5·RG floats (16-byte aligned). A row that sees no key gets 0. The fast exp
// (exp4, Cephes' exp2f polynomial) has a relative error of about 2e-7.
//
// A KV cache stored as 'f16', 'q8_0' or 'q4_0' (setRule's kind 1, 2, 3; src/wasm/kv-cache.ts writes it) is
// read where it is: each block of 64 keys is decoded into a scratch (gDec: Kᵀ [Dh, 64] then V [64, Dh]
// f32) just before its scores, and the scores and P·V run on that tile; nothing else of the cache is
// ever copied. An f16 cache read by 1 … 4 rows (a decode step's GQA group or lone head: one quad, Dh a
// multiple of 8) skips the tile: Tile's kernels in their f16 form widen each 8
// halves where they read them (the same values and sums, bit for bit; 0.54–0.56 against 0.59–0.61 ms for
// E 2048 H 16 G 4 over 1024 keys). Its layouts, per (sequence, key/value head):
//   kind 1  Kᵀ [⌈S/64⌉, Dh, 64] f16 bits;                      V [S, Dh] f16 bits (quant/kv.ts's rows)
//   kind 2  Kᵀ [⌈S/64⌉, Dh, 64] i8, scales [⌈S/64⌉, Dh/32, 64] f16 (kt's, at gKs); V [S] ggml q8_0 rows
//   kind 3  Kᵀ [⌈S/64⌉, Dh, 32 bytes]: keys 32h + i (i < 16) in the low nibble of byte 16h + i, keys
//           32h + 16 + i in its high nibble (value = nibble − 8); scales as kind 2; V [S] ggml q4_0 rows
// V rows are gVRow bytes apart. The decoded values are exactly quant/kv.ts's decodeKvRow's (f16 exact,
// f16 scale × small integer exact in f32).

import { F } from './gemm';

const BC: i32 = 64; // keys per block
const RG: i32 = 32; // query rows per pass over the keys (8 quads of the score micro-kernel): K and V blocks read once per 32 rows
const LOG2E: f32 = <f32>Math.LOG2E;

let gScale: f32 = 1;
let gSoftcap: f32 = 0;
let gSlope: f32 = 0;
let gSink: f32 = 0;
let gHasSink: bool = false;
let gHeadScale: f32 = 1;
let gCausal: bool = false;
let gWindow: i32 = 0;
let gPad: usize = 0;
let gMask: usize = 0;
let gOnePosition: bool = false; // attendHeads: every row is the same query (the last position), of another head
let gKind: i32 = 0; // how K and V are stored: 0 f32 (Kᵀ blocks, V rows of ldv floats), 1 f16, 2 q8_0, 3 q4_0 (see the top)
let gKs: usize = 0; // kinds 2, 3: the K scales
let gVRow: usize = 0; // kinds 1 … 3: bytes from one V row to the next
let gDec: usize = 0; // kinds 1 … 3: scratch for a decoded block, 128·Dh floats (16-byte aligned)
let gFinite: bool = false; // kind 1: the cache holds no ±∞ or NaN half (its writes checked), so Tile's f16 form skips the check

export function setRule(
  scale: f32,
  softcap: f32,
  slope: f32,
  sink: f32,
  hasSink: i32,
  headScale: f32,
  causal: i32,
  window: i32,
  pad: usize,
  mask: usize,
  kind: i32,
  ks: usize,
  vRow: usize,
  dec: usize,
  finite: i32,
): void {
  gKind = kind;
  gFinite = kind === 1 && finite !== 0;
  gKs = ks;
  gVRow = vRow;
  gDec = dec;
  gScale = scale;
  gSoftcap = softcap;
  gSlope = slope;
  gSink = sink;
  gHasSink = hasSink !== 0;
  gHeadScale = headScale;
  gCausal = causal !== 0;
  gWindow = window;
  gPad = pad;
  gMask = mask;
}

const ROUND: f32 = 12582912; // 1.5·2²³: t + ROUND is t rounded to an integer n (ties to even, |t| < 2²²), n in its low bits

// Vector constants, each a word of memory read as a splat where it is used (gemm.ts: "Constants in memory").
const C_LOG2E = memory.data<f32>([LOG2E]);
const C_EXP_MIN = memory.data<f32>([-127]);
const C_EXP_MAX = memory.data<f32>([127]);
const C_ROUND = memory.data<f32>([ROUND]);
const C_P6 = memory.data<f32>([1.5353361883195e-4]); // exp2f's polynomial (Cephes), highest power first
const C_P5 = memory.data<f32>([1.339887440266574e-3]);
const C_P4 = memory.data<f32>([9.61843735767464e-3]);
const C_P3 = memory.data<f32>([5.550332471162809e-2]);
const C_P2 = memory.data<f32>([2.402264791363012e-1]);
const C_P1 = memory.data<f32>([6.931472028550421e-1]);
const C_ONE = memory.data<f32>([1]);
const C_EXP_BIAS = memory.data<i32>([127 - 0x4b400000]);
const C_TWO112 = memory.data<f32>([<f32>5.192296858534828e33]); // 2^112
const C_H_MAGNITUDE = memory.data<u32>([0x7fff]);
const C_H_SIGN = memory.data<u32>([0x8000]);
const C_H_SPECIAL = memory.data<u32>([0x0f7fffff]);
const C_H_SPECIAL_EXP = memory.data<u32>([0x70000000]);
const C_H_EXP2 = memory.data<u32>([0x7c007c00]); // f16's exponent bits, in both halves of a word
const C_NIBBLE = memory.data<u32>([0x0f0f0f0f]); // 15 in each byte
const C_EIGHT = memory.data<u32>([0x08080808]);

/** The online softmax's vector parts, shared with wasm/paged.ts (a class: @inline needs a method, see KvDecode). */
// biome-ignore lint/complexity/noStaticOnlyClass: @inline needs a method here (see KvDecode)
export class Softmax {
  /**
   * eˣ on four lanes: 2^n · p(f), t = x·log2e = n + f, |f| ≤ ½; x ≤ −88 gives 0 (−∞ included), NaN gives
   * NaN. pmin/pmax clamp as min/max do here (NaN kept) in one instruction each; n comes from t + ROUND
   * (f32x4.nearest's value, and its bits give 2^n without a float-to-int conversion).
   */
  @inline
  static exp4(x: v128): v128 {
    let t = f32x4.mul(x, v128.load32_splat(C_LOG2E));
    t = f32x4.pmin(f32x4.pmax(t, v128.load32_splat(C_EXP_MIN)), v128.load32_splat(C_EXP_MAX));
    const big = f32x4.add(t, v128.load32_splat(C_ROUND));
    const n = f32x4.sub(big, v128.load32_splat(C_ROUND));
    const f = f32x4.sub(t, n);
    let p = v128.load32_splat(C_P6);
    p = f32x4.add(f32x4.mul(p, f), v128.load32_splat(C_P5));
    p = f32x4.add(f32x4.mul(p, f), v128.load32_splat(C_P4));
    p = f32x4.add(f32x4.mul(p, f), v128.load32_splat(C_P3));
    p = f32x4.add(f32x4.mul(p, f), v128.load32_splat(C_P2));
    p = f32x4.add(f32x4.mul(p, f), v128.load32_splat(C_P1));
    p = f32x4.add(f32x4.mul(p, f), v128.load32_splat(C_ONE));
    // 2^n from its exponent bits, n + 127 = bits(big) − bits(ROUND) + 127; n = −127 gives the bits of 0.
    const scale = i32x4.shl(i32x4.add(big, v128.load32_splat(C_EXP_BIAS)), 23);
    return f32x4.mul(p, scale);
  }

  /**
   * row[0 … n − 1] (n a multiple of 4) times `scale`, in place; returns their maximum, NaN where one is NaN
   * (as f32.max gives it). f32x4.pmax is one instruction where f32x4.max takes several; NaN lanes are
   * tracked on the side.
   */
  @inline
  static scaleRowMax(row: usize, n: i32, scale: f32): f32 {
    const sv = f32x4.splat(scale);
    let mv = f32x4.splat(-Infinity);
    let nan = i32x4.splat(0);
    for (let jj = 0; jj < n; jj += 4) {
      const s = f32x4.mul(v128.load(row + ((<usize>jj) << 2)), sv);
      v128.store(row + ((<usize>jj) << 2), s);
      mv = f32x4.pmax(mv, s);
      nan = v128.or(nan, f32x4.ne(s, s));
    }
    if (v128.any_true(nan)) return NaN;
    return max(max(f32x4.extract_lane(mv, 0), f32x4.extract_lane(mv, 1)), max(f32x4.extract_lane(mv, 2), f32x4.extract_lane(mv, 3)));
  }
}

/** The rule applied to dot = q·k of key j for row i (aligned i'), or −∞ when the row does not see j. */
function score(dot: f32, i: i32, ip: i32, j: i32, first: i32, last: i32, Skv: i32): f32 {
  if (j < first || j > last) return -Infinity;
  if (gPad !== 0 && load<u8>(gPad + <usize>j) !== 0) return -Infinity;
  let s = dot * gScale;
  if (gSoftcap > 0) s = gSoftcap * Mathf.tanh(s / gSoftcap);
  if (gSlope !== 0) s -= gSlope * <f32>abs(ip - j);
  if (gMask !== 0) s += load<f32>(gMask + ((<usize>i * <usize>Skv + <usize>j) << 2));
  return s;
}

function firstKey(ip: i32): i32 {
  return gWindow > 0 ? max(ip - gWindow + 1, 0) : 0;
}

function lastKey(ip: i32, Skv: i32): i32 {
  return gCausal || gWindow > 0 ? min(ip, Skv - 1) : Skv - 1;
}

/**
 * The score and P·V micro-kernels, each in three forms (FORM a constant, folded away): 0 over float32
 * keys and values (a cache of kind 0, or a tile decodeKeys / decodeValues filled), or over an f16 cache's
 * own bits (kind 1), each 8 halves widened where they are read (H8: KvDecode.halves8's rule, exact):
 * 1 checks each 8 for ±∞ and NaN, 2 does not (a cache that holds none: gFinite).
 * Every form gives the same values the same sums, bit for bit: the f16 forms only skip the tile, for
 * a quad of rows or fewer that would not share it (attend: a decode step's GQA group, a lone head).
 * The f16 forms need Dh a multiple of 8.
 */
// biome-ignore lint/complexity/noStaticOnlyClass: @inline needs a method here (see KvDecode)
class Tile {
  /**
   * Scores of 4 query rows (q0 … q3) × jn keys of the Kᵀ block [Dh, 64] at `block` (f32, or f16 bits):
   * Σ_d q[r, d]·Kᵀ[d, j], 8 keys per step, into sc rows [4, BC].
   */
  @inline
  static scores4(FORM: i32, q0: usize, q1: usize, q2: usize, q3: usize, block: usize, jn: i32, Dh: i32, sc: usize): void {
    const HALF = FORM !== 0;
    const rs = (<usize>BC) << 2;
    const size: usize = HALF ? 2 : 4; // bytes a key's value
    for (let c = 0; c < jn; c += 8) {
      let a00 = f32x4.splat(0);
      let a01 = a00;
      let a10 = a00;
      let a11 = a00;
      let a20 = a00;
      let a21 = a00;
      let a30 = a00;
      let a31 = a00;
      let kp = block + <usize>c * size;
      for (let d = 0; d < Dh; d++) {
        let k0: v128;
        let k1: v128;
        if (HALF) {
          const x = v128.load(kp);
          const special = H8.special(x, FORM); // ±∞ or NaN among them (rare: the general rule)
          k0 = H8.lo(x, special);
          k1 = H8.hi(x, special);
        } else {
          k0 = v128.load(kp);
          k1 = v128.load(kp, 16);
        }
        const dd = (<usize>d) << 2;
        let s = v128.load32_splat(q0 + dd);
        a00 = F.madd(s, k0, a00);
        a01 = F.madd(s, k1, a01);
        s = v128.load32_splat(q1 + dd);
        a10 = F.madd(s, k0, a10);
        a11 = F.madd(s, k1, a11);
        s = v128.load32_splat(q2 + dd);
        a20 = F.madd(s, k0, a20);
        a21 = F.madd(s, k1, a21);
        s = v128.load32_splat(q3 + dd);
        a30 = F.madd(s, k0, a30);
        a31 = F.madd(s, k1, a31);
        kp += <usize>BC * size;
      }
      const at = sc + ((<usize>c) << 2);
      v128.store(at, a00);
      v128.store(at, a01, 16);
      v128.store(at + rs, a10);
      v128.store(at + rs, a11, 16);
      v128.store(at + 2 * rs, a20);
      v128.store(at + 2 * rs, a21, 16);
      v128.store(at + 3 * rs, a30);
      v128.store(at + 3 * rs, a31, 16);
    }
  }

  /**
   * scores4 for one query row. 16 keys per step where 16 are left (four sums that do not wait on each
   * other: one would wait a float add's latency per step), else 8; each key's sum runs over d in order.
   */
  @inline
  static scores1(FORM: i32, q0: usize, block: usize, jn: i32, Dh: i32, sc: usize): void {
    const HALF = FORM !== 0;
    const size: usize = HALF ? 2 : 4;
    const end = (jn + 7) & ~7; // as scores4: whole 8s of the zero-padded block
    let c = 0;
    for (; c + 16 <= end; c += 16) {
      let a0 = f32x4.splat(0);
      let a1 = a0;
      let a2 = a0;
      let a3 = a0;
      let kp = block + <usize>c * size;
      for (let d = 0; d < Dh; d++) {
        const s = v128.load32_splat(q0 + ((<usize>d) << 2));
        if (HALF) {
          const x = v128.load(kp);
          const y = v128.load(kp, 16);
          const sx = H8.special(x, FORM);
          const sy = H8.special(y, FORM);
          a0 = F.madd(s, H8.lo(x, sx), a0);
          a1 = F.madd(s, H8.hi(x, sx), a1);
          a2 = F.madd(s, H8.lo(y, sy), a2);
          a3 = F.madd(s, H8.hi(y, sy), a3);
        } else {
          a0 = F.madd(s, v128.load(kp), a0);
          a1 = F.madd(s, v128.load(kp, 16), a1);
          a2 = F.madd(s, v128.load(kp, 32), a2);
          a3 = F.madd(s, v128.load(kp, 48), a3);
        }
        kp += <usize>BC * size;
      }
      const out = sc + ((<usize>c) << 2);
      v128.store(out, a0);
      v128.store(out, a1, 16);
      v128.store(out, a2, 32);
      v128.store(out, a3, 48);
    }
    for (; c < end; c += 8) {
      let a0 = f32x4.splat(0);
      let a1 = a0;
      let kp = block + <usize>c * size;
      for (let d = 0; d < Dh; d++) {
        const s = v128.load32_splat(q0 + ((<usize>d) << 2));
        if (HALF) {
          const x = v128.load(kp);
          const sx = H8.special(x, FORM);
          a0 = F.madd(s, H8.lo(x, sx), a0);
          a1 = F.madd(s, H8.hi(x, sx), a1);
        } else {
          a0 = F.madd(s, v128.load(kp), a0);
          a1 = F.madd(s, v128.load(kp, 16), a1);
        }
        kp += <usize>BC * size;
      }
      v128.store(sc + ((<usize>c) << 2), a0);
      v128.store(sc + ((<usize>c) << 2), a1, 16);
    }
  }

  /** pv4 for one row: acc ← alpha·acc + Σ_j p[j]·V[j] (V rows from v, vStride bytes apart; f32 or f16 bits). */
  @inline
  static pv1(FORM: i32, sc: usize, acc: usize, alpha: f32, v: usize, vStride: usize, jn: i32, Dh: i32): void {
    const HALF = FORM !== 0;
    const al = f32x4.splat(alpha);
    const size: usize = HALF ? 2 : 4;
    let d = 0;
    // 16 elements of Dh at a time (four sums that do not wait on each other), each summed over the keys in order.
    for (; d + 16 <= Dh; d += 16) {
      const ad = acc + ((<usize>d) << 2);
      let a0 = f32x4.mul(v128.load(ad), al);
      let a1 = f32x4.mul(v128.load(ad, 16), al);
      let a2 = f32x4.mul(v128.load(ad, 32), al);
      let a3 = f32x4.mul(v128.load(ad, 48), al);
      let vp = v + <usize>d * size;
      for (let jj = 0; jj < jn; jj++) {
        const p = v128.load32_splat(sc + ((<usize>jj) << 2));
        if (HALF) {
          const x = v128.load(vp);
          const y = v128.load(vp, 16);
          const sx = H8.special(x, FORM);
          const sy = H8.special(y, FORM);
          a0 = F.madd(p, H8.lo(x, sx), a0);
          a1 = F.madd(p, H8.hi(x, sx), a1);
          a2 = F.madd(p, H8.lo(y, sy), a2);
          a3 = F.madd(p, H8.hi(y, sy), a3);
        } else {
          a0 = F.madd(p, v128.load(vp), a0);
          a1 = F.madd(p, v128.load(vp, 16), a1);
          a2 = F.madd(p, v128.load(vp, 32), a2);
          a3 = F.madd(p, v128.load(vp, 48), a3);
        }
        vp += vStride;
      }
      v128.store(ad, a0);
      v128.store(ad, a1, 16);
      v128.store(ad, a2, 32);
      v128.store(ad, a3, 48);
    }
    if (HALF) {
      for (; d < Dh; d += 8) {
        const ad = acc + ((<usize>d) << 2);
        let a0 = f32x4.mul(v128.load(ad), al);
        let a1 = f32x4.mul(v128.load(ad, 16), al);
        let vp = v + ((<usize>d) << 1);
        for (let jj = 0; jj < jn; jj++) {
          const p = v128.load32_splat(sc + ((<usize>jj) << 2));
          const x = v128.load(vp);
          const sx = H8.special(x, FORM);
          a0 = F.madd(p, H8.lo(x, sx), a0);
          a1 = F.madd(p, H8.hi(x, sx), a1);
          vp += vStride;
        }
        v128.store(ad, a0);
        v128.store(ad, a1, 16);
      }
      return;
    }
    for (; d + 4 <= Dh; d += 4) {
      const ad = acc + ((<usize>d) << 2);
      let a = f32x4.mul(v128.load(ad), al);
      let vp = v + ((<usize>d) << 2);
      for (let jj = 0; jj < jn; jj++) {
        a = F.madd(v128.load32_splat(sc + ((<usize>jj) << 2)), v128.load(vp), a);
        vp += vStride;
      }
      v128.store(ad, a);
    }
    for (; d < Dh; d++) {
      const ad = acc + ((<usize>d) << 2);
      let a = load<f32>(ad) * alpha;
      for (let jj = 0; jj < jn; jj++) a += load<f32>(sc + ((<usize>jj) << 2)) * load<f32>(v + <usize>jj * vStride + ((<usize>d) << 2));
      store<f32>(ad, a);
    }
  }

  /**
   * acc[r] ← alpha[r]·acc[r] + Σ_j p[r, j]·V[j] for 4 rows (V's jn rows from v, vStride bytes apart; f32 or
   * f16 bits): one V load serves the 4, f32x4 over Dh, scalar past the last whole 4.
   */
  @inline
  static pv4(FORM: i32, sc: usize, acc: usize, rowBytes: usize, alpha: usize, v: usize, vStride: usize, jn: i32, Dh: i32): void {
    const HALF = FORM !== 0;
    const rs = (<usize>BC) << 2;
    const size: usize = HALF ? 2 : 4;
    const al0 = v128.load32_splat(alpha);
    const al1 = v128.load32_splat(alpha, 4);
    const al2 = v128.load32_splat(alpha, 8);
    const al3 = v128.load32_splat(alpha, 12);
    let d = 0;
    // 8 elements of Dh a step where 8 are left: 8 sums that do not wait on each other's add (4 would
    // wait its latency each key), and each p splat serves both halves.
    for (; d + 8 <= Dh; d += 8) {
      const ad = acc + ((<usize>d) << 2);
      let a0 = f32x4.mul(v128.load(ad), al0);
      let a1 = f32x4.mul(v128.load(ad + rowBytes), al1);
      let a2 = f32x4.mul(v128.load(ad + 2 * rowBytes), al2);
      let a3 = f32x4.mul(v128.load(ad + 3 * rowBytes), al3);
      let b0 = f32x4.mul(v128.load(ad, 16), al0);
      let b1 = f32x4.mul(v128.load(ad + rowBytes, 16), al1);
      let b2 = f32x4.mul(v128.load(ad + 2 * rowBytes, 16), al2);
      let b3 = f32x4.mul(v128.load(ad + 3 * rowBytes, 16), al3);
      let vp = v + <usize>d * size;
      let pp = sc;
      for (let jj = 0; jj < jn; jj++) {
        let va: v128;
        let vb: v128;
        if (HALF) {
          const x = v128.load(vp);
          const special = H8.special(x, FORM);
          va = H8.lo(x, special);
          vb = H8.hi(x, special);
        } else {
          va = v128.load(vp);
          vb = v128.load(vp, 16);
        }
        let p = v128.load32_splat(pp);
        a0 = F.madd(p, va, a0);
        b0 = F.madd(p, vb, b0);
        p = v128.load32_splat(pp + rs);
        a1 = F.madd(p, va, a1);
        b1 = F.madd(p, vb, b1);
        p = v128.load32_splat(pp + 2 * rs);
        a2 = F.madd(p, va, a2);
        b2 = F.madd(p, vb, b2);
        p = v128.load32_splat(pp + 3 * rs);
        a3 = F.madd(p, va, a3);
        b3 = F.madd(p, vb, b3);
        vp += vStride;
        pp += 4;
      }
      v128.store(ad, a0);
      v128.store(ad + rowBytes, a1);
      v128.store(ad + 2 * rowBytes, a2);
      v128.store(ad + 3 * rowBytes, a3);
      v128.store(ad, b0, 16);
      v128.store(ad + rowBytes, b1, 16);
      v128.store(ad + 2 * rowBytes, b2, 16);
      v128.store(ad + 3 * rowBytes, b3, 16);
    }
    if (HALF) return; // Dh a multiple of 8
    for (; d + 4 <= Dh; d += 4) {
      const ad = acc + ((<usize>d) << 2);
      let a0 = f32x4.mul(v128.load(ad), al0);
      let a1 = f32x4.mul(v128.load(ad + rowBytes), al1);
      let a2 = f32x4.mul(v128.load(ad + 2 * rowBytes), al2);
      let a3 = f32x4.mul(v128.load(ad + 3 * rowBytes), al3);
      let vp = v + ((<usize>d) << 2);
      let pp = sc;
      for (let jj = 0; jj < jn; jj++) {
        const vv = v128.load(vp);
        a0 = F.madd(v128.load32_splat(pp), vv, a0);
        a1 = F.madd(v128.load32_splat(pp + rs), vv, a1);
        a2 = F.madd(v128.load32_splat(pp + 2 * rs), vv, a2);
        a3 = F.madd(v128.load32_splat(pp + 3 * rs), vv, a3);
        vp += vStride;
        pp += 4;
      }
      v128.store(ad, a0);
      v128.store(ad + rowBytes, a1);
      v128.store(ad + 2 * rowBytes, a2);
      v128.store(ad + 3 * rowBytes, a3);
    }
    for (; d < Dh; d++) {
      for (let r = 0; r < 4; r++) {
        const ad = acc + <usize>r * rowBytes + ((<usize>d) << 2);
        let a = load<f32>(ad) * load<f32>(alpha + ((<usize>r) << 2));
        for (let jj = 0; jj < jn; jj++) {
          a += load<f32>(sc + <usize>r * rs + ((<usize>jj) << 2)) * load<f32>(v + <usize>jj * vStride + ((<usize>d) << 2));
        }
        store<f32>(ad, a);
      }
    }
  }
}

/**
 * Tile's kernels, each form its own function (as attend calls them: kept apart, not inlined into it):
 * float32, f16 bits that may hold ±∞ or NaN (each 8 checked), f16 bits of a cache that holds none (gFinite).
 */
function scores4(q0: usize, q1: usize, q2: usize, q3: usize, block: usize, jn: i32, Dh: i32, sc: usize): void {
  Tile.scores4(0, q0, q1, q2, q3, block, jn, Dh, sc);
}
function scores4Half(q0: usize, q1: usize, q2: usize, q3: usize, block: usize, jn: i32, Dh: i32, sc: usize): void {
  if (gFinite) Tile.scores4(2, q0, q1, q2, q3, block, jn, Dh, sc);
  else Tile.scores4(1, q0, q1, q2, q3, block, jn, Dh, sc);
}
function scores1(q0: usize, block: usize, jn: i32, Dh: i32, sc: usize): void {
  Tile.scores1(0, q0, block, jn, Dh, sc);
}
function scores1Half(q0: usize, block: usize, jn: i32, Dh: i32, sc: usize): void {
  if (gFinite) Tile.scores1(2, q0, block, jn, Dh, sc);
  else Tile.scores1(1, q0, block, jn, Dh, sc);
}
function pv1(sc: usize, acc: usize, alpha: f32, v: usize, vStride: usize, jn: i32, Dh: i32): void {
  Tile.pv1(0, sc, acc, alpha, v, vStride, jn, Dh);
}
function pv1Half(sc: usize, acc: usize, alpha: f32, v: usize, vStride: usize, jn: i32, Dh: i32): void {
  if (gFinite) Tile.pv1(2, sc, acc, alpha, v, vStride, jn, Dh);
  else Tile.pv1(1, sc, acc, alpha, v, vStride, jn, Dh);
}
function pv4(sc: usize, acc: usize, rowBytes: usize, alpha: usize, v: usize, vStride: usize, jn: i32, Dh: i32): void {
  Tile.pv4(0, sc, acc, rowBytes, alpha, v, vStride, jn, Dh);
}
function pv4Half(sc: usize, acc: usize, rowBytes: usize, alpha: usize, v: usize, vStride: usize, jn: i32, Dh: i32): void {
  if (gFinite) Tile.pv4(2, sc, acc, rowBytes, alpha, v, vStride, jn, Dh);
  else Tile.pv4(1, sc, acc, rowBytes, alpha, v, vStride, jn, Dh);
}

/**
 * The rule and the online softmax of one row's block of jn scores (keys j0 …): p replaces the score
 * in `row`; m, l (at mp, lp) are updated and the factor the row's accumulator must be scaled by is
 * stored at ap.
 */
function softmaxRow(row: usize, i: i32, ip: i32, j0: i32, jn: i32, first: i32, last: i32, Skv: i32, mp: usize, lp: usize, ap: usize): void {
  let mx: f32 = -Infinity;
  let jj = 0;
  // Where the rule is a scale alone (every key of the block in the row's band, no padding, mask,
  // softcap or ALiBi): four scores per step.
  if (gPad === 0 && gMask === 0 && gSoftcap <= 0 && gSlope === 0 && j0 >= first && j0 + jn - 1 <= last) {
    jj = jn & ~3;
    mx = Softmax.scaleRowMax(row, jj, gScale);
  }
  for (; jj < jn; jj++) {
    const s = score(load<f32>(row + ((<usize>jj) << 2)), i, ip, j0 + jj, first, last, Skv);
    store<f32>(row + ((<usize>jj) << 2), s);
    mx = max(mx, s);
  }
  for (let jj = jn; jj < ((jn + 3) & ~3); jj++) store<f32>(row + ((<usize>jj) << 2), -Infinity);
  const mOld = load<f32>(mp);
  const mNew = max(mOld, mx);
  if (mNew === -Infinity) {
    store<f32>(ap, 1);
    memory.fill(row, 0, (<usize>BC) << 2);
    return;
  }
  const a = Mathf.exp(mOld - mNew);
  store<f32>(ap, a);
  store<f32>(mp, mNew);
  const mv = f32x4.splat(mNew);
  let sum = f32x4.splat(0);
  for (let jj = 0; jj < jn; jj += 4) {
    const p = Softmax.exp4(f32x4.sub(v128.load(row + ((<usize>jj) << 2)), mv));
    v128.store(row + ((<usize>jj) << 2), p);
    sum = f32x4.add(sum, p);
  }
  const total = f32x4.extract_lane(sum, 0) + f32x4.extract_lane(sum, 1) + f32x4.extract_lane(sum, 2) + f32x4.extract_lane(sum, 3);
  store<f32>(lp, load<f32>(lp) * a + total);
}

let gTouched: u32 = 0; // what touchBlock read (kept, so that its loads stay)

/**
 * Touches the cache lines of the K and V block of jn keys from j0 (the next one) before this block's
 * arithmetic: loads that depend on nothing, so that the block comes from memory while this one computes.
 * For any number of rows. A lone row (a decode step of one head a key/value head) does too little
 * arithmetic per byte for the hardware prefetcher to keep up with when the cache is not in the CPU's
 * caches (2.7 GB/s measured on one core without the touches, 2-core EPYC). GQA's heads at a decode
 * step (4 rows) did well without them on that EPYC (0.45 → 0.39 ms from L3 without, the same from
 * memory, 4 groups of 4 heads over 1024 keys, Dh 128), but on a 2-core Xeon VM, with each step's K and
 * V in memory (24 layers' caches stepped through, as a model decodes), the step took 0.86 ms without
 * and 0.60–0.61 ms with them; with K and V in cache 0.37 ms without, 0.40 ms with. A model's caches are
 * in memory at each step, so the touches stay for every row count.
 */
function touchBlock(kt: usize, v: usize, vStride: usize, j0: i32, jn: i32, Dh: i32): void {
  const kb = kt + ((<usize>(j0 >> 6) * <usize>Dh) << 8);
  const kEnd = kb + ((<usize>Dh) << 8);
  let t = gTouched;
  for (let p = kb; p < kEnd; p += 64) t ^= load<u32>(p);
  const rowBytes = (<usize>Dh) << 2;
  for (let j = 0; j < jn; j++) {
    const row = v + <usize>(j0 + j) * vStride;
    for (let off: usize = 0; off < rowBytes; off += 64) t ^= load<u32>(row + off);
  }
  gTouched = t;
}

/** Touches the stored K block (and its scales) and V rows of jn keys from j0 of a kind 1 … 3 cache: touchBlock's job. */
function touchStored(kt: usize, v: usize, j0: i32, jn: i32, Dh: i32): void {
  const blk = <usize>(j0 >> 6);
  // Bytes of one stored Kᵀ block: Dh·64 values of 2, 1 or ½ bytes.
  const kBytes = gKind === 1 ? (<usize>Dh) << 7 : gKind === 2 ? (<usize>Dh) << 6 : (<usize>Dh) << 5;
  let t = gTouched;
  const kb = kt + blk * kBytes;
  for (let p = kb; p < kb + kBytes; p += 64) t ^= load<u32>(p);
  if (gKind >= 2) {
    const sBytes = (<usize>Dh) << 2; // Dh/32 · 64 scales of 2 bytes
    const sb = gKs + blk * sBytes;
    for (let p = sb; p < sb + sBytes; p += 64) t ^= load<u32>(p);
  }
  const vb = v + <usize>j0 * gVRow;
  const vEnd = vb + <usize>jn * gVRow;
  for (let p = vb; p < vEnd; p += 64) t ^= load<u32>(p);
  gTouched = t;
}

/** Four f16s (the low 16 bits of each lane) as f32, exactly: normals, subnormals, ±0, ±∞, NaN. */
function halfToFloat4(h: v128): v128 {
  // The magnitude's bits moved into f32's place, then scaled by 2^112 (the bias 127 − 15): exact for
  // normals and subnormals alike; exponent 31 (∞, NaN) gets f32's 255 instead; then the sign.
  const t = i32x4.shl(v128.and(h, v128.load32_splat(C_H_MAGNITUDE)), 13);
  const f = f32x4.mul(t, v128.load32_splat(C_TWO112));
  const special = i32x4.gt_s(t, v128.load32_splat(C_H_SPECIAL));
  const m = v128.bitselect(v128.or(t, v128.load32_splat(C_H_SPECIAL_EXP)), f, special);
  return v128.or(m, i32x4.shl(v128.and(h, v128.load32_splat(C_H_SIGN)), 16));
}

/** One f16 as f32 (halfToFloat4's rule). */
function halfToFloat1(h: u32): f32 {
  const t = (h & 0x7fff) << 13;
  const m = t > 0x0f7fffff ? reinterpret<f32>(t | 0x70000000) : reinterpret<f32>(t) * <f32>5.192296858534828e33;
  return reinterpret<f32>(reinterpret<u32>(m) | ((h & 0x8000) << 16));
}

/**
 * The cache decoders AssemblyScript inlines (`@inline`): static methods, because the linter does not
 * parse a decorator on a plain function (as qgemm.ts's Q).
 */
// biome-ignore lint/complexity/noStaticOnlyClass: @inline needs a method here (see above)
export class KvDecode {
  /**
   * halfToFloat4 where no lane is ±∞ or NaN (exponent < 31), of w = the f16 bits in each lane's high half:
   * an arithmetic shift by 3 puts the magnitude in f32's place below the sign (the copies of the sign
   * between them masked off), and 2^112 scales it, sign and all. Its two constants stay v128.const (not
   * words of memory, gemm.ts): read from memory, qgemv's decode (f16 scales) took 0.63 ms, not 0.44.
   */
  @inline
  static finiteHighHalfToFloat4(w: v128): v128 {
    return f32x4.mul(v128.and(i32x4.shr_s(w, 3), i32x4.splat(0x8fffe000)), f32x4.splat(<f32>5.192296858534828e33));
  }

  /** Eight f16s at p (16 bytes) as f32 at out (32 bytes). */
  @inline
  static halves8(p: usize, out: usize): void {
    const x = v128.load(p);
    const exp = v128.load32_splat(C_H_EXP2);
    if (v128.any_true(i16x8.eq(v128.and(x, exp), exp))) {
      // ±∞ or NaN among them (rare: the general rule)
      v128.store(out, halfToFloat4(i32x4.extend_low_i16x8_u(x)));
      v128.store(out, halfToFloat4(i32x4.extend_high_i16x8_u(x)), 16);
    } else {
      const zero = i32x4.splat(0);
      const lo = i8x16.shuffle(zero, x, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
      const hi = i8x16.shuffle(zero, x, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31);
      v128.store(out, KvDecode.finiteHighHalfToFloat4(lo));
      v128.store(out, KvDecode.finiteHighHalfToFloat4(hi), 16);
    }
  }

  /** Sixteen int8s (lanes of x) · s0 … s3 (4 lanes each) as f32 at out (64 bytes). */
  @inline
  static int8x16Times(x: v128, s0: v128, s1: v128, s2: v128, s3: v128, out: usize): void {
    const lo = i16x8.extend_low_i8x16_s(x);
    const hi = i16x8.extend_high_i8x16_s(x);
    v128.store(out, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(lo)), s0));
    v128.store(out, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(lo)), s1), 16);
    v128.store(out, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(hi)), s2), 32);
    v128.store(out, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(hi)), s3), 48);
  }

  /**
   * One stored row of Dh values at src, kind 1 … 3 (quant/kv.ts's row: f16 bits, or Dh/32 ggml q8_0 or
   * q4_0 blocks), as f32 at dst: a V row of a plain cache (decodeValues), a K or V row of a paged pool
   * (wasm/paged.ts).
   */
  @inline
  static row(src: usize, kind: i32, Dh: i32, dst: usize): void {
    if (kind === 1) {
      let d = 0;
      for (; d + 8 <= Dh; d += 8) KvDecode.halves8(src + ((<usize>d) << 1), dst + ((<usize>d) << 2));
      for (; d < Dh; d++) store<f32>(dst + ((<usize>d) << 2), halfToFloat1(load<u16>(src + ((<usize>d) << 1))));
    } else if (kind === 2) {
      for (let b = 0; b < Dh >> 5; b++) {
        const p = src + <usize>b * 34;
        const s = f32x4.splat(halfToFloat1(load<u16>(p)));
        const o = dst + ((<usize>b) << 7);
        KvDecode.int8x16Times(v128.load(p + 2), s, s, s, s, o);
        KvDecode.int8x16Times(v128.load(p + 18), s, s, s, s, o + 64);
      }
    } else {
      const low = v128.load32_splat(C_NIBBLE);
      const eight = v128.load32_splat(C_EIGHT);
      for (let b = 0; b < Dh >> 5; b++) {
        const p = src + <usize>b * 18;
        const s = f32x4.splat(halfToFloat1(load<u16>(p)));
        const q = v128.load(p + 2);
        const o = dst + ((<usize>b) << 7);
        KvDecode.int8x16Times(i8x16.sub(v128.and(q, low), eight), s, s, s, s, o);
        KvDecode.int8x16Times(i8x16.sub(i8x16.shr_u(q, 4), eight), s, s, s, s, o + 64);
      }
    }
  }
}

/** The 8 f16s of x (KvDecode.halves8's rule, exact) as f32: lanes 0 … 3 (lo) or 4 … 7. */
// biome-ignore lint/complexity/noStaticOnlyClass: @inline needs a method here (see KvDecode)
class H8 {
  /** Whether a lane of x is ±∞ or NaN; in Tile's form 2 (a cache known to hold none) never, without looking. */
  @inline
  static special(x: v128, FORM: i32): bool {
    if (FORM === 2) return false;
    const exp = v128.load32_splat(C_H_EXP2);
    return v128.any_true(i16x8.eq(v128.and(x, exp), exp));
  }

  @inline
  static lo(x: v128, special: bool): v128 {
    if (special) return halfToFloat4(i32x4.extend_low_i16x8_u(x));
    return KvDecode.finiteHighHalfToFloat4(i8x16.shuffle(i32x4.splat(0), x, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23));
  }

  @inline
  static hi(x: v128, special: bool): v128 {
    if (special) return halfToFloat4(i32x4.extend_high_i16x8_u(x));
    return KvDecode.finiteHighHalfToFloat4(i8x16.shuffle(i32x4.splat(0), x, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31));
  }
}

/** Kᵀ block `blk` [Dh, 64] of a kind 1 … 3 cache (kt: its (sequence, head)'s base) decoded as f32 into out. */
function decodeKeys(kt: usize, blk: i32, Dh: i32, out: usize): void {
  const n = (<usize>Dh) << 6; // values in the block
  if (gKind === 1) {
    const src = kt + <usize>blk * (n << 1);
    for (let i: usize = 0; i < n; i += 8) KvDecode.halves8(src + (i << 1), out + (i << 2));
    return;
  }
  const blocks = Dh >> 5; // blocks of 32 along Dh
  const scales = gKs + <usize>blk * ((<usize>blocks) << 7); // [Dh/32, 64] f16
  if (gKind === 2) {
    const src = kt + <usize>blk * n;
    for (let b = 0; b < blocks; b++) {
      for (let c = 0; c < 64; c += 16) {
        const sp = scales + ((<usize>(b * 64 + c)) << 1);
        const x0 = v128.load(sp);
        const x1 = v128.load(sp, 16);
        const s0 = halfToFloat4(i32x4.extend_low_i16x8_u(x0));
        const s1 = halfToFloat4(i32x4.extend_high_i16x8_u(x0));
        const s2 = halfToFloat4(i32x4.extend_low_i16x8_u(x1));
        const s3 = halfToFloat4(i32x4.extend_high_i16x8_u(x1));
        for (let d = b << 5; d < (b + 1) << 5; d++) {
          const at = ((<usize>d) << 6) + <usize>c;
          KvDecode.int8x16Times(v128.load(src + at), s0, s1, s2, s3, out + (at << 2));
        }
      }
    }
    return;
  }
  // kind 3: 32 bytes a d, each half (keys 32h …) 16 bytes: low nibbles keys 32h + i, high 32h + 16 + i.
  const src = kt + <usize>blk * (n >> 1);
  const low = v128.load32_splat(C_NIBBLE);
  const eight = v128.load32_splat(C_EIGHT);
  for (let b = 0; b < blocks; b++) {
    for (let h = 0; h < 2; h++) {
      const sp = scales + ((<usize>(b * 64 + 32 * h)) << 1);
      let x = v128.load(sp);
      const s0 = halfToFloat4(i32x4.extend_low_i16x8_u(x));
      const s1 = halfToFloat4(i32x4.extend_high_i16x8_u(x));
      x = v128.load(sp, 16);
      const s2 = halfToFloat4(i32x4.extend_low_i16x8_u(x));
      const s3 = halfToFloat4(i32x4.extend_high_i16x8_u(x));
      x = v128.load(sp, 32);
      const s4 = halfToFloat4(i32x4.extend_low_i16x8_u(x));
      const s5 = halfToFloat4(i32x4.extend_high_i16x8_u(x));
      x = v128.load(sp, 48);
      const s6 = halfToFloat4(i32x4.extend_low_i16x8_u(x));
      const s7 = halfToFloat4(i32x4.extend_high_i16x8_u(x));
      for (let d = b << 5; d < (b + 1) << 5; d++) {
        const q = v128.load(src + ((<usize>d) << 5) + ((<usize>h) << 4));
        const o = out + ((((<usize>d) << 6) + ((<usize>h) << 5)) << 2);
        KvDecode.int8x16Times(i8x16.sub(v128.and(q, low), eight), s0, s1, s2, s3, o);
        KvDecode.int8x16Times(i8x16.sub(i8x16.shr_u(q, 4), eight), s4, s5, s6, s7, o + 64);
      }
    }
  }
}

/** V rows j0 … j0 + jn − 1 of a kind 1 … 3 cache (v: its (sequence, head)'s row 0) decoded as f32 rows [jn, Dh] into out. */
function decodeValues(v: usize, j0: i32, jn: i32, Dh: i32, out: usize): void {
  const rowOut = (<usize>Dh) << 2;
  for (let j = 0; j < jn; j++) KvDecode.row(v + <usize>(j0 + j) * gVRow, gKind, Dh, out + <usize>j * rowOut);
}

/** Key j's value d as f32, wherever the cache's kind keeps it (probabilities: a scalar read per score). */
function keyAt(kt: usize, j: i32, d: i32, Dh: i32): f32 {
  const cell = ((<usize>(j >> 6) * <usize>Dh + <usize>d) << 6) + <usize>(j & 63); // Kᵀ's index
  if (gKind === 0) return load<f32>(kt + (cell << 2));
  if (gKind === 1) return halfToFloat1(load<u16>(kt + (cell << 1)));
  const s = halfToFloat1(load<u16>(gKs + ((((<usize>(j >> 6) * <usize>(Dh >> 5) + <usize>(d >> 5)) << 6) + <usize>(j & 63)) << 1)));
  if (gKind === 2) return s * <f32>load<i8>(kt + cell);
  const byte = load<u8>(kt + (((<usize>(j >> 6) * <usize>Dh + <usize>d) << 5) + (<usize>(j & 32) >> 1) + <usize>(j & 15)));
  return s * <f32>(<i32>((j & 16) !== 0 ? byte >> 4 : byte & 15) - 8);
}

/** O [Sq, Dh] for one (sequence, head); see the top of this file. */
export function attend(q: usize, ldq: i32, kt: usize, v: usize, ldv: i32, o: usize, ldo: i32, Sq: i32, Skv: i32, Dh: i32, stats: usize, scratch: usize): void {
  const Dp = (Dh + 3) & ~3;
  const rowBytes = (<usize>Dp) << 2;
  const sc = scratch; // p [RG, BC]
  const acc = sc + ((<usize>(RG * BC)) << 2); // [RG, Dp]
  const m = acc + RG * rowBytes; // [RG] running max
  const l = m + (RG << 2); // [RG] running sum
  const alpha = l + (RG << 2); // [RG] this block's rescale factor
  const bands = alpha + (RG << 2); // [RG, 2] i32: first, last key
  const vStride = (<usize>ldv) << 2;
  const qStride = (<usize>ldq) << 2;
  const rs = (<usize>BC) << 2;
  for (let i0 = 0; i0 < Sq; i0 += RG) {
    const R = min(RG, Sq - i0);
    const R4 = (R + 3) & ~3; // rows in whole quads; the ones past Sq see no key (first Skv, last −1)
    // Row r's query position ip0 + step·r and attnMask row (i0 + r)·step: attendHeads' rows (step 0) are
    // all the last position, mask row 0.
    const step = gOnePosition ? 0 : 1;
    const ip0 = gOnePosition ? Skv - 1 : i0 + Skv - Sq;
    let lo = Skv;
    let hi = -1;
    for (let r = 0; r < R4; r++) {
      const first = r < R ? firstKey(ip0 + step * r) : Skv;
      const last = r < R ? lastKey(ip0 + step * r, Skv) : -1;
      store<i32>(bands + ((<usize>r) << 3), first);
      store<i32>(bands + ((<usize>r) << 3), last, 4);
      lo = min(lo, first);
      hi = max(hi, last);
      store<f32>(m + ((<usize>r) << 2), gHasSink ? gSink : -Infinity);
      store<f32>(l + ((<usize>r) << 2), gHasSink ? 1 : 0);
    }
    memory.fill(acc, 0, rowBytes * R4);
    // An f16 cache read by one quad of 2 … 4 rows (a decode step's GQA group): each block's halves widened
    // where the kernels read them (Tile's f16 form), not decoded into gDec first for so few rows.
    const halves = gKind === 1 && R4 === 4 && (Dh & 7) === 0; // R 1 (one head a key/value head) too
    for (let j0 = lo & ~(BC - 1); j0 <= hi; j0 += BC) {
      const jn = min(BC, hi + 1 - j0);
      // The block's Kᵀ [Dh, 64] and first V row: where they are (f32), or decoded into gDec (f16, q-dtypes).
      let kb: usize;
      let vb: usize;
      let vs = vStride;
      if (gKind === 0) {
        if (j0 + BC <= hi) touchBlock(kt, v, vStride, j0 + BC, min(BC, hi + 1 - j0 - BC), Dh);
        kb = kt + ((<usize>(j0 >> 6) * <usize>Dh) << 8); // j0 is a multiple of BC = 64
        vb = v + <usize>j0 * vStride;
      } else if (halves) {
        if (j0 + BC <= hi) touchStored(kt, v, j0 + BC, min(BC, hi + 1 - j0 - BC), Dh);
        kb = kt + ((<usize>(j0 >> 6) * <usize>Dh) << 7); // the block's f16 Kᵀ, read where it is
        vb = v + <usize>j0 * gVRow;
      } else {
        if (j0 + BC <= hi) touchStored(kt, v, j0 + BC, min(BC, hi + 1 - j0 - BC), Dh);
        kb = gDec;
        vb = gDec; // V's rows take K's place once the scores are out (one 32 KB tile at Dh 128: L1's size)
        vs = (<usize>Dh) << 2;
        decodeKeys(kt, j0 >> 6, Dh, kb);
      }
      if (halves && R === 1) {
        scores1Half(q + <usize>i0 * qStride, kb, jn, Dh, sc);
      } else if (halves) {
        scores4Half(
          q + <usize>i0 * qStride,
          q + <usize>min(i0 + 1, Sq - 1) * qStride,
          q + <usize>min(i0 + 2, Sq - 1) * qStride,
          q + <usize>min(i0 + 3, Sq - 1) * qStride,
          kb,
          jn,
          Dh,
          sc,
        );
      }
      // Each K and V block serves all RG rows while it is in cache.
      for (let r0 = 0; !halves && r0 < R4; r0 += 4) {
        if (R - r0 === 1) {
          scores1(q + <usize>(i0 + r0) * qStride, kb, jn, Dh, sc + <usize>r0 * rs); // a lone row (a decode step)
          continue;
        }
        // Query rows past Sq repeat the last one (their results are dropped).
        const q0 = q + <usize>(i0 + r0) * qStride;
        const q1 = q + <usize>min(i0 + r0 + 1, Sq - 1) * qStride;
        const q2 = q + <usize>min(i0 + r0 + 2, Sq - 1) * qStride;
        const q3 = q + <usize>min(i0 + r0 + 3, Sq - 1) * qStride;
        scores4(q0, q1, q2, q3, kb, jn, Dh, sc + <usize>r0 * rs);
      }
      for (let r = 0; r < R; r++) {
        const ro = (<usize>r) << 2;
        const first = load<i32>(bands + ((<usize>r) << 3));
        const last = load<i32>(bands + ((<usize>r) << 3), 4);
        softmaxRow(sc + <usize>r * rs, (i0 + r) * step, ip0 + step * r, j0, jn, first, last, Skv, m + ro, l + ro, alpha + ro);
      }
      if (halves) {
        if (R === 1) pv1Half(sc, acc, load<f32>(alpha), vb, gVRow, jn, Dh);
        else pv4Half(sc, acc, rowBytes, alpha, vb, gVRow, jn, Dh);
        continue;
      }
      if (gKind !== 0) decodeValues(v, j0, jn, Dh, vb);
      for (let r0 = 0; r0 < R4; r0 += 4) {
        if (R - r0 === 1) pv1(sc + <usize>r0 * rs, acc + <usize>r0 * rowBytes, load<f32>(alpha + ((<usize>r0) << 2)), vb, vs, jn, Dh);
        else pv4(sc + <usize>r0 * rs, acc + <usize>r0 * rowBytes, rowBytes, alpha + ((<usize>r0) << 2), vb, vs, jn, Dh);
      }
    }
    // O = acc · headScale / l (0 for a row that saw nothing); (m, l) for probabilities().
    for (let r = 0; r < R; r++) {
      const i = i0 + r;
      const lr = load<f32>(l + ((<usize>r) << 2));
      const inv: f32 = lr > 0 ? gHeadScale / lr : 0;
      const src = acc + <usize>r * rowBytes;
      const dst = o + ((<usize>i * <usize>ldo) << 2);
      for (let d = 0; d < Dh; d++) store<f32>(dst + ((<usize>d) << 2), load<f32>(src + ((<usize>d) << 2)) * inv);
      if (stats !== 0) {
        store<f32>(stats + ((<usize>i) << 3), load<f32>(m + ((<usize>r) << 2)));
        store<f32>(stats + ((<usize>i) << 3), lr, 4);
      }
    }
  }
}

/**
 * attend for one query row of each of `heads` heads that share a key/value head (GQA's group at a decode
 * step): the heads are attend's rows (Q row stride ldq from one head to the next, O's ldo), all at the
 * last position and attnMask row 0, so that each K and V block is read once for the group, not once a
 * head. The rule (setRule) must be the same for all of them: no per-head ALiBi slope, sink or head mask.
 */
export function attendHeads(q: usize, ldq: i32, kt: usize, v: usize, ldv: i32, o: usize, ldo: i32, heads: i32, Skv: i32, Dh: i32, scratch: usize): void {
  gOnePosition = true;
  attend(q, ldq, kt, v, ldv, o, ldo, heads, Skv, Dh, 0, scratch);
  gOnePosition = false;
}

/** P [Sq, Skv] (row stride ldp) = exp(s − m)·headScale / l per row, 0 where masked; from attend's stats. */
export function probabilities(q: usize, ldq: i32, kt: usize, Sq: i32, Skv: i32, Dh: i32, stats: usize, out: usize, ldp: i32): void {
  for (let i = 0; i < Sq; i++) {
    const ip = i + Skv - Sq;
    const first = firstKey(ip);
    const last = lastKey(ip, Skv);
    const m = load<f32>(stats + ((<usize>i) << 3));
    const l = load<f32>(stats + ((<usize>i) << 3), 4);
    const inv: f32 = l > 0 ? gHeadScale / l : 0;
    const qr = q + ((<usize>i * <usize>ldq) << 2);
    const dst = out + ((<usize>i * <usize>ldp) << 2);
    for (let j = 0; j < Skv; j++) {
      // The score as attend's kernels sum it, bit for bit (F.madd: fused in the relaxed build), so that
      // exp(s − m) meets attend's own m: with logits of 1e25 one rounding apart would overflow it.
      let acc = f32x4.splat(0);
      for (let d = 0; d < Dh; d++) acc = F.madd(v128.load32_splat(qr + ((<usize>d) << 2)), f32x4.splat(keyAt(kt, j, d, Dh)), acc);
      const s = score(f32x4.extract_lane(acc, 0), i, ip, j, first, last, Skv);
      store<f32>(dst + ((<usize>j) << 2), s === -Infinity ? 0 : Mathf.exp(s - m) * inv);
    }
  }
}
