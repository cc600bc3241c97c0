// QK-norm over the whole projection (config.qkNorm.over 'all', OLMo 2's Olmo2Attention) and the
// weightless RMS norm of the value heads (config.vNorm, Gemma 4's v_norm): WebGPU (f32 and f16) and
// wasm against the float64 reference on prefill with rotary and KV-cache decode steps, GQA, head
// sizes that are padded on the GPU (5, 6) and not (8), cross-attention; the reference against a hand
// computation; and the typed errors.

import { describe, expect, test } from 'vitest';
import { InvalidArgumentError, type MultiHeadAttentionConfig, referenceMultiHeadAttention, ShapeMismatchError } from '../src/index.ts';
import { expectClose, f16Tolerance, f32Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

const engines = useEngines('webgpu', 'cpu', 'wasm');

const weights = (n: number, seed: number) => uniform(n, 1, mulberry32(seed)).map((v) => 1 + 0.5 * v);
const allNorm = (H: number, G: number, Dh: number, seed: number) => ({ query: weights(H * Dh, seed), key: weights(G * Dh, seed + 1), eps: 1e-6, over: 'all' as const });

interface Case {
  name: string;
  E: number;
  H: number;
  G: number;
  Dh: number;
  extra: (c: Case) => Partial<MultiHeadAttentionConfig>;
}

const CASES: Case[] = [
  { name: "over 'all', Dh 8, GQA 4/2, rotary", E: 32, H: 4, G: 2, Dh: 8, extra: (c) => ({ qkNorm: allNorm(c.H, c.G, c.Dh, 1), rotary: {} }) },
  { name: "over 'all', Dh 5 (padded), H·Dh ≠ E, no rotary", E: 12, H: 3, G: 1, Dh: 5, extra: (c) => ({ qkNorm: allNorm(c.H, c.G, c.Dh, 2) }) },
  {
    name: "over 'all', Dh 6 (padded), GQA 4/2, rotary dim 4, and vNorm",
    E: 24,
    H: 4,
    G: 2,
    Dh: 6,
    extra: (c) => ({ qkNorm: allNorm(c.H, c.G, c.Dh, 3), rotary: { dim: 4 }, vNorm: {} }),
  },
  { name: 'vNorm alone, Dh 8', E: 32, H: 4, G: 2, Dh: 8, extra: () => ({ vNorm: { eps: 1e-5 } }) },
  { name: 'vNorm alone, Dh 5 (padded)', E: 10, H: 2, G: 1, Dh: 5, extra: () => ({ vNorm: {} }) },
  {
    name: 'per-head qkNorm with rotary and vNorm, Dh 6',
    E: 24,
    H: 4,
    G: 4,
    Dh: 6,
    extra: (c) => ({ qkNorm: { query: weights(c.Dh, 7), key: weights(c.Dh, 8), over: 'head' }, rotary: {}, vNorm: {} }),
  },
];

const configOf = (c: Case): MultiHeadAttentionConfig => ({ embedDim: c.E, numHeads: c.H, numKvHeads: c.G, headDim: c.Dh, ...c.extra(c) });
const tolerance = (c: Case, S: number) => f32Tolerance([c.E, S, c.H * c.Dh]);

describe.each(CASES)('$name', (c) => {
  const config = configOf(c);
  const sd = randomStateDict({ embedDim: c.E, numHeads: c.H, numKvHeads: c.G, headDim: c.Dh }, 11 + c.E + c.Dh);

  test.each(['webgpu', 'wasm'] as const)('%s: prefill (B 2, S 9, causal) equals the float64 reference', async (backend) => {
    const x = uniform(2 * 9 * c.E, 1, mulberry32(21));
    const options = { batchSize: 2, seqLen: 9, isCausal: true };
    const want = referenceMultiHeadAttention(config, sd, x, options).output;
    const mha = engines.of(backend).createMultiHeadAttention(config, sd);
    const got = await withErrorScopes(engines.gpu.device!, () => mha.forward(x, options));
    expectClose(got.output, want, tolerance(c, 9), backend);
    mha.dispose();
  });

  test.each(['webgpu', 'wasm', 'cpu'] as const)('%s: prefill 5 then 3 decode steps with a KV cache equal one causal call', async (backend) => {
    const S = 8;
    const x = uniform(S * c.E, 1, mulberry32(31));
    const want = referenceMultiHeadAttention(config, sd, x, { batchSize: 1, seqLen: S, isCausal: true }).output;
    const mha = engines.of(backend).createMultiHeadAttention(config, sd);
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: S });
    const out = new Float32Array(S * c.E);
    out.set((await mha.forward(x.subarray(0, 5 * c.E), { batchSize: 1, seqLen: 5, kvCache: cache, isCausal: true })).output);
    for (let t = 5; t < S; t++) {
      const step = await withErrorScopes(engines.gpu.device!, () =>
        mha.forward(x.subarray(t * c.E, (t + 1) * c.E), { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true }),
      );
      out.set(step.output, t * c.E);
    }
    expectClose(out, want, tolerance(c, S), `${backend} decode`);
    cache.dispose();
    mha.dispose();
  });

  test.each(['webgpu', 'wasm'] as const)('%s: a packed batch (cuSeqlens) equals each sequence alone', async (backend) => {
    const cuSeqlens = Int32Array.from([0, 3, 10]);
    const x = uniform(10 * c.E, 1, mulberry32(61));
    const mha = engines.of(backend).createMultiHeadAttention(config, sd);
    const got = (await withErrorScopes(engines.gpu.device!, () => mha.forward(x, { cuSeqlens, isCausal: true }))).output;
    for (const [from, to] of [
      [0, 3],
      [3, 10],
    ]) {
      const alone = referenceMultiHeadAttention(config, sd, x.subarray(from * c.E, to * c.E), { batchSize: 1, seqLen: to - from, isCausal: true }).output;
      expectClose(got.subarray(from * c.E, to * c.E), alone, tolerance(c, to - from), `${backend} sequence ${from}…${to}`);
    }
    mha.dispose();
  });

  test('webgpu: cross-attention (key/value of their own length) equals the reference', async () => {
    const crossConfig = { ...config, rotary: undefined };
    const x = uniform(3 * c.E, 1, mulberry32(41));
    const kv = uniform(7 * c.E, 1, mulberry32(42));
    const options = { batchSize: 1, seqLen: 3, key: kv, value: kv, kvSeqLen: 7 };
    const want = referenceMultiHeadAttention(crossConfig, sd, x, options).output;
    for (const backend of ['webgpu', 'wasm'] as const) {
      const mha = engines.of(backend).createMultiHeadAttention(crossConfig, sd);
      const got = await withErrorScopes(engines.gpu.device!, () => mha.forward(x, options));
      expectClose(got.output, want, tolerance(c, 7), `${backend} cross`);
      mha.dispose();
    }
  });
});

