// AssemblyScript, compiled to WebAssembly (128-bit SIMD, and again with relaxed SIMD, where the
// multiply-adds are fused: F.madd in gemm.ts) by scripts/build-wasm.mjs into
// src/wasm/module.ts. The projections of the 'wasm' backend: one GEMM for Q, K, V and the output.
//
//   gemm       y [M, N] (row stride ldy) = x [M, K] (row stride ldx) · Wᵀ + bias
//   transpose  K [rows, Dh] (row stride ldk) → Kᵀ in blocks of 64 keys [⌈rows/64⌉, Dh, 64] (attention.ts reads keys so)
//
// W [N, K] is packed once, at layer creation (src/wasm/weights.ts), into panels of 8 output columns:
// wp[(p·K + k)·8 + c] = W[p·8 + c, k], zero for p·8 + c ≥ N; the bias likewise into [P·8] (zeros
// when the layer has none). The micro-kernel keeps a 4 × 8 block of y in eight f32x4 registers and
// per k reads one splat of each of 4 x rows and two vectors of the panel: 8 multiply-adds per 6 loads.
// Rows are taken in chunks of MC so that the chunk of x stays in cache while every panel goes by.
// Fewer than 4 rows (a decode step) go through two panels at a time (see gemm); every row's outputs
// are the same bits however many rows a call has.
//
// The host guarantees: all pointers are byte addresses of f32 data inside memory; ldx ≥ K, ldy ≥ N.

const MC: i32 = 64; // rows of x per chunk

/**
 * a·b + c on four lanes. The relaxed build (scripts/build-wasm.mjs) uses f32x4.relaxed_madd, which is one fused
 * multiply-add where the CPU has one (x86 FMA3, Arm) and a multiply then an add elsewhere: the same
 * arithmetic as the 128-bit build's, or one rounding fewer.
 */
// biome-ignore lint/complexity/noStaticOnlyClass: @inline needs a method here (see KvDecode)
export class F {
  @inline
  static madd(a: v128, b: v128, c: v128): v128 {
    if (ASC_FEATURE_RELAXED_SIMD) return f32x4.relaxed_madd(a, b, c);
    return f32x4.add(c, f32x4.mul(a, b));
  }
}

/*
 * Constants in memory. V8's optimizing compiler (x64: Node 20's V8 11, Deno's V8 15) builds a nonzero
 * v128.const where it is used, out of a general register (movq, vmovq, vpunpcklqdq: 3 instructions), inside
 * a loop every time round, though vector registers are free; and Binaryen (asc -O3) folds a constant splat
 * back into a v128.const at every use, even one a kernel hoists above its loop. So the kernels' hot nonzero
 * vector constants are words of memory (`memory.data`, below __heap_base), each read where it is used as
 * a splat (v128.load32_splat: one vbroadcastss): Softmax.exp4 over 64 floats, its 12 constants, 91 → 55 ns.
 * Not everywhere: in a loop short of general registers a load's address can cost more than the constant
 * (KvDecode.finiteHighHalfToFloat4, qgemm.ts's Q.groupPanel keep theirs; each was measured).
 */

/** The first byte the host may use: everything above is its arena. */
export function heapBase(): usize {
  return __heap_base;
}

/** Stores the first n (≤ 8) lanes of a0 ++ a1 at ptr. */
function store8(ptr: usize, a0: v128, a1: v128, n: i32): void {
  if (n >= 8) {
    v128.store(ptr, a0);
    v128.store(ptr, a1, 16);
    return;
  }
  if (n > 0) store<f32>(ptr, f32x4.extract_lane(a0, 0));
  if (n > 1) store<f32>(ptr, f32x4.extract_lane(a0, 1), 4);
  if (n > 2) store<f32>(ptr, f32x4.extract_lane(a0, 2), 8);
  if (n > 3) store<f32>(ptr, f32x4.extract_lane(a0, 3), 12);
  if (n > 4) store<f32>(ptr, f32x4.extract_lane(a1, 0), 16);
  if (n > 5) store<f32>(ptr, f32x4.extract_lane(a1, 1), 20);
  if (n > 6) store<f32>(ptr, f32x4.extract_lane(a1, 2), 24);
}

