// Score options, WebGPU against the float64 CPU reference and the reference against hand-computed
// values: scale (in place of 1/√Dh), softcap (s ← c·tanh(s/c)), ALiBi slopes (−slope·|i' − j|) and
// attention sinks (one more logit per head in each row's softmax, value 0), alone and with causal,
// windows, padding, grouped-query heads, varlen batches, KV-cache decoding (split-KV included),
// needWeights and the attention-only entry point. The score rule is one WGSL file and one float64
// module; these tests hold the two to each other.

import { describe, expect, test } from 'vitest';
import { type ForwardOptions, InvalidArgumentError, referenceMultiHeadAttention, ShapeMismatchError } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance, maxAbsFinite, probabilityTolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { withErrorScopes } from './helpers/gpu.ts';

const engines = useEngines();

const L = { embedDim: 32, numHeads: 4, numKvHeads: 2 };
const sd = randomStateDict(L, 21);
const H = L.numHeads;
const slopes = Float32Array.from({ length: H }, (_, h) => 2 ** ((-8 * (h + 1)) / H)); // the ALiBi paper's geometric slopes
const sinks = Float32Array.from([0.5, -1, 2, 0]);

async function check(query: Float32Array, options: ForwardOptions, what: string, Skv: number) {
  const a = engines.gpu.createMultiHeadAttention(L, sd);
  const b = engines.cpu.createMultiHeadAttention(L, sd);
  try {
    const g = await withErrorScopes(engines.gpu.device!, () => a.forward(query, options));
    const c = await b.forward(query, options);
    for (const v of g.output) expect(Number.isNaN(v)).toBe(false);
    expectClose(g.output, c.output, f32Tolerance([L.embedDim, Skv, L.embedDim]), `${what}: output`);
    if ('needWeights' in options && options.needWeights) {
      const logits = referenceMultiHeadAttention(L, sd, query, options).scores!;
      expectClose(g.attentionWeights!, c.attentionWeights!, probabilityTolerance(L.embedDim, Skv, maxAbsFinite(logits)), `${what}: attentionWeights`);
    }
    return c;
  } finally {
    a.dispose();
    b.dispose();
  }
}

const variants: [string, Record<string, unknown>][] = [
  ['scale 0.7', { scale: 0.7 }],
  ['softcap 1.5', { softcap: 1.5 }],
  ['alibi', { alibiSlopes: slopes }],
  ['sinks', { sinks }],
  ['smooth softmax (zero sinks)', { sinks: new Float32Array(H) }],
  ['all four', { scale: 0.3, softcap: 2, alibiSlopes: slopes, sinks }],
];

describe('each score option alone and with the masks', () => {
  for (const [name, score] of variants) {
    test.each([
      [1, 1, {}],
      [2, 7, { isCausal: true }],
      [1, 33, { window: 5, needWeights: true }],
      [2, 70, { isCausal: true, needWeights: true }],
    ] as const)(`${name}: B=%i S=%i %o`, async (B, S, extra) => {
      const x = uniform(B * S * L.embedDim, 1, mulberry32(S));
      await check(x, { batchSize: B, seqLen: S, ...extra, ...score } as ForwardOptions, `${name} B=${B} S=${S}`, S);
    });
  }

  test('with key padding (a fully padded sequence with a sink still gives 0)', async () => {
    const [B, S] = [2, 9];
    const keyPaddingMask = new Uint8Array(B * S);
    keyPaddingMask.fill(1, 0, S); // sequence 0: every key padded
    keyPaddingMask[S + 3] = 1;
    const x = uniform(B * S * L.embedDim, 1, mulberry32(5));
    const out = await check(x, { batchSize: B, seqLen: S, keyPaddingMask, sinks, alibiSlopes: slopes, needWeights: true }, 'padding', S);
    expect(Array.from(out.attentionWeights!.subarray(0, H * S * S)).every((p) => p === 0)).toBe(true);
  });

  test('varlen batches: positions within each sequence', async () => {
    const cuSeqlens = Int32Array.from([0, 5, 21, 22]);
    const x = uniform(22 * L.embedDim, 1, mulberry32(6));
    await check(x, { cuSeqlens, isCausal: true, softcap: 3, alibiSlopes: slopes, sinks }, 'varlen', 16);
  });
});

describe('KV-cache decoding with score options equals one causal forward', () => {
  test.each([
    [40, 35, 'one split'],
    [700, 690, 'split-KV'],
  ] as const)(
    'S=%i prefill=%i (%s)',
    async (S, prefill, _what) => {
      const options = { softcap: 2.5, alibiSlopes: slopes, sinks, scale: 0.4 };
      const x = uniform(S * L.embedDim, 1, mulberry32(S));
      for (const engine of [engines.gpu, engines.cpu]) {
        const mha = engine.createMultiHeadAttention(L, sd);
        const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: S });
        const parts: Float32Array[] = [];
        parts.push((await mha.forward(x.subarray(0, prefill * L.embedDim), { batchSize: 1, seqLen: prefill, kvCache: cache, isCausal: true, ...options })).output);
        for (let t = prefill; t < S; t++) {
          parts.push(
            (await mha.forward(x.subarray(t * L.embedDim, (t + 1) * L.embedDim), { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true, ...options })).output,
          );
        }
        const decoded = new Float32Array(S * L.embedDim);
        let offset = 0;
        for (const p of parts) {
          decoded.set(p, offset);
          offset += p.length;
        }
        const whole = referenceMultiHeadAttention(L, sd, x, { batchSize: 1, seqLen: S, isCausal: true, ...options }).output;
        expectClose(decoded, whole, f32Tolerance([L.embedDim, S, L.embedDim]), `${engine.backend} decode`);
        cache.dispose();
        mha.dispose();
      }
    },
    120_000,
  );
});

