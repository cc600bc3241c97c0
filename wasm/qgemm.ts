// AssemblyScript, compiled with gemm.ts and attention.ts into src/wasm/module.ts. The projections of the
// 'wasm' backend for quantized weights: the same y = x · Wᵀ + bias as gemm.ts, with W kept packed
// (4 or 8 bits per weight plus a (scale, offset) pair per group along K) and dequantized in the loops.
// A weight is w = scale·q − offset (src/quant/pack.ts's unpackWeight):
//
//   qgemv  M ≤ 8 rows (decode): x is first written as 16-bit integers, x = sx·(h + l·2⁻¹⁵) with a power
//          of two sx per group (exact to 2⁻³⁰ of the group's largest |x|), so that the products with the
//          quants are i32x4.dot_i16x8_s's (8 at a time, exact integers) rather than a float convert and a
//          multiply-add a weight; per group and row, y += scale·sx·(H + L·2⁻¹⁵) − offset·Σ x, in float32
//          (H = Σ q·h, L = Σ q·l; the sums of x per group first, into the scratch). Each quant word is
//          read once from memory for up to 2 rows (more rows take the panel again, from cache). The
//          panels are one sequential stream, touched ahead in bursts (touchAhead): this loop does so much
//          arithmetic a byte that the out-of-order window holds too few of its own misses to stream
//          from memory at speed (see touchAhead for the figures). Within float32's rule of
//          the float64 product (test/wasm-quant.test.ts); 1.2–1.3× faster than the float32 arithmetic on
//          the fields it replaced (0.16 → 0.12–0.13 ns a weight with the weights in cache, one thread,
//          2-core EPYC; there as fast with them streamed from memory, 4 bits: 0.11–0.12 ns a weight at
//          N = K = 2048, cold or from L3). On a 2-core Xeon VM, 0.08 ns a weight in cache and 0.10 from
//          memory with the touches (0.21 without)
//   qgemm  more rows (prefill): per chunk of 64 rows, each panel of 8 columns is dequantized into a
//          float32 scratch [K, 8] (gemm.ts's panel layout) and gemm.ts's 4 × 8 micro-kernel runs on it:
//          bit for bit what gemm gives on the unpacked float32 weights
//
// The layout, made once at layer creation (src/wasm/projection.ts) from src/quant's PackedWeight:
//   wq  [N8/4, W, 4] u32   the words of 4 rows of W side by side: wq[(c·W + w)·4 + r] = quants[(4c + r)·W + w],
//                          W = ceil(K·bits / 32) words per row (weight k in the bits from bits·(k % perWord)
//                          of word k / perWord, perWord = 32 / bits), N8 = N rounded up to 8, zeros past N
//   so  [N8/4, groups, 8] f32  so[(c·groups + g)·8 + r] = scale of row 4c + r in group g, [… + 4 + r] its offset
//       (or, with HALF_SCALES, [N8/4, groups, 4] f16 scales alone: see there)
// so that one v128 load gives the word w of 4 rows, the lanes are 4 output columns, and a word lies in
// one group (group ≥ 16 and a multiple of 8). It stays packed: bits + 64 / group bits per weight (6 for
// 4 bits in groups of 32), as PackedWeight, or bits + 16 / group with HALF_SCALES (4.5); only qgemm's
// scratch holds floats, one panel [K, 8] at a time.
//
// The host guarantees: pointers are byte addresses inside memory; bits is 4 or 8; group is a power of
// two ≥ 16; ldx ≥ K, ldy ≥ N; bias holds ⌈N/8⌉·8 floats; scratch holds W·perWord·8 floats (qgemm) or
// M·(2·groups + K) (qgemv).

import { KvDecode } from './attention';
import { F, gemm } from './gemm';

const MC: i32 = 64; // rows of x per chunk (as gemm.ts)

// Vector constants, each a word of memory read as a splat where it is used (gemm.ts: "Constants in memory").
const C_LOW16 = memory.data<u32>([0xffff]);
const C_2POW15 = memory.data<f32>([32768]);
/**
 * `bits` | HALF_SCALES (qgemv, qgemm, and wasm/q8.ts's qgemv8, qgemm8): `so` holds f16 scales alone,
 * [N8/4, groups, 4] (8 bytes a group of a panel, not 32), each offset being scale·2^(bits−1): q4_0,
 * q8_0, MatMulNBits without zero points (src/wasm/projection.ts halfScalesFit, which also keeps every
 * scale finite). A decode step then streams 4.5 bits a 4-bit weight, not 6; the floats are the same
 * (an f16 widens exactly; ·2^(bits−1) is exact).
 */
