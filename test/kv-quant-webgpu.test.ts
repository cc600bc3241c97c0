// Quantized and cross-precision KV caches on the WebGPU backend (issue 40, item 1): 'f32', 'f16',
// 'q8_0', 'q4_0' caches of any engine precision, stored in their own layouts (src/webgpu/kv-cache.ts),
// written by the projection through the store kernels (kv_store.wgsl, kv_quantize.wgsl) and read in
// place by every attention body through the dtype's loader (shaders/kv_*.wgsl).
//
// The oracle: the float64 reference over the cache's own dequantized values. After each call, the
// cache's rows (cache.read(): what the kernels read) and the reference's queries (src/cpu/reference.ts
// qkvProjection, with rotary) go through the float64 attention and output projection; the GPU output
// must match with |out − ref| ≤ 2e-4 + 2e-3·|ref| (f32 engines; an f16 engine with the project's f16
// rule). Bit-exactness: the rows a forward quantized on the GPU equal encodeKvRows (ggml's rule, on
// the host) of the float32 rows an 'f32' cache of the same layer holds after the same call, byte for
// byte; a grid of awkward values through the GPU quantizer likewise; a past's encoding round-trips.

import { describe, expect, test } from 'vitest';
import { attention, outputProjection, qkvProjection } from '../src/cpu/reference.ts';
import {
  type AttentionEngine,
  createAttentionEngine,
  InvalidArgumentError,
  type KvCache,
  type KvCacheDtype,
  type MultiHeadAttention,
  type MultiHeadAttentionConfig,
  type TuningChoice,
} from '../src/index.ts';
import { geometryOf, type LayerSpec, type LayerWeights, resolveForwardPlan, resolveLayerSpec, resolveWeights } from '../src/plan/index.ts';
import { encodeKvRows, kvRowBytes } from '../src/quant/kv.ts';
import { compareArrays, f16Tolerance, maxAbsFinite, type Tolerance } from '../src/util/tolerance.ts';
import { ATTENTION_VARIANTS } from '../src/webgpu/variants.ts';
import { gateVariant } from '../src/webgpu/tuning/gate.ts';
import { FAST_COMPILING, useEngines } from './helpers/engines.ts';
import { createGpuEngine } from './helpers/gpu.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

const engines = useEngines({ webgpu: FAST_COMPILING }, 'webgpu');
const F32_RULE: Tolerance = { atol: 2e-4, rtol: 2e-3 };
const Q_DTYPES = ['q8_0', 'q4_0'] as const;
const ALL_DTYPES: readonly KvCacheDtype[] = ['f32', 'f16', 'q8_0', 'q4_0'];

interface Layer {
  mha: MultiHeadAttention;
  spec: LayerSpec;
  weights: LayerWeights;
  E: number;
}

function makeLayer(engine: AttentionEngine, config: MultiHeadAttentionConfig, seed: number): Layer {
  const sd = randomStateDict(config, seed);
  const spec = resolveLayerSpec(config);
  return { mha: engine.createMultiHeadAttention(config, sd), spec, weights: resolveWeights(spec, sd), E: spec.embedDim };
}

/**
 * One call through the cache, checked against the float64 reference over the cache's dequantized
 * rows after it. Returns the GPU output.
 */
async function checkedStep(
  layer: Layer,
  cache: KvCache,
  x: Float32Array,
  seqLen: number,
  what: string,
  tolerance?: (ref: Float64Array) => Tolerance,
): Promise<Float32Array> {
  const B = cache.batchSize;
  const options = { batchSize: B, seqLen, kvCache: cache, isCausal: true };
  const plan = resolveForwardPlan(layer.spec, x, options); // before the call: the cache's length then
  const { output } = await layer.mha.forward(x, options);
  const { key, value } = await cache.read();
  const own = { ...plan, kvSeqLen: seqLen, geometry: geometryOf('self', B, seqLen, seqLen), cache: null };
  const { q } = qkvProjection(own, layer.weights);
  const ref = outputProjection(plan, layer.weights, attention(plan, q, Float64Array.from(key), Float64Array.from(value)));
  const verdict = compareArrays(output, ref, tolerance ? tolerance(ref) : F32_RULE, 1);
  if (!verdict.ok) {
    const [m] = verdict.mismatches;
    throw new Error(`${what}: output[${m.index}] = ${m.actual}, the float64 reference over the cache's values says ${m.expected}`);
  }
  return output;
}

