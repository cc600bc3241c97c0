// AssemblyScript, compiled to WebAssembly (128-bit SIMD) by scripts/build-wasm.mjs into
// src/wasm/module.ts. The attention of the 'wasm' backend, for one (sequence, head) per call:
//
//   setRule        the call's score rule (src/cpu/score-rule.ts, the float64 twin): scale, softcap,
//                  ALiBi slope, sink, head-mask factor, causal, window, key padding, attnMask
//   attend         O [Sq, Dh] = softmax(rule(Q·Kᵀ)) · V, tiled: 4 query rows × 64 keys at a time,
//                  online softmax (running max m and sum l per row), never an Sq × Skv buffer
//   probabilities  P [Sq, Skv] from Q, Kᵀ and attend's (m, l): only for needWeights
//
// Layouts: Q [Sq, Dh] row stride ldq; Kᵀ [Dh, ldkt] from gemm.ts's transpose, zero past Skv, with
// ldkt ≥ Skv + 8 (the score micro-kernel reads 8 keys at a time past the last one it needs);
// V [Skv, Dh] row stride ldv; O [Sq, Dh] row stride ldo; the key padding [Skv] u8 (1 = ignore);
// attnMask [Sq, Skv] f32 (added; −∞ = masked); stats [Sq, 2] f32 (m, l). Pointer 0 = none.
// Row i sees key j when first(i) ≤ j ≤ last(i) (causal, window, as keyBand) and j is not padded.
// scratch: ≥ 4·BC + 4·(Dh + 3) + 12 floats (16-byte aligned). A row that sees no key gets 0. The fast exp
// (exp4, Cephes' exp2f polynomial) has a relative error of about 2e-7.

const BC: i32 = 64; // keys per block
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