const HALF_SCALES: i32 = 0x100; // (wasm/q8.ts has its own copy: an export here would be the module's)
let gHalf: f32 = 0; // this call's offset factor 2^(bits−1) with HALF_SCALES, else 0 (f32 scales and offsets)
const ROWS: i32 = 2; // qgemv's rows per pass over a panel (each row keeps 4 sums: two rows' stay in x86-64's 16 SIMD registers)

const WQ_AHEAD: usize = 2048; // bytes of the quant stream ahead of the word being read that touchAhead touches
const SO_AHEAD: usize = 1024; // the same for the scale stream (half as long as the quants' for 4 bits in groups of 32)
let gTouched: u32 = 0; // what touchAhead read (kept, so that its loads stay)
let gTouchLimit: usize = 0; // the highest address a burst may start at (qgemv sets it from memory.size())

/**
 * Touches the 16 cache lines (1 KiB) of the quant words WQ_AHEAD bytes on from wp and 8 lines (512
 * bytes) of the scales SO_AHEAD on from sp, as one burst of loads that depend on nothing: groupPanel
 * calls it once per 64 words (1 KiB) of a panel. Its loop does ~30 vector operations per 16 bytes, so
 * the processor's out-of-order window spans only a few cache lines of its own loads, too few misses
 * in flight to hide memory's latency; the hardware prefetcher did not make up for it on the Xeon these
 * figures come from (2 cores of a VM). 16 independent loads at once are that many misses in flight.
 * q4_0 projections of a decode step (N = 3072 and 2048, K = 2048), stepping through 24 layers' weights
 * as a model does: 2.2 → 1.05–1.10 ms a layer (q8_0 3.1 → 1.7, q4_k 2.1 → 1.2 at 4 KiB ahead); one
 * layer over and over (weights in cache): 0.88 ms either way. Tried: 1, 3 and 4 KiB ahead (1.08, 1.16,
 * 1.23–1.25 ms), bursts of 8 or 32 lines (1.47, 1.56 ms), and spaced single touches, one line per 64
 * bytes read (no gain). Past the arrays' ends the bursts read whatever lies there, clamped to memory.
 */
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

/**
 * The helpers AssemblyScript inlines (`@inline`), their constant arguments (R, B) folded away: static
 * methods, because the linter does not parse a decorator on a plain function.
 */
// biome-ignore lint/complexity/noStaticOnlyClass: @inline needs a method here (see above)
export class Q {
  /** The 4-lane weight vector of quant field `shift` of word v: (q as float)·s − o. */
  @inline
  static dequant(v: v128, shift: i32, mask: v128, s: v128, o: v128): v128 {
    return f32x4.sub(f32x4.mul(f32x4.convert_i32x4_s(v128.and(i32x4.shr_u(v, shift), mask)), s), o);
  }

  /**
   * Σ_j dot(q_j, the i16 pair at p + 4j splat), j = 0 … 3: a 4-bit word's 8 products a row, twice.
   * The addresses are sums, not the load's offset immediate: V8 (TurboFan) keeps each distinct
   * (memory base + offset) of a splat load in a register of its own for the loop. Beside the next-panel
   * touches this kernel then had, the loop spilled to the stack (q4_0 at N = K = 2048: 0.53–0.89 →
   * 0.48–0.50 ms); without the touches the sums still gain (0.52 / 0.50 → 0.48 / 0.46 ms cold / L3).
   */
  @inline
  static dots4(q0: v128, q1: v128, q2: v128, q3: v128, p: usize): v128 {
    const a = i32x4.add(i32x4.dot_i16x8_s(q0, v128.load32_splat(p)), i32x4.dot_i16x8_s(q1, v128.load32_splat(p + 4)));
    return i32x4.add(a, i32x4.add(i32x4.dot_i16x8_s(q2, v128.load32_splat(p + 8)), i32x4.dot_i16x8_s(q3, v128.load32_splat(p + 12))));
  }

