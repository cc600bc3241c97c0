// Engine features beyond the plain layer (issue 39), each against the float64 CPU reference on WebGPU
// and wasm with the f32 tolerance (prefill, KV-cache decode and the cache's contents, GQA, head sizes
// the GPU pads), against transformers' own modules in float64 (test/fixtures/head-ops/, made by
// scripts/make_head_ops_fixtures.py: Olmo2Attention, Gemma4TextAttention, Qwen3NextAttention), and the
// refusals of bad configs and state dicts:
//   qkNorm.over = 'all'  one RMS norm over a token's whole q / k projection (OLMo 2)
//   vNorm                a weightless RMS norm of every value head (Gemma 4)
//   kEqV                 V = the k projection before the key norm and rotary, no v weights (Gemma 4)
//   outputGate           attention ⊙ sigmoid(x·W_gᵀ + b_g) before the output projection (Qwen3-Next)

import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { InvalidArgumentError, MissingWeightError, type MultiHeadAttentionConfig, ShapeMismatchError, type StateDict } from '../src/index.ts';
import { expectClose, f16Tolerance, f32Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';
import { FAST_COMPILING, useEngines } from './helpers/engines.ts';
import { createGpuEngine } from './helpers/gpu.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

const engines = useEngines({ webgpu: FAST_COMPILING }, 'webgpu', 'wasm', 'cpu');

function fixture(name: string): Record<string, number[] | number | string> {
  return JSON.parse(readFileSync(new URL(`./fixtures/head-ops/${name}.json`, import.meta.url), 'utf8'));
}

const f32 = (a: unknown) => Float32Array.from(a as number[]);

/** Weights around 1 (as trained norms are), length n. */
const normWeights = (n: number, seed: number) => uniform(n, 1, mulberry32(seed)).map((w) => 1 + w / 2);

/** Prefill of 5 tokens into a cache, one decode step, the whole 6 causally, and the cache's keys, on `backend`. */
async function runAll(backend: 'webgpu' | 'wasm' | 'cpu', config: MultiHeadAttentionConfig, sd: StateDict, x: Float32Array) {
  const E = config.embedDim;
  const mha = engines.of(backend).createMultiHeadAttention(config, sd);
  try {
    const cache = mha.createKvCache({ batchSize: 2, maxSeqLen: 8 });
    const prefill = await mha.forward(x.subarray(0, 2 * 5 * E), { batchSize: 2, seqLen: 5, isCausal: true, kvCache: cache });
    // x is [2, 6, E]: the prefill above took the first 10 rows, rows of batch 0 then 1 as [2, 5, E];
    // the decode step is rows 10, 11 as [2, 1, E]. The whole [2, 6, E] is the same tokens in another order, so compare the per-call results only.
    const step = await mha.forward(x.subarray(2 * 5 * E), { batchSize: 2, seqLen: 1, kvCache: cache });
    const whole = await mha.forward(x, { batchSize: 2, seqLen: 6, isCausal: true });
    const contents = await cache.read();
    return { prefill: prefill.output, step: step.output, whole: whole.output, keys: contents.key, values: contents.value };
  } finally {
    mha.dispose();
  }
}

describe("qkNorm over 'all' (OLMo 2): one RMS norm over a token's whole q / k projection", () => {
  const CASES = [
    { Dh: 8, H: 4, G: 2, rotary: true },
    { Dh: 6, H: 3, G: 1, rotary: true }, // padded to 8 lanes on the GPU: the mean over H·6 features only
    { Dh: 5, H: 2, G: 2, rotary: false },
    { Dh: 4, H: 2, G: 1, rotary: true, bias: false },
  ];
  test.each(CASES)('Dh=$Dh H=$H G=$G rotary=$rotary: webgpu and wasm match the float64 reference, prefill + decode', async ({ Dh, H, G, rotary, bias }) => {
    const E = H * Dh;
    const config: MultiHeadAttentionConfig = {
      embedDim: E,
      numHeads: H,
      numKvHeads: G,
      ...(bias === false ? { bias: false } : {}),
      ...(rotary ? { rotary: { dim: Dh % 2 ? Dh - 1 : Dh } } : {}),
      qkNorm: { query: normWeights(H * Dh, Dh), key: normWeights(G * Dh, Dh + 1), eps: 1e-5, over: 'all' },
    };
    const sd = randomStateDict(config, 40 + Dh);
    const x = uniform(2 * 6 * E, 1, mulberry32(70 + Dh));
    const want = await runAll('cpu', config, sd, x);
    // The norm is not per head: with 'head' norms of the same weights the reference differs.
    const perHead = await runAll('cpu', { ...config, qkNorm: { query: normWeights(Dh, 1), key: normWeights(Dh, 2) } }, sd, x);
    expect(Math.max(...want.whole.map((v, i) => Math.abs(v - perHead.whole[i])))).toBeGreaterThan(1e-3);
    const tol = f32Tolerance([E, 6, E]);
    for (const backend of ['webgpu', 'wasm'] as const) {
      const got = await runAll(backend, config, sd, x);
      expectClose(got.prefill, want.prefill, tol, `${backend} prefill`);
      expectClose(got.step, want.step, tol, `${backend} decode step`);
      expectClose(got.whole, want.whole, tol, `${backend} whole`);
      expectClose(got.keys, want.keys, f32Tolerance([E]), `${backend} normed keys in the cache`);
      expectClose(got.values, want.values, f32Tolerance([E]), `${backend} values in the cache`);
    }
  });

  test('cross-attention (kdim ≠ E, keys of their own length): webgpu and wasm match the reference', async () => {
    const [E, H, G, Dh, kdim] = [12, 3, 1, 4, 7];
    const config: MultiHeadAttentionConfig = {
      embedDim: E,
      numHeads: H,
      numKvHeads: G,
      kdim,
      vdim: kdim,
      qkNorm: { query: normWeights(H * Dh, 5), key: normWeights(G * Dh, 6), over: 'all' },
    };
    const r = mulberry32(11);
    const sd: StateDict = {
      q_proj_weight: uniform(H * Dh * E, 0.4, r),
      k_proj_weight: uniform(G * Dh * kdim, 0.4, r),
      v_proj_weight: uniform(G * Dh * kdim, 0.4, r),
      in_proj_bias: uniform((H + 2 * G) * Dh, 0.1, r),
      'out_proj.weight': uniform(E * E, 0.4, r),
      'out_proj.bias': uniform(E, 0.1, r),
    };
    const [B, Sq, Skv] = [2, 3, 5];
    const query = uniform(B * Sq * E, 1, r);
    const key = uniform(B * Skv * kdim, 1, r);
    const value = uniform(B * Skv * kdim, 1, r);
    const options = { batchSize: B, seqLen: Sq, kvSeqLen: Skv, key, value };
    const want = await engines.cpu.createMultiHeadAttention(config, sd).forward(query, options);
    for (const backend of ['webgpu', 'wasm'] as const) {
      const mha = engines.of(backend).createMultiHeadAttention(config, sd);
      expectClose((await mha.forward(query, options)).output, want.output, f32Tolerance([kdim, Skv, E]), `${backend} cross-attention`);
      mha.dispose();
    }
  });

  test("transformers' Olmo2Attention (float64): every backend", async () => {
    const fx = fixture('olmo2');
    const [E, H, G, S] = [fx.embedDim, fx.numHeads, fx.numKvHeads, fx.seqLen] as number[];
    const config: MultiHeadAttentionConfig = {
      embedDim: E,
      numHeads: H,
      numKvHeads: G,
      bias: false,
      rotary: { cos: f32(fx.cos), sin: f32(fx.sin) },
      qkNorm: { query: f32(fx.q_norm), key: f32(fx.k_norm), eps: fx.eps as number, over: 'all' },
    };
    const sd: StateDict = {
      q_proj_weight: f32(fx.q_proj_weight),
      k_proj_weight: f32(fx.k_proj_weight),
      v_proj_weight: f32(fx.v_proj_weight),
      'out_proj.weight': f32(fx.out_proj_weight),
    };
    const x = f32(fx.x);
    const want = fx.output as number[];
    // The weights and inputs are float64 in the fixture, float32 here: the reference is within the f32 tolerance too.
    const tol = f32Tolerance([E, S, E]);
    for (const backend of ['cpu', 'webgpu', 'wasm'] as const) {
      const mha = engines.of(backend).createMultiHeadAttention(config, sd);
      const whole = await mha.forward(x, { batchSize: 1, seqLen: S, isCausal: true });
      expectClose(whole.output, want, tol, `${backend} vs Olmo2Attention`);
      // The same through a KV cache: S − 1 tokens, then the last.
      const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: S });
      await mha.forward(x.subarray(0, (S - 1) * E), { batchSize: 1, seqLen: S - 1, isCausal: true, kvCache: cache });
      const step = await mha.forward(x.subarray((S - 1) * E), { batchSize: 1, seqLen: 1, kvCache: cache });
      expectClose(step.output, want.slice((S - 1) * E), tol, `${backend} decode vs Olmo2Attention`);
      mha.dispose();
    }
  });

  test('bad configs are refused, naming the argument and the expected shape', () => {
    const base = { embedDim: 12, numHeads: 3, numKvHeads: 1 };
    const sd = randomStateDict(base, 1);
    const make = (qkNorm: unknown) => () => engines.cpu.createMultiHeadAttention({ ...base, qkNorm } as MultiHeadAttentionConfig, sd);
    expect(make({ query: new Float32Array(4), key: new Float32Array(4), over: 'all' })).toThrow(ShapeMismatchError);
    expect(make({ query: new Float32Array(4), key: new Float32Array(4), over: 'all' })).toThrow(/config\.qkNorm\.query.*\[H·headDim\] = 12/s);
    expect(make({ query: new Float32Array(12), key: new Float32Array(12), over: 'all' })).toThrow(/config\.qkNorm\.key.*\[G·headDim\] = 4/s);
    expect(make({ query: new Float32Array(12), key: new Float32Array(4) })).toThrow(/config\.qkNorm\.query.*\[headDim\] = 4/s);
    expect(make({ query: new Float32Array(4), key: new Float32Array(4), over: 'token' })).toThrow(InvalidArgumentError);
    expect(make({ query: new Float32Array(4), key: new Float32Array(4), over: 'token' })).toThrow(/config\.qkNorm\.over/);
    for (const backend of ['webgpu', 'wasm'] as const) {
      expect(() => engines.of(backend).createMultiHeadAttention({ ...base, qkNorm: { query: new Float32Array(4), key: new Float32Array(4), over: 'all' } }, sd)).toThrow(
        ShapeMismatchError,
      );
    }
  });
});

