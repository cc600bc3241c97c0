// Rotary embeddings and QK-norm (layer config `rotary`, `qkNorm`): WebGPU against the float64
// reference (halves and interleaved, partial dims, given tables, positionIds, GQA, varlen positions
// within each sequence, KV-cache decoding at cache.length + i, QK-norm alone, with rotary and with
// cross-attention), the reference against a hand-computed rotation, and the typed errors.

import { describe, expect, test } from 'vitest';
import { InvalidArgumentError, type MultiHeadAttentionConfig, referenceMultiHeadAttention, ShapeMismatchError, UnsupportedError } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { rotaryAngle, rotaryAngles } from '../src/plan/index.ts';
import type { RotaryPlan } from '../src/plan/types.ts';
import { withErrorScopes } from './helpers/gpu.ts';

const engines = useEngines('webgpu', 'cpu', 'wasm');
const base = { embedDim: 48, numHeads: 4, numKvHeads: 2 };
const Dh = 12;
const sd = randomStateDict(base, 41);
const r = mulberry32(42);
const qkNorm = { query: uniform(Dh, 1, r).map((v) => 1 + 0.5 * v), key: uniform(Dh, 1, r).map((v) => 1 + 0.5 * v), eps: 1e-5 };
const tables = (positions: number, dim: number) => {
  const cos = new Float32Array(positions * (dim / 2));
  const sin = new Float32Array(positions * (dim / 2));
  for (let p = 0; p < positions; p++) {
    for (let i = 0; i < dim / 2; i++) {
      const angle = (p * 0.5) / 500 ** ((2 * i) / dim); // a "scaled" schedule the base alone would not give
      cos[p * (dim / 2) + i] = Math.cos(angle);
      sin[p * (dim / 2) + i] = Math.sin(angle);
    }
  }
  return { cos, sin };
};

const configs: [string, Partial<MultiHeadAttentionConfig>][] = [
  ['rotary halves', { rotary: {} }],
  ['rotary interleaved, dim 8, base 500', { rotary: { dim: 8, interleaved: true, base: 500 } }],
  ['rotary from tables', { rotary: { dim: 12, ...tables(64, 12) } }],
  ['rotary from invFreq (a zero pair) with an attention factor', { rotary: { dim: 10, invFreq: Float64Array.from([1, 0.3, 0, 0.01, 0.002]), attentionFactor: 1.2 } }],
  ['qkNorm', { qkNorm }],
  ['qkNorm and rotary', { qkNorm, rotary: { dim: 6 } }],
];

async function both(config: MultiHeadAttentionConfig, run: (mha: ReturnType<typeof engines.gpu.createMultiHeadAttention>) => Promise<Float32Array>) {
  const outputs: Float32Array[] = [];
  for (const engine of [engines.gpu, engines.cpu]) {
    const mha = engine.createMultiHeadAttention(config, sd);
    outputs.push(await withErrorScopes(engines.gpu.device!, () => run(mha)));
    mha.dispose();
  }
  return outputs;
}

