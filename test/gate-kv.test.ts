// K = V layers (config.kEqV, Gemma 4's attention_k_eq_v) and the output gate (config.outputGate,
// Qwen3-Next / Qwen3.5): WebGPU (f32 and f16) and wasm against the float64 reference — prefill, KV-cache
// decode, varlen, GQA, headDim ≠ E/H (and one not a multiple of 4: the GPU's padded path), with QK-norm
// and rotary (V taken before both), attention weights (before the gate) — the reference against a hand
// computation, and the typed errors.

import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import {
  type AttentionEngine,
  createAttentionEngine,
  dequantize,
  InvalidArgumentError,
  MissingWeightError,
  type MultiHeadAttentionConfig,
  type QuantizedTensor,
  quantizeWeights,
  referenceMultiHeadAttention,
  ShapeMismatchError,
  type StateDict,
  UnsupportedError,
} from '../src/index.ts';
import { expectClose, f16Tolerance, f32Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { withErrorScopes } from './helpers/gpu.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

const engines = useEngines('webgpu', 'cpu', 'wasm');

type Sizes = { embedDim: number; numHeads: number; numKvHeads: number; headDim: number; bias: boolean };

/** A layer's weights: q/k(/v) apart (no v with kEqV), and gate_proj_weight (and its bias) with outputGate. */
function layerWeights(config: Sizes & { kEqV?: boolean; outputGate?: boolean }, seed: number): StateDict {
  const { embedDim: E, numHeads: H, numKvHeads: G, headDim: Dh, bias } = config;
  const packed = randomStateDict(config, seed);
  const w = packed.in_proj_weight;
  const sd: StateDict = {
    q_proj_weight: w.slice(0, H * Dh * E),
    k_proj_weight: w.slice(H * Dh * E, (H + G) * Dh * E),
    'out_proj.weight': packed['out_proj.weight'],
  };
  if (!config.kEqV) sd.v_proj_weight = w.slice((H + G) * Dh * E);
  if (bias) {
    sd.in_proj_bias = packed.in_proj_bias;
    sd['out_proj.bias'] = packed['out_proj.bias'];
  }
  if (config.outputGate) {
    const r = mulberry32(seed + 1000);
    sd.gate_proj_weight = uniform(H * Dh * E, 2 / Math.sqrt(E), r);
    if (bias) sd.gate_proj_bias = uniform(H * Dh, 0.5, r);
  }
  return sd;
}

const norm = (n: number, seed: number) => uniform(n, 1, mulberry32(seed)).map((v) => 1 + 0.5 * v);

const cases: [string, MultiHeadAttentionConfig & Sizes][] = [
  ['outputGate, GQA, headDim 16 ≠ E/H, bias', { embedDim: 48, numHeads: 4, numKvHeads: 2, headDim: 16, bias: true, outputGate: true }],
  [
    'outputGate, MHA, no bias, QK-norm and rotary',
    { embedDim: 32, numHeads: 4, numKvHeads: 4, headDim: 8, bias: false, outputGate: true, qkNorm: { query: norm(8, 1), key: norm(8, 2) }, rotary: {} },
  ],
  [
    'kEqV, GQA, headDim 16, QK-norm and rotary',
    { embedDim: 48, numHeads: 4, numKvHeads: 2, headDim: 16, bias: false, kEqV: true, qkNorm: { query: norm(16, 3), key: norm(16, 4) }, rotary: { dim: 8 } },
  ],
  [
    'kEqV and outputGate, headDim 10 (padded on the GPU), E 36',
    { embedDim: 36, numHeads: 4, numKvHeads: 1, headDim: 10, bias: false, kEqV: true, outputGate: true, rotary: {} },
  ],
];

describe.each(cases)('%s', (_name, config) => {
  const sd = layerWeights(config, 7);
  const E = config.embedDim;
  const tol = (S: number) => f32Tolerance([E, S, config.numHeads * config.headDim]);

  test.each(['webgpu', 'wasm'] as const)('%s: prefill B=2 S=9 causal, and the attention weights (before the gate)', async (backend) => {
    const x = uniform(2 * 9 * E, 1, mulberry32(11));
    const options = { batchSize: 2, seqLen: 9, isCausal: true, needWeights: true };
    const ref = referenceMultiHeadAttention(config, sd, x, options);
    const engine = engines.of(backend);
    const mha = engine.createMultiHeadAttention(config, sd);
    const run = () => mha.forward(x, options);
    const got = backend === 'webgpu' ? await withErrorScopes(engine.device!, run) : await run();
    mha.dispose();
    expectClose(got.output, ref.output, tol(9), 'output');
    expectClose(got.attentionWeights!, ref.probs!, f32Tolerance([config.headDim, 9]), 'attention weights');
  });

  test.each(['webgpu', 'wasm'] as const)('%s: KV-cache decode (prefill 5, then 4 steps) = the whole sequence at once', async (backend) => {
    const S = 9;
    const x = uniform(S * E, 1, mulberry32(12));
    const ref = referenceMultiHeadAttention(config, sd, x, { batchSize: 1, seqLen: S, isCausal: true }).output;
    const engine = engines.of(backend);
    const mha = engine.createMultiHeadAttention(config, sd);
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: S });
    const out = new Float32Array(S * E);
    const step = async (t0: number, t1: number) =>
      out.set((await mha.forward(x.subarray(t0 * E, t1 * E), { batchSize: 1, seqLen: t1 - t0, kvCache: cache, isCausal: true })).output, t0 * E);
    await step(0, 5);
    for (let t = 5; t < S; t++) await step(t, t + 1);
    cache.dispose();
    mha.dispose();
    expectClose(out, ref, tol(S), 'decoded output');
  });

  test.each(['webgpu', 'wasm'] as const)('%s: varlen (cuSeqlens [0, 3, 10])', async (backend) => {
    const cuSeqlens = Int32Array.from([0, 3, 10]);
    const x = uniform(10 * E, 1, mulberry32(13));
    const engine = engines.of(backend);
    const mha = engine.createMultiHeadAttention(config, sd);
    const got = (await mha.forward(x, { cuSeqlens, isCausal: true })).output;
    mha.dispose();
    const second = referenceMultiHeadAttention(config, sd, x.subarray(3 * E), { batchSize: 1, seqLen: 7, isCausal: true }).output;
    expectClose(got.subarray(3 * E), second, tol(7), 'sequence 1 alone');
  });
});