/** Rows s0 … s1 − 1 of every batch element of x [B, S, E]. */
function rows(x: Float32Array, B: number, S: number, E: number, s0: number, s1: number): Float32Array {
  const out = new Float32Array(B * (s1 - s0) * E);
  for (let b = 0; b < B; b++) out.set(x.subarray((b * S + s0) * E, (b * S + s1) * E), b * (s1 - s0) * E);
  return out;
}

/** A prefill of `prefill` tokens, then `steps` single-token decode steps, each checked. */
async function prefillThenDecode(
  layer: Layer,
  dtype: KvCacheDtype,
  B: number,
  prefill: number,
  steps: number,
  seed: number,
  tolerance?: (ref: Float64Array) => Tolerance,
): Promise<KvCache> {
  const S = prefill + steps;
  const x = uniform(B * S * layer.E, 1, mulberry32(seed));
  const cache = layer.mha.createKvCache({ batchSize: B, maxSeqLen: S + 3, dtype });
  expect(cache.dtype).toBe(dtype);
  await checkedStep(layer, cache, rows(x, B, S, layer.E, 0, prefill), prefill, `${dtype} prefill ${prefill}`, tolerance);
  for (let t = prefill; t < S; t++) await checkedStep(layer, cache, rows(x, B, S, layer.E, t, t + 1), 1, `${dtype} step ${t}`, tolerance);
  expect(cache.length).toBe(S);
  return cache;
}

describe('every dtype against the float64 reference over the cache’s own values (f32 engine)', () => {
  test.each([
    // [label, config, B, prefill, steps]
    ['MHA Dh 32', { embedDim: 64, numHeads: 2 }, 1, 31, 3],
    ['GQA Dh 64, B 2, rotary', { embedDim: 128, numHeads: 4, numKvHeads: 2, headDim: 64, rotary: { base: 10000 } }, 2, 33, 3],
    ['MQA Dh 128', { embedDim: 128, numHeads: 2, numKvHeads: 1, headDim: 128 }, 1, 65, 2],
    ['MQA Dh 96, B 3', { embedDim: 96, numHeads: 2, numKvHeads: 1, headDim: 96 }, 3, 1, 4],
  ] as const)('%s', async (_label, config, B, prefill, steps) => {
    const layer = makeLayer(engines.gpu, config, 7);
    for (const dtype of ALL_DTYPES) (await prefillThenDecode(layer, dtype, B, prefill, steps, 3)).dispose();
    layer.mha.dispose();
  });

  test('Dh 48 (not a multiple of 32) takes f16 and f32 caches; q-dtypes are refused before any work', async () => {
    const layer = makeLayer(engines.gpu, { embedDim: 96, numHeads: 2, headDim: 48 }, 8);
    (await prefillThenDecode(layer, 'f16', 1, 5, 2, 4)).dispose();
    for (const dtype of Q_DTYPES) expect(() => layer.mha.createKvCache({ batchSize: 1, maxSeqLen: 8, dtype })).toThrow(InvalidArgumentError);
    expect(() => layer.mha.createKvCache({ batchSize: 1, maxSeqLen: 8, dtype: 'q5_0' as KvCacheDtype })).toThrow(InvalidArgumentError);
    layer.mha.dispose();
  });
});

