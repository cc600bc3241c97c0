// needWeights: the per-head probabilities [B, H, Sq, Skv] (PyTorch need_weights=True,
// average_attn_weights=False). On WebGPU a kernel of their own recomputes them from Q, K and the
// flash kernel's per-row softmax statistics; the flash kernel itself still never stores scores.

import { describe, expect, test } from 'vitest';
import { referenceMultiHeadAttention } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance, maxAbsFinite, probabilityTolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { withErrorScopes } from './helpers/gpu.ts';

const engines = useEngines();

const layers = [
  { embedDim: 8, numHeads: 2 },
  { embedDim: 48, numHeads: 12 }, // Dh 4
  { embedDim: 64, numHeads: 8, numKvHeads: 2 }, // grouped-query
  { embedDim: 256, numHeads: 1 }, // Dh 256
];
const shapes: [number, number][] = [
  [1, 1],
  [2, 7],
  [1, 33],
  [3, 17],
  [1, 100],
];

describe.each(layers)('attentionWeights, WebGPU vs CPU, E=$embedDim H=$numHeads', (l) => {
  test.each(
    shapes.flatMap(
      ([B, S]) =>
        [
          [B, S, false],
          [B, S, true],
        ] as const,
    ),
  )('B=%i S=%i causal=%s', async (B, S, isCausal) => {
    const sd = randomStateDict(l, 31 + S);
    const x = uniform(B * S * l.embedDim, 1.5, mulberry32(B * 100 + S));
    const options = { batchSize: B, seqLen: S, isCausal, needWeights: true };
    const a = engines.gpu.createMultiHeadAttention(l, sd);
    const b = engines.cpu.createMultiHeadAttention(l, sd);
    const g = await withErrorScopes(engines.gpu.device!, () => a.forward(x, options));
    const c = await b.forward(x, options);
    const H = l.numHeads;
    expect(g.attentionWeights).toBeInstanceOf(Float32Array);
    expect(g.attentionWeights!.length).toBe(B * H * S * S);
    const logits = referenceMultiHeadAttention(l, sd, x, options).scores!;
    expectClose(g.attentionWeights!, c.attentionWeights!, probabilityTolerance(l.embedDim, S, maxAbsFinite(logits)), 'attentionWeights');
    expectClose(g.output, c.output, f32Tolerance([l.embedDim, S, l.embedDim]), 'output');
    // Every row sums to 1; masked entries (above the diagonal when causal) are exactly 0.
    for (let row = 0; row < B * H * S; row++) {
      let sum = 0;
      const i = row % S;
      for (let j = 0; j < S; j++) {
        const p = g.attentionWeights![row * S + j];
        if (isCausal && j > i) expect(p).toBe(0);
        sum += p;
      }
      expect(Math.abs(sum - 1)).toBeLessThan(1e-5);
    }
    a.dispose();
    b.dispose();
  });
});

test('without needWeights there are no weights, and the output is the same either way', async () => {
  const l = { embedDim: 32, numHeads: 4 };
  const sd = randomStateDict(l, 5);
  const x = uniform(2 * 9 * 32, 1, mulberry32(5));
  for (const engine of [engines.gpu, engines.cpu]) {
    const mha = engine.createMultiHeadAttention(l, sd);
    const plain = await mha.forward(x, { batchSize: 2, seqLen: 9, isCausal: true });
    const withWeights = await mha.forward(x, { batchSize: 2, seqLen: 9, isCausal: true, needWeights: true });
    expect(plain.attentionWeights).toBeUndefined();
    expect(Array.from(withWeights.output)).toEqual(Array.from(plain.output));
    mha.dispose();
  }
});

test('needWeights must be a boolean', async () => {
  const l = { embedDim: 8, numHeads: 2 };
  const mha = engines.cpu.createMultiHeadAttention(l, randomStateDict(l, 1));
  await expect(mha.forward(new Float32Array(8), { batchSize: 1, seqLen: 1, needWeights: 'yes' as never })).rejects.toThrow(
    /options\.needWeights must be true or false; got "yes"/,
  );
});