  /** dots4 for an 8-bit word's two field pairs. */
  @inline
  static dots2(q0: v128, q1: v128, p: usize): v128 {
    return i32x4.add(i32x4.dot_i16x8_s(q0, v128.load32_splat(p)), i32x4.dot_i16x8_s(q1, v128.load32_splat(p + 4)));
  }

  /**
   * Four f16 scales at p (HALF_SCALES: 8 bytes) as f32, exactly: finite ones only (the host keeps the f32
   * layout for a weight with an infinite or NaN scale), normals and subnormals alike.
   */
  @inline
  static halfScales(p: usize): v128 {
    const h = v128.load64_zero(p);
    const zero = i32x4.splat(0);
    return KvDecode.finiteHighHalfToFloat4(v128.shuffle<i8>(zero, h, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23));
  }

  /** A group's 4 scales at sp: f16 (HALF_SCALES; `half` its offset factor, not 0) or f32. */
  @inline
  static scales(sp: usize, half: f32): v128 {
    if (half !== 0) return Q.halfScales(sp);
    return v128.load(sp);
  }

  /** The group's 4 offsets: s·half with HALF_SCALES, else the f32 ones after its scales. */
  @inline
  static offsets(sp: usize, half: f32, s: v128): v128 {
    if (half !== 0) return f32x4.mul(s, f32x4.splat(half));
    return v128.load(sp, 16);
  }

  /** Bytes of a group's scales (and offsets) in a 4-column panel: 8 with HALF_SCALES, else 32. */
  @inline
  static scaleBytes(half: f32): usize {
    return half !== 0 ? 8 : 32;
  }

  /** Stores the first n (≤ 4) lanes of a at ptr. */
  @inline
  static store4(ptr: usize, a: v128, n: i32): void {
    if (n >= 4) {
      v128.store(ptr, a);
      return;
    }
    store<f32>(ptr, f32x4.extract_lane(a, 0));
    if (n > 1) store<f32>(ptr, f32x4.extract_lane(a, 1), 4);
    if (n > 2) store<f32>(ptr, f32x4.extract_lane(a, 2), 8);
  }

