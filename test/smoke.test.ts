import { expect, test } from 'vitest';
import { createAttentionEngine, referenceMultiHeadAttention } from '../src/index.ts';
import { randomStateDict, uniform, mulberry32 } from '../src/util/random.ts';
import { withErrorScopes } from './helpers/gpu.ts';
import { compareArrays } from './helpers/tolerance.ts';

test('smoke', async () => {
  const engine = await createAttentionEngine({ backend: 'webgpu' });
  const cfg = { embedDim: 64, numHeads: 4 };
  const sd = randomStateDict(cfg, 1);
  const mha = engine.createMultiHeadAttention(cfg, sd);
  const x = uniform(2 * 37 * 64, 1, mulberry32(2));
  for (const isCausal of [false, true]) {
    const { output } = await withErrorScopes(engine.device!, () => mha.forward(x, { batchSize: 2, seqLen: 37, isCausal }));
    const ref = referenceMultiHeadAttention(cfg, sd, x, { batchSize: 2, seqLen: 37, isCausal });
    console.log(compareArrays(output, ref.output, { atol: 1e-5, rtol: 1e-5 }));
  }
  expect(1).toBe(1);
  engine.dispose();
});
