// AssemblyScript, compiled with gemm.ts and attention.ts into src/wasm/module.ts. The projections of the
// 'wasm' backend for quantized weights: the same y = x · Wᵀ + bias as gemm.ts, with W kept packed
// (4 or 8 bits per weight plus a (scale, offset) pair per group along K) and dequantized in the loops:
//
//   qgemv  M ≤ 8 rows (decode): every quant word is read once, from memory, for all M rows
//   qgemm  more rows (prefill): per chunk of 64 rows, each panel of 8 columns is dequantized into a
//          float32 scratch [K, 8] (gemm.ts's panel layout) and gemm.ts's 4 × 8 micro-kernel runs on it
//
// The layout, made once at layer creation (src/wasm/projection.ts) from src/quant's PackedWeight:
//   wq  [N8/4, W, 4] u32   the words of 4 rows of W side by side: wq[(c·W + w)·4 + r] = quants[(4c + r)·W + w],
//                          W = ceil(K·bits / 32) words per row (weight k in the bits from bits·(k % perWord)
//                          of word k / perWord, perWord = 32 / bits), N8 = N rounded up to 8, zeros past N
//   so  [N8/4, groups, 8] f32  so[(c·groups + g)·8 + r] = scale of row 4c + r in group g, [… + 4 + r] its offset
// so that one v128 load gives the word w of 4 rows, the lanes are 4 output columns, and a word lies in
// one group (group ≥ 16 and a multiple of 8). It stays packed: bits + 64 / group bits per weight (6 for
// 4 bits in groups of 32), as PackedWeight; only qgemm's scratch holds floats, one panel [K, 8] at a time. A weight is w = scale·q − offset in float32, exactly as
// src/quant/pack.ts's unpackWeight computes it, and the sums run over k in order from the bias, as in
// gemm.ts: both kernels give, bit for bit, what gemm gives on the unpacked float32 weights.
//
// The host guarantees: pointers are byte addresses inside memory; bits is 4 or 8; group is a power of
// two ≥ 16; ldx ≥ K, ldy ≥ N; bias holds ⌈N/8⌉·8 floats; scratch (qgemm) holds W·perWord·8 floats.

import { gemm } from './gemm';