describe("precision 'f16'", () => {
  let half: AttentionEngine;
  beforeAll(async () => {
    half = await createAttentionEngine({ backend: 'webgpu', precision: 'f16' });
  });
  afterAll(() => half?.dispose());

  test.each(cases.filter(([, c]) => c.outputGate))('%s', async (_name, config) => {
    expect(half.precision).toBe('f16');
    const sd = layerWeights(config, 8);
    const x = uniform(2 * 6 * config.embedDim, 1, mulberry32(14));
    const options = { batchSize: 2, seqLen: 6, isCausal: true };
    const ref = referenceMultiHeadAttention(config, sd, x, options);
    const mha = half.createMultiHeadAttention(config, sd);
    const got = await withErrorScopes(half.device!, () => mha.forward(x, options));
    mha.dispose();
    const E = config.embedDim;
    expectClose(got.output, ref.output, f16Tolerance([E, 6, config.numHeads * config.headDim], maxAbsFinite(ref.output), maxAbsFinite(ref.scores!)), 'output');
  });
});

describe('quantized weights (q8_0: q, k and the output projection packed, never expanded on webgpu and wasm; the gate float32)', () => {
  const quantized: [string, MultiHeadAttentionConfig & Sizes][] = [
    ['outputGate', { embedDim: 64, numHeads: 4, numKvHeads: 2, headDim: 16, bias: true, outputGate: true }],
    ['kEqV', { embedDim: 64, numHeads: 4, numKvHeads: 2, headDim: 32, bias: false, kEqV: true, rotary: {} }],
  ];
  test.each(quantized)('%s', async (_name, config) => {
    const sd = quantizeWeights(layerWeights(config, 21), { dtype: 'q8_0', config });
    if (config.outputGate) {
      // A quantized gate is refused, naming it (the gate is float32 on every backend); dequantized it runs.
      expect((sd.gate_proj_weight as QuantizedTensor).dtype).toBe('q8_0');
      for (const engine of [engines.cpu, engines.gpu, engines.wasm]) {
        expect(() => engine.createMultiHeadAttention(config, sd)).toThrow(UnsupportedError);
        expect(() => engine.createMultiHeadAttention(config, sd)).toThrow(/gate_proj_weight.*dequantize/);
      }
      sd.gate_proj_weight = dequantize(sd.gate_proj_weight as QuantizedTensor);
    }
    expect((sd.k_proj_weight as QuantizedTensor).dtype).toBe('q8_0');
    const E = config.embedDim;
    const x = uniform(2 * 5 * E, 1, mulberry32(22));
    const options = { batchSize: 2, seqLen: 5, isCausal: true };
    const ref = referenceMultiHeadAttention(config, sd, x, options).output; // on the exactly dequantized weights
    for (const backend of ['webgpu', 'wasm'] as const) {
      const engine = engines.of(backend);
      const mha = engine.createMultiHeadAttention(config, sd);
      const run = () => mha.forward(x, options);
      const got = backend === 'webgpu' ? await withErrorScopes(engine.device!, run) : await run();
      mha.dispose();
      expectClose(got.output, ref, f32Tolerance([E, 5, config.numHeads * config.headDim]), `${backend} output`);
    }
  });
});

