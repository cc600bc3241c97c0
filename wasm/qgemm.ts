// AssemblyScript, compiled with gemm.ts and attention.ts into src/wasm/module.ts. The projections of the
// 'wasm' backend for quantized weights: the same y = x · Wᵀ + bias as gemm.ts, with W kept packed
// (4 or 8 bits per weight plus a (scale, offset) pair per group along K) and dequantized in the loops.
// A weight is w = scale·q − offset (src/quant/pack.ts's unpackWeight), float32 throughout:
//
//   qgemv  M ≤ 8 rows (decode): each quant word is read once from memory and its fields converted to
//          float once for up to 3 rows (more rows take the panel again, from cache); per group and row,
//          y += scale·Σ x·q − offset·Σ x (the sums of x per group first, into the scratch), so that a
//          weight costs one convert and one multiply-add per row, not a dequantization per column; each
//          panel first touches the next one's cache lines, so that they come from memory while this one
//          computes (1.6–1.9× faster for one row when the weights are not in cache)
//   qgemm  more rows (prefill): per chunk of 64 rows, each panel of 8 columns is dequantized into a
//          float32 scratch [K, 8] (gemm.ts's panel layout) and gemm.ts's 4 × 8 micro-kernel runs on it:
//          bit for bit what gemm gives on the unpacked float32 weights
//
// The layout, made once at layer creation (src/wasm/projection.ts) from src/quant's PackedWeight:
//   wq  [N8/4, W, 4] u32   the words of 4 rows of W side by side: wq[(c·W + w)·4 + r] = quants[(4c + r)·W + w],
//                          W = ceil(K·bits / 32) words per row (weight k in the bits from bits·(k % perWord)
//                          of word k / perWord, perWord = 32 / bits), N8 = N rounded up to 8, zeros past N
//   so  [N8/4, groups, 8] f32  so[(c·groups + g)·8 + r] = scale of row 4c + r in group g, [… + 4 + r] its offset
// so that one v128 load gives the word w of 4 rows, the lanes are 4 output columns, and a word lies in
// one group (group ≥ 16 and a multiple of 8). It stays packed: bits + 64 / group bits per weight (6 for
// 4 bits in groups of 32), as PackedWeight; only qgemm's scratch holds floats, one panel [K, 8] at a time.
//
// The host guarantees: pointers are byte addresses inside memory; bits is 4 or 8; group is a power of
// two ≥ 16; ldx ≥ K, ldy ≥ N; bias holds ⌈N/8⌉·8 floats; scratch holds W·perWord·8 floats (qgemm) or
// M·(groups + K) (qgemv).

import { gemm } from './gemm';

const MC: i32 = 64; // rows of x per chunk (as gemm.ts)
const ROWS: i32 = 3; // qgemv's rows per pass over a panel (4 rows' sums would not stay in x86-64's 16 SIMD registers: 4 rows in one pass measured no faster than 3 + 1)

/**
 * The helpers AssemblyScript inlines (`@inline`), their constant arguments (R, B) folded away: static
 * methods, because the linter does not parse a decorator on a plain function.
 */
