// ggml's reference quantizers for the K-quants (ggml-quants.c quantize_row_q4_K_ref and
// quantize_row_q6_K_ref, with their helpers make_qkx2_quants and make_qx_quants), written from the C
// in float32 arithmetic (Math.fround after every operation, the C order of operations). They are what
// llama.cpp's `llama-quantize` does without an importance matrix. Checked byte for byte against a
// second transcription in numpy (scripts/make_quant_fixtures.py), not against a C build (none here; a
// C compiler may also fuse multiply-adds), and for round to nearest on the grid (test/quant-formats.test.ts).
//
// One row of K weights (K a multiple of 256) at a time, into the row's blocks of `out` at byte `at`.

import { floatToHalfBits, halfToFloat } from '../util/f16.ts';
import { q4kScaleMin } from './pack.ts';

const f = Math.fround;
const GROUP_MAX_EPS = f(1e-15);
/** makeQkx2Quants' candidate levels (n ≤ 32), reused. */
const AUX = new Uint8Array(32);

/** ggml's nearest_int (the 1.5·2²³ trick): round half to even, for |v| < 2²². */
function nearestInt(v: number): number {
  return f(v + 12582912) - 12582912;
}

/**
 * make_qkx2_quants: a scale and a min for n weights, levels 0 … nmax, from the min/max guess refined by
 * a weighted least-squares search over nstep + 1 candidate scales. Returns [scale, theMin] (theMin ≥ 0,
 * w ≈ scale·L − theMin) and writes the levels to L.
 */
function makeQkx2Quants(n: number, nmax: number, x: Float32Array, weights: Float32Array, L: Uint8Array, rmin: number, rdelta: number, nstep: number): [number, number] {
  let min = x[0];
  let max = x[0];
  let sumW = weights[0];
  let sumX = f(sumW * x[0]);
  for (let i = 1; i < n; i++) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sumW = f(sumW + weights[i]);
    sumX = f(sumX + f(weights[i] * x[i]));
  }
  if (min > 0) min = 0;
  if (max === min) {
    L.fill(0, 0, n);
    return [0, -min];
  }
  let iscale = f(nmax / f(max - min));
  let scale = f(1 / iscale);
  let bestError = 0;
  for (let i = 0; i < n; i++) {
    L[i] = Math.max(0, Math.min(nmax, nearestInt(f(iscale * f(x[i] - min)))));
    const diff = f(f(f(scale * L[i]) + min) - x[i]);
    bestError = f(bestError + f(weights[i] * f(diff * diff)));
  }
  const aux = AUX;
  for (let is = 0; is <= nstep; is++) {
    iscale = f(f(f(rmin + f(rdelta * is)) + nmax) / f(max - min));
    let sumL = 0;
    let sumL2 = 0;
    let sumXL = 0;
    for (let i = 0; i < n; i++) {
      const l = Math.max(0, Math.min(nmax, nearestInt(f(iscale * f(x[i] - min)))));
      aux[i] = l;
      const w = weights[i];
      sumL = f(sumL + f(w * l));
      sumL2 = f(sumL2 + f(f(w * l) * l));
      sumXL = f(sumXL + f(f(w * l) * x[i]));
    }
    const D = f(f(sumW * sumL2) - f(sumL * sumL));
    if (D > 0) {
      let thisScale = f(f(f(sumW * sumXL) - f(sumX * sumL)) / D);
      let thisMin = f(f(f(sumL2 * sumX) - f(sumL * sumXL)) / D);
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = f(sumXL / sumL2);
      }
      let error = 0;
      for (let i = 0; i < n; i++) {
        const diff = f(f(f(thisScale * aux[i]) + thisMin) - x[i]);
        error = f(error + f(weights[i] * f(diff * diff)));
      }
      if (error < bestError) {
        for (let i = 0; i < n; i++) L[i] = aux[i];
        bestError = error;
        scale = thisScale;
        min = thisMin;
      }
    }
  }
  return [scale, -min];
}

