// Quantized (and f16) KV caches on the 'cpu' backend (issue 40, item 1; docs/DECODING.md "Quantized caches"):
// - every call against the float64 reference OVER THE CACHE'S OWN DEQUANTIZED VALUES (cache.read()): the
//   reference's queries and output projection, attention() over K, V read back as float32 — for the cpu
//   backend, which reads the stored rows in place (one row decoded at a time), this checks that reading;
// - the stored rows bit for bit: readEncoded equals encodeKvRows of the float32 rows an 'f32' cache of the
//   same layer and calls holds (a new row depends only on its token and position, so both caches get the
//   same float64 row: rounded to float32, then encoded), and after createKvCache({ key, value, dtype });
// - ggml itself: test/fixtures/kv-quant/rows.json (scripts/make_kv_quant_fixtures.py: gguf-py's
//   gguf.quants, numpy's float16) and test/fixtures/quant/quantize.json (make_quant_fixtures.py's
//   transcription of quantize_row_q8_0_ref / q4_0_ref) against encodeKvRows and a cache's readEncoded;
// - truncate, acceptPath (treeParents), reset on q caches; cache.bytes; the bad inputs.

import { readFileSync } from 'node:fs';
import { describe, expect, test, vi } from 'vitest';
import type { BackendLayer } from '../src/backend.ts';
import { attention, outputProjection, qkvProjection } from '../src/cpu/reference.ts';
import { InvalidArgumentError, type KvCache, type MultiHeadAttention, type MultiHeadAttentionConfig } from '../src/index.ts';
import { geometryOf, type LayerWeights, resolveForwardPlan, resolveLayerSpec, resolveWeights } from '../src/plan/index.ts';
import { decodeKvRows, encodeKvRows, type KvCacheDtype, kvRowBytes, roundToKvDtype } from '../src/quant/kv.ts';
import { expectClose, type Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

const engines = useEngines('cpu');

/** The project's float32 check: |out − ref| ≤ 2e-4 + 2e-3·|ref|; a NaN fails. */
const TOL: Tolerance = { atol: 2e-4, rtol: 2e-3 };
const DTYPES = ['f16', 'q8_0', 'q4_0'] as const satisfies readonly KvCacheDtype[];

function norm(n: number, seed: number): Float32Array {
  return Float32Array.from(uniform(n, 0.5, mulberry32(seed)), (x) => 1 + x);
}

/** Layers by name: MHA / GQA / MQA at Dh 32, 64, 128, and one with rotary and QK-norm. */
const LAYERS: Record<string, MultiHeadAttentionConfig> = {
  'MHA Dh32': { embedDim: 64, numHeads: 2 },
  'GQA Dh32': { embedDim: 128, numHeads: 4, numKvHeads: 2 },
  'MQA Dh64': { embedDim: 128, numHeads: 2, numKvHeads: 1 },
  'GQA Dh128': { embedDim: 256, numHeads: 4, numKvHeads: 2, headDim: 128 } as MultiHeadAttentionConfig,
  'rotary+qkNorm Dh64': { embedDim: 128, numHeads: 4, numKvHeads: 2, headDim: 64, rotary: { base: 10000 }, qkNorm: { query: norm(64, 1), key: norm(64, 2) } },
};

interface Layer {
  mha: MultiHeadAttention;
  config: MultiHeadAttentionConfig;
  weights: LayerWeights;
  spec: ReturnType<typeof resolveLayerSpec>;
  E: number;
}

function makeLayer(name: string, seed = 7): Layer {
  const config = LAYERS[name];
  const sd = randomStateDict(config as Parameters<typeof randomStateDict>[0], seed);
  const spec = resolveLayerSpec(config);
  return { mha: engines.cpu.createMultiHeadAttention(config, sd), config, weights: resolveWeights(spec, sd), spec, E: config.embedDim };
}

/**
 * One cached call, and its oracle: the float64 reference's queries for x (rotary / QK-norm as the cpu
 * backend applies them), attention over the cache's dequantized K and V after the call (cache.read():
 * every position, the call's own new rows as stored), the output projection.
 */
async function checkedStep(layer: Layer, cache: KvCache, x: Float32Array, B: number, n: number, extra: Record<string, unknown> = {}): Promise<Float32Array> {
  const options = { batchSize: B, seqLen: n, kvCache: cache, isCausal: true, ...extra };
  const plan = resolveForwardPlan(layer.spec, x, options); // before the call: the cache's length is the start
  const { output } = await layer.mha.forward(x, options);
  const { key, value } = await cache.read();
  expect(key.length).toBe(B * layer.spec.numKvHeads * (plan.cache!.start + n) * layer.spec.headDim);
  const { q } = qkvProjection({ ...plan, kvSeqLen: n, geometry: geometryOf('self', B, n, n), cache: null }, layer.weights);
  const want = outputProjection(plan, layer.weights, attention(plan, q, Float64Array.from(key), Float64Array.from(value)));
  expectClose(output, want, TOL, `${cache.dtype} step at ${plan.cache!.start}+${n}`);
  // The same arithmetic over the same values: the in-place reads give the reference's numbers exactly
  // (an 'f32' cache keeps float64 rows on the cpu, read() their float32: the tolerance only).
  if (cache.dtype !== 'f32') expect(output).toEqual(Float32Array.from(want));
  return output;
}

/** Rows s0 … s1 − 1 of every batch element of x [B, S, E]. */
function rows(x: Float32Array, B: number, S: number, E: number, s0: number, s1: number): Float32Array {
  const out = new Float32Array(B * (s1 - s0) * E);
  for (let b = 0; b < B; b++) out.set(x.subarray((b * S + s0) * E, (b * S + s1) * E), b * (s1 - s0) * E);
  return out;
}

/** Rows `which` of x [n, E] (batch 1), stacked. */
function pick(x: Float32Array, E: number, which: readonly number[]): Float32Array {
  const out = new Float32Array(which.length * E);
  for (let i = 0; i < which.length; i++) out.set(x.subarray(which[i] * E, (which[i] + 1) * E), i * E);
  return out;
}

function b64(s: string): Uint8Array {
  const buf = Buffer.from(s, 'base64');
  return new Uint8Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
}

/** The cache's rows as stored (the storage's readEncoded: [B, G, length] rows of kvRowBytes each). */
const encoded = (cache: KvCache) => cache.storage.readEncoded(cache.length);

const f32 = (bytes: Uint8Array) => new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);

