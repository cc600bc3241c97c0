// Precision 'f16': weights, activations and KV caches stored in float16 on the GPU, arithmetic and
// softmax statistics in float32. Lavapipe (Node) has shader-f16; the tolerances are derived in
// src/util/tolerance.ts (f16Tolerance). Large logits do not overflow.

import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type AttentionEngine, createAttentionEngine, type ForwardOptions, referenceMultiHeadAttention } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f16ProbabilityTolerance, f16Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';
import { withErrorScopes, watchDevice } from './helpers/gpu.ts';

let half: AttentionEngine;
beforeAll(async () => {
  half = await createAttentionEngine({ backend: 'webgpu', precision: 'f16' });
  watchDevice(half.device!);
});
afterAll(() => half?.dispose());

interface Layer {
  embedDim: number;
  numHeads: number;
  numKvHeads?: number;
}

async function check(layer: Layer, x: Float32Array, options: ForwardOptions, seed: number, what: string) {
  const sd = randomStateDict(layer, seed);
  const mha = half.createMultiHeadAttention(layer, sd);
  const g = await withErrorScopes(half.device!, () => mha.forward(x, options));
  mha.dispose();
  const ref = referenceMultiHeadAttention(layer, sd, x, options);
  const Skv = options.cuSeqlens ? 1 : (options.kvSeqLen ?? options.seqLen);
  const logit = ref.scores ? maxAbsFinite(ref.scores) : 0;
  for (const v of g.output) expect(Number.isFinite(v)).toBe(true);
  expectClose(g.output, ref.output, f16Tolerance([layer.embedDim, Skv, layer.embedDim], maxAbsFinite(ref.output), logit), `${what}: output`);
  if (!options.cuSeqlens && options.needWeights) expectClose(g.attentionWeights!, ref.probs!, f16ProbabilityTolerance(logit), `${what}: weights`);
}

