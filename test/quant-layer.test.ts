// Layers with quantized weights on the CPU and wasm backends: every format (q4_0, q8_0, q4_k, q6_k,
// nbits 4/8 with and without zero points, f16 scales, a partial last block), a packed in_proj_weight
// and separate q/k/v_proj_weight of MIXED types (q4_k, q4_k, q6_k as GGUF Q4_K_M files keep them),
// out_proj.weight quantized, GQA, causal, B > 1, a KV-cache decode, and a Qwen2-style layer (q/k/v
// biases, no out_proj.bias, rotary): each output against the float64 reference run on the dequantized
// weights as plain Float32Arrays (dequantize(): what ggml / ONNX Runtime compute), at the float32 rule.
// The weights come from quantizeWeights on a seeded float state_dict. No GPU here.

import { describe, expect, test } from 'vitest';
import {
  dequantize,
  type MultiHeadAttentionConfig,
  type QuantizedStateDict,
  type QuantizedTensor,
  quantizeWeights,
  referenceMultiHeadAttention,
  type StateDict,
} from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';

const engines = useEngines('cpu', 'wasm');
const BACKENDS = ['cpu', 'wasm'] as const;

// Quantizing (q4_k's search above all) costs more than the forwards: each state_dict is made once and
// shared by both backends' tests.
const made = new Map<string, QuantizedStateDict>();
function once(key: string, make: () => QuantizedStateDict): QuantizedStateDict {
  const known = made.get(key);
  if (known) return known;
  const sd = make();
  made.set(key, sd);
  return sd;
}

/** The state_dict with every quantized weight dequantized to a Float32Array (the reference's weights). */
function dequantized(sd: QuantizedStateDict): StateDict {
  return Object.fromEntries(Object.entries(sd).map(([k, v]) => [k, v instanceof Float32Array ? v : dequantize(v)]));
}

/** in_proj_weight [(H + 2G)·Dh, E] split into q/k/v_proj_weight (and in_proj_bias kept). */
function separate(sd: StateDict, config: { embedDim: number; numHeads: number; numKvHeads?: number }): StateDict {
  const { embedDim: E, numHeads: H } = config;
  const G = config.numKvHeads ?? H;
  const Dh = E / H;
  const w = sd.in_proj_weight;
  const { in_proj_weight: _, ...rest } = sd;
  return {
    ...rest,
    q_proj_weight: w.slice(0, H * Dh * E),
    k_proj_weight: w.slice(H * Dh * E, (H + G) * Dh * E),
    v_proj_weight: w.slice((H + G) * Dh * E),
  };
}

async function expectMatchesReference(
  backend: (typeof BACKENDS)[number],
  config: MultiHeadAttentionConfig,
  sd: QuantizedStateDict,
  B: number,
  S: number,
  isCausal: boolean,
  seed: number,
): Promise<void> {
  const E = config.embedDim;
  const query = uniform(B * S * E, 1, mulberry32(seed));
  const options = { batchSize: B, seqLen: S, isCausal };
  const layer = engines.of(backend).createMultiHeadAttention(config, sd);
  const got = (await layer.forward(query, options)).output;
  const want = referenceMultiHeadAttention(config, dequantized(sd), query, options).output;
  expectClose(got, want, f32Tolerance([E, S, E]), `${backend} vs the float64 reference on dequantized weights`);
}

const FORMATS: [string, Parameters<typeof quantizeWeights>[1]][] = [
  ['q4_0', { dtype: 'q4_0' }],
  ['q8_0', { dtype: 'q8_0' }],
  ['q4_k', { dtype: 'q4_k' }],
  ['q6_k', { dtype: 'q6_k' }],
  ['nbits 4 (zero points)', { dtype: 'nbits', bits: 4, blockSize: 32 }],
  ['nbits 4 symmetric', { dtype: 'nbits', bits: 4, blockSize: 64, symmetric: true }],
  ['nbits 8 (zero points)', { dtype: 'nbits', bits: 8, blockSize: 128 }],
  ['nbits 8 symmetric', { dtype: 'nbits', bits: 8, blockSize: 16, symmetric: true }],
  ['nbits 4 f16 scales (q4f16)', { dtype: 'nbits', bits: 4, blockSize: 32, scales: 'f16' }],
];

