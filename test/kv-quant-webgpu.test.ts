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
} from '../src/index.ts';
import { geometryOf, type LayerSpec, type LayerWeights, resolveForwardPlan, resolveLayerSpec, resolveWeights } from '../src/plan/index.ts';
import { encodeKvRows, kvRowBytes } from '../src/quant/kv.ts';
import { compareArrays, f16Tolerance, maxAbsFinite, type Tolerance } from '../src/util/tolerance.ts';
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
    ['GQA Dh 96, B 3', { embedDim: 96, numHeads: 2, numKvHeads: 1, headDim: 96 }, 3, 1, 4],
  ] as const)('%s', async (_label, config, B, prefill, steps) => {
    const layer = makeLayer(engines.gpu, config, 7);
    for (const dtype of ALL_DTYPES) (await prefillThenDecode(layer, dtype, B, prefill, steps, 3)).dispose();
    layer.mha.dispose();
  });

  test('Dh 96 (not a multiple of 32) takes f16 and f32 caches; q-dtypes are refused before any work', async () => {
    const layer = makeLayer(engines.gpu, { embedDim: 96, numHeads: 2, headDim: 48 }, 8);
    (await prefillThenDecode(layer, 'f16', 1, 5, 2, 4)).dispose();
    for (const dtype of Q_DTYPES) expect(() => layer.mha.createKvCache({ batchSize: 1, maxSeqLen: 8, dtype })).toThrow(InvalidArgumentError);
    expect(() => layer.mha.createKvCache({ batchSize: 1, maxSeqLen: 8, dtype: 'q5_0' as KvCacheDtype })).toThrow(InvalidArgumentError);
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
