// Kernel timings from timestamp queries: createAttentionEngine({ profile: true }) on an adapter with
// 'timestamp-query' (lavapipe has it) reports GPU milliseconds per kernel with each forward, for any
// number of stages, and changes no output.

import { expect, test } from 'vitest';
import { createAttentionEngine } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
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

test('profile: true with every stage (more than four): the same output, and a timing for each stage', async () => {
  const profiled = await createAttentionEngine({ backend: 'webgpu', profile: true, tuning: { mode: 'off' } });
  const plain = await createAttentionEngine({ backend: 'webgpu', tuning: { mode: 'off' } });
  watchDevice(profiled.device!);
  // Every stage at once, more than the four the query set once held: a GPU-buffer input copied into
  // padded rows (head size 9 runs as 12), QK-norm and rotary, needWeights. The output is the unprofiled
  // engine's, and every stage that ran has a timing.
  const headDim = 9;
  const rng = mulberry32(7);
  const qkNorm = { query: uniform(headDim, 1, rng).map((v) => 1 + 0.5 * v), key: uniform(headDim, 1, rng).map((v) => 1 + 0.5 * v) };
  const every = { embedDim: 18, numHeads: 2, rotary: { dim: 8 }, qkNorm };
  const everySd = randomStateDict(every, 2);
  const y = uniform(2 * 7 * 18, 1, mulberry32(3));
  const device = profiled.device!;
  const input = device.createBuffer({ size: y.byteLength, usage: 0x80 | 0x8 }); // STORAGE | COPY_DST
  device.queue.writeBuffer(input, 0, y.buffer as ArrayBuffer, y.byteOffset, y.byteLength);
  const options = { batchSize: 2, seqLen: 7, isCausal: true, needWeights: true } as const;
  const r = await withErrorScopes(device, () => profiled.createMultiHeadAttention(every, everySd).forward(input, options));
  const s = await plain.createMultiHeadAttention(every, everySd).forward(y, options);
  expect(Array.from(r.output)).toEqual(Array.from(s.output));
  expect(Array.from(r.attentionWeights)).toEqual(Array.from(s.attentionWeights));
  const stages = ['copy_inputs', 'qkv_projection', 'head_transform', 'flash_attention', 'attention_probs', 'output_projection'];
  expect(Object.keys(r.timings!).sort()).toEqual([...stages, 'gpu'].sort());
  for (const k of stages) {
    expect(r.timings![k]).toBeGreaterThanOrEqual(0);
    expect(r.timings![k]).toBeLessThanOrEqual(r.timings!.gpu);
  }
  expect(r.timings!.gpu).toBeGreaterThan(0);
  input.destroy();
  profiled.dispose();
  plain.dispose();
});