describe("vNorm (Gemma 4's v_norm): a weightless RMS norm of every value head", () => {
  const CASES = [
    { Dh: 8, H: 4, G: 2, qk: 'all' as const },
    { Dh: 6, H: 3, G: 1, qk: 'head' as const }, // padded to 8 lanes on the GPU
    { Dh: 5, H: 2, G: 2, qk: null },
    { Dh: 4, H: 2, G: 1, qk: null, noRotary: true }, // vNorm alone: the head transform for the values only
  ];
  test.each(CASES)('Dh=$Dh H=$H G=$G qkNorm=$qk: webgpu and wasm match the float64 reference, prefill + decode + cached values', async ({ Dh, H, G, qk, noRotary }) => {
    const E = H * Dh;
    const config: MultiHeadAttentionConfig = {
      embedDim: E,
      numHeads: H,
      numKvHeads: G,
      ...(noRotary ? {} : { rotary: { dim: Dh % 2 ? Dh - 1 : Dh } }),
      vNorm: qk === 'head' ? true : { eps: 1e-5 },
      ...(qk === 'all' ? { qkNorm: { query: normWeights(H * Dh, 3), key: normWeights(G * Dh, 4), over: 'all' as const } } : {}),
      ...(qk === 'head' ? { qkNorm: { query: normWeights(Dh, 3), key: normWeights(Dh, 4) } } : {}),
    };
    const sd = randomStateDict(config, 80 + Dh);
    const x = uniform(2 * 6 * E, 1, mulberry32(90 + Dh));
    const want = await runAll('cpu', config, sd, x);
    // The cached values are normed: every head's mean square ≈ 1 (eps aside).
    for (let base = 0; base < want.values.length; base += Dh) {
      const rows = want.values.subarray(base, base + Dh);
      const filled = rows.some((v) => v !== 0);
      if (filled) expect(rows.reduce((a, v) => a + v * v, 0) / Dh).toBeCloseTo(1, 2); // mean(x²)/(mean(x²) + eps)
    }
    const tol = f32Tolerance([E, 6, E]);
    for (const backend of ['webgpu', 'wasm'] as const) {
      const got = await runAll(backend, config, sd, x);
      expectClose(got.prefill, want.prefill, tol, `${backend} prefill`);
      expectClose(got.step, want.step, tol, `${backend} decode step`);
      expectClose(got.whole, want.whole, tol, `${backend} whole`);
      expectClose(got.values, want.values, f32Tolerance([E]), `${backend} normed values in the cache`);
    }
  });

  test('bad vNorm configs are refused', () => {
    const base = { embedDim: 8, numHeads: 2 };
    const sd = randomStateDict(base, 1);
    const make = (vNorm: unknown) => () => engines.cpu.createMultiHeadAttention({ ...base, vNorm } as MultiHeadAttentionConfig, sd);
    expect(make({ eps: 0 })).toThrow(/config\.vNorm\.eps/);
    expect(make({ eps: 0 })).toThrow(InvalidArgumentError);
    expect(make({ weight: new Float32Array(4) })).toThrow(/config\.vNorm/);
    expect(make('yes')).toThrow(InvalidArgumentError);
  });
});