describe('cpu quantized caches against the float64 reference over the dequantized cache', () => {
  // [layer, B, prefill length, decode steps]: awkward lengths around the blocks and powers of two.
  const GRID: [string, number, number, number][] = [
    ['MHA Dh32', 1, 1, 3],
    ['MHA Dh32', 2, 31, 3],
    ['GQA Dh32', 3, 33, 2],
    ['MQA Dh64', 2, 65, 3],
    ['GQA Dh128', 1, 129, 3],
    ['GQA Dh128', 2, 17, 2],
    ['rotary+qkNorm Dh64', 2, 33, 3],
  ];
  describe.each(DTYPES)('%s', (dtype) => {
    test.each(GRID)('%s B=%i prefill %i, %i decode steps (then a 2-token step)', async (name, B, P, steps) => {
      const layer = makeLayer(name);
      const { E } = layer;
      const S = P + steps + 2;
      const x = uniform(B * S * E, 1, mulberry32(P * 31 + B));
      const cache = layer.mha.createKvCache({ batchSize: B, maxSeqLen: S + 3, dtype });
      const plain = layer.mha.createKvCache({ batchSize: B, maxSeqLen: S + 3 }); // 'f32': the rows before rounding
      expect(cache.dtype).toBe(dtype);
      expect(plain.dtype).toBe('f32');
      const plan: [number, number][] = [[0, P]];
      for (let s = 0; s < steps; s++) plan.push([P + s, P + s + 1]);
      plan.push([P + steps, S]);
      for (const [s0, s1] of plan) {
        const xs = rows(x, B, S, E, s0, s1);
        await checkedStep(layer, cache, xs, B, s1 - s0);
        await layer.mha.forward(xs, { batchSize: B, seqLen: s1 - s0, kvCache: plain, isCausal: true });
      }
      expect(cache.length).toBe(S);
      // Each stored row is encodeKvRow of the float32 row the reference computed (the 'f32' cache's).
      const Dh = layer.spec.headDim;
      const [enc, ref] = [await encoded(cache), await plain.read()];
      expect(enc.key).toEqual(encodeKvRows(dtype, ref.key, Dh));
      expect(enc.value).toEqual(encodeKvRows(dtype, ref.value, Dh));
      const back = await cache.read();
      expect(back.key).toEqual(roundToKvDtype(dtype, ref.key, Dh));
      expect(back.value).toEqual(roundToKvDtype(dtype, ref.value, Dh));
      // The cache is really quantized: its values differ from the float rows (q4_0 / q8_0 / f16 all round).
      expect(back.key).not.toEqual(ref.key);
    });
  });

  test("'f32' keeps float64 rows: the same outputs as before (the reference's, bit for bit), read() the float32 of them", async () => {
    const layer = makeLayer('GQA Dh32');
    const { E } = layer;
    const cache = layer.mha.createKvCache({ batchSize: 2, maxSeqLen: 40, dtype: 'f32' });
    const x = uniform(2 * 35 * E, 1, mulberry32(3));
    await checkedStep(layer, cache, rows(x, 2, 35, E, 0, 33), 2, 33);
    await checkedStep(layer, cache, rows(x, 2, 35, E, 33, 34), 2, 1);
    // The same call without a cache (the whole causal forward) gives the same last rows.
    const whole = (await layer.mha.forward(rows(x, 2, 35, E, 0, 34), { batchSize: 2, seqLen: 34, isCausal: true })).output;
    const c2 = layer.mha.createKvCache({ batchSize: 2, maxSeqLen: 40 });
    await layer.mha.forward(rows(x, 2, 35, E, 0, 33), { batchSize: 2, seqLen: 33, kvCache: c2, isCausal: true });
    const last = (await layer.mha.forward(rows(x, 2, 35, E, 33, 34), { batchSize: 2, seqLen: 1, kvCache: c2, isCausal: true })).output;
    expectClose(last, rows(whole, 2, 34, E, 33, 34), TOL, 'decode step vs whole forward');
    expect(cache.bytes).toBe(2 * 2 * 2 * 40 * 32 * 8); // K and V, [B, G, maxSeqLen, Dh] float64
  });

  test('needWeights over a q8_0 cache: the probabilities of the dequantized keys', async () => {
    const layer = makeLayer('MQA Dh64');
    const { E } = layer;
    const cache = layer.mha.createKvCache({ batchSize: 1, maxSeqLen: 20, dtype: 'q8_0' });
    const x = uniform(12 * E, 1, mulberry32(12));
    await checkedStep(layer, cache, x.subarray(0, 11 * E), 1, 11);
    const options = { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true, needWeights: true };
    const plan = resolveForwardPlan(layer.spec, x.subarray(11 * E), options);
    const r = await layer.mha.forward(x.subarray(11 * E), options);
    const { key, value } = await cache.read();
    const { q } = qkvProjection({ ...plan, kvSeqLen: 1, geometry: geometryOf('self', 1, 1, 1), cache: null }, layer.weights);
    const keep = { scores: new Float64Array(2 * 12), probs: new Float64Array(2 * 12) };
    attention(plan, q, Float64Array.from(key), Float64Array.from(value), keep);
    expect(r.attentionWeights).toEqual(Float32Array.from(keep.probs));
  });
});

