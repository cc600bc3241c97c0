// KV caches: prefill k tokens, then decode the rest one (or a few) at a time; position by position the
// outputs equal one causal forward over the whole sequence. On both backends, MHA and GQA, B > 1.

import { describe, expect, test } from 'vitest';
import { DeviceLostError, InvalidArgumentError, type KvCache } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { withErrorScopes } from './helpers/gpu.ts';

const engines = useEngines();

/** Rows s0 … s1 − 1 of every batch element of x [B, S, E]. */
function rows(x: Float32Array, B: number, S: number, E: number, s0: number, s1: number): Float32Array {
  const out = new Float32Array(B * (s1 - s0) * E);
  for (let b = 0; b < B; b++) out.set(x.subarray((b * S + s0) * E, (b * S + s1) * E), b * (s1 - s0) * E);
  return out;
}

const layers = [
  { embedDim: 32, numHeads: 4 },
  { embedDim: 64, numHeads: 8, numKvHeads: 2 },
  { embedDim: 64, numHeads: 4, numKvHeads: 1 },
];

describe.each(['webgpu', 'cpu'] as const)('prefill then decode equals one causal forward (%s)', (backend) => {
  test.each(
    layers.flatMap(
      (l) =>
        [
          [l, 2, 21, 5, 1],
          [l, 3, 40, 33, 2],
          [l, 1, 9, 1, 1],
        ] as const,
    ),
  )('%o B=%i S=%i prefill=%i step=%i', async (layer, B, S, prefill, step) => {
    const engine = engines.of(backend);
    const E = layer.embedDim;
    const sd = randomStateDict(layer, S + B);
    const x = uniform(B * S * E, 1, mulberry32(S * 7 + B));
    const mha = engine.createMultiHeadAttention(layer, sd);
    const whole = await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true });
    const cache = mha.createKvCache({ batchSize: B, maxSeqLen: S + 3 });
    const run = async (s0: number, s1: number) => {
      const call = () => mha.forward(rows(x, B, S, E, s0, s1), { batchSize: B, seqLen: s1 - s0, kvCache: cache, isCausal: true });
      return backend === 'webgpu' ? withErrorScopes(engine.device!, call) : call();
    };
    const pieces: Float32Array[] = [(await run(0, prefill)).output];
    expect(cache.length).toBe(prefill);
    for (let s = prefill; s < S; s += step) pieces.push((await run(s, Math.min(S, s + step))).output);
    expect(cache.length).toBe(S);
    // Reassemble [B, S, E] from the pieces (each [B, n, E]) and compare with the whole forward.
    const got = new Float32Array(B * S * E);
    let s0 = 0;
    for (const piece of pieces) {
      const n = piece.length / (B * E);
      for (let b = 0; b < B; b++) got.set(piece.subarray(b * n * E, (b + 1) * n * E), (b * S + s0) * E);
      s0 += n;
    }
    expectClose(got, whole.output, f32Tolerance([E, S, E]), 'decoded vs whole');
    cache.dispose();
    mha.dispose();
  });
});