describe("kEqV (Gemma 4's attention_k_eq_v): V is the k projection's output, before the key norm and rotary", () => {
  test("transformers' Gemma4TextAttention (float64; k_eq_v, q/k norms, v_norm, scaling 1): every backend, whole and decode", async () => {
    const fx = fixture('gemma4');
    const [E, H, G, S] = [fx.embedDim, fx.numHeads, fx.numKvHeads, fx.seqLen] as number[];
    const config: MultiHeadAttentionConfig = {
      embedDim: E,
      numHeads: H,
      numKvHeads: G,
      bias: false,
      rotary: { cos: f32(fx.cos), sin: f32(fx.sin) },
      qkNorm: { query: f32(fx.q_norm), key: f32(fx.k_norm), eps: fx.eps as number },
      vNorm: { eps: fx.eps as number },
      kEqV: true,
    };
    const sd: StateDict = { q_proj_weight: f32(fx.q_proj_weight), k_proj_weight: f32(fx.k_proj_weight), 'out_proj.weight': f32(fx.out_proj_weight) };
    const x = f32(fx.x);
    const want = fx.output as number[];
    const tol = f32Tolerance([E, S, E]);
    for (const backend of ['cpu', 'webgpu', 'wasm'] as const) {
      const mha = engines.of(backend).createMultiHeadAttention(config, sd);
      const whole = await mha.forward(x, { batchSize: 1, seqLen: S, isCausal: true, scale: 1 });
      expectClose(whole.output, want, tol, `${backend} vs Gemma4TextAttention`);
      const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: S });
      await mha.forward(x.subarray(0, (S - 1) * E), { batchSize: 1, seqLen: S - 1, isCausal: true, kvCache: cache, scale: 1 });
      const step = await mha.forward(x.subarray((S - 1) * E), { batchSize: 1, seqLen: 1, kvCache: cache, scale: 1 });
      expectClose(step.output, want.slice((S - 1) * E), tol, `${backend} decode vs Gemma4TextAttention`);
      mha.dispose();
    }
  });

  test('in_proj_weight [(H + G)·Dh, E] with in_proj_bias: the same layer as v_proj_weight = k_proj_weight, on every backend', async () => {
    const [Dh, H, G] = [6, 3, 1];
    const E = H * Dh;
    const full = randomStateDict({ embedDim: E, numHeads: H, numKvHeads: G }, 33);
    const inProj = full.in_proj_weight as Float32Array;
    const bias = full.in_proj_bias as Float32Array;
    const qk = (H + G) * Dh;
    // The ordinary layer with its v rows replaced by the k rows: what kEqV means (the norm and rotary apply to K alone).
    const vIsK = Float32Array.from(inProj);
    vIsK.set(inProj.subarray(H * Dh * E, qk * E), qk * E);
    const vBiasIsK = Float32Array.from(bias);
    vBiasIsK.set(bias.subarray(H * Dh, qk), qk);
    const common = { embedDim: E, numHeads: H, numKvHeads: G, rotary: {}, qkNorm: { query: normWeights(Dh, 1), key: normWeights(Dh, 2) } };
    const plain = { ...common };
    const kv: MultiHeadAttentionConfig = { ...common, kEqV: true };
    const x = uniform(2 * 6 * E, 1, mulberry32(5));
    const want = await runAll('cpu', plain, { ...full, in_proj_weight: vIsK, in_proj_bias: vBiasIsK }, x);
    const sd = {
      in_proj_weight: inProj.slice(0, qk * E),
      in_proj_bias: bias.slice(0, qk),
      'out_proj.weight': full['out_proj.weight'],
      'out_proj.bias': full['out_proj.bias'],
    };
    const tol = f32Tolerance([E, 6, E]);
    for (const backend of ['cpu', 'webgpu', 'wasm'] as const) {
      const got = await runAll(backend, kv, sd, x);
      expectClose(got.whole, want.whole, tol, `${backend} whole`);
      expectClose(got.step, want.step, tol, `${backend} decode`);
      expectClose(got.values, want.values, f32Tolerance([E]), `${backend} cached values (un-normed, un-rotated keys)`);
    }
  });

  test('bad kEqV layers and calls are refused', async () => {
    const base = { embedDim: 8, numHeads: 2, numKvHeads: 1, kEqV: true };
    const [H, G, Dh, E] = [2, 1, 4, 8];
    const q = new Float32Array(H * Dh * E);
    const k = new Float32Array(G * Dh * E);
    const out = { 'out_proj.weight': new Float32Array(E * E), 'out_proj.bias': new Float32Array(E) };
    const make = (config: object, sd: StateDict) => () => engines.cpu.createMultiHeadAttention(config as MultiHeadAttentionConfig, sd);
    const bias = new Float32Array((H + G) * Dh);
    expect(make(base, { q_proj_weight: q, k_proj_weight: k, v_proj_weight: k, in_proj_bias: bias, ...out })).toThrow(/stateDict\["v_proj_weight"\].*kEqV/s);
    expect(make(base, { in_proj_weight: new Float32Array((H + 2 * G) * Dh * E), in_proj_bias: bias, ...out })).toThrow(ShapeMismatchError);
    expect(make(base, { in_proj_weight: new Float32Array((H + 2 * G) * Dh * E), in_proj_bias: bias, ...out })).toThrow(/\[\(H \+ G\)·headDim, E\] = \[12, 8\]/);
    expect(make(base, { q_proj_weight: q, k_proj_weight: k, in_proj_bias: new Float32Array((H + 2 * G) * Dh), ...out })).toThrow(
      /in_proj_bias.*\[\(H \+ G\)·headDim\] = 12/s,
    );
    expect(make({ ...base, kEqV: 'yes' }, {})).toThrow(/config\.kEqV/);
    // A missing k weight names what a K = V layer takes (no v_proj_weight).
    expect(make(base, { q_proj_weight: q, in_proj_bias: bias, ...out })).toThrow(MissingWeightError);
    expect(make(base, { q_proj_weight: q, in_proj_bias: bias, ...out })).toThrow(/pass all of: q_proj_weight, k_proj_weight, out_proj\.weight/);
    expect(make({ ...base, kdim: 8, vdim: 6 }, {})).toThrow(/config\.vdim/);
    // Cross-attention: the value input must be the key input.
    const mha = engines.cpu.createMultiHeadAttention(base as MultiHeadAttentionConfig, { q_proj_weight: q, k_proj_weight: k, in_proj_bias: bias, ...out });
    const key = new Float32Array(3 * E);
    await expect(mha.forward(new Float32Array(2 * E), { batchSize: 1, seqLen: 2, kvSeqLen: 3, key, value: key.slice() })).rejects.toThrow(/options\.value/);
    await mha.forward(new Float32Array(2 * E), { batchSize: 1, seqLen: 2, kvSeqLen: 3, key, value: key });
  });
});