const MC: i32 = 64; // rows of x per chunk (as gemm.ts)

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
   * The whole words 0 … w1 − 1 of one panel of 4 rows of W (wq, so at the panel) into y[0 … R−1, 4 columns],
   * the sums starting from the bias b and going over k in order. Each word is loaded and dequantized once,
   * then every row takes its 32 / B multiply-adds. R ≤ 8 and B (bits) are constants: inlined once per (R, B).
   */
  @inline
  static panelWords(R: i32, B: i32, x: usize, xStride: usize, wq: usize, so: usize, group: i32, w1: i32, b: v128, y: usize, yStride: usize, cols: i32): void {
    const perWord = 32 / B;
    const mask = i32x4.splat((1 << B) - 1);
    const groupShift = ctz<i32>(group / perWord); // words per group: a power of two
    let a0 = b;
    let a1 = b;
    let a2 = b;
    let a3 = b;
    let a4 = b;
    let a5 = b;
    let a6 = b;
    let a7 = b;
    for (let w = 0; w < w1; w++) {
      const v = v128.load(wq + ((<usize>w) << 4)); // word w of the 4 rows
      const sp = so + ((<usize>(w >> groupShift)) << 5);
      const s = v128.load(sp);
      const o = v128.load(sp, 16);
      let xk = x + ((<usize>(w * perWord)) << 2);
      let u = v;
      for (let j = 0; j < perWord; j++) {
        const d = f32x4.sub(f32x4.mul(f32x4.convert_i32x4_s(v128.and(u, mask)), s), o); // weight k of the 4 rows
        u = i32x4.shr_u(u, B);
        a0 = f32x4.add(a0, f32x4.mul(v128.load32_splat(xk), d));
        if (R > 1) a1 = f32x4.add(a1, f32x4.mul(v128.load32_splat(xk + xStride), d));
        if (R > 2) a2 = f32x4.add(a2, f32x4.mul(v128.load32_splat(xk + 2 * xStride), d));
        if (R > 3) a3 = f32x4.add(a3, f32x4.mul(v128.load32_splat(xk + 3 * xStride), d));
        if (R > 4) a4 = f32x4.add(a4, f32x4.mul(v128.load32_splat(xk + 4 * xStride), d));
        if (R > 5) a5 = f32x4.add(a5, f32x4.mul(v128.load32_splat(xk + 5 * xStride), d));
        if (R > 6) a6 = f32x4.add(a6, f32x4.mul(v128.load32_splat(xk + 6 * xStride), d));
        if (R > 7) a7 = f32x4.add(a7, f32x4.mul(v128.load32_splat(xk + 7 * xStride), d));
        xk += 4;
      }
    }
    Q.store4(y, a0, cols);
    if (R > 1) Q.store4(y + yStride, a1, cols);
    if (R > 2) Q.store4(y + 2 * yStride, a2, cols);
    if (R > 3) Q.store4(y + 3 * yStride, a3, cols);
    if (R > 4) Q.store4(y + 4 * yStride, a4, cols);
    if (R > 5) Q.store4(y + 5 * yStride, a5, cols);
    if (R > 6) Q.store4(y + 6 * yStride, a6, cols);
    if (R > 7) Q.store4(y + 7 * yStride, a7, cols);
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

  /** One panel for R rows, B bits: its whole words (panelWords), then a row's last, partial word if K leaves one. */
  @inline
  static panel(R: i32, B: i32, x: usize, xStride: usize, K: i32, wq: usize, so: usize, group: i32, b: v128, y: usize, yStride: usize, cols: i32): void {
    const perWord = 32 / B;
    const whole = K / perWord;
    Q.panelWords(R, B, x, xStride, wq, so, group, whole, b, y, yStride, cols);
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

/** Q.panel() for a run-time M ≤ 8 and bits: a copy per (M, bits). */
function panelAny(M: i32, bits: i32, x: usize, xStride: usize, K: i32, wq: usize, so: usize, group: i32, b: v128, y: usize, yStride: usize, cols: i32): void {
  if (bits === 4) {
    switch (M) {
      case 1:
        Q.panel(1, 4, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      case 2:
        Q.panel(2, 4, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      case 3:
        Q.panel(3, 4, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      case 4:
        Q.panel(4, 4, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      case 5:
        Q.panel(5, 4, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      case 6:
        Q.panel(6, 4, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      case 7:
        Q.panel(7, 4, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      default:
        Q.panel(8, 4, x, xStride, K, wq, so, group, b, y, yStride, cols);
    }
  } else {
    switch (M) {
      case 1:
        Q.panel(1, 8, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      case 2:
        Q.panel(2, 8, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      case 3:
        Q.panel(3, 8, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      case 4:
        Q.panel(4, 8, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      case 5:
        Q.panel(5, 8, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      case 6:
        Q.panel(6, 8, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      case 7:
        Q.panel(7, 8, x, xStride, K, wq, so, group, b, y, yStride, cols);
        break;
      default:
        Q.panel(8, 8, x, xStride, K, wq, so, group, b, y, yStride, cols);
    }
  }
}

/** y [M, N] = x [M, K] · Wᵀ + bias for 1 ≤ M ≤ 8 (more rows: qgemm), W packed as at the top of this file. */
export function qgemv(x: usize, ldx: i32, M: i32, K: i32, wq: usize, so: usize, N: i32, bias: usize, y: usize, ldy: i32, bits: i32, group: i32): void {
  const xStride = (<usize>ldx) << 2;
  const yStride = (<usize>ldy) << 2;
  const panelBytes = (<usize>((K * bits + 31) >> 5)) << 4; // one panel of wq
  const panelScales = (<usize>((K + group - 1) / group)) << 5; // one panel of so
  for (let c = 0; c < N; c += 4) {
    const p = <usize>(c >> 2);
    const b = v128.load(bias + ((<usize>c) << 2));
    panelAny(M, bits, x, xStride, K, wq + p * panelBytes, so + p * panelScales, group, b, y + ((<usize>c) << 2), yStride, N - c);
  }
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
