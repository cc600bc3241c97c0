// config.activations 'q8' (llama.cpp's arithmetic: the input of every projection with quantized weights
// quantized as ggml's Q8_0 per block of 32 along K, src/quant/activations.ts):
// - the rule against ggml itself: gguf-py's Q8_0 rows (test/fixtures/kv-quant/rows.json, the same
//   quantize_row_q8_0_ref), a partial last block as ggml's zero padding gives it;
// - each backend against an expectation built here from the float64 reference's public parts: x rounded
//   by the rule, the layer run on it with the dequantized weights, the attention output rounded by the
//   rule before W_O (its own float64 product here); every quantized format, GQA, a K with a partial
//   block, a padded head size (WebGPU), mixed float and quantized projections, a KV-cache decode, a paged call;
// - the bad inputs.
// The backends compute the attention output in float32 before rounding it: an element within float32's
// error of a rounding boundary may round the other way (one step d = max/127 of its block), which the
// project's rule |out − ref| ≤ 2e-4 + 2e-3·|ref| holds; the CPU backend, float64 as the expectation, meets
// float32's own bound.

import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import {
  dequantize,
  InvalidArgumentError,
  type MultiHeadAttentionConfig,
  type QuantizedStateDict,
  quantizeWeights,
  referenceMultiHeadAttention,
  type StateDict,
  UnsupportedError,
} from '../src/index.ts';
import { Q8_BLOCK, quantizeActivationsQ8, roundActivationsQ8 } from '../src/quant/activations.ts';
import { floatToHalfBits, halfToFloat } from '../src/util/f16.ts';
import { expectClose, f32Tolerance, type Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

const engines = useEngines('webgpu', 'cpu', 'wasm');
const BACKENDS = ['cpu', 'webgpu', 'wasm'] as const;
type Backend = (typeof BACKENDS)[number];

/** The project's float32 rule. */
const RULE: Tolerance = { atol: 2e-4, rtol: 2e-3 };

const b64 = (s: string) => new Uint8Array(Buffer.from(s, 'base64'));
const f32 = (bytes: Uint8Array) => new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);

describe('the rule', () => {
  test("roundActivationsQ8 gives gguf-py's Q8_0 values (quantize_row_q8_0_ref) row by row", () => {
    const kv = JSON.parse(readFileSync(new URL('./fixtures/kv-quant/rows.json', import.meta.url), 'utf8')) as Record<string, string> & { Dh: number; rows: number };
    const input = f32(b64(kv.input));
    expect(roundActivationsQ8(input, kv.rows, kv.Dh)).toEqual(f32(b64(kv.q8_0_values)));
  });

  test('a last block of K % 32 elements is quantized as ggml quantizes it zero-padded', () => {
    const K = 40;
    const x = uniform(3 * K, 2, mulberry32(1));
    const padded = new Float32Array(3 * 64);
    for (let r = 0; r < 3; r++) padded.set(x.subarray(r * K, (r + 1) * K), r * 64);
    const a = quantizeActivationsQ8(x, 3, K);
    const b = quantizeActivationsQ8(padded, 3, 64);
    for (let r = 0; r < 3; r++) {
      expect(Array.from(a.q.subarray(r * K, (r + 1) * K))).toEqual(Array.from(b.q.subarray(r * 64, r * 64 + K)));
      expect(Array.from(a.d.subarray(2 * r, 2 * r + 2))).toEqual(Array.from(b.d.subarray(2 * r, 2 * r + 2)));
    }
    expect(Q8_BLOCK).toBe(32);
  });

  test('zeros give d = 0 and q = 0; the largest element of a block becomes ±127', () => {
    const x = new Float32Array(64);
    x[40] = -3;
    x[41] = 1.5;
    const { q, d } = quantizeActivationsQ8(x, 1, 64);
    expect(d[0]).toBe(0);
    expect(d[1]).toBe(halfToFloat(floatToHalfBits(Math.fround(3 / 127))));
    expect(q[40]).toBe(-127);
    expect(q[41]).toBe(64); // 1.5·127/3 = 63.5: half away from zero
    expect(Array.from(q.subarray(0, 32)).every((v) => v === 0)).toBe(true);
  });
});