describe('cpu quantized caches: a past, rollback, trees, reset', () => {
  test.each(DTYPES)('%s: createKvCache({ key, value, dtype }) stores encodeKvRows of the past; steps attend to it', async (dtype) => {
    for (const name of ['GQA Dh32', 'rotary+qkNorm Dh64', 'GQA Dh128']) {
      const layer = makeLayer(name);
      const { E } = layer;
      const { numKvHeads: G, headDim: Dh } = layer.spec;
      const B = 2;
      const L = 37;
      const key = uniform(B * G * L * Dh, 2, mulberry32(L + Dh));
      const value = uniform(B * G * L * Dh, 2, mulberry32(L + Dh + 1));
      const cache = layer.mha.createKvCache({ batchSize: B, maxSeqLen: L + 4, key, value, dtype });
      expect(cache.length).toBe(L);
      const enc = await encoded(cache);
      expect(enc.key).toEqual(encodeKvRows(dtype, key, Dh));
      expect(enc.value).toEqual(encodeKvRows(dtype, value, Dh));
      expect(enc.key.length).toBe(B * G * L * kvRowBytes(dtype, Dh));
      const back = await cache.read();
      expect(back.key).toEqual(roundToKvDtype(dtype, key, Dh));
      expect(back.value).toEqual(roundToKvDtype(dtype, value, Dh));
      const x = uniform(B * 3 * E, 1, mulberry32(5));
      await checkedStep(layer, cache, rows(x, B, 3, E, 0, 1), B, 1);
      await checkedStep(layer, cache, rows(x, B, 3, E, 1, 3), B, 2);
      // writeEncoded(readEncoded) round trip into another cache: bit for bit, and the same next step.
      const copy = layer.mha.createKvCache({ batchSize: B, maxSeqLen: L + 4, dtype });
      const all = await encoded(cache);
      copy.storage.writeEncoded(all.key, all.value, cache.length);
      copy.advance(cache.length);
      expect(await encoded(copy)).toEqual(all);
      const y = uniform(B * E, 1, mulberry32(8));
      const [a, b] = [await checkedStep(layer, cache, y, B, 1), await checkedStep(layer, copy, y, B, 1)];
      expect(a).toEqual(b);
    }
  });

  test.each(DTYPES)('%s: truncate then continue equals a cache that never saw the dropped positions, bit for bit', async (dtype) => {
    const layer = makeLayer('rotary+qkNorm Dh64');
    const { E } = layer;
    const B = 2;
    const S = 14;
    const x = uniform(B * S * E, 1, mulberry32(21));
    const junk = uniform(B * 5 * E, 1, mulberry32(99));
    const a = layer.mha.createKvCache({ batchSize: B, maxSeqLen: 16, dtype });
    await checkedStep(layer, a, rows(x, B, S, E, 0, 9), B, 9);
    a.truncate(4);
    expect(a.length).toBe(4);
    await checkedStep(layer, a, rows(x, B, S, E, 4, 7), B, 3);
    await checkedStep(layer, a, junk, B, 5);
    a.truncate(7);
    const gotA = [await checkedStep(layer, a, rows(x, B, S, E, 7, 8), B, 1), await checkedStep(layer, a, rows(x, B, S, E, 8, S), B, S - 8)];
    const b = layer.mha.createKvCache({ batchSize: B, maxSeqLen: 16, dtype });
    await checkedStep(layer, b, rows(x, B, S, E, 0, 4), B, 4);
    await checkedStep(layer, b, rows(x, B, S, E, 4, 7), B, 3);
    const gotB = [await checkedStep(layer, b, rows(x, B, S, E, 7, 8), B, 1), await checkedStep(layer, b, rows(x, B, S, E, 8, S), B, S - 8)];
    expect(gotA).toEqual(gotB);
    expect(await encoded(a)).toEqual(await encoded(b));
    a.truncate(0);
    expect(a.length).toBe(0);
    expect((await a.read()).key.length).toBe(0);
  });

  test.each(DTYPES)('%s: a tree (treeParents) then acceptPath equals the path run alone, bit for bit', async (dtype) => {
    const layer = makeLayer('rotary+qkNorm Dh64');
    const { E } = layer;
    const ctx = uniform(6 * E, 1, mulberry32(31));
    const nodes = uniform(6 * E, 1, mulberry32(32));
    const parents = Int32Array.from([-1, 0, 0, 1, 2, -1]);
    const tree = layer.mha.createKvCache({ batchSize: 1, maxSeqLen: 16, dtype });
    await checkedStep(layer, tree, ctx, 1, 6);
    // Every node against the oracle over the cache's dequantized rows (the tree's mask and depths from the plan).
    await checkedStep(layer, tree, nodes, 1, 6, { treeParents: parents });
    expect(tree.length).toBe(12);
    const path = [0, 2, 4];
    tree.acceptPath(path);
    expect(tree.length).toBe(9);
    const alone = layer.mha.createKvCache({ batchSize: 1, maxSeqLen: 16, dtype });
    await checkedStep(layer, alone, ctx, 1, 6);
    await checkedStep(layer, alone, pick(nodes, E, path), 1, 3);
    expect(await encoded(tree)).toEqual(await encoded(alone));
    const next = uniform(E, 1, mulberry32(33));
    expect(await checkedStep(layer, tree, next, 1, 1)).toEqual(await checkedStep(layer, alone, next, 1, 1));
  });

  test.each(DTYPES)('%s: reset empties it; the next prefill equals a fresh cache', async (dtype) => {
    const layer = makeLayer('GQA Dh32');
    const { E } = layer;
    const x = uniform(2 * 9 * E, 1, mulberry32(41));
    const cache = layer.mha.createKvCache({ batchSize: 2, maxSeqLen: 12, dtype });
    await checkedStep(layer, cache, uniform(2 * 11 * E, 1, mulberry32(40)), 2, 11);
    cache.reset();
    expect(cache.length).toBe(0);
    expect(cache.dtype).toBe(dtype);
    const fresh = layer.mha.createKvCache({ batchSize: 2, maxSeqLen: 12, dtype });
    expect(await checkedStep(layer, cache, x, 2, 9)).toEqual(await checkedStep(layer, fresh, x, 2, 9));
    expect(await encoded(cache)).toEqual(await encoded(fresh));
  });
});