  /**
   * The whole words 0 … whole − 1 of one panel of 4 rows of W (wq, so at the panel) into y[0 … R−1, 4
   * columns], R ≤ 2 and B (bits) constants (inlined once per (R, B)). Row r's x is given as x = sx_g·(h + l·2⁻¹⁵)
   * in group g, h and l 16-bit integers (qgemv's HL; sx_g at sxg bytes past row r's Σ x of the group), paired
   * as i32x4.dot_i16x8_s takes them: a word's field j of each row masked out as the
   * i16 pair (q_j, q_{j+perWord/2}) meets the splat pair (h_j, h_{j+perWord/2}), one instruction for 8
   * products where the float path converts and multiplies 4. Per group g, in exact integers
   *   H = Σ q·h, L = Σ q·l   (|q·h| < 2²³, at most 256 terms a lane: no overflow)
   * then in float32: y_r = b + Σ_g s_g·sx_g·(H + L·2⁻¹⁵) − Σ_g o_g·X_g.
   */
  @inline
  static groupPanel(
    R: i32,
    B: i32,
    hl: usize,
    hlStride: usize,
    xsum: usize,
    xsumStride: usize,
    wq: usize,
    so: usize,
    group: i32,
    whole: i32,
    b: v128,
    y: usize,
    yStride: usize,
    cols: i32,
    sxg: usize,
  ): void {
    const perWord = 32 / B;
    const half = gHalf;
    const mask = B === 4 ? i32x4.splat(0x000f000f) : i32x4.splat(0x00ff00ff);
    const wordsPerGroup = group / perWord;
    const lScale = f32x4.splat(<f32>1 / <f32>32768);
    let A0 = f32x4.splat(0);
    let A1 = A0;
    let B0 = A0;
    let B1 = A0;
    let p0 = hl; // row r's HL at the current word: hl + r·hlStride + 32·w (4 bits) or 16·w (8 bits)
    let p1 = hl + hlStride;
    let sp = so;
    let xg = xsum;
    for (let w0 = 0; w0 < whole; w0 += wordsPerGroup) {
      const w1 = min(w0 + wordsPerGroup, whole);
      let h0 = i32x4.splat(0);
      let l0 = h0;
      let h1 = h0;
      let l1 = h0;
      const wEnd = wq + ((<usize>w1) << 4);
      let wp = wq + ((<usize>w0) << 4);
      if ((w0 & 63) === 0) touchAhead(wp, sp); // every 1 KiB of words (a group's words: a power of two ≤ 64)
      if (B === 4) {
        // Fields (j, j + 4) of each row as an i16 pair, j = 0 … 3; row r's pairs (h_j, h_{j+4}) at p_r + 4j,
        // (l_j, l_{j+4}) at p_r + 16 + 4j. One word a step: unrolled, TurboFan hoists all the loads to
        // the top and spills (0.50 → 0.70 ms at N = K = 2048).
        for (; wp < wEnd; wp += 16) {
          const u = v128.load(wp); // word (wp − wq) / 16 of the 4 rows
          const q0 = v128.and(u, mask);
          const q1 = v128.and(i32x4.shr_u(u, 4), mask);
          const q2 = v128.and(i32x4.shr_u(u, 8), mask);
          const q3 = v128.and(i32x4.shr_u(u, 12), mask);
          h0 = i32x4.add(h0, Q.dots4(q0, q1, q2, q3, p0));
          l0 = i32x4.add(l0, Q.dots4(q0, q1, q2, q3, p0 + 16));
          if (R > 1) {
            h1 = i32x4.add(h1, Q.dots4(q0, q1, q2, q3, p1));
            l1 = i32x4.add(l1, Q.dots4(q0, q1, q2, q3, p1 + 16));
          }
          p0 += 32;
          if (R > 1) p1 += 32;
        }
      } else {
        // Fields (0, 2) and (1, 3); row r's pairs (h_0, h_2), (h_1, h_3) at p_r, p_r + 4, its l pairs at p_r + 8, p_r + 12.
        for (; wp < wEnd; wp += 16) {
          const u = v128.load(wp);
          const q0 = v128.and(u, mask);
          const q1 = v128.and(i32x4.shr_u(u, 8), mask);
          h0 = i32x4.add(h0, Q.dots2(q0, q1, p0));
          l0 = i32x4.add(l0, Q.dots2(q0, q1, p0 + 8));
          if (R > 1) {
            h1 = i32x4.add(h1, Q.dots2(q0, q1, p1));
            l1 = i32x4.add(l1, Q.dots2(q0, q1, p1 + 8));
          }
          p0 += 16;
          if (R > 1) p1 += 16;
        }
      }
      const s = Q.scales(sp, half);
      const o = Q.offsets(sp, half, s);
      sp += Q.scaleBytes(half);
      A0 = f32x4.add(A0, f32x4.mul(f32x4.mul(s, v128.load32_splat(xg + sxg)), f32x4.add(f32x4.convert_i32x4_s(h0), f32x4.mul(f32x4.convert_i32x4_s(l0), lScale))));
      B0 = f32x4.add(B0, f32x4.mul(o, v128.load32_splat(xg)));
      if (R > 1) {
        A1 = f32x4.add(
          A1,
          f32x4.mul(f32x4.mul(s, v128.load32_splat(xg + sxg + xsumStride)), f32x4.add(f32x4.convert_i32x4_s(h1), f32x4.mul(f32x4.convert_i32x4_s(l1), lScale))),
        );
        B1 = f32x4.add(B1, f32x4.mul(o, v128.load32_splat(xg + xsumStride)));
      }
      xg += 4;
    }
    Q.store4(y, f32x4.sub(f32x4.add(b, A0), B0), cols);
    if (R > 1) Q.store4(y + yStride, f32x4.sub(f32x4.add(b, A1), B1), cols);
  }

  /** The first n (≤ 4) lanes at ptr, zeros after. */
  @inline
  static load4(ptr: usize, n: i32): v128 {
    if (n >= 4) return v128.load(ptr);
    let a = f32x4.splat(0);
    a = f32x4.replace_lane(a, 0, load<f32>(ptr));
    if (n > 1) a = f32x4.replace_lane(a, 1, load<f32>(ptr, 4));
    if (n > 2) a = f32x4.replace_lane(a, 2, load<f32>(ptr, 8));
    return a;
  }

