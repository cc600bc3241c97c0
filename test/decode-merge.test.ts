// shaders/decode_merge.wgsl (split-KV, "flash-decoding"): a call with few query rows over many keys
// splits the keys among workgroups (src/webgpu/kernels/flash-attention.ts splitKv: from 512 keys on,
// ~256 keys a split), and the merge combines the splits' partial results by log-sum-exp. Driven through
// scaledDotProductAttention on arrays, against the float64 CPU backend, over shapes no split size
// divides (exactly 512 keys: two splits; 777 and 1031 keys: a short last split), head sizes 4, 8 and 12,
// odd head counts and grouped/multi-query heads, B = 1 and 2; and over what reaches the merge itself:
// splits that see no key at all (a sliding window, a padding mask over the first splits, causal rows),
// sinks (added once, in the merge) and a head mask (applied there), and the row statistics it writes
// for needWeights. Each case proves the merge ran (recordPipelines); a call with few keys runs none.

import { describe, expect, test } from 'vitest';
import type { ScaledDotProductAttentionOptions } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { recordPipelines } from './helpers/dispatches.ts';
import { useEngines } from './helpers/engines.ts';
import { withErrorScopes } from './helpers/gpu.ts';

// The projections (only the KV-cache case has any) forced to the quickest to compile; attention runs
// the adapter's built-in choice for few query rows, as a real decode step does.
const engines = useEngines({ webgpu: { tuning: { mode: 'off', kernels: { qkv_projection: 'register-4x4', output_projection: 'register-4x4' } } } });
const MERGE = /decode.?merge/i;

interface Shape {
  B: number;
  H: number;
  G: number;
  Sq: number;
  Skv: number;
  Dh: number;
}

const shapes: [string, Shape][] = [
  ['B=1 H=1 Sq=1 Skv=512 Dh=4 (two splits exactly)', { B: 1, H: 1, G: 1, Sq: 1, Skv: 512, Dh: 4 }],
  ['B=2 H=3 G=1 Sq=3 Skv=1031 Dh=8 (multi-query, a short last split)', { B: 2, H: 3, G: 1, Sq: 3, Skv: 1031, Dh: 8 }],
  ['B=1 H=4 G=2 Sq=5 Skv=777 Dh=12 (grouped-query)', { B: 1, H: 4, G: 2, Sq: 5, Skv: 777, Dh: 12 }],
];

/** What reaches the merge: masks that leave whole splits empty, sinks, a head mask. */
const options: [string, (s: Shape) => Partial<ScaledDotProductAttentionOptions>][] = [
  ['no mask', () => ({})],
  ['causal', () => ({ isCausal: true })],
  ['a sliding window of 37 keys (every split but the last sees none)', () => ({ window: 37 })],
  [
    'the first 600 keys padded in batch 0 (its first splits see none), a few at random elsewhere',
    ({ B, Skv }) => {
      const r = mulberry32(Skv);
      return { keyPaddingMask: Uint8Array.from({ length: B * Skv }, (_, i) => (i < Math.min(600, Skv - 1) ? 1 : r() < 0.2 ? 1 : 0)) };
    },
  ],
  [
    'sinks and a head mask (0, ½, 2 …)',
    ({ B, H }) => ({
      sinks: Float32Array.from({ length: H }, (_, h) => [0.5, -1, 2, 0][h % 4]),
      headMask: Float32Array.from({ length: B * H }, (_, i) => [1, 0, 0.5, 2][i % 4]),
    }),
  ],
];

function inputs({ B, H, G, Sq, Skv, Dh }: Shape, seed: number) {
  const r = mulberry32(seed);
  return { q: uniform(B * H * Sq * Dh, 1, r), k: uniform(B * G * Skv * Dh, 1, r), v: uniform(B * G * Skv * Dh, 1, r) };
}