describe.each(configs)('%s', (_name, extra) => {
  const config = { ...base, ...extra } as MultiHeadAttentionConfig;

  test.each([
    [1, 1],
    [2, 9],
    [1, 37],
  ])('B=%i S=%i, causal; and with positionIds', async (B, S) => {
    const x = uniform(B * S * base.embedDim, 1, mulberry32(S));
    const options = { batchSize: B, seqLen: S, isCausal: true };
    const [g, c] = await both(config, async (mha) => (await mha.forward(x, options)).output);
    expectClose(g, c, f32Tolerance([base.embedDim, S, base.embedDim]), 'output');
    if (config.rotary) {
      // Left padding: each sequence's positions start where its tokens do.
      const positionIds = Int32Array.from({ length: B * S }, (_, m) => Math.max(0, (m % S) - (m < S ? 0 : 2)));
      const [gp, cp] = await both(config, async (mha) => (await mha.forward(x, { ...options, positionIds })).output);
      expectClose(gp, cp, f32Tolerance([base.embedDim, S, base.embedDim]), 'output with positionIds');
    }
  });

  test('varlen: positions within each sequence', async () => {
    const cuSeqlens = Int32Array.from([0, 4, 15, 16]);
    const x = uniform(16 * base.embedDim, 1, mulberry32(7));
    const [g, c] = await both(config, async (mha) => (await mha.forward(x, { cuSeqlens, isCausal: true })).output);
    expectClose(g, c, f32Tolerance([base.embedDim, 11, base.embedDim]), 'output');
    // The same as each sequence alone.
    const alone = referenceMultiHeadAttention(config, sd, x.subarray(4 * base.embedDim, 15 * base.embedDim), { batchSize: 1, seqLen: 11, isCausal: true }).output;
    expectClose(c.subarray(4 * base.embedDim, 15 * base.embedDim), alone, f32Tolerance([base.embedDim, 11, base.embedDim]), 'sequence 1 alone');
  });

  test('KV-cache decoding equals one causal forward (keys rotated before they are cached)', async () => {
    const S = 14;
    const x = uniform(S * base.embedDim, 1, mulberry32(8));
    const whole = referenceMultiHeadAttention(config, sd, x, { batchSize: 1, seqLen: S, isCausal: true }).output;
    for (const engine of [engines.gpu, engines.cpu]) {
      const mha = engine.createMultiHeadAttention(config, sd);
      const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: S });
      const out = new Float32Array(S * base.embedDim);
      out.set((await mha.forward(x.subarray(0, 10 * base.embedDim), { batchSize: 1, seqLen: 10, kvCache: cache, isCausal: true })).output);
      for (let t = 10; t < S; t++) {
        out.set(
          (await mha.forward(x.subarray(t * base.embedDim, (t + 1) * base.embedDim), { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true })).output,
          t * base.embedDim,
        );
      }
      expectClose(out, whole, f32Tolerance([base.embedDim, S, base.embedDim]), `${engine.backend} decode`);
      mha.dispose();
    }
  });
});

test('qkNorm with cross-attention (keys from their own input)', async () => {
  const config = { ...base, qkNorm };
  const [B, Sq, Skv] = [2, 5, 9];
  const x = uniform(B * Sq * base.embedDim, 1, mulberry32(9));
  const kv = uniform(B * Skv * base.embedDim, 1, mulberry32(10));
  const options = { batchSize: B, seqLen: Sq, key: kv, value: kv, kvSeqLen: Skv };
  const [g, c] = await both(config, async (mha) => (await mha.forward(x, options)).output);
  expectClose(g, c, f32Tolerance([base.embedDim, Skv, base.embedDim]), 'output');
});

test('the reference rotates by hand: position p turns pair i by p·base^(−2i/dim)', () => {
  // One head of 4 features, identity projections: q = k = x; dim 4, halves: pairs (0, 2) and (1, 3).
  const E = 4;
  const eye = new Float32Array(3 * E * E);
  for (let n = 0; n < 3 * E; n++) eye[n * E + (n % E)] = 1;
  const identity = { in_proj_weight: eye, 'out_proj.weight': eye.subarray(0, E * E) };
  const config = { embedDim: E, numHeads: 1, bias: false, rotary: { base: 100 } };
  const x = Float32Array.from([0, 0, 0, 0, 1, 2, 3, 4]); // token 1 (position 1)
  const { q } = referenceMultiHeadAttention(config, identity, x, { batchSize: 1, seqLen: 2 });
  const [t0, t1] = [1, 100 ** -0.5]; // θ_0 = 1, θ_1 = base^(−2/4)
  expect(q[4]).toBeCloseTo(1 * Math.cos(t0) - 3 * Math.sin(t0), 12);
  expect(q[6]).toBeCloseTo(3 * Math.cos(t0) + 1 * Math.sin(t0), 12);
  expect(q[5]).toBeCloseTo(2 * Math.cos(t1) - 4 * Math.sin(t1), 12);
  expect(q[7]).toBeCloseTo(4 * Math.cos(t1) + 2 * Math.sin(t1), 12);
});