/** Every quantized weight of a state dict dequantized (what the reference multiplies). */
function dequantized(sd: QuantizedStateDict): StateDict {
  return Object.fromEntries(Object.entries(sd).map(([k, v]) => [k, v instanceof Float32Array ? v : dequantize(v)]));
}

/**
 * The 'q8' expectation for a self-attention call without a cache: x rounded by the rule where a
 * projection's weights are quantized, the layer's attention in float64 (the reference, on the
 * dequantized weights), then concat(heads) rounded to float32 and by the rule where W_O is quantized,
 * times W_O, plus b_O. `slack`: what an element of the attention output within float32's error of a
 * rounding boundary (2e-4 of a step: float32 error of 1.6e-6 of the block's largest element) may add if a float32 backend
 * rounds it the other way: its step d times |W_O[n, e]|, summed over such elements of the row.
 */
function expected(
  config: MultiHeadAttentionConfig,
  sd: QuantizedStateDict,
  x: Float32Array,
  B: number,
  S: number,
  isCausal: boolean,
): { y: Float64Array; slack: Float64Array } {
  const { activations: _, ...floatConfig } = config;
  const E = config.embedDim;
  const H = config.numHeads;
  const Dh = config.headDim ?? E / H;
  const HD = H * Dh;
  const quantized = (name: string) => {
    const w = sd.in_proj_weight ?? sd[name];
    return w !== undefined && !(w instanceof Float32Array);
  };
  const rounded = roundActivationsQ8(x, B * S, E);
  const [q, k, v] = ['q_proj_weight', 'k_proj_weight', 'v_proj_weight'].map((n) => (quantized(n) ? rounded : x));
  const floats = dequantized(sd);
  // As cross-attention (key and value given, Skv = Sq): each projection gets its own input.
  const { attention } = referenceMultiHeadAttention(floatConfig, floats, q, { batchSize: B, seqLen: S, isCausal, key: k, value: v });
  const outQuantized = !(sd['out_proj.weight'] instanceof Float32Array);
  const W = floats['out_proj.weight'];
  const bias = floats['out_proj.bias'];
  const y = new Float64Array(B * S * E);
  const slack = new Float64Array(B * S * E);
  const row = new Float32Array(HD);
  for (let b = 0; b < B; b++) {
    for (let s = 0; s < S; s++) {
      for (let h = 0; h < H; h++) for (let d = 0; d < Dh; d++) row[h * Dh + d] = attention[((b * H + h) * S + s) * Dh + d];
      const o = outQuantized ? roundActivationsQ8(row, 1, HD) : row;
      // The elements near a boundary, and their blocks' steps.
      const near: [e: number, step: number][] = [];
      if (outQuantized) {
        const { d } = quantizeActivationsQ8(row, 1, HD); // the f16 steps x̂ is made of
        for (let e0 = 0; e0 < HD; e0 += Q8_BLOCK) {
          const block = row.subarray(e0, Math.min(HD, e0 + Q8_BLOCK));
          const amax = block.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
          const inv = amax > 0 ? Math.fround(1 / Math.fround(amax / 127)) : 0; // what q = roundf(x·inv) uses
          block.forEach((v, i) => {
            const t = Math.abs(v * inv);
            if (Math.abs(t - Math.floor(t) - 0.5) < 2e-4) near.push([e0 + i, d[e0 / Q8_BLOCK]]);
          });
        }
      }
      for (let n = 0; n < E; n++) {
        let sum = bias ? bias[n] : 0;
        for (let e = 0; e < HD; e++) sum += o[e] * W[n * HD + e];
        y[(b * S + s) * E + n] = sum;
        for (const [e, step] of near) slack[(b * S + s) * E + n] += step * Math.abs(W[n * HD + e]);
      }
    }
  }
  return { y, slack };
}

const made = new Map<string, QuantizedStateDict>();
function once(key: string, make: () => QuantizedStateDict): QuantizedStateDict {
  if (!made.has(key)) made.set(key, make());
  return made.get(key)!;
}