  /** One panel for R ≤ 2 rows, B bits: its whole words (groupPanel), then a row's last, partial word if K leaves one. */
  @inline
  static panel(
    R: i32,
    B: i32,
    x: usize,
    xStride: usize,
    hl: usize,
    hlStride: usize,
    xsum: usize,
    xsumStride: usize,
    K: i32,
    wq: usize,
    so: usize,
    group: i32,
    b: v128,
    y: usize,
    yStride: usize,
    cols: i32,
    sxg: usize,
  ): void {
    const perWord = 32 / B;
    const whole = K / perWord;
    Q.groupPanel(R, B, hl, hlStride, xsum, xsumStride, wq, so, group, whole, b, y, yStride, cols, sxg);
    if (whole * perWord < K) partialWord(R, B, x, xStride, wq, so, group, whole, K - whole * perWord, y, yStride, cols);
  }
}

/**
 * The last word w of a row when it is partial (n = K − w·perWord < perWord weights), added to y[0 … M−1,
 * 4 columns] (where panelWords left the sums), one row at a time: the one word is read M times, from cache.
 */
function partialWord(M: i32, bits: i32, x: usize, xStride: usize, wq: usize, so: usize, group: i32, w: i32, n: i32, y: usize, yStride: usize, cols: i32): void {
  const perWord = 32 / bits;
  const mask = i32x4.splat((1 << bits) - 1);
  const v = v128.load(wq + ((<usize>w) << 4));
  const sp = so + <usize>((w * perWord) / group) * Q.scaleBytes(gHalf);
  const s = Q.scales(sp, gHalf);
  const o = Q.offsets(sp, gHalf, s);
  for (let r = 0; r < M; r++) {
    const out = y + <usize>r * yStride;
    let a = Q.load4(out, cols);
    let xk = x + <usize>r * xStride + ((<usize>(w * perWord)) << 2);
    for (let j = 0; j < n; j++) {
      a = F.madd(v128.load32_splat(xk), Q.dequant(v, j * bits, mask, s, o), a);
      xk += 4;
    }
    Q.store4(out, a, cols);
  }
}

/** Q.panel() for a run-time R ≤ 2 and bits: a copy per (R, bits). */
function panelAny(
  R: i32,
  bits: i32,
  x: usize,
  xStride: usize,
  hl: usize,
  hlStride: usize,
  xsum: usize,
  xsumStride: usize,
  K: i32,
  wq: usize,
  so: usize,
  group: i32,
  b: v128,
  y: usize,
  yStride: usize,
  cols: i32,
  sxg: usize,
): void {
  if (bits === 4) {
    if (R === 1) Q.panel(1, 4, x, xStride, hl, hlStride, xsum, xsumStride, K, wq, so, group, b, y, yStride, cols, sxg);
    else Q.panel(2, 4, x, xStride, hl, hlStride, xsum, xsumStride, K, wq, so, group, b, y, yStride, cols, sxg);
  } else {
    if (R === 1) Q.panel(1, 8, x, xStride, hl, hlStride, xsum, xsumStride, K, wq, so, group, b, y, yStride, cols, sxg);
    else Q.panel(2, 8, x, xStride, hl, hlStride, xsum, xsumStride, K, wq, so, group, b, y, yStride, cols, sxg);
  }
}

/**
 * y [M, N] = x [M, K] · Wᵀ + bias for 1 ≤ M ≤ 8 (more rows: qgemm), W packed as at the top of this file
 * (flags: its bits, | HALF_SCALES where `so` holds f16 scales alone).
 * scratch: M·(2·groups + K) floats, where the sums of each row's x over each group go first, then x as
 * 16-bit integer pairs (HL below) and each group's scale. Rows are taken
 * ROWS at a time, each panel by all of them before the next (its words from cache after the first).
 */