describe('outputGate (Qwen3-Next, Qwen3.5): out = W_O·(attention ⊙ sigmoid(x·W_gᵀ + b_g))', () => {
  test("transformers' Qwen3NextAttention (float64; gate rows split out of q_proj, q/k norms 1 + w, bias): every backend, whole and decode", async () => {
    const fx = fixture('qwen3_next');
    const [E, H, G, S] = [fx.embedDim, fx.numHeads, fx.numKvHeads, fx.seqLen] as number[];
    const config: MultiHeadAttentionConfig = {
      embedDim: E,
      numHeads: H,
      numKvHeads: G,
      rotary: { cos: f32(fx.cos), sin: f32(fx.sin) },
      qkNorm: { query: f32(fx.q_norm), key: f32(fx.k_norm), eps: fx.eps as number },
      outputGate: true,
    };
    const sd: StateDict = {
      q_proj_weight: f32(fx.q_proj_weight),
      k_proj_weight: f32(fx.k_proj_weight),
      v_proj_weight: f32(fx.v_proj_weight),
      in_proj_bias: f32(fx.in_proj_bias),
      'out_proj.weight': f32(fx.out_proj_weight),
      'out_proj.bias': f32(fx.out_proj_bias),
      gate_proj_weight: f32(fx.gate_proj_weight),
      gate_proj_bias: f32(fx.gate_proj_bias),
    };
    const x = f32(fx.x);
    const want = fx.output as number[];
    const tol = f32Tolerance([E, S, E]);
    for (const backend of ['cpu', 'webgpu', 'wasm'] as const) {
      const mha = engines.of(backend).createMultiHeadAttention(config, sd);
      const whole = await mha.forward(x, { batchSize: 1, seqLen: S, isCausal: true });
      expectClose(whole.output, want, tol, `${backend} vs Qwen3NextAttention`);
      const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: S });
      await mha.forward(x.subarray(0, (S - 1) * E), { batchSize: 1, seqLen: S - 1, isCausal: true, kvCache: cache });
      const step = await mha.forward(x.subarray((S - 1) * E), { batchSize: 1, seqLen: 1, kvCache: cache });
      expectClose(step.output, want.slice((S - 1) * E), tol, `${backend} decode vs Qwen3NextAttention`);
      mha.dispose();
    }
    // Without the gate the output differs: the gate is applied.
    const { gate_proj_weight: _w, gate_proj_bias: _b, ...plain } = sd;
    const ungated = await engines.cpu.createMultiHeadAttention({ ...config, outputGate: false }, plain).forward(x, { batchSize: 1, seqLen: S, isCausal: true });
    expect(Math.max(...ungated.output.map((v, i) => Math.abs(v - want[i])))).toBeGreaterThan(1e-2);
  });

  test.each([
    { Dh: 5, H: 3, G: 1, bias: false }, // padded to 8 lanes (and E = 15 to 16) on the GPU
    { Dh: 8, H: 4, G: 2, bias: true },
  ])('webgpu and wasm match the float64 reference: Dh=$Dh H=$H G=$G bias=$bias, prefill + decode', async ({ Dh, H, G, bias }) => {
    const E = H * Dh;
    const config: MultiHeadAttentionConfig = { embedDim: E, numHeads: H, numKvHeads: G, bias, outputGate: true, rotary: { dim: 4 } };
    const gate: StateDict = { gate_proj_weight: uniform(H * Dh * E, 0.5, mulberry32(13)), ...(bias ? { gate_proj_bias: uniform(H * Dh, 0.5, mulberry32(15)) } : {}) };
    const sd: StateDict = { ...randomStateDict(config, 12), ...gate };
    const x = uniform(2 * 6 * E, 1, mulberry32(14));
    const want = await runAll('cpu', config, sd, x);
    const tol = f32Tolerance([E, 6, E]);
    for (const backend of ['webgpu', 'wasm'] as const) {
      const got = await runAll(backend, config, sd, x);
      expectClose(got.prefill, want.prefill, tol, `${backend} prefill`);
      expectClose(got.step, want.step, tol, `${backend} decode step`);
      expectClose(got.whole, want.whole, tol, `${backend} whole`);
    }
  });

  test('refusals: missing or misshapen gate weights, a gate weight without the flag', () => {
    const config: MultiHeadAttentionConfig = { embedDim: 8, numHeads: 2, outputGate: true };
    const sd = randomStateDict({ embedDim: 8, numHeads: 2 }, 3);
    const gate = { gate_proj_weight: new Float32Array(64), gate_proj_bias: new Float32Array(8) };
    expect(() => engines.gpu.createMultiHeadAttention(config, { ...sd, gate_proj_weight: gate.gate_proj_weight })).toThrow(MissingWeightError);
    expect(() => engines.cpu.createMultiHeadAttention(config, sd)).toThrow(MissingWeightError);
    expect(() => engines.cpu.createMultiHeadAttention(config, { ...sd, gate_proj_weight: gate.gate_proj_weight })).toThrow(/gate_proj_bias/);
    expect(() => engines.wasm.createMultiHeadAttention(config, { ...sd, ...gate, gate_proj_weight: new Float32Array(60) })).toThrow(ShapeMismatchError);
    expect(() => engines.wasm.createMultiHeadAttention(config, { ...sd, ...gate, gate_proj_weight: new Float32Array(60) })).toThrow(/\[8, 8\] = 64/);
    expect(() => engines.cpu.createMultiHeadAttention({ ...config, outputGate: false }, { ...sd, ...gate })).toThrow(/gate_proj_weight/);
    expect(() => engines.cpu.createMultiHeadAttention({ ...config, outputGate: 1 } as never, { ...sd, ...gate })).toThrow(/config\.outputGate/);
  });
});