test('outputGate in cross-attention (kdim, vdim ≠ E): the gate is projected from the query, on webgpu and wasm as in the reference', async () => {
  const config = { embedDim: 24, kdim: 20, vdim: 12, numHeads: 2, numKvHeads: 2, headDim: 8, bias: true, outputGate: true };
  const r = mulberry32(31);
  const sd: StateDict = {
    q_proj_weight: uniform(16 * 24, 0.3, r),
    k_proj_weight: uniform(16 * 20, 0.3, r),
    v_proj_weight: uniform(16 * 12, 0.3, r),
    in_proj_bias: uniform(48, 0.1, r),
    'out_proj.weight': uniform(24 * 16, 0.3, r),
    'out_proj.bias': uniform(24, 0.1, r),
    gate_proj_weight: uniform(16 * 24, 0.5, r),
    gate_proj_bias: uniform(16, 0.5, r),
  };
  const q = uniform(2 * 3 * 24, 1, r);
  const options = { batchSize: 2, seqLen: 3, kvSeqLen: 5, key: uniform(2 * 5 * 20, 1, r), value: uniform(2 * 5 * 12, 1, r) };
  const ref = referenceMultiHeadAttention(config, sd, q, options).output;
  for (const backend of ['webgpu', 'wasm'] as const) {
    const mha = engines.of(backend).createMultiHeadAttention(config, sd);
    expectClose((await mha.forward(q, options)).output, ref, f32Tolerance([24, 5, 16]), `${backend} output`);
    mha.dispose();
  }
});