describe('scaledDotProductAttention with score options', () => {
  test('GPU equals CPU, probabilities included', async () => {
    const [B, Hq, G, Sq, Skv, Dh] = [2, 4, 2, 5, 12, 8];
    const r = mulberry32(8);
    const q = uniform(B * Hq * Sq * Dh, 1, r);
    const k = uniform(B * G * Skv * Dh, 1, r);
    const v = uniform(B * G * Skv * Dh, 1, r);
    const opts = {
      batchSize: B,
      numHeads: Hq,
      numKvHeads: G,
      seqLen: Sq,
      kvSeqLen: Skv,
      headDim: Dh,
      isCausal: true,
      needWeights: true,
      scale: 0.5,
      softcap: 1.2,
      alibiSlopes: slopes,
      sinks,
    };
    const g = await withErrorScopes(engines.gpu.device!, () => engines.gpu.scaledDotProductAttention(q, k, v, opts));
    const c = await engines.cpu.scaledDotProductAttention(q, k, v, opts);
    expectClose(g.output, c.output, f32Tolerance([Dh, Skv]), 'output');
    expectClose(g.attentionWeights!, c.attentionWeights!, probabilityTolerance(Dh, Skv, 4), 'attentionWeights');
  });
});

describe('the reference, by hand', () => {
  // One head of size 4, no projections to think about: scaledDotProductAttention on the CPU.
  const q = Float32Array.from([1, 0, 0, 0]);
  const k = Float32Array.from([1, 0, 0, 0, 0, 1, 0, 0]); // keys k0 = e0, k1 = e1: q·k0 = 1, q·k1 = 0
  const v = Float32Array.from([1, 0, 0, 0, 0, 1, 0, 0]);
  const base = { batchSize: 1, numHeads: 1, seqLen: 1, kvSeqLen: 2, headDim: 4, needWeights: true };
  const probs = async (extra: object) => (await engines.cpu.scaledDotProductAttention(q, k, v, { ...base, ...extra })).attentionWeights!;
  const softmax2 = (a: number, b: number, sink = -Infinity) => {
    const m = Math.max(a, b, sink);
    const z = Math.exp(a - m) + Math.exp(b - m) + Math.exp(sink - m);
    return [Math.exp(a - m) / z, Math.exp(b - m) / z];
  };

  test('scale replaces 1/√Dh', async () => {
    expect(Array.from(await probs({ scale: 2 }))).toEqual(softmax2(2, 0).map(Math.fround));
  });

  test('softcap: c·tanh(s/c) of the scaled score', async () => {
    const s = 3 * Math.tanh(0.5 / 3); // q·k0 / √4 = 0.5
    const [p0, p1] = await probs({ softcap: 3 });
    expect(p0).toBeCloseTo(softmax2(s, 0)[0], 6);
    expect(p1).toBeCloseTo(softmax2(s, 0)[1], 6);
  });

  test('ALiBi: −slope·|i′ − j| with the query aligned to the last key', async () => {
    const [p0, p1] = await probs({ alibiSlopes: Float32Array.from([0.25]) }); // i′ = 1: key 0 is 1 away, key 1 is 0 away
    expect(p0).toBeCloseTo(softmax2(0.5 - 0.25, 0)[0], 6);
    expect(p1).toBeCloseTo(softmax2(0.5 - 0.25, 0)[1], 6);
  });

  test('a sink joins the denominator, not the probabilities', async () => {
    const [p0, p1] = await probs({ sinks: Float32Array.from([1]) });
    expect(p0).toBeCloseTo(softmax2(0.5, 0, 1)[0], 6);
    expect(p1).toBeCloseTo(softmax2(0.5, 0, 1)[1], 6);
    expect(p0 + p1).toBeLessThan(1);
  });
});

describe('bad score options', () => {
  const x = new Float32Array(2 * L.embedDim);
  const call = { batchSize: 1, seqLen: 2 };
  test.each([
    [{ scale: 0 }, InvalidArgumentError, 'options.scale'],
    [{ scale: Number.NaN }, InvalidArgumentError, 'options.scale'],
    [{ softcap: -1 }, InvalidArgumentError, 'options.softcap'],
    [{ softcap: Number.POSITIVE_INFINITY }, InvalidArgumentError, 'options.softcap'],
    [{ sinks: new Float32Array(3) }, ShapeMismatchError, 'options.sinks'],
    [{ sinks: [0, 0, 0, 0] }, InvalidArgumentError, 'options.sinks'],
    [{ alibiSlopes: new Float32Array(5) }, ShapeMismatchError, 'options.alibiSlopes'],
    [{ alibiSlopes: Float32Array.from([1, Number.NaN, 1, 1]) }, InvalidArgumentError, 'options.alibiSlopes[1]'],
  ])('%o', async (extra, kind, argument) => {
    for (const engine of [engines.gpu, engines.cpu]) {
      const mha = engine.createMultiHeadAttention(L, sd);
      const error = await mha.forward(x, { ...call, ...extra } as never).then(
        () => null,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(kind);
      expect((error as Error).message).toContain(argument);
      mha.dispose();
    }
  });
});
