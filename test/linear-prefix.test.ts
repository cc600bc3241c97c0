// shaders/linear_prefix.wgsl (linear attention, pass 2 of 3): the per-chunk sums of pass 1 (chunks of 64
// keys, linear_state.wgsl) become exclusive prefix sums along the chunks, plus the sum of all keys, which
// pass 3 (linear_attention.wgsl) reads. It runs for calls of more than 16 query rows (fewer loop over
// their keys directly). Driven through engine.linearAttention against the float64 CPU backend at the
// chunk boundaries (63, 64, 65, 128, 129 and 191 keys: one, two and three chunks, the last one short),
// with 17 query rows (just past the direct loop) and more; causal (rows in the first chunk read an empty
// prefix), padding masks that empty whole chunks, cross lengths (Sq ≠ Skv), grouped-query heads and
// B = 2 (one prefix per batch and key/value head); head sizes 4 and 8. Each case proves the prefix pass
// ran (recordPipelines); a call of 16 query rows runs none.

import { describe, expect, test } from 'vitest';
import type { LinearAttentionOptions } from '../src/index.ts';
import { mulberry32, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { recordPipelines } from './helpers/dispatches.ts';
import { useEngines } from './helpers/engines.ts';
import { withErrorScopes } from './helpers/gpu.ts';

const engines = useEngines();
const PREFIX = /linear.?(attention.)?prefix/i;

// [B, H, G, Sq, Skv, Dh]
const grid: [number, number, number, number, number, number][] = [
  [1, 1, 1, 17, 63, 4],
  [1, 1, 1, 64, 64, 4],
  [2, 2, 1, 65, 65, 8],
  [1, 3, 3, 17, 128, 4],
  [2, 4, 2, 129, 129, 8],
  [1, 2, 1, 33, 191, 8],
];

async function run(B: number, H: number, G: number, Sq: number, Skv: number, Dh: number, extra: Partial<LinearAttentionOptions>) {
  const r = mulberry32(Sq * 1000 + Skv);
  const q = uniform(B * H * Sq * Dh, 1, r);
  const k = uniform(B * G * Skv * Dh, 1, r);
  const v = uniform(B * G * Skv * Dh, 1, r);
  const options: LinearAttentionOptions = { batchSize: B, numHeads: H, numKvHeads: G, seqLen: Sq, kvSeqLen: Skv, headDim: Dh, ...extra };
  const { result, pipelines } = await recordPipelines(engines.gpu.device!, () =>
    withErrorScopes(engines.gpu.device!, () => engines.gpu.linearAttention(q, k, v, options)),
  );
  const want = await engines.cpu.linearAttention(q, k, v, options);
  return { got: result.output, want: want.output, pipelines };
}

describe.each(grid)('B=%i H=%i G=%i Sq=%i Skv=%i Dh=%i', (B, H, G, Sq, Skv, Dh) => {
  const padding = () => {
    // Batch 0: the whole first chunk padded (its sums are zero; at 63 keys, every key), and the last key;
    // batch 1: a quarter of the keys, at random.
    const r = mulberry32(Skv);
    return Uint8Array.from({ length: B * Skv }, (_, i) => ((i < Skv ? i < 64 || i === Skv - 1 : r() < 0.25) ? 1 : 0));
  };
  test.each([
    ['not causal', {}],
    ['causal', { isCausal: true }],
    ['causal, first chunk and last key padded', { isCausal: true, keyPaddingMask: padding() }],
  ] as [string, Partial<LinearAttentionOptions>][])('%s: equals the float64 reference, through the prefix sums', async (_what, extra) => {
    const { got, want, pipelines } = await run(B, H, G, Sq, Skv, Dh, extra);
    expect(
      pipelines.filter((p) => PREFIX.test(p)),
      `pipelines run: ${pipelines.join(', ')}`,
    ).toHaveLength(1);
    expectClose(got, want, f32Tolerance([Dh, Skv, Dh]), 'output');
  });
});

test('16 query rows loop over their keys directly: no prefix pass', async () => {
  const { got, want, pipelines } = await run(1, 2, 1, 16, 200, 4, { isCausal: true });
  expect(pipelines.length).toBeGreaterThan(0);
  expect(pipelines.filter((p) => PREFIX.test(p))).toEqual([]);
  expectClose(got, want, f32Tolerance([4, 200, 4]), 'output');
});