export function qgemv(x: usize, ldx: i32, M: i32, K: i32, wq: usize, so: usize, N: i32, bias: usize, y: usize, ldy: i32, flags: i32, group: i32, scratch: usize): void {
  const bits = flags & 0xff;
  gHalf = (flags & HALF_SCALES) !== 0 ? <f32>(1 << (bits - 1)) : 0;
  const xStride = (<usize>ldx) << 2;
  const yStride = (<usize>ldy) << 2;
  const groups = (K + group - 1) / group;
  const panelBytes = (<usize>((K * bits + 31) >> 5)) << 4; // one panel of wq
  const panelScales = <usize>groups * Q.scaleBytes(gHalf); // one panel of so
  // X [M, groups]: row r's Σ x over group g, over the whole words only (a partial last word is taken apart, exactly).
  const kWhole = (K / (32 / bits)) * (32 / bits);
  for (let r = 0; r < M; r++) {
    for (let g = 0; g < groups; g++) {
      let sum: f32 = 0;
      const k1 = min((g + 1) * group, kWhole);
      for (let k = g * group; k < k1; k++) sum += load<f32>(x + <usize>r * xStride + ((<usize>k) << 2));
      store<f32>(scratch + ((<usize>(r * groups + g)) << 2), sum);
    }
  }
  const xsumStride = (<usize>groups) << 2;
  // HL [M, kWhole] u32 after X: row r's x over the whole words as x = sx_g·(h + l·2⁻¹⁵) in group g, h and
  // l 16-bit integers in the pairs groupPanel reads (4 bits: word w's (h_j, h_{j+4}), j = 0 … 3, at 32·w + 4j,
  // its l pairs at 32·w + 16 + 4j; 8 bits: (h_j, h_{j+2}), j = 0, 1, at 16·w + 4j, l pairs at 16·w + 8 + 4j).
  // sx_g is the power of two that puts the group's max |x| in 32767: then X = x / sx, h = round(X) and
  // l = round((X − h)·2¹⁵) are exact, and x is kept to 2⁻³⁰ of its group's max |x| (float32 keeps 2⁻²⁴ of
  // each x). SX [M, groups] after HL. A group with a NaN or an infinity gets sx_g = NaN: the row's outputs
  // are NaN, where the float product's would be NaN or ±∞.
  const hl = scratch + <usize>M * xsumStride;
  const hlStride = (<usize>kWhole) << 2;
  const sxs = hl + <usize>M * hlStride;
  const wordBytes: i32 = bits === 4 ? 32 : 16;
  const low = v128.load32_splat(C_LOW16);
  const lMul = v128.load32_splat(C_2POW15);
  const wordsPerGroup = group / (32 / bits);
  for (let r = 0; r < M; r++) {
    const from = x + <usize>r * xStride;
    const to = hl + <usize>r * hlStride;
    for (let g = 0; g * group < kWhole; g++) {
      const k0 = g * group;
      const k1 = min(k0 + group, kWhole);
      let mv = f32x4.splat(0);
      for (let k = k0; k < k1; k += 4) mv = f32x4.max(mv, f32x4.abs(v128.load(from + ((<usize>k) << 2)))); // a NaN stays
      const m = max(max(f32x4.extract_lane(mv, 0), f32x4.extract_lane(mv, 1)), max(f32x4.extract_lane(mv, 2), f32x4.extract_lane(mv, 3)));
      // NaN (f32.max keeps one) or an infinity: sx = NaN (not ≤ the largest float).
      let sx: f32 = m <= F32.MAX_VALUE ? 1 : <f32>NaN;
      if (sx === 1 && m > 0) sx = reinterpret<f32>((reinterpret<u32>(m / 32767) + 0x7fffff) & 0x7f800000);
      store<f32>(sxs + ((<usize>(r * groups + g)) << 2), sx);
      const inv = f32x4.splat(sx > 0 ? 1 / sx : 0); // NaN: 0
      const w1 = min((g + 1) * wordsPerGroup, kWhole / (32 / bits));
      for (let w = g * wordsPerGroup; w < w1; w++) {
        const at = to + <usize>(w * wordBytes);
        if (bits === 4) {
          // (h_j, h_{j+4}) of the word's 8 weights: x[8w + j] and x[8w + 4 + j].
          const Xa = f32x4.mul(v128.load(from + ((<usize>(8 * w)) << 2)), inv);
          const Xb = f32x4.mul(v128.load(from + ((<usize>(8 * w)) << 2), 16), inv);
          const ha = f32x4.nearest(Xa);
          const hb = f32x4.nearest(Xb);
          const la = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(f32x4.sub(Xa, ha), lMul)));
          const lb = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(f32x4.sub(Xb, hb), lMul)));
          v128.store(at, v128.or(v128.and(i32x4.trunc_sat_f32x4_s(ha), low), i32x4.shl(i32x4.trunc_sat_f32x4_s(hb), 16)));
          v128.store(at, v128.or(v128.and(la, low), i32x4.shl(lb, 16)), 16);
        } else {
          // (h_0, h_2) and (h_1, h_3) of the word's 4 weights x[4w … 4w + 3].
          const X = f32x4.mul(v128.load(from + ((<usize>(4 * w)) << 2)), inv);
          const h = f32x4.nearest(X);
          const hi = i32x4.trunc_sat_f32x4_s(h);
          const li = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(f32x4.sub(X, h), lMul)));
          v128.store64_lane(at, v128.or(v128.and(hi, low), i32x4.shl(v128.shuffle<i32>(hi, hi, 2, 3, 2, 3), 16)), 0);
          v128.store64_lane(at + 8, v128.or(v128.and(li, low), i32x4.shl(v128.shuffle<i32>(li, li, 2, 3, 2, 3), 16)), 0);
        }
      }
    }
  }
  gTouchLimit = ((<usize>memory.size()) << 16) - 1024;
  for (let c = 0; c < N; c += 4) {
    const p = <usize>(c >> 2);
    const b = v128.load(bias + ((<usize>c) << 2));
    const wp = wq + p * panelBytes;
    const sp = so + p * panelScales;
    const out = y + ((<usize>c) << 2);
    for (let r = 0; r < M; r += ROWS) {
      const rs = <usize>r;
      panelAny(
        min(ROWS, M - r),
        bits,
        x + rs * xStride,
        xStride,
        hl + rs * hlStride,
        hlStride,
        scratch + rs * xsumStride,
        xsumStride,
        K,
        wp,
        sp,
        group,
        b,
        out + rs * yStride,
        yStride,
        N - c,
        sxs - scratch,
      );
    }
  }
  store<u32>(scratch, gTouched); // the touches' one use, so that no optimizer drops them (the sums of x there are spent)
}