test('invFreq: base^(−2i/dim) given as frequencies is the base; a zero leaves its pair alone; the factor scales cos and sin', async () => {
  const dim = 8;
  const invFreq = Float64Array.from({ length: dim / 2 }, (_, i) => 300 ** ((-2 * i) / dim));
  const x = uniform(6 * base.embedDim, 1, mulberry32(11));
  const call = { batchSize: 1, seqLen: 6, isCausal: true };
  const fromBase = referenceMultiHeadAttention({ ...base, rotary: { dim, base: 300 } }, sd, x, call);
  const fromFreq = referenceMultiHeadAttention({ ...base, rotary: { dim, invFreq } }, sd, x, call);
  expect(Array.from(fromFreq.output)).toEqual(Array.from(fromBase.output));
  // One head of 4 features, identity projections, pair 1 frequency 0, factor 2: token 1 turns pair 0 by 1 rad.
  const E = 4;
  const eye = new Float32Array(3 * E * E);
  for (let n = 0; n < 3 * E; n++) eye[n * E + (n % E)] = 1;
  const identity = { in_proj_weight: eye, 'out_proj.weight': eye.subarray(0, E * E) };
  const config = { embedDim: E, numHeads: 1, bias: false, rotary: { invFreq: Float32Array.from([1, 0]), attentionFactor: 2 } };
  const { q } = referenceMultiHeadAttention(config, identity, Float32Array.from([0, 0, 0, 0, 1, 2, 3, 4]), { batchSize: 1, seqLen: 2 });
  expect(q[4]).toBeCloseTo(2 * (1 * Math.cos(1) - 3 * Math.sin(1)), 12);
  expect(q[6]).toBeCloseTo(2 * (3 * Math.cos(1) + 1 * Math.sin(1)), 12);
  expect(q[5]).toBeCloseTo(2 * 2, 12); // cos 0 = 1, sin 0 = 0, times the factor
  expect(q[7]).toBeCloseTo(2 * 4, 12);
});

test('invFreq with an attention factor on wasm and WebGPU, prefill then KV-cache decode, against the reference', async () => {
  const config = { ...base, rotary: { dim: 12, invFreq: Float64Array.from([1, 0.5, 0.1, 0, 0.02, 1e-4]), attentionFactor: 0.9 } } as MultiHeadAttentionConfig;
  const S = 9;
  const x = uniform(S * base.embedDim, 1, mulberry32(12));
  const whole = referenceMultiHeadAttention(config, sd, x, { batchSize: 1, seqLen: S, isCausal: true }).output;
  for (const engine of [engines.wasm, engines.gpu]) {
    const mha = engine.createMultiHeadAttention(config, sd);
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: S });
    const out = new Float32Array(S * base.embedDim);
    out.set((await mha.forward(x.subarray(0, 7 * base.embedDim), { batchSize: 1, seqLen: 7, kvCache: cache, isCausal: true })).output);
    for (let t = 7; t < S; t++) {
      const step = await mha.forward(x.subarray(t * base.embedDim, (t + 1) * base.embedDim), { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
      out.set(step.output, t * base.embedDim);
    }
    expectClose(out, whole, f32Tolerance([base.embedDim, S, base.embedDim]), `${engine.backend} decode`);
    mha.dispose();
  }
});