describe('padded heads and attention weights', () => {
  test('Dh 10 (padded to 12 lanes): f16 and f32 caches', async () => {
    const layer = makeLayer(engines.gpu, { embedDim: 20, numHeads: 2 }, 10);
    for (const dtype of ['f16', 'f32'] as const) (await prefillThenDecode(layer, dtype, 2, 7, 2, 11)).dispose();
    layer.mha.dispose();
  });

  test.each(Q_DTYPES)('%s: needWeights reads the cache through its loader (attention_probs.wgsl)', async (dtype) => {
    const layer = makeLayer(engines.gpu, { embedDim: 128, numHeads: 4, numKvHeads: 2, headDim: 32 }, 23);
    const B = 2;
    const cache = await prefillThenDecode(layer, dtype, B, 9, 0, 24);
    const x = uniform(B * 2 * layer.E, 1, mulberry32(25));
    const options = { batchSize: B, seqLen: 2, kvCache: cache, isCausal: true, needWeights: true };
    const plan = resolveForwardPlan(layer.spec, x, options);
    const { attentionWeights } = await layer.mha.forward(x, options);
    const { key, value } = await cache.read();
    const own = { ...plan, kvSeqLen: 2, geometry: geometryOf('self', B, 2, 2), cache: null };
    const keep = { scores: new Float64Array(B * 4 * 2 * 11), probs: new Float64Array(B * 4 * 2 * 11) };
    attention(plan, qkvProjection(own, layer.weights).q, Float64Array.from(key), Float64Array.from(value), keep);
    expect(compareArrays(attentionWeights!, keep.probs, F32_RULE, 1).ok).toBe(true);
    cache.dispose();
    layer.mha.dispose();
  });
});

describe('split-KV decode (flash-decoding) over a long quantized cache', () => {
  test.each(Q_DTYPES)('%s: 600 positions, then steps that split', async (dtype) => {
    const layer = makeLayer(engines.gpu, { embedDim: 128, numHeads: 4, numKvHeads: 2, headDim: 32 }, 9);
    (await prefillThenDecode(layer, dtype, 1, 600, 2, 5)).dispose();
    layer.mha.dispose();
  });
});

/** A layer whose K and V are its input (identity projections, no bias): a forward stores x's rows as they are, so chosen values reach the GPU's quantizer. */
function identityLayer(engine: AttentionEngine, Dh: number): Layer {
  const config = { embedDim: Dh, numHeads: 1, headDim: Dh, bias: false };
  const spec = resolveLayerSpec(config);
  const w = new Float32Array(3 * Dh * Dh);
  const rng = mulberry32(1);
  for (let i = 0; i < Dh * Dh; i++) w[i] = (rng() - 0.5) / Dh; // Q: anything
  for (let d = 0; d < Dh; d++) {
    w[(Dh + d) * Dh + d] = 1; // K = x
    w[(2 * Dh + d) * Dh + d] = 1; // V = x
  }
  const sd = { in_proj_weight: w, 'out_proj.weight': uniform(Dh * Dh, 1 / Math.sqrt(Dh), rng) };
  return { mha: engine.createMultiHeadAttention(config, sd), spec, weights: resolveWeights(spec, sd), E: Dh };
}

/** Blocks of 32 values that probe every rounding of the quantizers (each row of the result is one block). */
function awkwardBlocks(): Float32Array[] {
  const blocks: Float32Array[] = [];
  const block = (f: (j: number) => number) => {
    blocks.push(Float32Array.from({ length: 32 }, (_, j) => f(j)));
  };
  block(() => 0); // d = 0, id = 0
  // q8_0 ties: amax 127 makes d = 1, id = 1, so x.5 lands on a tie (roundf: away from zero)
  block((j) => (j === 0 ? 127 : ((j % 2 ? -1 : 1) * (j + 0.5)) / 1));
  block((j) => (j === 31 ? -127 : (j - 16) * 0.5));
  // q4_0: the max's sign (d = max / −8), the first of equal magnitudes, and the + 8.5 ties
  block((j) => (j === 3 ? -8 : (j - 16) * 0.5));
  block((j) => (j === 3 ? 8 : j === 9 ? -8 : (j - 16) * 0.25));
  block((j) => (j === 2 ? -8 : j === 7 ? 8 : (16 - j) * 0.5));
  block((j) => (j % 3 === 0 ? -1 : j % 3 === 1 ? 1 : 0.5));
  // subnormal f16 scales (d < 2^-14), down to the smallest, and scales that round up to a normal one
  for (const amax of [1e-3, 3e-5 * 127, 6e-8 * 127, 6.1e-5 * 127 * 0.99999, 2 ** -14 * 127])
    block((j) => (amax * Math.sin(j + 1)) / Math.max(...Array.from({ length: 32 }, (_, i) => Math.abs(Math.sin(i + 1)))));
  // large and tiny magnitudes, inexact quotients everywhere
  const rng = mulberry32(42);
  for (let n = 0; n < 300; n++) {
    const scale = 10 ** (rng() * 8 - 4);
    block(() => (rng() - 0.5) * scale);
  }
  // f16 overflow of d (q8_0: amax > 65504·127): stored as Infinity, as the rule says
  block((j) => (j === 0 ? 1e7 : j));
  return blocks;
}