describe.each(['webgpu', 'cpu'] as const)('cache bookkeeping (%s)', (backend) => {
  const L = { embedDim: 32, numHeads: 4 };
  const sd = randomStateDict(L, 3);

  test('reset() empties it; overflowing maxSeqLen is a clear error; needWeights covers every cached key', async () => {
    const mha = engines.of(backend).createMultiHeadAttention(L, sd);
    const cache: KvCache = mha.createKvCache({ batchSize: 1, maxSeqLen: 4 });
    const x = uniform(3 * 32, 1, mulberry32(1));
    await mha.forward(x, { batchSize: 1, seqLen: 3, kvCache: cache, isCausal: true });
    const r = await mha.forward(x.subarray(0, 32), { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true, needWeights: true });
    expect(r.attentionWeights!.length).toBe(4 * 1 * 4); // [B, H, 1, 4]
    await expect(mha.forward(x.subarray(0, 32), { batchSize: 1, seqLen: 1, kvCache: cache })).rejects.toThrow(
      /options\.kvCache must be room for 1 more position\(s\): length 4 \+ seqLen 1 ≤ maxSeqLen 4; got a cache with 0 free\. reset\(\) the cache/,
    );
    cache.reset();
    expect(cache.length).toBe(0);
    const again = await mha.forward(x, { batchSize: 1, seqLen: 3, kvCache: cache, isCausal: true });
    const plain = await mha.forward(x, { batchSize: 1, seqLen: 3, isCausal: true });
    expectClose(again.output, plain.output, f32Tolerance([32, 3, 32]));
    cache.dispose();
    mha.dispose();
  });

  test('a cache serves its own layer, its batch size, and one forward at a time', async () => {
    const a = engines.of(backend).createMultiHeadAttention(L, sd);
    const b = engines.of(backend).createMultiHeadAttention(L, sd);
    const cache = a.createKvCache({ batchSize: 2, maxSeqLen: 8 });
    const x = uniform(2 * 32, 1, mulberry32(2));
    await expect(b.forward(x, { batchSize: 2, seqLen: 1, kvCache: cache })).rejects.toThrow(/a KvCache made by this layer/);
    await expect(a.forward(x.subarray(0, 32), { batchSize: 1, seqLen: 1, kvCache: cache })).rejects.toThrow(/the cache's batchSize \(2\)/);
    const first = a.forward(x, { batchSize: 2, seqLen: 1, kvCache: cache });
    await expect(a.forward(x, { batchSize: 2, seqLen: 1, kvCache: cache })).rejects.toThrow(InvalidArgumentError);
    await first;
    expect(cache.length).toBe(1);
    await expect(a.forward(x, { batchSize: 2, seqLen: 1, kvCache: cache, key: x, value: x } as never)).rejects.toThrow(/options\.key must be left out with kvCache/);
    expect(() => a.createKvCache({ batchSize: 0, maxSeqLen: 8 })).toThrow(/options\.batchSize must be a positive integer/);
    cache.dispose();
    await expect(a.forward(x, { batchSize: 2, seqLen: 1, kvCache: cache })).rejects.toThrow(/a live KvCache/);
    a.dispose();
    b.dispose();
  });
});

test('WebGPU: after a device loss the cache reports its keys and values lost; reset() makes it usable again', async () => {
  const { createGpuEngine } = await import('./helpers/gpu.ts');
  const engine = await createGpuEngine();
  const L = { embedDim: 32, numHeads: 4 };
  const mha = engine.createMultiHeadAttention(L, randomStateDict(L, 4));
  const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: 8 });
  const x = uniform(32, 1, mulberry32(3));
  await mha.forward(x, { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
  engine.device!.destroy();
  const error = await mha.forward(x, { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true }).then(
    () => null,
    (e) => e,
  );
  expect(error).toBeInstanceOf(DeviceLostError);
  expect((error as Error).message).toContain("KV cache's keys and values were lost");
  cache.reset();
  const r = await mha.forward(x, { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
  const plain = await mha.forward(x, { batchSize: 1, seqLen: 1 });
  expect(Array.from(r.output)).toEqual(Array.from(plain.output));
  engine.dispose();
});

describe('split-KV decoding (flash-decoding): a few queries over a long cache', () => {
  test.each(['webgpu', 'cpu'] as const)('decode steps over ~700 cached positions equal the whole causal forward (%s)', async (backend) => {
    const engine = engines.of(backend);
    const layer = { embedDim: 32, numHeads: 4, numKvHeads: 2 };
    const B = 2;
    const S = 700;
    const E = 32;
    const x = uniform(B * S * E, 1, mulberry32(70));
    const mha = engine.createMultiHeadAttention(layer, randomStateDict(layer, 70));
    const whole = await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true });
    const cache = mha.createKvCache({ batchSize: B, maxSeqLen: S });
    await mha.forward(rows(x, B, S, E, 0, 690), { batchSize: B, seqLen: 690, kvCache: cache, isCausal: true });
    for (let s = 690; s < S; s++) {
      const step = await mha.forward(rows(x, B, S, E, s, s + 1), { batchSize: B, seqLen: 1, kvCache: cache, isCausal: true, needWeights: s === S - 1 });
      expectClose(step.output, rows(whole.output, B, S, E, s, s + 1), f32Tolerance([E, S, E]), `position ${s}`);
      if (step.attentionWeights) {
        // [B, H, 1, S]: each row sums to 1 over all 700 cached keys.
        for (let r = 0; r < B * 4; r++) {
          const sum = step.attentionWeights.subarray(r * S, (r + 1) * S).reduce((a, p) => a + p, 0);
          expect(Math.abs(sum - 1)).toBeLessThan(1e-4);
        }
      }
    }
    mha.dispose();
  });

  test('cross-attention with 5 queries and 1000 keys, padding, a head mask and weights: WebGPU (split) vs CPU', async () => {
    const layer = { embedDim: 32, numHeads: 4 };
    const sd = randomStateDict(layer, 71);
    const r = mulberry32(71);
    const B = 2;
    const Sq = 5;
    const Skv = 1000;
    const pad = Uint8Array.from({ length: B * Skv }, (_, i) => (i < Skv ? 1 : r() < 0.3 ? 1 : 0)); // batch 0: every key ignored
    const kv = uniform(B * Skv * 32, 1, r);
    const options = { batchSize: B, seqLen: Sq, kvSeqLen: Skv, key: kv, value: kv, keyPaddingMask: pad, headMask: Float32Array.from([1, 0.5, 0, 2]), needWeights: true };
    const x = uniform(B * Sq * 32, 1, r);
    const a = engines.gpu.createMultiHeadAttention(layer, sd);
    const c = engines.cpu.createMultiHeadAttention(layer, sd);
    const g = await withErrorScopes(engines.gpu.device!, () => a.forward(x, options));
    const ref = await c.forward(x, options);
    expectClose(g.output, ref.output, f32Tolerance([32, Skv, 32]), 'output');
    expectClose(g.attentionWeights!, ref.attentionWeights!, f32Tolerance([32, Skv]), 'attentionWeights');
    for (let i = 0; i < Sq * 32; i++) expect(g.output[i]).toBeCloseTo(sd['out_proj.bias'][i % 32], 6); // batch 0 saw no key
    a.dispose();
    c.dispose();
  });
});