test("webgpu precision 'f16': over 'all' with rotary and vNorm, padded and aligned", async () => {
  const engine = await createGpuEngine({ precision: 'f16' });
  for (const c of [CASES[0], CASES[2]]) {
    const config = configOf(c);
    const sd = randomStateDict({ embedDim: c.E, numHeads: c.H, numKvHeads: c.G, headDim: c.Dh }, 51 + c.Dh);
    const x = uniform(2 * 6 * c.E, 1, mulberry32(52));
    const options = { batchSize: 2, seqLen: 6, isCausal: true };
    const want = referenceMultiHeadAttention(config, sd, x, options).output;
    const mha = engine.createMultiHeadAttention(config, sd);
    const got = await withErrorScopes(engine.device!, () => mha.forward(x, options));
    expectClose(got.output, want, f16Tolerance([c.E, 6, c.H * c.Dh], maxAbsFinite(want)), `f16 ${c.name}`);
    // KV-cache decode in f16: prefill 4, then 2 steps, each the rows of one causal call.
    const one = x.subarray(0, 6 * c.E);
    const whole = referenceMultiHeadAttention(config, sd, one, { batchSize: 1, seqLen: 6, isCausal: true }).output;
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: 6 });
    const out = new Float32Array(6 * c.E);
    out.set((await mha.forward(one.subarray(0, 4 * c.E), { batchSize: 1, seqLen: 4, kvCache: cache, isCausal: true })).output);
    for (let t = 4; t < 6; t++) {
      const step = await withErrorScopes(engine.device!, () =>
        mha.forward(one.subarray(t * c.E, (t + 1) * c.E), { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true }),
      );
      out.set(step.output, t * c.E);
    }
    expectClose(out, whole, f16Tolerance([c.E, 6, c.H * c.Dh], maxAbsFinite(whole)), `f16 decode ${c.name}`);
    cache.dispose();
    mha.dispose();
  }
  engine.dispose();
});