describe.each(shapes)('%s', (_name, shape) => {
  const { B, H, G, Sq, Skv, Dh } = shape;
  const sizes = { batchSize: B, numHeads: H, numKvHeads: G, seqLen: Sq, kvSeqLen: Skv, headDim: Dh };

  test.each(options)('%s: the merged output equals the float64 reference', async (_what, extra) => {
    const { q, k, v } = inputs(shape, Skv + Dh);
    const o = { ...sizes, ...extra(shape) };
    const { result, pipelines } = await recordPipelines(engines.gpu.device!, () =>
      withErrorScopes(engines.gpu.device!, () => engines.gpu.scaledDotProductAttention(q, k, v, o)),
    );
    const ref = await engines.cpu.scaledDotProductAttention(q, k, v, o);
    expect(
      pipelines.filter((p) => MERGE.test(p)),
      `pipelines run: ${pipelines.join(', ')}`,
    ).toHaveLength(1);
    expectClose(result.output, ref.output, f32Tolerance([Dh, Skv]), 'output');
  });
});

test('needWeights reads the row statistics the merge writes: the probabilities of every split, each row summing to 1', async () => {
  const shape = shapes[1][1];
  const { B, H, G, Sq, Skv, Dh } = shape;
  const { q, k, v } = inputs(shape, 5);
  const o = { batchSize: B, numHeads: H, numKvHeads: G, seqLen: Sq, kvSeqLen: Skv, headDim: Dh, isCausal: true, needWeights: true as const };
  const { result, pipelines } = await recordPipelines(engines.gpu.device!, () =>
    withErrorScopes(engines.gpu.device!, () => engines.gpu.scaledDotProductAttention(q, k, v, o)),
  );
  const ref = await engines.cpu.scaledDotProductAttention(q, k, v, o);
  expect(pipelines.some((p) => MERGE.test(p))).toBe(true);
  expectClose(result.output, ref.output, f32Tolerance([Dh, Skv]), 'output');
  expectClose(result.attentionWeights, ref.attentionWeights, f32Tolerance([Dh, Skv]), 'attentionWeights');
  for (let row = 0; row < B * H * Sq; row++) {
    const sum = result.attentionWeights.subarray(row * Skv, (row + 1) * Skv).reduce((a, p) => a + p, 0);
    expect(Math.abs(sum - 1), `row ${row}`).toBeLessThan(1e-4);
  }
});

test('a KV-cache decode step over 600 cached positions runs the merge and equals the reference', async () => {
  const layer = { embedDim: 24, numHeads: 3, numKvHeads: 1 }; // Dh 8
  const sd = randomStateDict(layer, 9);
  const past = 600;
  const r = mulberry32(9);
  // The cache starts from a given past (keys and values [B, G, past, Dh]): no 600-row prefill to compile and run.
  const [key, value] = [uniform(past * 8, 1, r), uniform(past * 8, 1, r)];
  const x = uniform(24, 1, r);
  const outputs: Float32Array[] = [];
  for (const engine of [engines.gpu, engines.cpu]) {
    const mha = engine.createMultiHeadAttention(layer, sd);
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: past + 1, key, value });
    const step = () => mha.forward(x, { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
    if (engine === engines.gpu) {
      const { result, pipelines } = await recordPipelines(engine.device!, () => withErrorScopes(engine.device!, step));
      expect(
        pipelines.some((p) => MERGE.test(p)),
        `pipelines run: ${pipelines.join(', ')}`,
      ).toBe(true);
      outputs.push(result.output);
    } else outputs.push((await step()).output);
    mha.dispose();
  }
  expectClose(outputs[0], outputs[1], f32Tolerance([24, past + 1, 24]), 'decode step');
});

test('a call over few keys runs no merge (one split)', async () => {
  const shape = { B: 1, H: 2, G: 2, Sq: 1, Skv: 100, Dh: 8 };
  const { q, k, v } = inputs(shape, 3);
  const o = { batchSize: 1, numHeads: 2, seqLen: 1, kvSeqLen: 100, headDim: 8 };
  const { result, pipelines } = await recordPipelines(engines.gpu.device!, () => engines.gpu.scaledDotProductAttention(q, k, v, o));
  expect(pipelines.length).toBeGreaterThan(0);
  expect(pipelines.filter((p) => MERGE.test(p))).toEqual([]);
  expectClose(result.output, (await engines.cpu.scaledDotProductAttention(q, k, v, o)).output, f32Tolerance([8, 100]));
});