async function expectQ8(backend: Backend, config: MultiHeadAttentionConfig, sd: QuantizedStateDict, B: number, S: number, isCausal: boolean, seed: number) {
  const E = config.embedDim;
  const x = uniform(B * S * E, 1, mulberry32(seed));
  const layer = engines.of(backend).createMultiHeadAttention({ ...config, activations: 'q8' }, sd);
  try {
    const got = (await layer.forward(x, { batchSize: B, seqLen: S, isCausal })).output;
    const { y, slack } = expected({ ...config, activations: 'q8' }, sd, x, B, S, isCausal);
    const HD = config.numHeads * (config.headDim ?? E / config.numHeads);
    if (backend === 'cpu')
      expectClose(got, y, f32Tolerance([E, S, HD]), "cpu activations 'q8' vs the expectation"); // float64 as it: no slack
    else {
      // Within the rule, once an element near a boundary may have rounded the other way (slack).
      const want = y.map((w, i) => w + Math.max(-slack[i], Math.min(slack[i], got[i] - w)));
      expectClose(got, want, RULE, `${backend} activations 'q8' vs the expectation`);
    }
    // And not the 'f32' answer: the rounding shows.
    const { activations: _, ...f32Config } = config;
    const plain = (await engines.cpu.createMultiHeadAttention(f32Config, sd).forward(x, { batchSize: B, seqLen: S, isCausal })).output;
    let off = 0;
    for (let i = 0; i < got.length; i++) off = Math.max(off, Math.abs(got[i] - plain[i]));
    expect(off).toBeGreaterThan(1e-5);
  } finally {
    layer.dispose?.();
  }
}

const FORMATS: [string, Parameters<typeof quantizeWeights>[1]][] = [
  ['q4_0', { dtype: 'q4_0' }],
  ['q8_0', { dtype: 'q8_0' }],
  ['q4_k', { dtype: 'q4_k' }],
  ['q6_k', { dtype: 'q6_k' }],
  ['nbits 4 block 32', { dtype: 'nbits', bits: 4, blockSize: 32 }],
  ['nbits 8 block 128', { dtype: 'nbits', bits: 8, blockSize: 128 }],
  ['nbits 4 block 16', { dtype: 'nbits', bits: 4, blockSize: 16, symmetric: true }],
];

describe.each(BACKENDS)('backend %s', (backend) => {
  const config = { embedDim: 256, numHeads: 4, numKvHeads: 2 };
  const base = randomStateDict(config, 41);

  test.each(FORMATS)('%s weights: every projection quantized, GQA, B = 2, causal', async (name, options) => {
    await expectQ8(
      backend,
      config,
      once(name, () => quantizeWeights(base, options)),
      2,
      5,
      true,
      1,
    );
  });

  test('K = 48 (a partial activation block), nbits blocks of 16', async () => {
    const small = { embedDim: 48, numHeads: 3 };
    await expectQ8(backend, small, quantizeWeights(randomStateDict(small, 42), { dtype: 'nbits', bits: 8, blockSize: 16 }), 2, 4, false, 2);
  });

  test('head size 6 (padded on WebGPU), q4_0: out_proj K = H·Dh = 96', async () => {
    const odd = { embedDim: 64, numHeads: 16, headDim: 6 };
    await expectQ8(backend, odd, quantizeWeights(randomStateDict(odd, 43), { dtype: 'q4_0', config: odd }), 1, 5, true, 3);
  });

  test("in_proj quantized, out_proj float32: W_O's input is not rounded", async () => {
    const sd = quantizeWeights(randomStateDict(config, 44), { dtype: 'q8_0' });
    const mixed = { ...sd, 'out_proj.weight': dequantize(sd['out_proj.weight'] as never) };
    await expectQ8(backend, config, mixed, 1, 3, false, 4);
  });

  test('out_proj quantized, in_proj float32: only W_O rounds its input', async () => {
    const sd = randomStateDict(config, 45);
    const mixed = { ...sd, 'out_proj.weight': quantizeWeights(sd, { dtype: 'q4_0' })['out_proj.weight'] };
    await expectQ8(backend, config, mixed, 1, 3, false, 5);
  });
});