describe.each(BACKENDS)('backend %s', (backend) => {
  // E = 256: the K-quants' super-block; H = 4, Dh = 64, one KV head (fewer rows to quantize)
  const config = { embedDim: 256, numHeads: 4, numKvHeads: 1 };
  const base = randomStateDict(config, 31);

  test.each(FORMATS)('%s: in_proj_weight and out_proj.weight quantized, B = 2', async (_name, options) => {
    const sd = once(_name, () => quantizeWeights(base, options));
    expect((sd.in_proj_weight as QuantizedTensor).dtype).toBe(options.dtype);
    expect((sd['out_proj.weight'] as QuantizedTensor).dtype).toBe(options.dtype);
    await expectMatchesReference(backend, config, sd, 2, 5, false, 1);
  });

  test('nbits with K not a multiple of blockSize (E = 40, blocks of 16 and 32), causal', async () => {
    const small = { embedDim: 40, numHeads: 4, numKvHeads: 2 };
    const s = randomStateDict(small, 32);
    await expectMatchesReference(backend, small, quantizeWeights(s, { dtype: 'nbits', bits: 4, blockSize: 16 }), 2, 6, true, 2);
    await expectMatchesReference(backend, small, quantizeWeights(s, { dtype: 'nbits', bits: 8, blockSize: 32, symmetric: true }), 2, 6, true, 3);
  });

  const gqa = { embedDim: 256, numHeads: 4, numKvHeads: 2 };
  /** Q4_K_M's mix: q and k in q4_k, v in q6_k, out_proj in q4_k. */
  function q4km(sd: StateDict): QuantizedStateDict {
    const { v_proj_weight, ...rest } = separate(sd, gqa);
    return { ...quantizeWeights(rest, { dtype: 'q4_k', config: gqa }), ...quantizeWeights({ v_proj_weight }, { dtype: 'q6_k', config: gqa }) };
  }

  test('separate q/k/v_proj_weight of mixed types (q4_k, q4_k, q6_k) + out_proj.weight q4_k, GQA, causal, B = 2', async () => {
    const sd = once('q4km 33', () => q4km(randomStateDict(gqa, 33)));
    expect(['q_proj_weight', 'k_proj_weight', 'v_proj_weight', 'out_proj.weight'].map((n) => (sd[n] as QuantizedTensor).dtype)).toEqual(['q4_k', 'q4_k', 'q6_k', 'q4_k']);
    await expectMatchesReference(backend, gqa, sd, 2, 7, true, 4);
  });

  test('separate q/k/v_proj_weight: one float, one q8_0, one nbits', async () => {
    const sep = separate(randomStateDict(gqa, 34), gqa);
    const sd: QuantizedStateDict = {
      ...sep,
      k_proj_weight: quantizeWeights(sep, { dtype: 'q8_0' }).k_proj_weight,
      v_proj_weight: quantizeWeights(sep, { dtype: 'nbits', bits: 4, blockSize: 64 }).v_proj_weight,
    };
    await expectMatchesReference(backend, gqa, sd, 1, 4, false, 5);
  });

  test('a KV-cache decode (prefill 4, then 3 steps of one token) with q4_0 weights, GQA, B = 2', async () => {
    const sd = once('q4_0 35', () => quantizeWeights(randomStateDict(gqa, 35), { dtype: 'q4_0' }));
    const [B, S, E, prefill] = [2, 7, 256, 4];
    const x = uniform(B * S * E, 1, mulberry32(6));
    const rows = (t0: number, t1: number) => {
      const out = new Float32Array(B * (t1 - t0) * E);
      for (let b = 0; b < B; b++) out.set(x.subarray((b * S + t0) * E, (b * S + t1) * E), b * (t1 - t0) * E);
      return out;
    };
    const layer = engines.of(backend).createMultiHeadAttention(gqa, sd);
    const cache = layer.createKvCache({ batchSize: B, maxSeqLen: S });
    const decoded = new Float32Array(B * S * E);
    const place = (y: Float32Array, t0: number, t1: number) => {
      for (let b = 0; b < B; b++) decoded.set(y.subarray(b * (t1 - t0) * E, (b + 1) * (t1 - t0) * E), (b * S + t0) * E);
    };
    place((await layer.forward(rows(0, prefill), { batchSize: B, seqLen: prefill, kvCache: cache, isCausal: true })).output, 0, prefill);
    for (let t = prefill; t < S; t++) place((await layer.forward(rows(t, t + 1), { batchSize: B, seqLen: 1, kvCache: cache, isCausal: true })).output, t, t + 1);
    expect(cache.length).toBe(S);
    const want = referenceMultiHeadAttention(gqa, dequantized(sd), x, { batchSize: B, seqLen: S, isCausal: true }).output;
    expectClose(decoded, want, f32Tolerance([E, S, E]), `${backend} decode vs the float64 reference`);
  });

  test('a Qwen2-style layer: q/k/v biases, no out_proj.bias, rotary, GQA, Q4_K_M weights, causal', async () => {
    const qwen = { ...gqa, rotary: { base: 1_000_000 } };
    const { 'out_proj.bias': _, ...sd } = once('q4km 36', () => q4km(randomStateDict(gqa, 36)));
    expect(sd.in_proj_bias).toBeInstanceOf(Float32Array);
    await expectMatchesReference(backend, qwen, sd, 2, 6, true, 7);
  });
});
