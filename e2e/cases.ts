// The browser correctness suite's cases, one list for every browser that runs them: Chromium through
// Playwright (e2e/correctness.spec.ts) and Firefox through WebDriver BiDi (scripts/firefox-test.ts),
// both on the harness page (e2e/harness.ts); both compare a case's output with e2e/output-check.ts.
// Imports no test framework.

import type { CaseParams } from './harness.ts';

interface Shape {
  embedDim: number;
  numHeads: number;
  numKvHeads?: number;
  bias: boolean;
  why: string;
}

// Head sizes 4 (smallest vec4), 20 (not a power of two), 32, 256 (the kernels' maximum: only 16
// keys per tile in 32 KiB of workgroup memory), grouped- and multi-query, and a layer without biases.
const SHAPES: Shape[] = [
  { embedDim: 8, numHeads: 2, bias: true, why: 'Dh=4' },
  { embedDim: 12, numHeads: 3, bias: true, why: 'Dh=4, odd H, E not a multiple of 8' },
  { embedDim: 40, numHeads: 2, bias: false, why: 'Dh=20, no bias' },
  { embedDim: 64, numHeads: 2, bias: true, why: 'Dh=32' },
  { embedDim: 64, numHeads: 4, numKvHeads: 2, bias: true, why: 'Dh=16, GQA G=2' },
  { embedDim: 48, numHeads: 6, numKvHeads: 1, bias: true, why: 'Dh=8, MQA G=1' },
  { embedDim: 256, numHeads: 1, bias: true, why: 'Dh=256 (max)' },
  { embedDim: 512, numHeads: 8, bias: true, why: 'Dh=64, long GEMM reductions' },
];
// 1: a single row; 7: under one tile; 33: one past a 32-key tile and a 32-row query or GEMM tile (the
// tuner picks 32- or 64-row ones), over two 16-key tiles at Dh=256; 64: whole tiles exactly; 100:
// several tiles with a ragged last one.
// B varies so batch offsets are exercised.
const SEQ_LENS: { seqLen: number; batchSize: number }[] = [
  { seqLen: 1, batchSize: 2 },
  { seqLen: 7, batchSize: 1 },
  { seqLen: 33, batchSize: 2 },
  { seqLen: 64, batchSize: 1 },
  { seqLen: 100, batchSize: 3 },
];

/** A group of cases: one layer shape, named as the spec's describe block. */
export interface CaseGroup {
  name: string;
  cases: { name: string; params: CaseParams }[];
}

/** Every shape × sequence length × causal or not, in order, each with its own seed (1000, 1001, …). */
export function correctnessCases(): CaseGroup[] {
  let seed = 1000;
  return SHAPES.map((shape) => ({
    name: `E=${shape.embedDim} H=${shape.numHeads}${shape.numKvHeads ? ` G=${shape.numKvHeads}` : ''} (${shape.why})`,
    cases: SEQ_LENS.flatMap(({ seqLen, batchSize }) =>
      [false, true].map((isCausal) => ({
        name: `B=${batchSize} S=${seqLen} ${isCausal ? 'causal' : 'full'}`,
        params: {
          embedDim: shape.embedDim,
          numHeads: shape.numHeads,
          numKvHeads: shape.numKvHeads,
          bias: shape.bias,
          batchSize,
          seqLen,
          isCausal,
          seed: seed++,
        },
      })),
    ),
  }));
}

/** The mid-sized layer of the closing check (one more forward after the grid). */
export const CLOSING_CASE: CaseParams = { embedDim: 64, numHeads: 4, batchSize: 1, seqLen: 64, isCausal: true, bias: true, seed: 7 };