describe('bad rotary and qkNorm arguments', () => {
  test.each([
    [{ rotary: { dim: 7 } }, InvalidArgumentError, 'config.rotary.dim'],
    [{ rotary: { dim: 14 } }, InvalidArgumentError, 'config.rotary.dim'],
    [{ rotary: { base: 0 } }, InvalidArgumentError, 'config.rotary.base'],
    [{ rotary: { cos: new Float32Array(12) } }, InvalidArgumentError, 'config.rotary.sin'],
    [{ rotary: { cos: new Float32Array(7), sin: new Float32Array(7) } }, ShapeMismatchError, 'config.rotary.cos'],
    [{ rotary: { speed: 1 } }, InvalidArgumentError, 'config.rotary'],
    [{ rotary: { invFreq: new Float32Array(5) } }, ShapeMismatchError, 'config.rotary.invFreq'],
    [{ rotary: { invFreq: Float32Array.from([1, 0.5, -1, 0, 0, 0]) } }, InvalidArgumentError, 'config.rotary.invFreq[2]'],
    [{ rotary: { invFreq: [1, 0.5, 0, 0, 0, 0] } }, InvalidArgumentError, 'config.rotary.invFreq'],
    [{ rotary: { invFreq: new Float32Array(6), base: 100 } }, InvalidArgumentError, 'config.rotary.invFreq'],
    [{ rotary: { invFreq: new Float32Array(6), ...tables(2, 12) } }, InvalidArgumentError, 'config.rotary.invFreq'],
    [{ rotary: { attentionFactor: 0 } }, InvalidArgumentError, 'config.rotary.attentionFactor'],
    [{ rotary: { attentionFactor: 2, ...tables(2, 12) } }, InvalidArgumentError, 'config.rotary.attentionFactor'],
    [{ qkNorm: { query: new Float32Array(Dh) } }, InvalidArgumentError, 'config.qkNorm.key'],
    [{ qkNorm: { query: new Float32Array(3), key: new Float32Array(Dh) } }, ShapeMismatchError, 'config.qkNorm.query'],
    [{ qkNorm: { ...qkNorm, eps: -1 } }, InvalidArgumentError, 'config.qkNorm.eps'],
  ])('%o', (extra, kind, argument) => {
    for (const engine of [engines.gpu, engines.cpu]) {
      expect(() => engine.createMultiHeadAttention({ ...base, ...extra } as never, sd)).toThrow(kind);
      expect(() => engine.createMultiHeadAttention({ ...base, ...extra } as never, sd)).toThrow(argument);
    }
  });

  test('positionIds: wrong length, negative, past the tables, or without rotary; rotary with cross-attention', async () => {
    const x = new Float32Array(2 * 3 * base.embedDim);
    const call = { batchSize: 2, seqLen: 3 };
    const rotary = engines.cpu.createMultiHeadAttention({ ...base, rotary: { dim: 12, ...tables(4, 12) } }, sd);
    const plain = engines.cpu.createMultiHeadAttention(base, sd);
    const cases: [Promise<unknown>, typeof InvalidArgumentError, string][] = [
      [rotary.forward(x, { ...call, positionIds: new Int32Array(5) }), ShapeMismatchError, 'options.positionIds'],
      [rotary.forward(x, { ...call, positionIds: Int32Array.from([0, 1, 2, 0, -1, 2]) }), InvalidArgumentError, 'options.positionIds[4]'],
      [rotary.forward(x, { ...call, positionIds: Int32Array.from([0, 1, 2, 0, 1, 4]) }), InvalidArgumentError, 'options.positionIds'],
      [plain.forward(x, { ...call, positionIds: new Int32Array(6) }), InvalidArgumentError, 'options.positionIds'],
      [rotary.forward(x, { ...call, key: x, value: x }), UnsupportedError, 'options.key'],
    ];
    for (const [promise, kind, argument] of cases) {
      const error = await promise.then(
        () => null,
        (e: unknown) => e,
      );
      expect(error, argument).toBeInstanceOf(kind);
      expect((error as Error).message).toContain(argument);
    }
    rotary.dispose();
    plain.dispose();
  });
});