describe('cpu quantized caches: memory', () => {
  test('cache.bytes is what the rows hold: q8_0 / f16 = 34/64 = 0.53, q4_0 / f16 = 18/64 = 0.28 (Dh 128)', () => {
    const layer = makeLayer('GQA Dh128');
    const [B, G, S, Dh] = [2, 2, 100, 128];
    const bytes = Object.fromEntries((['f32', 'f16', 'q8_0', 'q4_0'] as const).map((d) => [d, layer.mha.createKvCache({ batchSize: B, maxSeqLen: S, dtype: d }).bytes]));
    expect(bytes.f16).toBe(2 * B * G * S * Dh * 2);
    expect(bytes.q8_0).toBe(2 * B * G * S * (Dh / 32) * 34);
    expect(bytes.q4_0).toBe(2 * B * G * S * (Dh / 32) * 18);
    expect(bytes.f32).toBe(2 * B * G * S * Dh * 8); // the cpu's 'f32' cache keeps the reference's float64 rows
    expect(bytes.q8_0 / bytes.f16).toBeCloseTo(0.53125, 10);
    expect(bytes.q4_0 / bytes.f16).toBeCloseTo(0.28125, 10);
    expect(bytes.q8_0 / bytes.f16).toBeLessThanOrEqual(0.56);
    expect(bytes.q4_0 / bytes.f16).toBeLessThanOrEqual(0.3);
    const c = layer.mha.createKvCache({ batchSize: 1, maxSeqLen: 4, dtype: 'q4_0' });
    c.dispose();
    expect(c.bytes).toBe(0);
  });
});