describe('the reference, by hand', () => {
  test('outputGate: y = W_O·(O ⊙ sigmoid(x·W_gᵀ + b_g)) + b_O, O the ungated attention output', () => {
    const config = cases[0][1];
    const { embedDim: E, numHeads: H, headDim: Dh } = config;
    const sd = layerWeights(config, 9);
    const [B, S] = [2, 3];
    const x = uniform(B * S * E, 1, mulberry32(15));
    const ref = referenceMultiHeadAttention(config, sd, x, { batchSize: B, seqLen: S });
    // The same layer without the gate has the same attention output.
    const plain = { ...sd };
    delete plain.gate_proj_weight;
    delete plain.gate_proj_bias;
    const ungated = referenceMultiHeadAttention({ ...config, outputGate: false }, plain, x, { batchSize: B, seqLen: S });
    expect(ref.attention).toEqual(ungated.attention);
    expect(ref.output).not.toEqual(ungated.output);
    const Wg = sd.gate_proj_weight;
    const bg = sd.gate_proj_bias;
    const Wo = sd['out_proj.weight'];
    const bo = sd['out_proj.bias'];
    for (let b = 0; b < B; b++) {
      for (let s = 0; s < S; s++) {
        const t = b * S + s;
        const gated = new Float64Array(H * Dh);
        for (let n = 0; n < H * Dh; n++) {
          let g = bg[n];
          for (let e = 0; e < E; e++) g += x[t * E + e] * Wg[n * E + e];
          const [h, d] = [Math.floor(n / Dh), n % Dh];
          gated[n] = ref.attention[((b * H + h) * S + s) * Dh + d] / (1 + Math.exp(-g));
        }
        for (let m = 0; m < E; m++) {
          let y = bo[m];
          for (let n = 0; n < H * Dh; n++) y += gated[n] * Wo[m * H * Dh + n];
          expect(ref.output[t * E + m]).toBeCloseTo(y, 10);
        }
      }
    }
  });

  test('kEqV: V is x·W_kᵀ before QK-norm and rotary, and the layer is one with v_proj_weight = k_proj_weight', () => {
    const config = cases[2][1];
    const { embedDim: E, numKvHeads: G, headDim: Dh } = config;
    const sd = layerWeights(config, 10);
    const S = 4;
    const x = uniform(S * E, 1, mulberry32(16));
    const ref = referenceMultiHeadAttention(config, sd, x, { batchSize: 1, seqLen: S, isCausal: true });
    const Wk = sd.k_proj_weight;
    for (let g = 0; g < G; g++) {
      for (let s = 0; s < S; s++) {
        for (let d = 0; d < Dh; d++) {
          let v = 0;
          for (let e = 0; e < E; e++) v += x[s * E + e] * Wk[(g * Dh + d) * E + e];
          expect(ref.v[(g * S + s) * Dh + d]).toBeCloseTo(v, 10);
        }
      }
    }
    // K was normed and rotated, V was not.
    expect(Math.abs(ref.k[Dh + 1] - ref.v[Dh + 1])).toBeGreaterThan(1e-3);
    const same = referenceMultiHeadAttention({ ...config, kEqV: false }, { ...sd, v_proj_weight: Wk }, x, { batchSize: 1, seqLen: S, isCausal: true });
    expect(ref.output).toEqual(same.output);
    // in_proj_weight [(H + G)·Dh, E] is the packed form.
    const inProj = new Float32Array([...sd.q_proj_weight, ...Wk]);
    const packed = referenceMultiHeadAttention(config, { in_proj_weight: inProj, 'out_proj.weight': sd['out_proj.weight'] }, x, {
      batchSize: 1,
      seqLen: S,
      isCausal: true,
    });
    expect(packed.output).toEqual(ref.output);
  });
});