/** y [M, N] = x [M, K] · Wᵀ + bias, W packed in panels of 8 columns (see the top of this file). */
export function gemm(x: usize, ldx: i32, M: i32, K: i32, wp: usize, N: i32, bias: usize, y: usize, ldy: i32): void {
  const P = (N + 7) >> 3;
  const xStride = (<usize>ldx) << 2; // bytes per row of x
  const yStride = (<usize>ldy) << 2;
  // Fewer than 4 rows (a decode step): each row against two panels at a time, two streams of W in
  // flight and four sums that do not wait on each other, where one panel's two sums wait on the FMA's
  // latency (E 2048 f32 layer, a decode step: 4.4 → 3.6–3.8 ms, 2026-12-06). Each column's sum is taken
  // in the order of the loops below: the same bits.
  let pStart = 0;
  if (M < 4) {
    pStart = P & ~1; // an odd last panel: the loops below
    for (let m = 0; m < M; m++) {
      const xr = x + <usize>m * xStride;
      const yr = y + <usize>m * yStride;
      for (let p = 0; p < pStart; p += 2) {
        const panel = wp + ((<usize>p * <usize>K) << 5);
        const panel2 = panel + ((<usize>K) << 5);
        const bp = bias + ((<usize>p) << 5);
        let a0 = v128.load(bp);
        let a1 = v128.load(bp, 16);
        let c0 = v128.load(bp, 32);
        let c1 = v128.load(bp, 48);
        let x0 = xr;
        let w = panel;
        let u = panel2;
        for (let k = 0; k < K; k++) {
          const s = v128.load32_splat(x0);
          a0 = F.madd(s, v128.load(w), a0);
          a1 = F.madd(s, v128.load(w, 16), a1);
          c0 = F.madd(s, v128.load(u), c0);
          c1 = F.madd(s, v128.load(u, 16), c1);
          x0 += 4;
          w += 32;
          u += 32;
        }
        const n0 = p << 3;
        store8(yr + ((<usize>n0) << 2), a0, a1, N - n0);
        store8(yr + ((<usize>n0 + 8) << 2), c0, c1, N - n0 - 8);
      }
    }
  }
  for (let m0 = 0; m0 < M; m0 += MC) {
    const m1 = min(m0 + MC, M);
    for (let p = pStart; p < P; p++) {
      const panel = wp + ((<usize>p * <usize>K) << 5); // 8 floats per k
      const b0 = v128.load(bias + ((<usize>p) << 5));
      const b1 = v128.load(bias + ((<usize>p) << 5), 16);
      const n0 = p << 3;
      const cols = N - n0;
      let m = m0;
      // 4 rows × 8 columns per step.
      for (; m + 4 <= m1; m += 4) {
        let a00 = b0;
        let a01 = b1;
        let a10 = b0;
        let a11 = b1;
        let a20 = b0;
        let a21 = b1;
        let a30 = b0;
        let a31 = b1;
        let x0 = x + <usize>m * xStride;
        const x1 = xStride;
        let w = panel;
        for (let k = 0; k < K; k++) {
          const w0 = v128.load(w);
          const w1 = v128.load(w, 16);
          let s = v128.load32_splat(x0);
          a00 = F.madd(s, w0, a00);
          a01 = F.madd(s, w1, a01);
          s = v128.load32_splat(x0 + x1);
          a10 = F.madd(s, w0, a10);
          a11 = F.madd(s, w1, a11);
          s = v128.load32_splat(x0 + 2 * x1);
          a20 = F.madd(s, w0, a20);
          a21 = F.madd(s, w1, a21);
          s = v128.load32_splat(x0 + 3 * x1);
          a30 = F.madd(s, w0, a30);
          a31 = F.madd(s, w1, a31);
          x0 += 4;
          w += 32;
        }
        const out = y + <usize>m * yStride + ((<usize>n0) << 2);
        store8(out, a00, a01, cols);
        store8(out + yStride, a10, a11, cols);
        store8(out + 2 * yStride, a20, a21, cols);
        store8(out + 3 * yStride, a30, a31, cols);
      }
      // The rows left over: one at a time (k in the 4-row loop's order: a row gives the same bits alone or
      // among others, which a paged call's rows rely on).
      for (; m < m1; m++) {
        let a0 = b0;
        let a1 = b1;
        let x0 = x + <usize>m * xStride;
        let w = panel;
        for (let k = 0; k < K; k++) {
          const s = v128.load32_splat(x0);
          a0 = F.madd(s, v128.load(w), a0);
          a1 = F.madd(s, v128.load(w, 16), a1);
          x0 += 4;
          w += 32;
        }
        store8(y + <usize>m * yStride + ((<usize>n0) << 2), a0, a1, cols);
      }
    }
  }
}

/** Kᵀ in blocks of 64 keys, kt [⌈rows/64⌉, Dh, 64] (attention.ts's layout), from K [rows, Dh] (row stride ldk); zero past `rows`. */
export function transpose(k: usize, ldk: i32, rows: i32, Dh: i32, kt: usize): void {
  const blocks = (rows + 63) >> 6;
  for (let jb = 0; jb < blocks; jb++) {
    for (let d = 0; d < Dh; d++) {
      const dst = kt + ((<usize>(jb * Dh + d)) << 8);
      for (let jj = 0; jj < 64; jj++) {
        const j = (jb << 6) + jj;
        store<f32>(dst + ((<usize>jj) << 2), j < rows ? load<f32>(k + ((<usize>j * <usize>ldk + <usize>d) << 2)) : 0);
      }
    }
  }
}