/** quantize_row_q4_K_ref: one row [K] into K / 256 blocks of 144 bytes. */
export function quantizeRowQ4K(x: Float32Array, out: Uint8Array, at: number): void {
  const L = new Uint8Array(256);
  const weights = new Float32Array(32);
  const scales = new Float32Array(8);
  const mins = new Float32Array(8);
  for (let b = 0; b < x.length / 256; b++) {
    const xb = x.subarray(256 * b, 256 * b + 256);
    const y = at + 144 * b;
    let maxScale = 0;
    let maxMin = 0;
    for (let j = 0; j < 8; j++) {
      const xs = xb.subarray(32 * j, 32 * j + 32);
      let sumX2 = 0;
      for (let l = 0; l < 32; l++) sumX2 = f(sumX2 + f(xs[l] * xs[l]));
      const avX = f(Math.sqrt(f(sumX2 / 32)));
      for (let l = 0; l < 32; l++) weights[l] = f(avX + Math.abs(xs[l]));
      [scales[j], mins[j]] = makeQkx2Quants(32, 15, xs, weights, L.subarray(32 * j, 32 * j + 32), -1, f(0.1), 20);
      if (scales[j] > maxScale) maxScale = scales[j];
      if (mins[j] > maxMin) maxMin = mins[j];
    }
    const invScale = maxScale > 0 ? f(63 / maxScale) : 0;
    const invMin = maxMin > 0 ? f(63 / maxMin) : 0;
    const sc = out.subarray(y + 4, y + 16); // scales[12], zeroed
    sc.fill(0);
    for (let j = 0; j < 8; j++) {
      const ls = Math.min(63, nearestInt(f(invScale * scales[j])) & 0xff);
      const lm = Math.min(63, nearestInt(f(invMin * mins[j])) & 0xff);
      if (j < 4) {
        sc[j] = ls;
        sc[j + 4] = lm;
      } else {
        sc[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
        sc[j - 4] |= (ls >> 4) << 6;
        sc[j] |= (lm >> 4) << 6;
      }
    }
    const dBits = floatToHalfBits(f(maxScale / 63));
    const dminBits = floatToHalfBits(f(maxMin / 63));
    out[y] = dBits & 0xff;
    out[y + 1] = dBits >> 8;
    out[y + 2] = dminBits & 0xff;
    out[y + 3] = dminBits >> 8;
    for (let j = 0; j < 8; j++) {
      const [s, m] = q4kScaleMin(out, y + 4, j);
      const d = f(halfToFloat(dBits) * s);
      if (!d) continue;
      const dm = f(halfToFloat(dminBits) * m);
      for (let i = 0; i < 32; i++) L[32 * j + i] = Math.max(0, Math.min(15, nearestInt(f(f(xb[32 * j + i] + dm) / d))));
    }
    // qs[128]: chunk c of 64 weights → 32 bytes, weight l in the low nibble, weight l + 32 in the high
    for (let c = 0; c < 4; c++) for (let l = 0; l < 32; l++) out[y + 16 + 32 * c + l] = L[64 * c + l] | (L[64 * c + l + 32] << 4);
  }
}

/**
 * make_qx_quants with rmse_type 1 (weights x²): a signed scale for n weights, levels −nmax … nmax − 1,
 * from the max-|x| guess and a search over 18 nearby scales. Writes L (level + nmax) and returns the scale.
 */
function makeQxQuants(n: number, nmax: number, x: Float32Array, L: Uint8Array): number {
  let max = 0;
  let amax = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < GROUP_MAX_EPS) {
    L.fill(0, 0, n);
    return 0;
  }
  const sums = (iscale: number, write: boolean): [number, number] => {
    let sumLX = 0;
    let sumL2 = 0;
    for (let i = 0; i < n; i++) {
      const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(f(iscale * x[i]))));
      if (write) L[i] = l + nmax;
      const w = f(x[i] * x[i]);
      sumLX = f(sumLX + f(f(w * x[i]) * l));
      sumL2 = f(sumL2 + f(f(w * l) * l));
    }
    return [sumLX, sumL2];
  };
  let [sumLX, sumL2] = sums(f(-nmax / max), true);
  let scale = sumL2 ? f(sumLX / sumL2) : 0;
  let best = f(scale * sumLX);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    const iscale = f(-f(nmax + f(f(0.1) * is)) / max);
    [sumLX, sumL2] = sums(iscale, false);
    if (sumL2 > 0 && f(sumLX * sumLX) > f(best * sumL2)) {
      sums(iscale, true);
      scale = f(sumLX / sumL2);
      best = f(scale * sumLX);
    }
  }
  return scale;
}

/** quantize_row_q6_K_ref: one row [K] into K / 256 blocks of 210 bytes. */
export function quantizeRowQ6K(x: Float32Array, out: Uint8Array, at: number): void {
  const L = new Uint8Array(256);
  const scales = new Float32Array(16);
  for (let b = 0; b < x.length / 256; b++) {
    const xb = x.subarray(256 * b, 256 * b + 256);
    const y = at + 210 * b;
    out.fill(0, y, y + 210);
    let maxScale = 0;
    let maxAbsScale = 0;
    for (let ib = 0; ib < 16; ib++) {
      scales[ib] = makeQxQuants(16, 32, xb.subarray(16 * ib, 16 * ib + 16), L.subarray(16 * ib, 16 * ib + 16));
      const abs = Math.abs(scales[ib]);
      if (abs > maxAbsScale) {
        maxAbsScale = abs;
        maxScale = scales[ib];
      }
    }
    if (maxAbsScale < GROUP_MAX_EPS) continue; // an all-zero block: d = 0, every byte 0
    const iscale = f(-128 / maxScale);
    const dBits = floatToHalfBits(f(1 / iscale));
    out[y + 208] = dBits & 0xff;
    out[y + 209] = dBits >> 8;
    for (let ib = 0; ib < 16; ib++) out[y + 192 + ib] = Math.min(127, nearestInt(f(iscale * scales[ib]))) & 0xff;
    for (let j = 0; j < 16; j++) {
      const d = f(halfToFloat(dBits) * ((out[y + 192 + j] << 24) >> 24));
      if (!d) continue;
      for (let i = 0; i < 16; i++) L[16 * j + i] = Math.max(-32, Math.min(31, nearestInt(f(xb[16 * j + i] / d)))) + 32;
    }
    // ql[128], qh[64]: half h of 128 weights; weight 32·i + l (i < 4) → low 4 bits in ql[64h + l + 32·(i & 1)]
    // (low nibble for i < 2, high for i ≥ 2), high 2 bits at bit 2i of qh[32h + l]
    for (let h = 0; h < 2; h++) {
      for (let l = 0; l < 32; l++) {
        const [q1, q2, q3, q4] = [0, 32, 64, 96].map((o) => L[128 * h + l + o]);
        out[y + 64 * h + l] = (q1 & 0xf) | ((q3 & 0xf) << 4);
        out[y + 64 * h + l + 32] = (q2 & 0xf) | ((q4 & 0xf) << 4);
        out[y + 128 + 32 * h + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
      }
    }
  }
}