describe('the GPU quantizer equals ggml’s rule (src/quant/kv.ts encodeKvRows) bit for bit', () => {
  test.each(Q_DTYPES)('%s: a grid of awkward blocks through a forward', async (dtype) => {
    const Dh = 32;
    const layer = identityLayer(engines.gpu, Dh);
    const blocks = awkwardBlocks();
    const x = new Float32Array(blocks.length * Dh);
    for (const [i, b] of blocks.entries()) x.set(b, i * Dh);
    // Two calls (the second's rows start at an odd row: its first scale shares a word with the first call's last)
    const cache = layer.mha.createKvCache({ batchSize: 1, maxSeqLen: blocks.length, dtype });
    const f32 = layer.mha.createKvCache({ batchSize: 1, maxSeqLen: blocks.length, dtype: 'f32' });
    const first = 7;
    for (const c of [cache, f32]) {
      await layer.mha.forward(x.subarray(0, first * Dh), { batchSize: 1, seqLen: first, kvCache: c, isCausal: true });
      await layer.mha.forward(x.subarray(first * Dh), { batchSize: 1, seqLen: blocks.length - first, kvCache: c, isCausal: true });
    }
    const floats = await f32.read();
    expect(floats.key).toEqual(x); // the identity projection: K = x exactly
    const stored = await cache.storage.readEncoded(cache.length);
    expect(Buffer.from(stored.key).equals(Buffer.from(encodeKvRows(dtype, x, Dh)))).toBe(true);
    expect(Buffer.from(stored.value).equals(Buffer.from(encodeKvRows(dtype, x, Dh)))).toBe(true);
    cache.dispose();
    f32.dispose();
    layer.mha.dispose();
  });

  test.each([
    ['q8_0', { embedDim: 128, numHeads: 4, numKvHeads: 2, headDim: 64, rotary: { base: 10000 } }, 2],
    ['q4_0', { embedDim: 96, numHeads: 3, numKvHeads: 1, headDim: 96 }, 3],
    ['f16', { embedDim: 64, numHeads: 2, numKvHeads: 2, headDim: 32 }, 1],
  ] as const)('%s: the rows a forward stored equal encodeKvRows of an f32 cache’s rows after the same call (%o, B %i)', async (dtype, config, B) => {
    const layer = makeLayer(engines.gpu, config, 12);
    const S = 37;
    const x = uniform(B * S * layer.E, 1, mulberry32(13));
    const q = layer.mha.createKvCache({ batchSize: B, maxSeqLen: 40, dtype });
    const f = layer.mha.createKvCache({ batchSize: B, maxSeqLen: 40, dtype: 'f32' });
    for (const c of [q, f]) {
      await layer.mha.forward(rows(x, B, S, layer.E, 0, 21), { batchSize: B, seqLen: 21, kvCache: c, isCausal: true });
      await layer.mha.forward(rows(x, B, S, layer.E, 21, S), { batchSize: B, seqLen: S - 21, kvCache: c, isCausal: true });
    }
    const floats = await f.read();
    const stored = await q.storage.readEncoded(q.length);
    const Dh = layer.spec.headDim;
    expect(Buffer.from(stored.key).equals(Buffer.from(encodeKvRows(dtype, floats.key, Dh)))).toBe(true);
    expect(Buffer.from(stored.value).equals(Buffer.from(encodeKvRows(dtype, floats.value, Dh)))).toBe(true);
    expect(stored.key.length).toBe(B * layer.spec.numKvHeads * S * kvRowBytes(dtype, Dh));
    layer.mha.dispose();
  });
});

