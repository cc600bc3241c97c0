// shaders/head_transform.wgsl on its own terms: one invocation per (token, head), 64 tokens a workgroup,
// dispatched once for the query heads and once for the key heads, in place. test/head-transform.test.ts
// covers the options (rotary styles, tables, positionIds, varlen, KV caches, cross-attention); this
// file covers the kernel's geometry against the float64 reference: token counts at the workgroup's
// edges (1, 63, 64, 65, and 2 × 33, where a workgroup straddles two batch rows), odd head counts with
// fewer key heads (H = 3, G = 1), head sizes that are padded (6 → 8: the norm's mean over the 6 real
// features only) and not (8), a partial rotary dim, and a layer without rotary or QK-norm, which runs
// no head transform. Each case proves the kernel ran twice (recordPipelines).

import { describe, expect, test } from 'vitest';
import type { MultiHeadAttentionConfig } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { recordPipelines } from './helpers/dispatches.ts';
import { FAST_COMPILING, useEngines } from './helpers/engines.ts';
import { withErrorScopes } from './helpers/gpu.ts';

const engines = useEngines({ webgpu: FAST_COMPILING }); // the kernels around the transform: the quickest to compile
const TRANSFORM = /head.?transform/i;

const weightsOf = (Dh: number, seed: number) => {
  const r = mulberry32(seed);
  return { query: uniform(Dh, 1, r).map((v) => 1 + 0.5 * v), key: uniform(Dh, 1, r).map((v) => 1 + 0.5 * v), eps: 1e-5 };
};

const layers: [string, MultiHeadAttentionConfig][] = [
  ['Dh 6 (padded to 8): QK-norm and rotary halves', { embedDim: 18, numHeads: 3, numKvHeads: 1, qkNorm: weightsOf(6, 1), rotary: {} }],
  ['Dh 8: rotary interleaved over 4 of 8 features', { embedDim: 24, numHeads: 3, numKvHeads: 1, rotary: { dim: 4, interleaved: true, base: 100 } }],
  ['Dh 8: QK-norm alone', { embedDim: 24, numHeads: 3, numKvHeads: 1, qkNorm: weightsOf(8, 2) }],
];

describe.each(layers)('%s', (_name, config) => {
  const sd = randomStateDict(config, 5);

  test.each([
    [1, 1],
    [1, 63],
    [1, 64],
    [1, 65],
    [2, 33],
  ])('B=%i S=%i: equals the float64 reference', async (B, S) => {
    const E = config.embedDim;
    const x = uniform(B * S * E, 1, mulberry32(B * 100 + S));
    const options = { batchSize: B, seqLen: S, isCausal: true };
    const gpu = engines.gpu.createMultiHeadAttention(config, sd);
    const cpu = engines.cpu.createMultiHeadAttention(config, sd);
    const { result, pipelines } = await recordPipelines(engines.gpu.device!, () => withErrorScopes(engines.gpu.device!, () => gpu.forward(x, options)));
    expect(
      pipelines.filter((p) => TRANSFORM.test(p)),
      `pipelines run: ${pipelines.join(', ')}`,
    ).toHaveLength(2); // query heads, key heads
    expectClose(result.output, (await cpu.forward(x, options)).output, f32Tolerance([E, S, E]), 'output');
    gpu.dispose();
    cpu.dispose();
  });
});

test('a layer without rotary or QK-norm runs no head transform', async () => {
  const config = { embedDim: 24, numHeads: 3, numKvHeads: 1 };
  const mha = engines.gpu.createMultiHeadAttention(config, randomStateDict(config, 6));
  const { pipelines } = await recordPipelines(engines.gpu.device!, () => mha.forward(uniform(5 * 24, 1, mulberry32(6)), { batchSize: 1, seqLen: 5 }));
  expect(pipelines.length).toBeGreaterThan(0);
  expect(pipelines.filter((p) => TRANSFORM.test(p))).toEqual([]);
  mha.dispose();
});
