// The comparison rule of every numeric check (the tests, the e2e cases, the demo's correctness panel
// and benchmark gate, the scripts, the tuner's gate): |actual − expected| ≤ atol + rtol·|expected|,
// elementwise. A NaN (or ±Infinity where the reference is finite) always fails. Failures list the
// first offending indices with both values. Imports nothing, so the library can use it too.

export interface Tolerance {
  atol: number;
  rtol: number;
}

const F32_EPS = 2 ** -23;

/**
 * Tolerance for float32 results of a chain of reductions against a float64 reference.
 * Rounding errors of a length-n float32 sum grow like √n·ε for random-signed terms (and ≤ n·ε in the
 * worst case); the three passes of a layer chain reductions of length E (QKV), Skv (scores and P·V)
 * and E (output). We allow 16·√(n_total)·ε relative and the same absolute (outputs are O(1)).
 */
export function f32Tolerance(reductionLengths: number[]): Tolerance {
  const n = reductionLengths.reduce((a, b) => a + b, 0);
  const tol = 16 * Math.sqrt(n) * F32_EPS;
  return { atol: tol, rtol: tol };
}

/**
 * Tolerance for float32 attention probabilities. Besides the rounding of the projection (length E)
 * and of the softmax sum (S terms), a probability inherits the absolute rounding error of its logit,
 * which grows with the logit's size: a logit L is only known to about |L|·2⁻²³, and p = exp(s − m)
 * turns that into a relative error of the same size (logits in the thousands give ~1e-4). So rtol
 * gains 4·max|logit|·ε, max|logit| being the largest scaled score QKᵀ/√Dh (from the reference).
 */
export function probabilityTolerance(embedDim: number, seqLen: number, maxAbsLogit: number): Tolerance {
  const base = f32Tolerance([embedDim, seqLen]);
  return { atol: base.atol, rtol: base.rtol + 4 * maxAbsLogit * F32_EPS };
}

/**
 * Tolerance for float32 outputs of attention whose logits are large. The probabilities carry a
 * relative error of about 4·max|logit|·ε (see probabilityTolerance), and the output Σ_j p_j·v_j
 * turns that into an absolute error of up to that much times the size of the values it averages,
 * which the output's own size stands for (W_O is near-orthonormal in scale). So both atol and rtol
 * gain 4·max|logit|·ε, atol scaled by max|output|. For O(1) logits the extra term is negligible.
 */
export function outputTolerance(reductionLengths: number[], maxAbsLogit: number, maxAbsOutput: number): Tolerance {
  const base = f32Tolerance(reductionLengths);
  const extra = 4 * maxAbsLogit * F32_EPS;
  return { atol: base.atol + extra * maxAbsOutput, rtol: base.rtol + extra };
}

/** The largest finite |value| (masked scores are −Infinity). */
export function maxAbsFinite(values: ArrayLike<number>): number {
  let max = 0;
  for (let i = 0; i < values.length; i++) if (Number.isFinite(values[i])) max = Math.max(max, Math.abs(values[i]));
  return max;
}

const F16_UNIT_ROUNDOFF = 2 ** -11;

/**
 * Tolerance for precision 'f16' outputs against the float64 reference. Every stored tensor is rounded
 * to float16 (relative error ≤ 2⁻¹¹): the input, the weights, Q/K/V, the attention output O, the
 * output Y; the projections' four-term dot products run in float16 and accumulate in float32. Y's own
 * rounding is |y|·2⁻¹¹; each earlier rounding reaches Y through a float32 sum of random-signed terms,
 * adding about the same relative amount of the output's scale. With six roundings and margin:
 * rtol = 4·2⁻¹¹, and atol = 4·2⁻¹¹·max|ref| for outputs near zero (whose error follows the scale of
 * their terms, not their own size). Logits come from float16 Q and K, so a logit L is known to about
 * |L|·2⁻¹¹ (not 2⁻²³): the logit-size term of outputTolerance, at float16's unit roundoff. With
 * logits in the hundreds that term reaches 100 %: float16 cannot pin such a softmax, only keep it finite.
 */
export function f16Tolerance(reductionLengths: number[], maxAbsRef: number, maxAbsLogit = 0): Tolerance {
  const base = f32Tolerance(reductionLengths);
  const logit = 4 * maxAbsLogit * F16_UNIT_ROUNDOFF;
  return {
    atol: base.atol + (4 * F16_UNIT_ROUNDOFF + logit) * maxAbsRef,
    rtol: base.rtol + 4 * F16_UNIT_ROUNDOFF + logit,
  };
}

/** Probabilities with precision 'f16': logits from float16 Q and K carry |logit|·2⁻¹⁰ error, turned into relative error of p. */
export function f16ProbabilityTolerance(maxAbsLogit: number): Tolerance {
  return { atol: 4 * F16_UNIT_ROUNDOFF, rtol: 4 * (1 + maxAbsLogit) * 2 * F16_UNIT_ROUNDOFF };
}

export interface Mismatch {
  index: number;
  actual: number;
  expected: number;
  error: number;
  allowed: number;
}

/**
 * Compares elementwise by the rule above: `ok`, how many elements fail (`count`), the first
 * `maxReported` of them, the largest finite |error| and relative error, and the worst element against
 * its allowance (`worstRatio` = |error| / allowed, ≤ 1 when ok; Infinity for a NaN; `worstIndex` −1
 * when every error is 0).
 */
export function compareArrays(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: Tolerance, maxReported = 8) {
  const mismatches: Mismatch[] = [];
  let count = 0;
  let maxAbs = 0;
  let maxRel = 0;
  let worstRatio = 0;
  let worstIndex = -1;
  if (actual.length !== expected.length) {
    throw new Error(`length mismatch: actual ${actual.length}, expected ${expected.length}`);
  }
  for (let i = 0; i < actual.length; i++) {
    const a = actual[i];
    const e = expected[i];
    const error = Math.abs(a - e);
    const allowed = tol.atol + tol.rtol * Math.abs(e);
    if (!(error <= allowed)) {
      // NaN compares false, so a NaN anywhere lands here.
      count++;
      if (mismatches.length < maxReported) mismatches.push({ index: i, actual: a, expected: e, error, allowed });
    }
    const ratio = error <= allowed ? (allowed > 0 ? error / allowed : 0) : allowed > 0 && Number.isFinite(error) ? error / allowed : Infinity;
    if (ratio > worstRatio) {
      worstRatio = ratio;
      worstIndex = i;
    }
    if (Number.isFinite(error)) {
      maxAbs = Math.max(maxAbs, error);
      if (e !== 0) maxRel = Math.max(maxRel, error / Math.abs(e));
    }
  }
  return { ok: count === 0, count, mismatches, maxAbs, maxRel, worstRatio, worstIndex };
}

/** Asserts closeness (throws, so it works in vitest and Playwright alike); the message lists the first mismatches with their indices. */
export function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: Tolerance, what = 'output'): void {
  const r = compareArrays(actual, expected, tol);
  if (!r.ok) {
    const lines = r.mismatches.map((m) => `  [${m.index}] got ${m.actual}, expected ${m.expected} (|err| ${m.error.toExponential(2)} > ${m.allowed.toExponential(2)})`);
    throw new Error(
      `${what}: ${r.count} of ${actual.length} elements outside atol ${tol.atol.toExponential(2)} + rtol ${tol.rtol.toExponential(2)}·|ref|:\n${lines.join('\n')}`,
    );
  }
}