describe('pasts, bytes, truncate, acceptPath and reset', () => {
  test.each(ALL_DTYPES)('%s: a past via createKvCache({ key, value, dtype }) is stored as encodeKvRows says, and decodes on', async (dtype) => {
    const config = { embedDim: 128, numHeads: 4, numKvHeads: 2, headDim: 64, rotary: { base: 10000 } };
    const layer = makeLayer(engines.gpu, config, 14);
    const [B, G, Dh, length] = [2, 2, 64, 19];
    const key = uniform(B * G * length * Dh, 2, mulberry32(15));
    const value = uniform(B * G * length * Dh, 2, mulberry32(16));
    const cache = layer.mha.createKvCache({ batchSize: B, maxSeqLen: 24, key, value, dtype });
    expect(cache.length).toBe(length);
    const stored = await cache.storage.readEncoded(cache.length);
    expect(Buffer.from(stored.key).equals(Buffer.from(encodeKvRows(dtype, key, Dh)))).toBe(true);
    expect(Buffer.from(stored.value).equals(Buffer.from(encodeKvRows(dtype, value, Dh)))).toBe(true);
    // a cache given that encoding (as the auto backend moves a cache) holds the same bytes
    const moved = layer.mha.createKvCache({ batchSize: B, maxSeqLen: 24, dtype });
    moved.storage.writeEncoded(stored.key, stored.value, length);
    const again = await moved.storage.readEncoded(length);
    expect(Buffer.from(again.key).equals(Buffer.from(stored.key)) && Buffer.from(again.value).equals(Buffer.from(stored.value))).toBe(true);
    moved.dispose();
    const x = uniform(B * 3 * layer.E, 1, mulberry32(17));
    for (let t = 0; t < 3; t++) await checkedStep(layer, cache, rows(x, B, 3, layer.E, t, t + 1), 1, `${dtype} after a past, step ${t}`);
    layer.mha.dispose();
  });

  test('bytes: q8_0 ≤ 0.56× and q4_0 ≤ 0.30× of an f16 cache’s, f32 2×', async () => {
    const layer = makeLayer(engines.gpu, { embedDim: 2048, numHeads: 16, numKvHeads: 4 }, 18);
    const bytes = Object.fromEntries(ALL_DTYPES.map((dtype) => [dtype, layer.mha.createKvCache({ batchSize: 1, maxSeqLen: 4096, dtype }).bytes]));
    expect(bytes.f16).toBe(2 * 4 * 4096 * 128 * 2);
    expect(bytes.f32).toBe(2 * bytes.f16);
    expect(bytes.q8_0 / bytes.f16).toBeCloseTo(34 / 64, 6);
    expect(bytes.q4_0 / bytes.f16).toBeCloseTo(18 / 64, 6);
    layer.mha.dispose();
  });

  test.each(Q_DTYPES)('%s: truncate, a tree with acceptPath (rows moved bit for bit), reset', async (dtype) => {
    const config = { embedDim: 64, numHeads: 2, numKvHeads: 1, headDim: 32, rotary: { base: 10000 } }; // Dh 32: one scale a row, two rows a word
    const layer = makeLayer(engines.gpu, config, 19);
    const E = layer.E;
    const cache = layer.mha.createKvCache({ batchSize: 1, maxSeqLen: 32, dtype });
    const x = uniform(20 * E, 1, mulberry32(20));
    await checkedStep(layer, cache, x.subarray(0, 9 * E), 9, 'prefill');
    cache.truncate(5);
    expect(cache.length).toBe(5);
    await checkedStep(layer, cache, x.subarray(9 * E, 12 * E), 3, 'after truncate');
    // a tree of 6 drafts: 0 → 1 → 3, 0 → 2, 1 → 4 → 5; keep 0, 1, 4, 5
    const parents = Int32Array.from([-1, 0, 0, 1, 1, 4]);
    const before = await cache.storage.readEncoded(cache.length); // length 8
    await layer.mha.forward(x.subarray(12 * E, 18 * E), { batchSize: 1, seqLen: 6, kvCache: cache, treeParents: parents });
    const tree = await cache.storage.readEncoded(cache.length); // length 14
    const path = [0, 1, 4, 5];
    cache.acceptPath(path);
    expect(cache.length).toBe(8 + path.length);
    const after = await cache.storage.readEncoded(cache.length);
    const rowBytes = kvRowBytes(dtype, 32);
    const expected = (all: Uint8Array, past: Uint8Array) => {
      const out = new Uint8Array((8 + path.length) * rowBytes);
      out.set(past.subarray(0, 8 * rowBytes));
      for (const [i, p] of path.entries()) out.set(all.subarray((8 + p) * rowBytes, (9 + p) * rowBytes), (8 + i) * rowBytes);
      return out;
    };
    expect(Buffer.from(after.key).equals(Buffer.from(expected(tree.key, before.key)))).toBe(true);
    expect(Buffer.from(after.value).equals(Buffer.from(expected(tree.value, before.value)))).toBe(true);
    await checkedStep(layer, cache, x.subarray(18 * E, 19 * E), 1, 'after acceptPath');
    cache.reset();
    expect(cache.length).toBe(0);
    await checkedStep(layer, cache, x.subarray(0, 4 * E), 4, 'after reset');
    layer.mha.dispose();
  });
});