export function setRule(scale: f32, softcap: f32, slope: f32, sink: f32, hasSink: i32, headScale: f32, causal: i32, window: i32, pad: usize, mask: usize): void {
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

/** eˣ on four lanes: 2^n · p(f), t = x·log2e = n + f, |f| ≤ ½; x ≤ −88 gives 0 (−∞ included). */
function exp4(x: v128): v128 {
  let t = f32x4.mul(x, f32x4.splat(LOG2E));
  t = f32x4.min(f32x4.max(t, f32x4.splat(-127)), f32x4.splat(127));
  const n = f32x4.nearest(t);
  const f = f32x4.sub(t, n);
  let p = f32x4.splat(1.5353361883195e-4);
  p = f32x4.add(f32x4.mul(p, f), f32x4.splat(1.339887440266574e-3));
  p = f32x4.add(f32x4.mul(p, f), f32x4.splat(9.61843735767464e-3));
  p = f32x4.add(f32x4.mul(p, f), f32x4.splat(5.550332471162809e-2));
  p = f32x4.add(f32x4.mul(p, f), f32x4.splat(2.402264791363012e-1));
  p = f32x4.add(f32x4.mul(p, f), f32x4.splat(6.931472028550421e-1));
  p = f32x4.add(f32x4.mul(p, f), f32x4.splat(1));
  // 2^n from its exponent bits; n = −127 gives the bits of 0.
  const scale = i32x4.shl(i32x4.add(i32x4.trunc_sat_f32x4_s(n), i32x4.splat(127)), 23);
  return f32x4.mul(p, scale);
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

/** O [Sq, Dh] for one (sequence, head); see the top of this file. */
export function attend(q: usize, ldq: i32, kt: usize, ldkt: i32, v: usize, ldv: i32, o: usize, ldo: i32, Sq: i32, Skv: i32, Dh: i32, stats: usize, scratch: usize): void {
  const Dp = (Dh + 3) & ~3;
  const D4 = Dh >> 2; // whole f32x4 chunks of a row
  const sc = scratch; // p [4, BC]
  const acc = sc + ((<usize>(4 * BC)) << 2); // [4, Dp]
  const rowBytes = (<usize>Dp) << 2;
  const ktStride = (<usize>ldkt) << 2;
  const vStride = (<usize>ldv) << 2;
  const m = acc + 4 * rowBytes; // [4] running max
  const l = m + 16; // [4] running sum
  const alpha = l + 16; // [4] this block's rescale factor
  for (let i0 = 0; i0 < Sq; i0 += 4) {
    const R = min(4, Sq - i0);
    // Per row: its band, its running max m, sum l and rescale factor alpha.
    // Rows past Sq see no key (first Skv, last −1).
    const ip0 = i0 + Skv - Sq;
    const f0 = firstKey(ip0);
    const k0 = lastKey(ip0, Skv);
    const f1 = R > 1 ? firstKey(ip0 + 1) : Skv;
    const k1 = R > 1 ? lastKey(ip0 + 1, Skv) : -1;
    const f2 = R > 2 ? firstKey(ip0 + 2) : Skv;
    const k2 = R > 2 ? lastKey(ip0 + 2, Skv) : -1;
    const f3 = R > 3 ? firstKey(ip0 + 3) : Skv;
    const k3 = R > 3 ? lastKey(ip0 + 3, Skv) : -1;
    const lo = min(min(f0, f1), min(f2, f3));
    const hi = max(max(k0, k1), max(k2, k3));
    for (let r = 0; r < 4; r++) {
      store<f32>(m + ((<usize>r) << 2), gHasSink ? gSink : -Infinity);
      store<f32>(l + ((<usize>r) << 2), gHasSink ? 1 : 0);
    }
    memory.fill(acc, 0, rowBytes * 4);
    // Query rows past Sq repeat the last one (their results are dropped).
    const qr0 = q + ((<usize>i0 * <usize>ldq) << 2);
    const qr1 = q + ((<usize>min(i0 + 1, Sq - 1) * <usize>ldq) << 2);
    const qr2 = q + ((<usize>min(i0 + 2, Sq - 1) * <usize>ldq) << 2);
    const qr3 = q + ((<usize>min(i0 + 3, Sq - 1) * <usize>ldq) << 2);
    for (let j0 = lo; j0 <= hi; j0 += BC) {
      const jn = min(BC, hi + 1 - j0);
      // Scores: 4 rows × 8 keys per step, Σ_d q[r, d] · Kᵀ[d, j … j + 7].
      for (let c = 0; c < jn; c += 8) {
        let a00 = f32x4.splat(0);
        let a01 = a00;
        let a10 = a00;
        let a11 = a00;
        let a20 = a00;
        let a21 = a00;
        let a30 = a00;
        let a31 = a00;
        let kp = kt + ((<usize>(j0 + c)) << 2);
        for (let d = 0; d < Dh; d++) {
          const k0 = v128.load(kp);
          const k1 = v128.load(kp, 16);
          const dd = (<usize>d) << 2;
          let s = v128.load32_splat(qr0 + dd);
          a00 = f32x4.add(a00, f32x4.mul(s, k0));
          a01 = f32x4.add(a01, f32x4.mul(s, k1));
          s = v128.load32_splat(qr1 + dd);
          a10 = f32x4.add(a10, f32x4.mul(s, k0));
          a11 = f32x4.add(a11, f32x4.mul(s, k1));
          s = v128.load32_splat(qr2 + dd);
          a20 = f32x4.add(a20, f32x4.mul(s, k0));
          a21 = f32x4.add(a21, f32x4.mul(s, k1));
          s = v128.load32_splat(qr3 + dd);
          a30 = f32x4.add(a30, f32x4.mul(s, k0));
          a31 = f32x4.add(a31, f32x4.mul(s, k1));
          kp += ktStride;
        }
        const at = sc + ((<usize>c) << 2);
        const rs = (<usize>BC) << 2;
        v128.store(at, a00);
        v128.store(at, a01, 16);
        v128.store(at + rs, a10);
        v128.store(at + rs, a11, 16);
        v128.store(at + 2 * rs, a20);
        v128.store(at + 2 * rs, a21, 16);
        v128.store(at + 3 * rs, a30);
        v128.store(at + 3 * rs, a31, 16);
      }
      // The rule, then the online softmax of this block, row by row; p replaces the score.
      for (let r = 0; r < 4; r++) {
        const row = sc + ((<usize>(r * BC)) << 2);
        const first = r === 0 ? f0 : r === 1 ? f1 : r === 2 ? f2 : f3;
        const last = r === 0 ? k0 : r === 1 ? k1 : r === 2 ? k2 : k3;
        let mx: f32 = -Infinity;
        for (let jj = 0; jj < jn; jj++) {
          const s = score(load<f32>(row + ((<usize>jj) << 2)), i0 + r, ip0 + r, j0 + jj, first, last, Skv);
          store<f32>(row + ((<usize>jj) << 2), s);
          mx = max(mx, s);
        }
        for (let jj = jn; jj < ((jn + 3) & ~3); jj++) store<f32>(row + ((<usize>jj) << 2), -Infinity);
        const ro = (<usize>r) << 2;
        const mOld = load<f32>(m + ro);
        const mNew = max(mOld, mx);
        if (mNew === -Infinity) {
          store<f32>(alpha + ro, 1);
          memory.fill(row, 0, (<usize>BC) << 2);
          continue;
        }
        const a = Mathf.exp(mOld - mNew);
        store<f32>(alpha + ro, a);
        store<f32>(m + ro, mNew);
        const mv = f32x4.splat(mNew);
        let sum = f32x4.splat(0);
        for (let jj = 0; jj < jn; jj += 4) {
          const p = exp4(f32x4.sub(v128.load(row + ((<usize>jj) << 2)), mv));
          v128.store(row + ((<usize>jj) << 2), p);
          sum = f32x4.add(sum, p);
        }
        const total = f32x4.extract_lane(sum, 0) + f32x4.extract_lane(sum, 1) + f32x4.extract_lane(sum, 2) + f32x4.extract_lane(sum, 3);
        store<f32>(l + ro, load<f32>(l + ro) * a + total);
      }
      // acc[r] ← alpha[r]·acc[r] + Σ_j p[r, j]·V[j]: 4 rows per V load, f32x4 over Dh.
      const al0 = v128.load32_splat(alpha);
      const al1 = v128.load32_splat(alpha, 4);
      const al2 = v128.load32_splat(alpha, 8);
      const al3 = v128.load32_splat(alpha, 12);
      const rs = (<usize>BC) << 2;
      for (let d4 = 0; d4 < D4; d4++) {
        const ad = acc + ((<usize>d4) << 4);
        let a0 = f32x4.mul(v128.load(ad), al0);
        let a1 = f32x4.mul(v128.load(ad + rowBytes), al1);
        let a2 = f32x4.mul(v128.load(ad + 2 * rowBytes), al2);
        let a3 = f32x4.mul(v128.load(ad + 3 * rowBytes), al3);
        let vp = v + <usize>j0 * vStride + ((<usize>d4) << 4);
        let pp = sc;
        for (let jj = 0; jj < jn; jj++) {
          const vv = v128.load(vp);
          a0 = f32x4.add(a0, f32x4.mul(v128.load32_splat(pp), vv));
          a1 = f32x4.add(a1, f32x4.mul(v128.load32_splat(pp + rs), vv));
          a2 = f32x4.add(a2, f32x4.mul(v128.load32_splat(pp + 2 * rs), vv));
          a3 = f32x4.add(a3, f32x4.mul(v128.load32_splat(pp + 3 * rs), vv));
          vp += vStride;
          pp += 4;
        }
        v128.store(ad, a0);
        v128.store(ad + rowBytes, a1);
        v128.store(ad + 2 * rowBytes, a2);
        v128.store(ad + 3 * rowBytes, a3);
      }
      // Head sizes that are not a multiple of 4: the last features one at a time.
      for (let d = D4 << 2; d < Dh; d++) {
        for (let r = 0; r < 4; r++) {
          const ad = acc + <usize>r * rowBytes + ((<usize>d) << 2);
          let a = load<f32>(ad) * load<f32>(alpha + ((<usize>r) << 2));
          for (let jj = 0; jj < jn; jj++) {
            a += load<f32>(sc + ((<usize>(r * BC + jj)) << 2)) * load<f32>(v + <usize>(j0 + jj) * vStride + ((<usize>d) << 2));
          }
          store<f32>(ad, a);
        }
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

/** P [Sq, Skv] (row stride ldp) = exp(s − m)·headScale / l per row, 0 where masked; from attend's stats. */
export function probabilities(q: usize, ldq: i32, kt: usize, ldkt: i32, Sq: i32, Skv: i32, Dh: i32, stats: usize, out: usize, ldp: i32): void {
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
      let dot: f32 = 0;
      for (let d = 0; d < Dh; d++) dot += load<f32>(qr + ((<usize>d) << 2)) * load<f32>(kt + ((<usize>d * <usize>ldkt + <usize>j) << 2));
      const s = score(dot, i, ip, j, first, last, Skv);
      store<f32>(dst + ((<usize>j) << 2), s === -Infinity ? 0 : Mathf.exp(s - m) * inv);
    }
  }
}