describe("cpu quantized caches: the rounding is ggml's, bit for bit", () => {
  const kv = JSON.parse(readFileSync(new URL('./fixtures/kv-quant/rows.json', import.meta.url), 'utf8')) as Record<string, string> & { Dh: number; rows: number };
  const input = f32(b64(kv.input));

  test.each(DTYPES)("%s: encodeKvRows equals gguf-py's bytes (scripts/make_kv_quant_fixtures.py), decodeKvRows its values", (dtype) => {
    expect(encodeKvRows(dtype, input, kv.Dh)).toEqual(b64(kv[dtype]));
    if (dtype !== 'f16') expect(decodeKvRows(dtype, b64(kv[dtype]), kv.Dh)).toEqual(f32(b64(kv[`${dtype}_values`])));
  });

  test.each(DTYPES)('%s: a cpu cache made from these rows holds those bytes (readEncoded), and their values (read)', async (dtype) => {
    const layer = makeLayer('MQA Dh64'); // G 1, Dh 64
    const n = kv.rows;
    const reversed = new Float32Array(input.length);
    for (let r = 0; r < n; r++) reversed.set(input.subarray(r * 64, (r + 1) * 64), (n - 1 - r) * 64);
    const cache = layer.mha.createKvCache({ batchSize: 1, maxSeqLen: n + 1, key: input, value: reversed, dtype });
    const enc = await encoded(cache);
    const want = b64(kv[dtype]);
    expect(enc.key).toEqual(want);
    const rb = kvRowBytes(dtype, 64);
    for (let r = 0; r < n; r++) expect(enc.value.subarray(r * rb, (r + 1) * rb)).toEqual(want.subarray((n - 1 - r) * rb, (n - r) * rb));
    if (dtype !== 'f16') expect((await cache.read()).key).toEqual(f32(b64(kv[`${dtype}_values`])));
    // A step over these rows (Inf scales and NaN values included in the huge row) follows the reference:
    // the NaN row poisons the scores exactly as the reference's does over the same values.
    if (dtype === 'f16' || dtype === 'q8_0' || dtype === 'q4_0') {
      const x = uniform(layer.E, 1, mulberry32(51));
      const options = { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true };
      const plan = resolveForwardPlan(layer.spec, x, options);
      const { output } = await layer.mha.forward(x, options);
      const { key, value } = await cache.read();
      const { q } = qkvProjection({ ...plan, kvSeqLen: 1, geometry: geometryOf('self', 1, 1, 1), cache: null }, layer.weights);
      expect(output).toEqual(Float32Array.from(outputProjection(plan, layer.weights, attention(plan, q, Float64Array.from(key), Float64Array.from(value)))));
    }
  });

  test('the older transcription of quantize_row_q8_0_ref / q4_0_ref (test/fixtures/quant/quantize.json) agrees, rows of Dh 64 and 96', async () => {
    const q = JSON.parse(readFileSync(new URL('./fixtures/quant/quantize.json', import.meta.url), 'utf8')) as {
      cases: { name: string; dtype: string; shape: [number, number]; input: string; data: string }[];
    };
    const cases = q.cases.filter((c) => c.dtype === 'q8_0' || c.dtype === 'q4_0');
    expect(cases.length).toBeGreaterThanOrEqual(4);
    for (const c of cases) {
      const [N, K] = c.shape;
      expect(encodeKvRows(c.dtype as KvCacheDtype, f32(b64(c.input)), K), c.name).toEqual(b64(c.data));
      expect(N * kvRowBytes(c.dtype as KvCacheDtype, K)).toBe(b64(c.data).length);
    }
  });
});

