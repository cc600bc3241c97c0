// The 'wasm' backend's f16 KV cache remembers whether a ±∞ or NaN half was ever written to it
// (WasmKvCache's `special`, sticky until reset()); while none was, the attention's f16 kernels skip their
// check for them (wasm/attention.ts, Tile's form 2). Every way a special half enters a cache must turn the
// check back on: a forward whose keys or values overflow f16, and a past written at creation.
// The oracle is exact: a twin cache with the same contents whose check is forced on from the start
// (form 1, the general rule), whose outputs must be the same bit for bit (NaN equal to NaN) at every step.

import { afterAll, beforeAll, expect, test } from 'vitest';
import { type AttentionEngine, createAttentionEngine, type KvCache } from '../src/index.ts';
import type { WasmKvCache } from '../src/wasm/kv-cache.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

let engine: AttentionEngine;
beforeAll(async () => {
  engine = await createAttentionEngine({ backend: 'wasm', threads: 1 });
});
afterAll(() => engine.dispose());

const [E, H, G] = [128, 8, 2]; // Dh 16, a decode step's query heads 4 to a key/value head: Tile's f16 forms
const Dh = E / H;
const storage = (cache: KvCache) => (cache as unknown as { storage: WasmKvCache }).storage;
const finite = (cache: KvCache) => (storage(cache).views().k.stored?.finite ?? false) as boolean;
const bits = (a: Float32Array) => Array.from(a, String); // NaN equals NaN

test.each(['a forward whose keys and values overflow f16', 'a forward whose values alone overflow f16', 'a past with a NaN, written at creation'])(
  'the f16 kernels check for ±∞ and NaN again after %s, and give the checked form’s bits throughout',
  async (how) => {
    const config = { embedDim: E, numHeads: H, numKvHeads: G };
    const sd = randomStateDict(config, 5);
    // Values alone: W_k zero (every key its bias, finite), so only the V rows of the huge token overflow.
    if (how.includes('values alone')) (sd.in_proj_weight as Float32Array).fill(0, E * E, (E + G * Dh) * E);
    const mha = engine.createMultiHeadAttention(config, sd);
    const r = mulberry32(11);
    const length = 70;
    const key = uniform(G * length * Dh, 1, r);
    const value = uniform(G * length * Dh, 1, r);
    const past = how.startsWith('a past');
    if (past) key[G * length * Dh - 3] = Number.NaN;
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: 80, dtype: 'f16', key, value });
    const checked = mha.createKvCache({ batchSize: 1, maxSeqLen: 80, dtype: 'f16', key, value });
    (storage(checked) as unknown as { special: boolean }).special = true; // the general rule at every step
    expect(finite(checked)).toBe(false);
    expect(finite(cache), 'a past without specials is finite; one with a NaN is not').toBe(!past);

    // Step 1 (forward cases): a token scaled far past f16's range (65504), whose projections round to ±∞.
    const steps = [0, 1, 2, 3].map((i) => uniform(E, 1, r).map((x) => (i === 1 && !past ? x * 1e7 : x)));
    for (const [i, x] of steps.entries()) {
      const a = await mha.forward(x, { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
      const b = await mha.forward(x, { batchSize: 1, seqLen: 1, kvCache: checked, isCausal: true });
      expect(bits(a.output), `step ${i}: the output against the checked form's`).toEqual(bits(b.output));
      if (i === 0) expect(finite(cache), 'the check skipped while the cache holds no special').toBe(!past);
      if (i > 0)
        expect(
          Array.from(a.output).some((v) => !Number.isFinite(v)),
          `step ${i}: the special reaches the output`,
        ).toBe(true);
    }
    expect(finite(cache), 'a special half was written: the check is back on').toBe(false);
    mha.dispose();
  },
);

test('reset() (a cache emptied) skips the check again; a q-dtype cache never claims it', async () => {
  const config = { embedDim: E, numHeads: H, numKvHeads: G };
  const mha = engine.createMultiHeadAttention(config, randomStateDict(config, 6));
  const r = mulberry32(12);
  const key = uniform(G * 10 * Dh, 1, r);
  key[0] = Number.POSITIVE_INFINITY;
  const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: 20, dtype: 'f16', key, value: uniform(G * 10 * Dh, 1, r) });
  expect(finite(cache)).toBe(false);
  cache.reset();
  expect(finite(cache)).toBe(true);
  mha.dispose();
  const wide = { embedDim: 256, numHeads: 8, numKvHeads: 2 }; // Dh 32: a q-dtype's blocks
  const other = engine.createMultiHeadAttention(wide, randomStateDict(wide, 7));
  expect(finite(other.createKvCache({ batchSize: 1, maxSeqLen: 20, dtype: 'q8_0' }))).toBe(false);
  expect(finite(other.createKvCache({ batchSize: 1, maxSeqLen: 20, dtype: 'f16' }))).toBe(true);
  other.dispose();
});
