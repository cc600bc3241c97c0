// The comparison of a layer's output [B, S, E] with its float64 reference, as every browser test
// applies it (Playwright's expectOutputClose in e2e/helpers.ts, the Firefox runner
// scripts/firefox-test.ts). Imports no test framework.

import { compareArrays, f32Tolerance, type Mismatch, type Tolerance } from '../src/util/tolerance.ts';

/** The layer shape of a [B, S, E] output. */
export interface OutputShape {
  batchSize: number;
  seqLen: number;
  embedDim: number;
}

function describeIndex(i: number, s: OutputShape): string {
  const E = s.embedDim;
  return `[${i}] = (b ${Math.floor(i / (s.seqLen * E))}, s ${Math.floor(i / E) % s.seqLen}, e ${i % E})`;
}

export interface OutputCheck {
  ok: boolean;
  tol: Tolerance;
  count: number;
  maxAbs: number;
  maxRel: number;
  mismatches: Mismatch[];
  /** Its largest errors and the tolerance, one line. */
  summary: string;
  /** On failure: how many elements failed, for which case, and the first failures by (b, s, e). */
  failure: string;
}

/**
 * Compares the output [B, S, E] of case `c` with its reference: |actual − ref| ≤ atol + rtol·|ref|
 * under f32Tolerance([E, S, E]) (the chain QKV, scores and P·V, output), a NaN always failing. `names`
 * name the two values (actual, reference) in the failure lines.
 */
export function checkOutput(actual: ArrayLike<number>, reference: ArrayLike<number>, c: OutputShape, names: [actual: string, reference: string]): OutputCheck {
  const n = c.batchSize * c.seqLen * c.embedDim;
  const tol = f32Tolerance([c.embedDim, c.seqLen, c.embedDim]);
  const cmp = compareArrays(actual, reference, tol);
  const lines = cmp.mismatches.map(
    (m) => `  ${describeIndex(m.index, c)}: ${names[0]} ${m.actual}, ${names[1]} ${m.expected} (|err| ${m.error.toExponential(2)} > ${m.allowed.toExponential(2)})`,
  );
  return {
    ...cmp,
    tol,
    summary: `abs ${cmp.maxAbs.toExponential(2)}, rel ${cmp.maxRel.toExponential(2)} (atol = rtol = ${tol.atol.toExponential(2)})`,
    failure:
      `${cmp.count} of ${n} elements outside atol ${tol.atol.toExponential(2)} + rtol ${tol.rtol.toExponential(2)}·|ref| ` +
      `for ${JSON.stringify(c)}; first failures (index into [B, S, E]):\n${lines.join('\n')}`,
  };
}
