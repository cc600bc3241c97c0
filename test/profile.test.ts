// Kernel timings from timestamp queries: createAttentionEngine({ profile: true }) on an adapter with
// 'timestamp-query' (lavapipe has it) reports GPU milliseconds per kernel with each forward.

import { expect, test } from 'vitest';
import { createAttentionEngine } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from '../src/util/random.ts';
import { watchDevice, withErrorScopes } from './helpers/gpu.ts';

test('profile: true gives per-kernel GPU times; the results equal an unprofiled engine', async () => {
  // Both run the built-in kernels (no tiers, no tuning), so their results may be compared bit for bit.
  const profiled = await createAttentionEngine({ backend: 'webgpu', profile: true, tuning: { mode: 'off' } });
  const plain = await createAttentionEngine({ backend: 'webgpu', tuning: { mode: 'off' } });
  watchDevice(profiled.device!);
  expect(profiled.profiling).toBe(true);
  expect(plain.profiling).toBe(false);
  const cfg = { embedDim: 64, numHeads: 4 };
  const sd = randomStateDict(cfg, 1);
  const x = uniform(2 * 40 * 64, 1, mulberry32(1));
  const a = profiled.createMultiHeadAttention(cfg, sd);
  const b = plain.createMultiHeadAttention(cfg, sd);
  for (const needWeights of [false, true]) {
    const options = { batchSize: 2, seqLen: 40, isCausal: true, needWeights };
    const r = await withErrorScopes(profiled.device!, () => a.forward(x, options));
    const s = await b.forward(x, options);
    expect(Array.from(r.output)).toEqual(Array.from(s.output));
    expect(s.timings).toBeUndefined();
    const kernels = ['qkv_projection', 'flash_attention', 'output_projection', ...(needWeights ? ['attention_probs'] : [])];
    expect(Object.keys(r.timings!).sort()).toEqual([...kernels, 'gpu'].sort());
    for (const k of kernels) {
      expect(r.timings![k]).toBeGreaterThanOrEqual(0);
      expect(r.timings![k]).toBeLessThanOrEqual(r.timings!.gpu);
    }
    expect(r.timings!.gpu).toBeGreaterThan(0);
  }
  profiled.dispose();
  plain.dispose();
  await expect(createAttentionEngine({ profile: 'yes' as never })).rejects.toThrow(/options\.profile must be true or false/);
});