describe('all four together', () => {
  // qkNorm over 'all', vNorm, kEqV and the output gate in one layer (GQA, rotary, bias, an odd head size).
  const [Dh, H, G] = [6, 4, 2];
  const E = H * Dh;
  const config: MultiHeadAttentionConfig = {
    embedDim: E,
    numHeads: H,
    numKvHeads: G,
    rotary: {},
    qkNorm: { query: normWeights(H * Dh, 21), key: normWeights(G * Dh, 22), over: 'all' },
    vNorm: true,
    kEqV: true,
    outputGate: true,
  };
  const r = mulberry32(23);
  const sd: StateDict = {
    in_proj_weight: uniform((H + G) * Dh * E, 0.4, r),
    in_proj_bias: uniform((H + G) * Dh, 0.1, r),
    'out_proj.weight': uniform(E * E, 0.4, r),
    'out_proj.bias': uniform(E, 0.1, r),
    gate_proj_weight: uniform(H * Dh * E, 0.4, r),
    gate_proj_bias: uniform(H * Dh, 0.5, r),
  };
  const x = uniform(2 * 6 * E, 1, mulberry32(24));

  test('webgpu and wasm match the float64 reference, prefill + decode + cache contents', async () => {
    const want = await runAll('cpu', config, sd, x);
    const tol = f32Tolerance([E, 6, E]);
    for (const backend of ['webgpu', 'wasm'] as const) {
      const got = await runAll(backend, config, sd, x);
      expectClose(got.prefill, want.prefill, tol, `${backend} prefill`);
      expectClose(got.step, want.step, tol, `${backend} decode step`);
      expectClose(got.whole, want.whole, tol, `${backend} whole`);
      expectClose(got.keys, want.keys, f32Tolerance([E]), `${backend} cached keys`);
      expectClose(got.values, want.values, f32Tolerance([E]), `${backend} cached values`);
    }
  });

  test("with attention: 'linear', webgpu and wasm match the reference, prefill + decode", async () => {
    const linear: MultiHeadAttentionConfig = { ...config, attention: 'linear' };
    const want = await runAll('cpu', linear, sd, x);
    const tol = f32Tolerance([E, 6, E]);
    for (const backend of ['webgpu', 'wasm'] as const) {
      const got = await runAll(backend, linear, sd, x);
      expectClose(got.prefill, want.prefill, tol, `${backend} linear prefill`);
      expectClose(got.step, want.step, tol, `${backend} linear decode step`);
      expectClose(got.whole, want.whole, tol, `${backend} linear whole`);
    }
  });

  test('with config.headDim ≠ embedDim / numHeads (H·Dh = 20 ≠ E = 12): webgpu and wasm match the reference', async () => {
    const [E2, H2, G2, Dh2] = [12, 4, 2, 5];
    const wide: MultiHeadAttentionConfig = {
      embedDim: E2,
      numHeads: H2,
      numKvHeads: G2,
      headDim: Dh2,
      rotary: { dim: 4 },
      qkNorm: { query: normWeights(H2 * Dh2, 31), key: normWeights(G2 * Dh2, 32), over: 'all' },
      vNorm: true,
      kEqV: true,
      outputGate: true,
    };
    const r2 = mulberry32(33);
    const sd2: StateDict = {
      q_proj_weight: uniform(H2 * Dh2 * E2, 0.4, r2),
      k_proj_weight: uniform(G2 * Dh2 * E2, 0.4, r2),
      in_proj_bias: uniform((H2 + G2) * Dh2, 0.1, r2),
      'out_proj.weight': uniform(E2 * H2 * Dh2, 0.4, r2),
      'out_proj.bias': uniform(E2, 0.1, r2),
      gate_proj_weight: uniform(H2 * Dh2 * E2, 0.4, r2),
      gate_proj_bias: uniform(H2 * Dh2, 0.5, r2),
    };
    const x2 = uniform(2 * 6 * E2, 1, mulberry32(34));
    const want = await runAll('cpu', wide, sd2, x2);
    const tol = f32Tolerance([H2 * Dh2, 6, H2 * Dh2]);
    for (const backend of ['webgpu', 'wasm'] as const) {
      const got = await runAll(backend, wide, sd2, x2);
      expectClose(got.prefill, want.prefill, tol, `${backend} prefill`);
      expectClose(got.step, want.step, tol, `${backend} decode step`);
      expectClose(got.whole, want.whole, tol, `${backend} whole`);
    }
  });

  test("precision 'f16' on WebGPU, within the f16 tolerance", async () => {
    const engine = await createGpuEngine({ precision: 'f16' });
    try {
      const want = await engines.cpu.createMultiHeadAttention(config, sd).forward(x, { batchSize: 2, seqLen: 6, isCausal: true });
      const got = await engine.createMultiHeadAttention(config, sd).forward(x, { batchSize: 2, seqLen: 6, isCausal: true });
      expectClose(got.output, want.output, f16Tolerance([E, 6, E], maxAbsFinite(want.output)), 'f16 all four');
    } finally {
      engine.dispose();
    }
  });
});