describe('the reference against a hand computation', () => {
  // One token, E 2, H 2, G 1, Dh 2, no bias.
  const E = 2;
  const H = 2;
  const G = 1;
  const Dh = 2;
  // W_q rows [1,0],[0,2],[3,0],[0,4] → q = [x0, 2·x1, 3·x0, 4·x1]; W_k = W_v rows [1,0],[0,2] → [x0, 2·x1];
  // W_O [E, H·Dh] picks head 0: with one key the output is V.
  const sd = {
    q_proj_weight: Float32Array.from([1, 0, 0, 2, 3, 0, 0, 4]),
    k_proj_weight: Float32Array.from([1, 0, 0, 2]),
    v_proj_weight: Float32Array.from([1, 0, 0, 2]),
    'out_proj.weight': Float32Array.from([1, 0, 0, 0, 0, 1, 0, 0]),
  };
  const x = Float32Array.from([0.5, -1.5]);
  const rms = (v: number[], eps: number) => v.map((a) => a / Math.sqrt(v.reduce((s, b) => s + b * b, 0) / v.length + eps));

  test("qkNorm over 'all': one mean over the token's H·Dh query features, weights per feature", () => {
    const qw = Float32Array.from([1, 2, 0.5, -1]);
    const kw = Float32Array.from([2, 3]);
    const config: MultiHeadAttentionConfig = {
      embedDim: E,
      numHeads: H,
      numKvHeads: G,
      headDim: Dh,
      bias: false,
      qkNorm: { query: qw, key: kw, eps: 1e-6, over: 'all' },
    };
    const r = referenceMultiHeadAttention(config, sd, x, { batchSize: 1, seqLen: 1 });
    const q = rms([0.5, -3, 1.5, -6], 1e-6).map((v, i) => v * qw[i]);
    const k = rms([0.5, -3], 1e-6).map((v, i) => v * kw[i]);
    expect(Array.from(r.q)).toEqual(q.map((v) => expect.closeTo(v, 12)));
    expect(Array.from(r.k)).toEqual(k.map((v) => expect.closeTo(v, 12)));
    // Not the per-head norm: head 0 alone would have its own scale.
    const perHead = rms([0.5, -3], 1e-6)[0] * qw[0];
    expect(Math.abs(r.q[0] - perHead)).toBeGreaterThan(0.05);
  });

  test('vNorm: each value head divided by its RMS, no weights; Q and K untouched', () => {
    const config: MultiHeadAttentionConfig = { embedDim: E, numHeads: H, numKvHeads: G, headDim: Dh, bias: false, vNorm: { eps: 1e-6 } };
    const r = referenceMultiHeadAttention(config, sd, x, { batchSize: 1, seqLen: 1 });
    expect(Array.from(r.v)).toEqual(rms([0.5, -3], 1e-6).map((v) => expect.closeTo(v, 12)));
    expect(Array.from(r.k)).toEqual([0.5, -3]);
    // One key: head 0's output is V itself.
    expect(Array.from(r.output)).toEqual([...rms([0.5, -3], 1e-6)].map((v) => expect.closeTo(v, 6)));
  });
});

describe('bad input', () => {
  const base = { embedDim: 12, numHeads: 3, numKvHeads: 1, headDim: 4 };
  const sd = randomStateDict(base, 61);
  const make = (extra: object) => () => engines.cpu.createMultiHeadAttention({ ...base, ...extra } as MultiHeadAttentionConfig, sd);

  test("over 'all' with weights [headDim] names [H·headDim] and [G·headDim]", () => {
    expect(make({ qkNorm: { query: new Float32Array(4), key: new Float32Array(4), over: 'all' } })).toThrow(ShapeMismatchError);
    expect(make({ qkNorm: { query: new Float32Array(4), key: new Float32Array(4), over: 'all' } })).toThrow(/qkNorm\.query.*\[H·headDim\] = 12/s);
    expect(make({ qkNorm: { query: new Float32Array(12), key: new Float32Array(12), over: 'all' } })).toThrow(/qkNorm\.key.*\[G·headDim\] = 4/s);
  });

  test("over 'head' (the default) with weights [H·Dh] is refused", () => {
    expect(make({ qkNorm: { query: new Float32Array(12), key: new Float32Array(4) } })).toThrow(ShapeMismatchError);
  });

  test("over neither 'head' nor 'all'", () => {
    expect(make({ qkNorm: { query: new Float32Array(4), key: new Float32Array(4), over: 'layer' } })).toThrow(InvalidArgumentError);
    expect(make({ qkNorm: { query: new Float32Array(4), key: new Float32Array(4), over: 'layer' } })).toThrow(/config\.qkNorm\.over/);
  });

  test('vNorm: eps not a positive number, unknown keys, neither a boolean nor an object', () => {
    expect(make({ vNorm: { eps: 0 } })).toThrow(/config\.vNorm\.eps/);
    expect(make({ vNorm: { eps: 0 } })).toThrow(InvalidArgumentError);
    expect(make({ vNorm: { weight: new Float32Array(4) } })).toThrow(/weight/);
    expect(make({ vNorm: 'yes' })).toThrow(InvalidArgumentError);
  });
});