describe('scaledDotProductAttention with rotary: the queries and the last Sq keys turn', () => {
  test.each([
    [3, 3, {}],
    [2, 9, { interleaved: true, dim: 4 }],
  ] as const)('Sq=%i Skv=%i %o; GPU equals CPU; positionIds; earlier keys untouched', async (Sq, Skv, rotaryExtra) => {
    const [B, H, G, D] = [2, 4, 2, 8];
    const rr = mulberry32(Sq * 7 + Skv);
    const q = uniform(B * H * Sq * D, 1, rr);
    const k = uniform(B * G * Skv * D, 1, rr);
    const v = uniform(B * G * Skv * D, 1, rr);
    const opts = { batchSize: B, numHeads: H, numKvHeads: G, seqLen: Sq, kvSeqLen: Skv, headDim: D, isCausal: true, needWeights: true, rotary: { ...rotaryExtra } };
    const g = await withErrorScopes(engines.gpu.device!, () => engines.gpu.scaledDotProductAttention(q, k, v, opts));
    const c = await engines.cpu.scaledDotProductAttention(q, k, v, opts);
    expectClose(g.output, c.output, f32Tolerance([D, Skv]), 'output');
    const positionIds = Int32Array.from({ length: B * Sq }, (_, m) => 5 + (m % Sq));
    const gp = await withErrorScopes(engines.gpu.device!, () => engines.gpu.scaledDotProductAttention(q, k, v, { ...opts, positionIds }));
    const cp = await engines.cpu.scaledDotProductAttention(q, k, v, { ...opts, positionIds });
    expectClose(gp.output, cp.output, f32Tolerance([D, Skv]), 'output with positionIds');
  });

  test("a layer's rotary equals scaledDotProductAttention's rotary on the layer's unrotated Q, K, V", async () => {
    const S = 7;
    const x = uniform(S * base.embedDim, 1, mulberry32(12));
    const plain = referenceMultiHeadAttention(base, sd, x, { batchSize: 1, seqLen: S, isCausal: true });
    const turned = referenceMultiHeadAttention({ ...base, rotary: { dim: 8 } }, sd, x, { batchSize: 1, seqLen: S, isCausal: true });
    const opts = { batchSize: 1, numHeads: 4, numKvHeads: 2, seqLen: S, headDim: Dh, isCausal: true, rotary: { dim: 8 } };
    const [q, k, v] = [plain.q, plain.k, plain.v].map((a) => Float32Array.from(a));
    const g = await withErrorScopes(engines.gpu.device!, () => engines.gpu.scaledDotProductAttention(q, k, v, opts));
    expectClose(g.output, turned.attention, f32Tolerance([base.embedDim, S]), 'attention');
  });

  test('kvSeqLen < seqLen with rotary, and positionIds without rotary, are refused', async () => {
    const q = new Float32Array(1 * 1 * 4 * 4);
    const k = new Float32Array(1 * 1 * 2 * 4);
    const base = { batchSize: 1, numHeads: 1, seqLen: 4, headDim: 4 };
    await expect(engines.cpu.scaledDotProductAttention(q, k, k, { ...base, kvSeqLen: 2, rotary: {} })).rejects.toThrow(/options\.kvSeqLen/);
    await expect(engines.cpu.scaledDotProductAttention(q, q, q, { ...base, positionIds: new Int32Array(4) })).rejects.toThrow(/options\.positionIds/);
    await expect(engines.cpu.scaledDotProductAttention(q, q, q, { ...base, rotary: { dim: 3 } })).rejects.toThrow(/options\.rotary\.dim/);
  });
});

describe('rotaryAngles: the angles of one token for all its heads (the CPU paths turn each head with them)', () => {
  test("rotaryAngle's numbers exactly, for computed angles (base, invFreq, YaRN's factor) and given tables", () => {
    const dim = 10;
    const given = tables(40, dim);
    const plans: RotaryPlan[] = [
      { dim, base: 10000, interleaved: false, invFreq: null, attentionFactor: 1, cos: null, sin: null },
      { dim, base: 500000, interleaved: true, invFreq: null, attentionFactor: 1.25, cos: null, sin: null },
      { dim, base: 10000, interleaved: false, invFreq: Float64Array.from({ length: dim / 2 }, (_, i) => 0.3 / (i + 1)), attentionFactor: 1, cos: null, sin: null },
      { dim, base: 10000, interleaved: false, invFreq: null, attentionFactor: 1, ...given },
    ];
    for (const [n, plan] of plans.entries()) {
      for (const position of [0, 1, 7, 39]) {
        const want = Array.from({ length: dim / 2 }, (_, i) => rotaryAngle(plan, position, i)).flat();
        expect(Array.from(rotaryAngles(plan, position)), `plan ${n} position ${position}`).toEqual(want);
      }
    }
  });
});