describe('decode and paged calls, WebGPU and wasm against the CPU backend', () => {
  const config: MultiHeadAttentionConfig = { embedDim: 128, numHeads: 4, numKvHeads: 2, activations: 'q8', rotary: {} };
  const sd = quantizeWeights(randomStateDict(config, 46), { dtype: 'q4_0' });

  test('a KV-cache prefill of 4, then 3 steps of one token, B = 2', async () => {
    const [B, E] = [2, 128];
    const outputs: Float32Array[][] = [];
    for (const backend of BACKENDS) {
      const layer = engines.of(backend).createMultiHeadAttention(config, sd);
      const cache = layer.createKvCache({ batchSize: B, maxSeqLen: 8 });
      const got: Float32Array[] = [];
      const rng = mulberry32(7);
      got.push((await layer.forward(uniform(B * 4 * E, 1, rng), { batchSize: B, seqLen: 4, kvCache: cache, isCausal: true })).output);
      for (let t = 0; t < 3; t++) got.push((await layer.forward(uniform(B * E, 1, rng), { batchSize: B, seqLen: 1, kvCache: cache, isCausal: true })).output);
      outputs.push(got);
    }
    for (const b of [1, 2]) for (const [i, y] of outputs[b].entries()) expectClose(y, outputs[0][i], RULE, `${BACKENDS[b]} step ${i} vs cpu`);
  });

  test('a paged call of three sequences', async () => {
    const E = 128;
    const results: Float32Array[] = [];
    for (const backend of BACKENDS) {
      const layer = engines.of(backend).createMultiHeadAttention(config, sd);
      const paged = layer.createPagedKvCache({ blockSize: 16, maxBlocks: 8 });
      const ids = [paged.addSequence(), paged.addSequence(), paged.addSequence()];
      const lengths = [5, 1, 3];
      const x = uniform(9 * E, 1, mulberry32(8));
      results.push((await layer.forward(x, { kvCache: paged, sequences: ids.map((id, i) => ({ id, length: lengths[i] })) })).output);
    }
    for (const b of [1, 2]) expectClose(results[b], results[0], RULE, `${BACKENDS[b]} paged vs cpu`);
  });
});

describe('bad input', () => {
  test("activations other than 'f32' or 'q8': InvalidArgumentError naming config.activations", () => {
    const config = { embedDim: 64, numHeads: 4 };
    const sd = quantizeWeights(randomStateDict(config, 47), { dtype: 'q4_0' });
    for (const bad of ['int8', 'Q8', 8, null]) {
      expect(() => engines.cpu.createMultiHeadAttention({ ...config, activations: bad as never }, sd)).toThrow(InvalidArgumentError);
      expect(() => engines.cpu.createMultiHeadAttention({ ...config, activations: bad as never }, sd)).toThrow(/config\.activations/);
    }
  });

  test("'q8' on a layer whose weights are all float32: InvalidArgumentError naming config.activations", () => {
    const config = { embedDim: 64, numHeads: 4, activations: 'q8' as const };
    for (const backend of BACKENDS) {
      expect(() => engines.of(backend).createMultiHeadAttention(config, randomStateDict(config, 48))).toThrow(InvalidArgumentError);
      expect(() => engines.of(backend).createMultiHeadAttention(config, randomStateDict(config, 48))).toThrow(/config\.activations.*'q8'|'q8'.*config\.activations/s);
    }
  });

  test("WebGPU: q, k and v of mixed float and quantized weights with 'q8' are refused (UnsupportedError); cpu and wasm take them", async () => {
    const config = { embedDim: 64, numHeads: 4, activations: 'q8' as const };
    const sd = randomStateDict(config, 49);
    const E = 64;
    const { in_proj_weight: w, ...rest } = sd;
    const sep = { q_proj_weight: w.slice(0, E * E), k_proj_weight: w.slice(E * E, 2 * E * E), v_proj_weight: w.slice(2 * E * E) };
    const mixed: QuantizedStateDict = { ...rest, ...sep, k_proj_weight: quantizeWeights(sep, { dtype: 'q8_0', config }).k_proj_weight };
    expect(() => engines.gpu.createMultiHeadAttention(config, mixed)).toThrow(UnsupportedError);
    await expectQ8('cpu', config, mixed, 1, 3, false, 9);
    await expectQ8('wasm', config, mixed, 1, 3, false, 9);
  });
});
