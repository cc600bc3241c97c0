// The GPU-vs-CPU grid (test/gpu-vs-cpu.test.ts on the engine's own device and on the 'wasm' backend;
// test/default-limits.test.ts on a device with WebGPU's default limits only): each backend's built-in
// kernels against the float64 CPU reference, over a grid of shapes that includes S = 1, odd S, S not a
// multiple of any tile (the built-in choice's flash tiles of 64 rows and ≤32 keys, GEMM tiles of
// 64×64), head sizes 4…256, 1…12 heads, grouped-query and multi-query layers, with and without bias,
// causal or not.

import { describe, expect, test } from 'vitest';
import type { AttentionEngine } from '../../src/index.ts';
import { resolveForwardPlan, resolveLayerSpec, resolveWeights } from '../../src/plan/index.ts';
import { referenceForward } from '../../src/cpu/reference.ts';
import { mulberry32, randomStateDict, uniform } from './random.ts';
import { expectClose, f32Tolerance } from '../../src/util/tolerance.ts';
import { withErrorScopes } from './gpu.ts';

interface LayerCase {
  embedDim: number;
  numHeads: number;
  numKvHeads?: number;
  bias?: boolean;
}

const layers: LayerCase[] = [
  { embedDim: 4, numHeads: 1 }, // Dh 4, the smallest
  { embedDim: 48, numHeads: 12 }, // Dh 4, 12 heads
  { embedDim: 24, numHeads: 3, bias: false }, // Dh 8, no bias
  { embedDim: 40, numHeads: 2 }, // Dh 20, not a power of two
  { embedDim: 132, numHeads: 3 }, // Dh 44
  { embedDim: 128, numHeads: 2 }, // Dh 64
  { embedDim: 256, numHeads: 2 }, // Dh 128
  { embedDim: 256, numHeads: 1 }, // Dh 256, the largest
  { embedDim: 64, numHeads: 8, numKvHeads: 2 }, // grouped-query: 4 query heads per key/value head
  { embedDim: 64, numHeads: 4, numKvHeads: 1 }, // multi-query
];

// (B, S): S = 1, 2, odd, one below and one above a 32-key tile, 64 (one whole 64-row tile), and 100 (no tile divides it).
const shapes: [number, number][] = [
  [1, 1],
  [3, 1],
  [1, 2],
  [2, 7],
  [1, 31],
  [3, 33],
  [1, 64],
  [2, 100],
];

function caseName(l: LayerCase): string {
  return `E=${l.embedDim} H=${l.numHeads}${l.numKvHeads ? ` G=${l.numKvHeads}` : ''} Dh=${l.embedDim / l.numHeads}${l.bias === false ? ' no bias' : ''}`;
}

async function checkAgainstReference(engine: AttentionEngine, l: LayerCase, B: number, S: number, isCausal: boolean, seed: number) {
  const sd = randomStateDict(l, seed);
  const query = uniform(B * S * l.embedDim, 1, mulberry32(seed + 1));
  const mha = engine.createMultiHeadAttention(l, sd);
  try {
    const run = () => mha.forward(query, { batchSize: B, seqLen: S, isCausal });
    const { output } = engine.device ? await withErrorScopes(engine.device, run) : await run();
    const spec = resolveLayerSpec(l);
    const ref = referenceForward(resolveForwardPlan(spec, query, { batchSize: B, seqLen: S, isCausal }), resolveWeights(spec, sd));
    expect(output.length).toBe(B * S * l.embedDim);
    expectClose(output, ref.output, f32Tolerance([l.embedDim, S, l.embedDim]), `${caseName(l)} B=${B} S=${S}${isCausal ? ' causal' : ''}`);
  } finally {
    mha.dispose();
  }
}

/** Registers the grid for the engine `engineOf()` returns (read inside the tests: create it in a beforeAll). */
export function describeGpuVsCpuGrid(engineOf: () => AttentionEngine): void {
  describe.each(layers)('$embedDim/$numHeads', (l) => {
    test.each(
      shapes.flatMap(
        ([B, S]) =>
          [
            [B, S, false],
            [B, S, true],
          ] as const,
      ),
    )(`${caseName(l)} B=%i S=%i causal=%s`, async (B, S, isCausal) => {
      await checkAgainstReference(engineOf(), l, B, S, isCausal, 1000 * l.embedDim + 10 * S + B);
    });
  });

  describe('BERT-base layer', () => {
    test.each([
      [1, 1, false],
      [1, 33, true],
      [2, 100, false],
    ] as const)('E=768 H=12 B=%i S=%i causal=%s', async (B, S, isCausal) => {
      await checkAgainstReference(engineOf(), { embedDim: 768, numHeads: 12 }, B, S, isCausal, 768 + S);
    });
  });

  describe('long sequences (several key tiles per row)', () => {
    test.each([
      [1, 257, true],
      [1, 300, false],
    ] as const)('E=64 H=2 B=%i S=%i causal=%s', async (B, S, isCausal) => {
      await checkAgainstReference(engineOf(), { embedDim: 64, numHeads: 2 }, B, S, isCausal, 64 + S);
    });
  });
}