describe('cpu quantized caches: bad input', () => {
  test('a q-dtype with headDim 48 is refused naming options.dtype, before any storage; f16 and f32 are fine', () => {
    const config = { embedDim: 96, numHeads: 2 }; // Dh 48
    const mha = engines.cpu.createMultiHeadAttention(config, randomStateDict(config, 3));
    const impl = (mha as unknown as { impl: BackendLayer }).impl;
    const made = vi.spyOn(impl, 'createCacheStorage');
    for (const dtype of ['q8_0', 'q4_0']) {
      expect(() => mha.createKvCache({ batchSize: 1, maxSeqLen: 8, dtype } as never)).toThrow(InvalidArgumentError);
      expect(() => mha.createKvCache({ batchSize: 1, maxSeqLen: 8, dtype } as never)).toThrow(/options\.dtype.*headDim 48 is not a multiple of 32/s);
      const past = new Float32Array(2 * 3 * 48);
      expect(() => mha.createKvCache({ batchSize: 1, maxSeqLen: 8, key: past, value: past, dtype } as never)).toThrow(/options\.dtype/);
    }
    expect(made).not.toHaveBeenCalled();
    expect(mha.createKvCache({ batchSize: 1, maxSeqLen: 8, dtype: 'f16' }).bytes).toBe(2 * 2 * 8 * 48 * 2); // K and V, G 2, 8 positions, Dh 48, 2 bytes
    expect(mha.createKvCache({ batchSize: 1, maxSeqLen: 8, dtype: 'f32' }).dtype).toBe('f32');
    expect(made).toHaveBeenCalledTimes(2);
  });

  test('an unknown dtype is refused naming options.dtype and the four it takes; the default stays f32', () => {
    const layer = makeLayer('MHA Dh32');
    for (const dtype of ['q5_1', 'F16', 'bf16', 8, null]) {
      expect(() => layer.mha.createKvCache({ batchSize: 1, maxSeqLen: 8, dtype } as never)).toThrow(InvalidArgumentError);
      expect(() => layer.mha.createKvCache({ batchSize: 1, maxSeqLen: 8, dtype } as never)).toThrow(/options\.dtype.*'f32', 'f16', 'q8_0', 'q4_0'/s);
    }
    expect(layer.mha.createKvCache({ batchSize: 1, maxSeqLen: 8 }).dtype).toBe('f32');
  });
});
