// A KV cache's contents in and out: cache.read() gives the keys and values it holds, [B, G, length,
// Dh] float32, equal to the layer's own K and V (the float64 reference's); mha.createKvCache({ key,
// value }) starts a cache from a past, and decoding from it equals decoding from the cache it was read
// from. Both backends, grouped-query heads, and the typed errors of bad pasts.

import { describe, expect, test } from 'vitest';
import { InvalidArgumentError, referenceMultiHeadAttention, ShapeMismatchError } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f16Tolerance, f32Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';
import { createGpuEngine } from './helpers/gpu.ts';
import { useEngines } from './helpers/engines.ts';

const engines = useEngines();
const L = { embedDim: 48, numHeads: 4, numKvHeads: 2 };
const sd = randomStateDict(L, 31);
const [B, G, Dh] = [2, 2, 12];

describe.each(['webgpu', 'cpu'] as const)('%s', (backend) => {
  test('read() after a prefill gives the layer’s K and V; a cache made from them decodes the same', async () => {
    const engine = engines.of(backend);
    const mha = engine.createMultiHeadAttention(L, sd);
    const [prefill, total] = [9, 12];
    const x = uniform(B * total * L.embedDim, 1, mulberry32(3));
    const rows = (from: number, to: number) => {
      const out = new Float32Array(B * (to - from) * L.embedDim);
      for (let b = 0; b < B; b++) out.set(x.subarray((b * total + from) * L.embedDim, (b * total + to) * L.embedDim), b * (to - from) * L.embedDim);
      return out;
    };
    const cache = mha.createKvCache({ batchSize: B, maxSeqLen: 16 });
    expect(await cache.read()).toEqual({ key: new Float32Array(0), value: new Float32Array(0) });
    await mha.forward(rows(0, prefill), { batchSize: B, seqLen: prefill, kvCache: cache, isCausal: true });
    const past = await cache.read();
    expect(past.key.length).toBe(B * G * prefill * Dh);
    const ref = referenceMultiHeadAttention(L, sd, rows(0, prefill), { batchSize: B, seqLen: prefill });
    const tol = f32Tolerance([L.embedDim]);
    expectClose(past.key, ref.k, tol, 'key');
    expectClose(past.value, ref.v, tol, 'value');

    // A new cache from that past continues exactly as the original one does.
    const copy = mha.createKvCache({ batchSize: B, maxSeqLen: 16, key: past.key, value: past.value });
    expect(copy.length).toBe(prefill);
    for (let t = prefill; t < total; t++) {
      const step = { batchSize: B, seqLen: 1, isCausal: true };
      const a = await mha.forward(rows(t, t + 1), { ...step, kvCache: cache });
      const c = await mha.forward(rows(t, t + 1), { ...step, kvCache: copy });
      expectClose(c.output, a.output, f32Tolerance([L.embedDim, t + 1, L.embedDim]), `step ${t}`);
    }
    expect(copy.length).toBe(total);
    cache.dispose();
    copy.dispose();
    await expect(copy.read()).rejects.toThrow(/KvCache/);
    mha.dispose();
  });

  test('a past shorter than its arrays with `length`, and bad pasts refused with typed errors', async () => {
    const mha = engines.of(backend).createMultiHeadAttention(L, sd);
    const block = B * G * Dh;
    const key = uniform(3 * block, 1, mulberry32(4));
    const value = uniform(3 * block, 1, mulberry32(5));
    const cache = mha.createKvCache({ batchSize: B, maxSeqLen: 8, key, value, length: 3 });
    const back = await cache.read();
    expect(Array.from(back.key)).toEqual(Array.from(key));
    expect(Array.from(back.value)).toEqual(Array.from(value));
    cache.dispose();
    const cases: [object, typeof InvalidArgumentError, string][] = [
      [{ key }, InvalidArgumentError, 'options.value'],
      [{ key: [1, 2], value }, InvalidArgumentError, 'options.key'],
      [{ key: key.subarray(1), value }, ShapeMismatchError, 'options.key'],
      [{ key, value: value.subarray(0, block) }, ShapeMismatchError, 'options.value'],
      [{ key, value, length: 9 }, InvalidArgumentError, 'options.length'],
      [{ length: 2 }, InvalidArgumentError, 'options.length'],
    ];
    for (const [extra, kind, argument] of cases) {
      let error: unknown = null;
      try {
        mha.createKvCache({ batchSize: B, maxSeqLen: 8, ...extra } as never);
      } catch (e) {
        error = e;
      }
      expect(error, argument).toBeInstanceOf(kind);
      expect((error as Error).message).toContain(argument);
    }
    mha.dispose();
  });
});

test('f16 storage: read() widens what is stored; a cache written from it holds the same bits', async () => {
  const engine = await createGpuEngine({ precision: 'f16' });
  expect(engine.precision).toBe('f16'); // lavapipe has shader-f16
  const mha = engine.createMultiHeadAttention(L, sd);
  const S = 6;
  const x = uniform(B * S * L.embedDim, 1, mulberry32(8));
  const cache = mha.createKvCache({ batchSize: B, maxSeqLen: 8 });
  await mha.forward(x, { batchSize: B, seqLen: S, kvCache: cache, isCausal: true });
  const past = await cache.read();
  const ref = referenceMultiHeadAttention(L, sd, x, { batchSize: B, seqLen: S });
  expectClose(past.key, ref.k, f16Tolerance([L.embedDim], maxAbsFinite(ref.k)), 'key');
  const copy = mha.createKvCache({ batchSize: B, maxSeqLen: 8, ...past });
  const again = await copy.read();
  expect(Array.from(again.key)).toEqual(Array.from(past.key));
  expect(Array.from(again.value)).toEqual(Array.from(past.value));
  engine.dispose();
});