describe('an f16 engine', () => {
  let engine: AttentionEngine;
  test.each([...ALL_DTYPES])('%s cache: prefill and decode against the reference over its values', async (dtype) => {
    engine ??= await createGpuEngine({ precision: 'f16', ...FAST_COMPILING });
    const config = { embedDim: 128, numHeads: 4, numKvHeads: 2, headDim: 64, rotary: { base: 10000 } };
    const layer = makeLayer(engine, config, 21);
    const tolerance = (ref: Float64Array) => f16Tolerance([layer.E, 40, layer.E], maxAbsFinite(ref), 4);
    (await prefillThenDecode(layer, dtype, 2, 33, 3, 22, tolerance)).dispose();
    layer.mha.dispose();
  });
});

describe('every attention body reads every cache format in place; the tuner gates and sweeps on them', () => {
  test.each(['q8_0', 'q4_0', 'f16x2'] as const)('the gate (prefill and decode through a %s cache) passes every variant', async (kvFormat) => {
    const pool = (engines.gpu as unknown as { impl: { pool: Parameters<typeof gateVariant>[0] } }).impl.pool;
    for (const variant of ATTENTION_VARIANTS) {
      expect(await gateVariant(pool, 'unrolling-cpu', 'flash_attention', variant, 32, null, kvFormat), `${variant} ${kvFormat}`).toBeNull();
    }
  });

  test('a call over a q8_0 cache is its own shape class: swept, every candidate gated through such a cache', async () => {
    const engine = await createAttentionEngine({ device: engines.gpu.device!, tuning: { mode: 'auto' } });
    const layer = makeLayer(engine, { embedDim: 64, numHeads: 2, headDim: 32 }, 30);
    const cache = await prefillThenDecode(layer, 'q8_0', 1, 12, 1, 31);
    await engine.settled();
    expect(engine.tuning!.failures).toEqual([]);
    const flash = engine.tuning!.choices.filter((c: TuningChoice) => c.kernel === 'flash_attention');
    expect(flash.length).toBeGreaterThan(0);
    for (const c of flash) {
      expect(c.shapeClass).toContain('kv:q8_0');
      expect(c.refused).toBeUndefined();
    }
    // the swept choice reads the cache right
    await checkedStep(layer, cache, uniform(layer.E, 1, mulberry32(32)), 1, 'after the sweep');
    cache.dispose();
    layer.mha.dispose();
    engine.dispose();
  });
});