describe("precision 'f16' against the float64 reference", () => {
  test('the adapter has shader-f16, so the engine runs in f16', () => {
    expect(half.precision).toBe('f16');
    expect(half.precisionNote).toBeNull();
  });

  const layers: Layer[] = [
    { embedDim: 32, numHeads: 4 },
    { embedDim: 64, numHeads: 8, numKvHeads: 2 },
    { embedDim: 256, numHeads: 1 },
  ];
  test.each(
    layers.flatMap(
      (l) =>
        [
          [l, 1, 1, false],
          [l, 2, 7, true],
          [l, 1, 33, false],
          [l, 3, 100, true],
        ] as const,
    ),
  )('%o B=%i S=%i causal=%s', async (l, B, S, isCausal) => {
    await check(l, uniform(B * S * l.embedDim, 1, mulberry32(S)), { batchSize: B, seqLen: S, isCausal, needWeights: true }, l.embedDim + S, 'f16');
  });

  test('masks, a window and cross-attention', async () => {
    const l = { embedDim: 32, numHeads: 4 };
    const r = mulberry32(9);
    const kv = uniform(2 * 40 * 32, 1, r);
    await check(
      l,
      uniform(2 * 5 * 32, 1, r),
      {
        batchSize: 2,
        seqLen: 5,
        kvSeqLen: 40,
        key: kv,
        value: kv,
        window: 12,
        isCausal: true,
        keyPaddingMask: Uint8Array.from({ length: 80 }, () => (r() < 0.2 ? 1 : 0)),
        attnMask: uniform(5 * 40, 1, r),
        needWeights: true,
      },
      10,
      'attention options',
    );
  });

  test('packed sequences', async () => {
    const l = { embedDim: 32, numHeads: 4 };
    await check(l, uniform(22 * 32, 1, mulberry32(11)), { cuSeqlens: Int32Array.from([0, 5, 21, 22]), isCausal: true }, 11, 'packed');
  });

  test('moderately large logits (inputs ×4) within the logit-scaled tolerance', async () => {
    const l = { embedDim: 64, numHeads: 4 };
    await check(l, uniform(2 * 17 * 64, 4, mulberry32(12)), { batchSize: 2, seqLen: 17, isCausal: true, needWeights: true }, 12, '×4');
  });

  test('large logits (inputs ×25, logits in the hundreds): no overflow, every output and probability finite', async () => {
    // The softmax statistics and accumulators are float32, so nothing overflows; with logits this size
    // float16 Q and K cannot pin which keys win (see f16Tolerance), so only finiteness is asserted here.
    const l = { embedDim: 64, numHeads: 4 };
    const sd = randomStateDict(l, 12);
    const x = uniform(2 * 17 * 64, 25, mulberry32(12));
    const mha = half.createMultiHeadAttention(l, sd);
    const r = await withErrorScopes(half.device!, () => mha.forward(x, { batchSize: 2, seqLen: 17, isCausal: true, needWeights: true }));
    mha.dispose();
    expect(maxAbsFinite(referenceMultiHeadAttention(l, sd, x, { batchSize: 2, seqLen: 17 }).scores!)).toBeGreaterThan(100);
    for (const v of r.output) expect(Number.isFinite(v)).toBe(true);
    for (let row = 0; row < 2 * 4 * 17; row++) {
      const p = r.attentionWeights!.subarray(row * 17, (row + 1) * 17);
      for (const v of p) expect(Number.isFinite(v)).toBe(true);
      expect(Math.abs(p.reduce((a, b) => a + b, 0) - 1)).toBeLessThan(1e-3);
    }
  });

  test('a KV cache in f16: prefill then decode (split-KV over 600 keys) matches the reference', async () => {
    const l = { embedDim: 32, numHeads: 4, numKvHeads: 2 };
    const sd = randomStateDict(l, 13);
    const S = 600;
    const x = uniform(S * 32, 1, mulberry32(13));
    const mha = half.createMultiHeadAttention(l, sd);
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: S });
    await mha.forward(x.subarray(0, (S - 3) * 32), { batchSize: 1, seqLen: S - 3, kvCache: cache, isCausal: true });
    const ref = referenceMultiHeadAttention(l, sd, x, { batchSize: 1, seqLen: S, isCausal: true });
    for (let s = S - 3; s < S; s++) {
      const step = await mha.forward(x.subarray(s * 32, (s + 1) * 32), { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
      const expected = ref.output.subarray(s * 32, (s + 1) * 32);
      expectClose(step.output, expected, f16Tolerance([32, S, 32], maxAbsFinite(expected)), `position ${s}`);
    }
    mha.dispose();
  });

  test('scaledDotProductAttention', async () => {
    const r = mulberry32(14);
    const q = uniform(2 * 4 * 6 * 8, 1, r);
    const k = uniform(2 * 2 * 9 * 8, 1, r);
    const opts = { batchSize: 2, numHeads: 4, numKvHeads: 2, seqLen: 6, kvSeqLen: 9, headDim: 8, isCausal: true };
    const cpu = await createAttentionEngine({ backend: 'cpu' });
    const g = await half.scaledDotProductAttention(q, k, k, opts);
    const c = await cpu.scaledDotProductAttention(q, k, k, opts);
    expectClose(g.output, c.output, f16Tolerance([8, 9], maxAbsFinite(c.output)), 'sdpa');
    cpu.dispose();
  });

  test('weights take half the GPU memory of f32', async () => {
    const full = await createAttentionEngine({ backend: 'webgpu' });
    const l = { embedDim: 256, numHeads: 4 };
    const sd = randomStateDict(l, 15);
    const before = [half.stats().bytes, full.stats().bytes];
    const a = half.createMultiHeadAttention(l, sd);
    const b = full.createMultiHeadAttention(l, sd);
    const halfBytes = half.stats().bytes - before[0];
    const fullBytes = full.stats().bytes - before[1];
    expect(halfBytes).toBe(fullBytes / 2);
    a.dispose();
    b.dispose();
    full.dispose();
  });
});

test('without shader-f16 the engine says so and runs in f32', async () => {
  const { create } = (await import('webgpu')) as { create: (flags: string[]) => GPU };
  // Dawn's GPU object must outlive its devices (collected early, it takes the process down): keep it.
  const gpu = create([]);
  const adapter = await gpu.requestAdapter();
  const device = await adapter!.requestDevice(); // no shader-f16 requested
  const engine = await createAttentionEngine({ device, precision: 'f16' });
  expect(engine.precision).toBe('f32');
  expect(engine.precisionNote).toContain('shader-f16');
  const l = { embedDim: 32, numHeads: 4 };
  const mha = engine.createMultiHeadAttention(l, randomStateDict(l, 16));
  expect((await mha.forward(uniform(3 * 32, 1, mulberry32(16)), { batchSize: 1, seqLen: 3 })).output.length).toBe(96);
  engine.dispose();
  device.destroy();
  // A real use of `gpu` after its device is gone (which also keeps it alive until here): it still hands out adapters.
  expect(await gpu.requestAdapter()).not.toBeNull();
  await expect(createAttentionEngine({ precision: 'f8' as never })).rejects.toThrow(/options\.precision must be "f32", "f16" or left out/);
});