/** Panel c of 4 rows (wq, so at the panel) dequantized into columns 0 … 3 of out [W·perWord, 8] (ld 8 floats). */
function dequantPanel(K: i32, wq: usize, so: usize, bits: i32, group: i32, out: usize): void {
  const perWord = 32 / bits;
  const mask = i32x4.splat((1 << bits) - 1);
  const W = (K * bits + 31) >> 5;
  const wordsPerGroup = group / perWord;
  let wp = wq;
  let sp = so;
  let dst = out;
  const half = gHalf;
  for (let w0 = 0; w0 < W; w0 += wordsPerGroup) {
    const s = Q.scales(sp, half);
    const o = Q.offsets(sp, half, s);
    sp += Q.scaleBytes(half);
    const w1 = min(w0 + wordsPerGroup, W);
    for (let w = w0; w < w1; w++) {
      const v = v128.load(wp);
      wp += 16;
      for (let shift = 0; shift < 32; shift += bits) {
        v128.store(dst, Q.dequant(v, shift, mask, s, o));
        dst += 32; // the next k of the [·, 8] panel
      }
    }
  }
}

/** y [M, N] = x [M, K] · Wᵀ + bias for any M (fastest for M > 8), W packed as at the top of this file (flags: as qgemv's). */
export function qgemm(x: usize, ldx: i32, M: i32, K: i32, wq: usize, so: usize, N: i32, bias: usize, y: usize, ldy: i32, flags: i32, group: i32, scratch: usize): void {
  const bits = flags & 0xff;
  gHalf = (flags & HALF_SCALES) !== 0 ? <f32>(1 << (bits - 1)) : 0;
  const xStride = (<usize>ldx) << 2;
  const yStride = (<usize>ldy) << 2;
  const panelBytes = (<usize>((K * bits + 31) >> 5)) << 4;
  const panelScales = <usize>((K + group - 1) / group) * Q.scaleBytes(gHalf);
  for (let m0 = 0; m0 < M; m0 += MC) {
    const rows = min(MC, M - m0);
    for (let c = 0; c < N; c += 8) {
      const p = <usize>(c >> 2); // the first of this 8-column panel's two 4-row panels
      dequantPanel(K, wq + p * panelBytes, so + p * panelScales, bits, group, scratch);
      dequantPanel(K, wq + (p + 1) * panelBytes, so + (p + 1) * panelScales, bits, group, scratch + 16);
      const n = min(8, N - c);
      gemm(x + <usize>m0 * xStride, ldx, rows, K, scratch, n, bias + ((<usize>c) << 2), y + <usize>m0 * yStride + ((<usize>c) << 2), ldy);
    }
  }
}