// biome-ignore lint/complexity/noStaticOnlyClass: @inline needs a method here (see above)
class Q {
  /** The 4-lane weight vector of quant field `shift` of word v: (q as float)·s − o. */
  @inline
  static dequant(v: v128, shift: i32, mask: v128, s: v128, o: v128): v128 {
    return f32x4.sub(f32x4.mul(f32x4.convert_i32x4_s(v128.and(i32x4.shr_u(v, shift), mask)), s), o);
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
   * The whole words 0 … whole − 1 of one panel of 4 rows of W (wq, so at the panel) into y[0 … R−1, 4 columns],
   * R ≤ 3 and B (bits) constants (inlined once per (R, B)). Per group g and row r, in float32:
   *   y += s_g · Σ_k x_k·q_k − o_g · X_g      (k in group g; X_g = Σ_k x_k, from xsum [R, groups], row stride xsumStride)
   * which is Σ_k x_k·(s_g·q_k − o_g) with two multiplies per group instead of two per weight. Each word is
   * loaded once and its fields converted once for all R rows; the sums start from the bias b.
   */
  @inline
  static groupPanel(
    R: i32,
    B: i32,
    xs: usize,
    xsStride: usize,
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
  ): void {
    const perWord = 32 / B;
    const mask = i32x4.splat((1 << B) - 1);
    const mask1 = i32x4.splat(((1 << B) - 1) << B);
    const mask2 = i32x4.splat(((1 << B) - 1) << (2 * B));
    const mask3 = i32x4.splat(((1 << B) - 1) << (3 * B));
    const wordsPerGroup = group / perWord;
    let a0 = b;
    let a1 = b;
    let a2 = b;
    let x0 = xs; // row r's scaled x at the current word: xs + r·xsStride + 4·k
    let x1 = xs + xsStride;
    let x2 = xs + 2 * xsStride;
    let sp = so;
    let xg = xsum;
    for (let w0 = 0; w0 < whole; w0 += wordsPerGroup) {
      const w1 = min(w0 + wordsPerGroup, whole);
      // Σ x·q of this group: row r's in the chains s_r0 … (4 chains for one row, 2 each for two, 1 each
      // for three), field j of each 4 into chain j mod chains: sums that do not wait on each other's
      // float add (one chain would wait an add's latency per field: 8 per word at 4 bits).
      let s00 = f32x4.splat(0);
      let s01 = s00;
      let s02 = s00;
      let s03 = s00;
      let s10 = s00;
      let s11 = s00;
      let s20 = s00;
      for (let w = w0; w < w1; w++) {
        let u = v128.load(wq + ((<usize>w) << 4)); // word w of the 4 rows
        for (let f = 0; f < perWord; f += 4) {
          // Fields f … f + 3 (weights k … k + 3), each converted once for every row. Field j is taken
          // in place, q·2^(B·j) (masked, not shifted), and meets x·2^(−B·j) (the scaled xs): the same
          // product, one shift fewer. 8 bits' field 3 (q·2²⁴ past i32) is shifted down first.
          let q = f32x4.convert_i32x4_s(v128.and(u, mask));
          s00 = f32x4.add(s00, f32x4.mul(v128.load32_splat(x0, 0), q));
          if (R > 1) s10 = f32x4.add(s10, f32x4.mul(v128.load32_splat(x1, 0), q));
          if (R > 2) s20 = f32x4.add(s20, f32x4.mul(v128.load32_splat(x2, 0), q));
          q = f32x4.convert_i32x4_s(v128.and(u, mask1));
          if (R < 3) s01 = f32x4.add(s01, f32x4.mul(v128.load32_splat(x0, 4), q));
          else s00 = f32x4.add(s00, f32x4.mul(v128.load32_splat(x0, 4), q));
          if (R === 2) s11 = f32x4.add(s11, f32x4.mul(v128.load32_splat(x1, 4), q));
          if (R > 2) s10 = f32x4.add(s10, f32x4.mul(v128.load32_splat(x1, 4), q));
          if (R > 2) s20 = f32x4.add(s20, f32x4.mul(v128.load32_splat(x2, 4), q));
          q = f32x4.convert_i32x4_s(v128.and(u, mask2));
          if (R === 1) s02 = f32x4.add(s02, f32x4.mul(v128.load32_splat(x0, 8), q));
          else s00 = f32x4.add(s00, f32x4.mul(v128.load32_splat(x0, 8), q));
          if (R > 1) s10 = f32x4.add(s10, f32x4.mul(v128.load32_splat(x1, 8), q));
          if (R > 2) s20 = f32x4.add(s20, f32x4.mul(v128.load32_splat(x2, 8), q));
          q = f32x4.convert_i32x4_s(B === 8 ? v128.and(i32x4.shr_u(u, 3 * B), mask) : v128.and(u, mask3));
          if (R === 1) s03 = f32x4.add(s03, f32x4.mul(v128.load32_splat(x0, 12), q));
          else if (R === 2) s01 = f32x4.add(s01, f32x4.mul(v128.load32_splat(x0, 12), q));
          else s00 = f32x4.add(s00, f32x4.mul(v128.load32_splat(x0, 12), q));
          if (R === 2) s11 = f32x4.add(s11, f32x4.mul(v128.load32_splat(x1, 12), q));
          if (R > 2) s10 = f32x4.add(s10, f32x4.mul(v128.load32_splat(x1, 12), q));
          if (R > 2) s20 = f32x4.add(s20, f32x4.mul(v128.load32_splat(x2, 12), q));
          u = i32x4.shr_u(u, 4 * B); // (8 bits: one pass of this loop)
          x0 += 16;
          if (R > 1) x1 += 16;
          if (R > 2) x2 += 16;
        }
      }
      let g0 = s00;
      let g1 = s10;
      const g2 = s20;
      if (R === 1) g0 = f32x4.add(f32x4.add(s00, s01), f32x4.add(s02, s03));
      if (R === 2) {
        g0 = f32x4.add(s00, s01);
        g1 = f32x4.add(s10, s11);
      }
      const s = v128.load(sp);
      const o = v128.load(sp, 16);
      sp += 32;
      a0 = f32x4.add(a0, f32x4.sub(f32x4.mul(s, g0), f32x4.mul(o, v128.load32_splat(xg))));
      if (R > 1) a1 = f32x4.add(a1, f32x4.sub(f32x4.mul(s, g1), f32x4.mul(o, v128.load32_splat(xg + xsumStride))));
      if (R > 2) a2 = f32x4.add(a2, f32x4.sub(f32x4.mul(s, g2), f32x4.mul(o, v128.load32_splat(xg + 2 * xsumStride))));
      xg += 4;
    }
    Q.store4(y, a0, cols);
    if (R > 1) Q.store4(y + yStride, a1, cols);
    if (R > 2) Q.store4(y + 2 * yStride, a2, cols);
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

  /** One panel for R ≤ 3 rows, B bits: its whole words (groupPanel), then a row's last, partial word if K leaves one. */
  @inline
  static panel(
    R: i32,
    B: i32,
    x: usize,
    xStride: usize,
    xs: usize,
    xsStride: usize,
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
  ): void {
    const perWord = 32 / B;
    const whole = K / perWord;
    Q.groupPanel(R, B, xs, xsStride, xsum, xsumStride, wq, so, group, whole, b, y, yStride, cols);
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
  const sp = so + ((<usize>((w * perWord) / group)) << 5);
  const s = v128.load(sp);
  const o = v128.load(sp, 16);
  for (let r = 0; r < M; r++) {
    const out = y + <usize>r * yStride;
    let a = Q.load4(out, cols);
    let xk = x + <usize>r * xStride + ((<usize>(w * perWord)) << 2);
    for (let j = 0; j < n; j++) {
      a = f32x4.add(a, f32x4.mul(v128.load32_splat(xk), Q.dequant(v, j * bits, mask, s, o)));
      xk += 4;
    }
    Q.store4(out, a, cols);
  }
}

/** Q.panel() for a run-time R ≤ 3 and bits: a copy per (R, bits). */
function panelAny(
  R: i32,
  bits: i32,
  x: usize,
  xStride: usize,
  xs: usize,
  xsStride: usize,
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
): void {
  if (bits === 4) {
    if (R === 1) Q.panel(1, 4, x, xStride, xs, xsStride, xsum, xsumStride, K, wq, so, group, b, y, yStride, cols);
    else if (R === 2) Q.panel(2, 4, x, xStride, xs, xsStride, xsum, xsumStride, K, wq, so, group, b, y, yStride, cols);
    else Q.panel(3, 4, x, xStride, xs, xsStride, xsum, xsumStride, K, wq, so, group, b, y, yStride, cols);
  } else {
    if (R === 1) Q.panel(1, 8, x, xStride, xs, xsStride, xsum, xsumStride, K, wq, so, group, b, y, yStride, cols);
    else if (R === 2) Q.panel(2, 8, x, xStride, xs, xsStride, xsum, xsumStride, K, wq, so, group, b, y, yStride, cols);
    else Q.panel(3, 8, x, xStride, xs, xsStride, xsum, xsumStride, K, wq, so, group, b, y, yStride, cols);
  }
}

/**
 * y [M, N] = x [M, K] · Wᵀ + bias for 1 ≤ M ≤ 8 (more rows: qgemm), W packed as at the top of this file.
 * scratch: M·(groups + K) floats, where the sums of each row's x over each group go first, then x scaled for
 * the fields taken in place (XS below). Rows are taken
 * ROWS at a time, each panel by all of them before the next (its words from cache after the first).
 */
export function qgemv(x: usize, ldx: i32, M: i32, K: i32, wq: usize, so: usize, N: i32, bias: usize, y: usize, ldy: i32, bits: i32, group: i32, scratch: usize): void {
  const xStride = (<usize>ldx) << 2;
  const yStride = (<usize>ldy) << 2;
  const groups = (K + group - 1) / group;
  const panelBytes = (<usize>((K * bits + 31) >> 5)) << 4; // one panel of wq
  const panelScales = (<usize>groups) << 5; // one panel of so
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
  // XS [M, kWhole]: row r's x with weight k scaled by 2^(−bits·(k % 4)) for the fields taken in place
  // (groupPanel; 8 bits' k % 4 = 3 unscaled); after X in the scratch. Exact, a power of two, for any x
  // above 2⁻¹¹⁰ in size (smaller ones become subnormal and lose bits: contributions far below f32's
  // rounding of the sum).
  const xs = scratch + <usize>M * xsumStride;
  const xsStride = (<usize>kWhole) << 2;
  let f = f32x4.splat(1);
  f = f32x4.replace_lane(f, 1, <f32>1 / <f32>(1 << bits));
  f = f32x4.replace_lane(f, 2, <f32>1 / <f32>(1 << (2 * bits)));
  f = f32x4.replace_lane(f, 3, bits === 8 ? <f32>1 : <f32>1 / <f32>(1 << (3 * bits))); // 8 bits' field 3 is shifted down, not taken in place
  for (let r = 0; r < M; r++) {
    const from = x + <usize>r * xStride;
    const to = xs + <usize>r * xsStride;
    for (let k = 0; k < kWhole; k += 4) v128.store(to + ((<usize>k) << 2), f32x4.mul(v128.load(from + ((<usize>k) << 2)), f));
  }
  let touched: u32 = 0;
  for (let c = 0; c < N; c += 4) {
    const p = <usize>(c >> 2);
    const b = v128.load(bias + ((<usize>c) << 2));
    const wp = wq + p * panelBytes;
    const sp = so + p * panelScales;
    if (c + 4 < N) {
      // Touch the next panel's cache lines (its words and scales) before this panel's arithmetic: loads
      // that depend on nothing, so the CPU has them in flight while it computes, and the next panel
      // comes from cache rather than waiting on memory (a panel's arithmetic is ~50 operations per
      // 16 bytes, which leaves the hardware prefetcher behind when the weights are not cached).
      const nw = wp + panelBytes;
      for (let off: usize = 0; off < panelBytes; off += 64) touched ^= load<u32>(nw + off);
      const ns = sp + panelScales;
      for (let off: usize = 0; off < panelScales; off += 64) touched ^= load<u32>(ns + off);
    }
    const out = y + ((<usize>c) << 2);
    for (let r = 0; r < M; r += ROWS) {
      const rs = <usize>r;
      panelAny(
        min(ROWS, M - r),
        bits,
        x + rs * xStride,
        xStride,
        xs + rs * xsStride,
        xsStride,
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
      );
    }
  }
  store<u32>(scratch, touched); // the touches' one use (the sums of x there are spent)
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
  for (let w0 = 0; w0 < W; w0 += wordsPerGroup) {
    const s = v128.load(sp);
    const o = v128.load(sp, 16);
    sp += 32;
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

/** y [M, N] = x [M, K] · Wᵀ + bias for any M (fastest for M > 8), W packed as at the top of this file. */
export function qgemm(x: usize, ldx: i32, M: i32, K: i32, wq: usize, so: usize, N: i32, bias: usize, y: usize, ldy: i32, bits: i32, group: i32, scratch: usize): void {
  const xStride = (<usize>ldx) << 2;
  const yStride = (<usize>ldy) << 2;
  const panelBytes = (<usize>((K * bits + 31) >> 5)) << 4;
  const panelScales = (<usize>((K + group - 1) / group)) << 5;
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