describe('bad input', () => {
  const gated = cases[0][1];
  const sd = layerWeights(gated, 11);
  const kv = cases[2][1];
  const kvSd = layerWeights(kv, 12);

  test('outputGate without gate_proj_weight: MissingWeightError naming it and its shape', () => {
    const { gate_proj_weight: _, ...rest } = sd;
    for (const engine of [engines.cpu, engines.gpu, engines.wasm]) {
      const err = (() => {
        try {
          engine.createMultiHeadAttention(gated, rest);
        } catch (e) {
          return e as Error;
        }
        return null;
      })();
      expect(err).toBeInstanceOf(MissingWeightError);
      expect(err!.message).toContain('gate_proj_weight');
      expect(err!.message).toContain('[H·Dh, E] = [4·16, 48]');
    }
  });

  test('a gate of the wrong shape: ShapeMismatchError with [H·Dh, E]', () => {
    const bad = { ...sd, gate_proj_weight: new Float32Array(48 * 48) };
    expect(() => engines.gpu.createMultiHeadAttention(gated, bad)).toThrow(ShapeMismatchError);
    expect(() => engines.wasm.createMultiHeadAttention(gated, bad)).toThrow(/\[H·Dh, E\] = \[4·16, 48\]/);
    const badBias = { ...sd, gate_proj_bias: new Float32Array(5) };
    expect(() => engines.cpu.createMultiHeadAttention(gated, badBias)).toThrow(/gate_proj_bias/);
  });

  test('gate weights without outputGate: the unknown-key error, hinting at outputGate', () => {
    expect(() => engines.gpu.createMultiHeadAttention({ ...gated, outputGate: false }, sd)).toThrow(InvalidArgumentError);
    expect(() => engines.gpu.createMultiHeadAttention({ ...gated, outputGate: false }, sd)).toThrow(/outputGate: true/);
  });

  test('kEqV: a missing in_proj_bias names the K = V shape, v weights are refused, vdim ≠ kdim refused', () => {
    const err = (() => {
      try {
        engines.gpu.createMultiHeadAttention({ ...kv, bias: undefined }, kvSd);
      } catch (e) {
        return e as Error;
      }
      return null;
    })();
    expect(err).toBeInstanceOf(MissingWeightError);
    expect(err!.message).toContain('[(H + G)·headDim] = 96');
    expect(() => engines.gpu.createMultiHeadAttention(kv, { ...kvSd, v_proj_weight: kvSd.k_proj_weight })).toThrow(/left out: this layer has config.kEqV/);
    expect(() => engines.gpu.createMultiHeadAttention({ ...kv, vdim: 24 }, kvSd)).toThrow(InvalidArgumentError);
    expect(() => engines.gpu.createMultiHeadAttention({ ...kv, kEqV: 1 as unknown as boolean }, kvSd)).toThrow(InvalidArgumentError);
  });

  test('kEqV with biases: in_proj_bias [(H + G)·Dh], V biased by the k bias, on webgpu and wasm', async () => {
    const config = { ...kv, bias: true };
    const { embedDim: E, numHeads: H, numKvHeads: G, headDim: Dh } = config;
    const r = mulberry32(19);
    const sdb = { ...kvSd, in_proj_bias: uniform((H + G) * Dh, 0.3, r), 'out_proj.bias': uniform(E, 0.1, r) };
    const x = uniform(2 * 6 * E, 1, r);
    const options = { batchSize: 2, seqLen: 6, isCausal: true };
    const ref = referenceMultiHeadAttention(config, sdb, x, options);
    const vb = new Float32Array((H + 2 * G) * Dh);
    vb.set(sdb.in_proj_bias, 0);
    vb.set(sdb.in_proj_bias.subarray(H * Dh), (H + G) * Dh);
    const plain = referenceMultiHeadAttention(
      { ...config, kEqV: false },
      { ...kvSd, v_proj_weight: kvSd.k_proj_weight, in_proj_bias: vb, 'out_proj.bias': sdb['out_proj.bias'] },
      x,
      options,
    );
    expect(ref.output).toEqual(plain.output);
    for (const backend of ['webgpu', 'wasm'] as const) {
      const mha = engines.of(backend).createMultiHeadAttention(config, sdb);
      expectClose((await mha.forward(x, options)).output, ref.output, f32Tolerance([E, 6, H * Dh]), `${backend} output`);
      mha.dispose();
    }
  });

  test('kEqV: cross-attention with a value other than the key is refused before any work; the key twice runs', async () => {
    const config = { embedDim: 16, numHeads: 2, headDim: 8, numKvHeads: 2, bias: false, kEqV: true };
    const w = layerWeights(config, 13);
    const q = uniform(3 * 16, 1, mulberry32(17));
    const k = uniform(5 * 16, 1, mulberry32(18));
    const options = { batchSize: 1, seqLen: 3, kvSeqLen: 5 };
    for (const backend of ['cpu', 'webgpu', 'wasm'] as const) {
      const mha = engines.of(backend).createMultiHeadAttention(config, w);
      await expect(mha.forward(q, { ...options, key: k, value: k.slice() })).rejects.toThrow(UnsupportedError);
      const got = (await mha.forward(q, { ...options, key: k, value: k })).output;
      const ref = referenceMultiHeadAttention({ ...config, kEqV: false }, { ...w, v_proj_weight: w.k_proj_weight }, q, { ...options, key: k, value: k }).output;
      expectClose(got, ref, f32Tolerance([16, 5, 16]), `${backend} cross-attention`);
      mha.dispose();
    }
  });
});
