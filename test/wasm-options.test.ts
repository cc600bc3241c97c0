// The 'wasm' backend's options against the float64 CPU backend: masks (key padding, additive and
// boolean attnMask, shared and per head, fully masked rows), windows, head masks, the score options
// (scale, softcap, ALiBi, sinks), needWeights, cross-attention (Skv ≠ Sq, kdim/vdim ≠ E), packed
// batches (cuSeqlens), KV-cache decoding, rotary and QK-norm, the attention-only entry point, and
// scoreMod and linear-attention layers (whose attention pass runs on the float64 reference).

import { describe, expect, test } from 'vitest';
import { type ForwardOptions, type MultiHeadAttentionConfig, referenceMultiHeadAttention } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance, maxAbsFinite, probabilityTolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';

const engines = useEngines('wasm', 'cpu');

function bits(n: number, seed: number, p: number): Uint8Array {
  const r = mulberry32(seed);
  return Uint8Array.from({ length: n }, () => (r() < p ? 1 : 0));
}

/** One call on both backends; output (and weights, when asked) compared by the shared rule. */
async function check(layer: MultiHeadAttentionConfig, query: Float32Array, options: ForwardOptions, what: string, sd = randomStateDict(layer, 7 + layer.embedDim)) {
  const a = engines.wasm.createMultiHeadAttention(layer, sd);
  const b = engines.cpu.createMultiHeadAttention(layer, sd);
  try {
    const w = await a.forward(query, options);
    const c = await b.forward(query, options);
    for (const v of w.output) expect(Number.isNaN(v)).toBe(false);
    const cu = options.cuSeqlens;
    const Skv = cu ? Math.max(...cu.subarray(1).map((end, i) => end - cu[i])) : (options.kvSeqLen ?? options.seqLen);
    expectClose(w.output, c.output, f32Tolerance([layer.kdim ?? layer.embedDim, Skv, layer.embedDim]), `${what}: output`);
    if (!cu && options.needWeights) {
      const logits = referenceMultiHeadAttention(layer, sd, query, options).scores!;
      expect(w.attentionWeights!.length).toBe(c.attentionWeights!.length);
      expectClose(w.attentionWeights!, c.attentionWeights!, probabilityTolerance(layer.embedDim, Skv, maxAbsFinite(logits)), `${what}: attentionWeights`);
    }
    return { wasm: w, cpu: c };
  } finally {
    a.dispose();
    b.dispose();
  }
}

const L = { embedDim: 32, numHeads: 4, numKvHeads: 2 };
const H = L.numHeads;
const slopes = Float32Array.from({ length: H }, (_, h) => 2 ** ((-8 * (h + 1)) / H));
const sinks = Float32Array.from([0.5, -1, 2, 0]);
// A scoreMod that needs the (b, h, i, j) it is given: a per-head scale and a relative-position bias.
const scoreMod = {
  wgsl: 'fn scoreMod(score: f32, b: u32, h: u32, i: u32, j: u32) -> f32 { return score * f32(1u + h) - 0.1 * abs(f32(i) - f32(j)); }',
  reference: (s: number, _b: number, h: number, i: number, j: number) => s * (1 + h) - 0.1 * Math.abs(i - j),
};

describe('masks, with needWeights', () => {
  test.each([
    [1, 1],
    [2, 7],
    [1, 33],
    [2, 70],
  ] as const)('B=%i S=%i', async (B, S) => {
    const x = uniform(B * S * L.embedDim, 1, mulberry32(S));
    const base = { batchSize: B, seqLen: S, needWeights: true };
    const additive = uniform(S * S, 2, mulberry32(S + 1));
    const boolPerHead = bits(B * H * S * S, S + 2, 0.3);
    await check(L, x, { ...base, keyPaddingMask: bits(B * S, S + 3, 0.3) }, 'key padding');
    await check(L, x, { ...base, attnMask: additive, isCausal: true }, 'additive attnMask, causal');
    await check(L, x, { ...base, attnMask: boolPerHead }, 'boolean attnMask per head');
    await check(L, x, { ...base, window: 3, isCausal: true }, 'window 3');
    await check(L, x, { ...base, headMask: uniform(B * H, 1, mulberry32(S + 4)) }, 'head mask');
  });

  test('a fully padded sequence, with sinks, gives probabilities and output 0', async () => {
    const [B, S] = [2, 9];
    const keyPaddingMask = new Uint8Array(B * S);
    keyPaddingMask.fill(1, 0, S);
    keyPaddingMask[S + 3] = 1;
    const x = uniform(B * S * L.embedDim, 1, mulberry32(5));
    const { wasm } = await check(L, x, { batchSize: B, seqLen: S, keyPaddingMask, sinks, alibiSlopes: slopes, needWeights: true }, 'padding');
    expect(Array.from(wasm.attentionWeights!.subarray(0, H * S * S)).every((p) => p === 0)).toBe(true);
  });
});

describe('score options', () => {
  const variants: [string, Partial<ForwardOptions>][] = [
    ['scale 0.7', { scale: 0.7 }],
    ['softcap 1.5', { softcap: 1.5 }],
    ['alibi', { alibiSlopes: slopes }],
    ['sinks', { sinks }],
    ['all four', { scale: 0.3, softcap: 2, alibiSlopes: slopes, sinks }],
  ];
  test.each(variants)('%s, alone and with causal, window, needWeights', async (name, score) => {
    for (const [B, S, extra] of [
      [1, 1, {}],
      [2, 7, { isCausal: true }],
      [1, 33, { window: 5, needWeights: true }],
      [2, 70, { isCausal: true, needWeights: true }],
    ] as const) {
      const x = uniform(B * S * L.embedDim, 1, mulberry32(S));
      await check(L, x, { batchSize: B, seqLen: S, ...extra, ...score } as ForwardOptions, `${name} B=${B} S=${S}`);
    }
  });
});

describe('cross-attention', () => {
  test.each([
    [1, 1, 9, false],
    [2, 7, 3, true],
    [2, 33, 65, false],
    [1, 5, 100, true],
  ] as const)('B=%i Sq=%i Skv=%i causal=%s: kdim 12, vdim 20; and kdim = vdim = E', async (B, Sq, Skv, isCausal) => {
    const r = mulberry32(Sq * Skv);
    const layer = { embedDim: 24, numHeads: 3, kdim: 12, vdim: 20 };
    const sd = {
      q_proj_weight: uniform(24 * 24, 0.3, r),
      k_proj_weight: uniform(24 * 12, 0.3, r),
      v_proj_weight: uniform(24 * 20, 0.3, r),
      in_proj_bias: uniform(72, 0.1, r),
      'out_proj.weight': uniform(24 * 24, 0.2, r),
      'out_proj.bias': uniform(24, 0.1, r),
    };
    const options = { batchSize: B, seqLen: Sq, kvSeqLen: Skv, isCausal, key: uniform(B * Skv * 12, 1, r), value: uniform(B * Skv * 20, 1, r), needWeights: true };
    await check(layer, uniform(B * Sq * 24, 1, r), options, `cross Sq=${Sq} Skv=${Skv}`, sd);
    const same = { ...options, key: uniform(B * Skv * 32, 1, r), value: uniform(B * Skv * 32, 1, r) };
    await check(L, uniform(B * Sq * 32, 1, r), same, `cross Sq=${Sq} Skv=${Skv}, GQA, in_proj_weight`);
  });
});

test('packed batches (cuSeqlens): each sequence attends within itself', async () => {
  const cuSeqlens = Int32Array.from([0, 5, 21, 22, 91]);
  const x = uniform(91 * L.embedDim, 1, mulberry32(6));
  await check(L, x, { cuSeqlens, isCausal: true, softcap: 3, alibiSlopes: slopes, sinks }, 'varlen');
  await check(L, x, { cuSeqlens, window: 4, isCausal: true, headMask: uniform(4 * H, 1, mulberry32(7)) }, 'varlen, window, head mask');
});

describe('KV cache: prefill, then one token at a time', () => {
  const layers: [string, MultiHeadAttentionConfig][] = [
    ['GQA', L],
    ['a scoreMod layer', { ...L, scoreMod }],
    ['a linear-attention layer', { ...L, attention: 'linear' }],
    [
      'rotary (6 of 7 features) and QK-norm, Dh 7',
      { embedDim: 14, numHeads: 2, rotary: { dim: 6 }, qkNorm: { query: uniform(7, 1, mulberry32(1)), key: uniform(7, 1, mulberry32(2)) } },
    ],
  ];
  test.each(layers)('%s', async (_name, layer) => {
    const [B, E] = [2, layer.embedDim];
    const sd = randomStateDict(layer, 3);
    const a = engines.wasm.createMultiHeadAttention(layer, sd);
    const b = engines.cpu.createMultiHeadAttention(layer, sd);
    const ca = a.createKvCache({ batchSize: B, maxSeqLen: 80 });
    const cb = b.createKvCache({ batchSize: B, maxSeqLen: 80 });
    const x = uniform(B * 70 * E, 1, mulberry32(4));
    const step = async (S: number, what: string, needWeights = false) => {
      const q = x.subarray(0, B * S * E);
      const w = await a.forward(q, { batchSize: B, seqLen: S, kvCache: ca, isCausal: true, needWeights });
      const c = await b.forward(q, { batchSize: B, seqLen: S, kvCache: cb, isCausal: true, needWeights });
      expectClose(w.output, c.output, f32Tolerance([E, ca.length, E]), `${what}: output`);
      if (needWeights) expectClose(w.attentionWeights!, c.attentionWeights!, probabilityTolerance(E, ca.length, 10), `${what}: weights`);
    };
    try {
      await step(65, 'prefill of 65');
      for (let t = 0; t < 6; t++) await step(1, `decode step ${t}`, t === 5 && layer.attention !== 'linear'); // linear attention has no weights
      await step(3, 'three more');
      expect(ca.length).toBe(74);
      const [kw, kc] = [await ca.read(), await cb.read()];
      expectClose(kw.key, kc.key, f32Tolerance([E]), 'cached keys');
      expectClose(kw.value, kc.value, f32Tolerance([E]), 'cached values');
      // A cache started from that past decodes as the cache it came from, bit for bit.
      const restored = a.createKvCache({ batchSize: B, maxSeqLen: 80, key: kw.key, value: kw.value });
      const q = x.subarray(0, B * E);
      const next = { batchSize: B, seqLen: 1, isCausal: true };
      expect((await a.forward(q, { ...next, kvCache: restored })).output).toEqual((await a.forward(q, { ...next, kvCache: ca })).output);
    } finally {
      a.dispose();
      b.dispose();
    }
  });
});

test.each([
  ['the rule alone (the group of 3 query heads a key/value head serves together)', {}],
  ['window, key padding, an attnMask row, softcap', { window: 5, softcap: 4, keyPaddingMask: 'every 4th', attnMask: true }],
  ['a head mask the same within each group', { headMask: [0.5, 0.5, 0.5, 2, 2, 2] }],
  ['a head mask that differs within a group (its heads one at a time)', { headMask: [1, 0.5, 1, 2, 2, 2] }],
  ['ALiBi and sinks (per-head rules: one head at a time)', { alibi: true, sinks: true }],
] as const)('decode steps of a GQA layer (6 query heads, 2 key/value heads): %s', async (_name, opts) => {
  const layer = { embedDim: 48, numHeads: 6, numKvHeads: 2 };
  const [B, E, past] = [2, 48, 70];
  const sd = randomStateDict(layer, 5);
  const a = engines.wasm.createMultiHeadAttention(layer, sd);
  const b = engines.cpu.createMultiHeadAttention(layer, sd);
  const r = mulberry32(past);
  const [key, value] = [uniform(B * 2 * past * 8, 1, r), uniform(B * 2 * past * 8, 1, r)];
  const ca = a.createKvCache({ batchSize: B, maxSeqLen: past + 4, key, value });
  const cb = b.createKvCache({ batchSize: B, maxSeqLen: past + 4, key, value });
  try {
    for (let t = 0; t < 3; t++) {
      const Skv = past + t + 1;
      const o = opts as Record<string, unknown>;
      const options = {
        batchSize: B,
        seqLen: 1,
        isCausal: true,
        ...(o.window ? { window: o.window as number } : {}),
        ...(o.softcap ? { softcap: o.softcap as number } : {}),
        ...(o.keyPaddingMask ? { keyPaddingMask: Uint8Array.from({ length: B * Skv }, (_, i) => (i % 4 === 1 ? 1 : 0)) } : {}),
        ...(o.attnMask ? { attnMask: Float32Array.from(uniform(Skv, 1, r), (x, j) => (j % 7 === 3 ? -Infinity : x)) } : {}),
        ...(o.headMask ? { headMask: Float32Array.from({ length: B * 6 }, (_, i) => (o.headMask as number[])[i % 6]) } : {}),
        ...(o.alibi ? { alibiSlopes: Float32Array.from({ length: 6 }, (_, h) => 2 ** -(h + 1)) } : {}),
        ...(o.sinks ? { sinks: Float32Array.from([0.5, -1, 2, 0, 1, -0.5]) } : {}),
      };
      const x = uniform(B * E, 1, r);
      const [w, c] = [await a.forward(x, { ...options, kvCache: ca }), await b.forward(x, { ...options, kvCache: cb })];
      expectClose(w.output, c.output, f32Tolerance([E, Skv, E]), `decode step ${t}: output`);
    }
  } finally {
    a.dispose();
    b.dispose();
  }
});

test('rotary (interleaved, positionIds) and QK-norm without a cache', async () => {
  const layer = {
    embedDim: 48,
    numHeads: 4,
    numKvHeads: 2,
    rotary: { interleaved: true, dim: 8 },
    qkNorm: { query: uniform(12, 1, mulberry32(8)), key: uniform(12, 1, mulberry32(9)) },
  };
  const x = uniform(2 * 9 * 48, 1, mulberry32(10));
  await check(layer, x, { batchSize: 2, seqLen: 9, isCausal: true, positionIds: Int32Array.from({ length: 18 }, (_, i) => 3 * i) }, 'rotary, QK-norm');
});

describe('scaledDotProductAttention', () => {
  test.each([
    [1, 4, 4, 1, 1, 8, false],
    [2, 4, 2, 7, 7, 64, true],
    [1, 6, 3, 5, 40, 33, true],
    [2, 2, 1, 70, 70, 128, false],
  ] as const)('B=%i H=%i G=%i Sq=%i Skv=%i Dh=%i causal=%s, needWeights', async (B, Hq, G, Sq, Skv, Dh, isCausal) => {
    const r = mulberry32(Sq + Skv + Dh);
    const [q, k, v] = [uniform(B * Hq * Sq * Dh, 1, r), uniform(B * G * Skv * Dh, 1, r), uniform(B * G * Skv * Dh, 1, r)];
    const options = { batchSize: B, numHeads: Hq, numKvHeads: G, seqLen: Sq, kvSeqLen: Skv, headDim: Dh, isCausal, needWeights: true as const, sinks: uniform(Hq, 1, r) };
    const w = await engines.wasm.scaledDotProductAttention(q, k, v, options);
    const c = await engines.cpu.scaledDotProductAttention(q, k, v, options);
    expectClose(w.output, c.output, f32Tolerance([Dh, Skv]), 'output');
    expectClose(w.attentionWeights, c.attentionWeights, probabilityTolerance(Dh, Skv, 4 * Dh), 'weights');
  });

  test('with rotary: the queries and the last Sq keys turn', async () => {
    const r = mulberry32(11);
    const [B, Hq, Sq, Skv, Dh] = [1, 2, 3, 10, 16];
    const [q, k, v] = [uniform(B * Hq * Sq * Dh, 1, r), uniform(B * Hq * Skv * Dh, 1, r), uniform(B * Hq * Skv * Dh, 1, r)];
    const options = { batchSize: B, numHeads: Hq, seqLen: Sq, kvSeqLen: Skv, headDim: Dh, rotary: {}, isCausal: true };
    const w = await engines.wasm.scaledDotProductAttention(q, k, v, options);
    const c = await engines.cpu.scaledDotProductAttention(q, k, v, options);
    expectClose(w.output, c.output, f32Tolerance([Dh, Skv]), 'output');
  });
});

describe('scoreMod and linear layers: projections on the kernels, the attention pass on the float64 reference', () => {
  test.each([
    ['scoreMod', { ...L, scoreMod }, { batchSize: 2, seqLen: 7, isCausal: true, needWeights: true }],
    ['scoreMod, padding and window', { ...L, scoreMod }, { batchSize: 2, seqLen: 33, window: 5, keyPaddingMask: bits(66, 3, 0.2), needWeights: true }],
    ['scoreMod, packed batches', { ...L, scoreMod }, { cuSeqlens: Int32Array.from([0, 5, 21, 22]), isCausal: true }],
    ['linear', { ...L, attention: 'linear' }, { batchSize: 2, seqLen: 7, isCausal: true }],
    ['linear, padding, not causal', { ...L, attention: 'linear' }, { batchSize: 2, seqLen: 40, keyPaddingMask: bits(80, 4, 0.2) }],
  ] as [string, MultiHeadAttentionConfig, ForwardOptions][])('%s', async (name, layer, options) => {
    const rows = options.cuSeqlens ? options.cuSeqlens[options.cuSeqlens.length - 1] : options.batchSize * options.seqLen;
    await check(layer, uniform(rows * 32, 1, mulberry32(12)), options, name);
  });

  test("linearAttention and scaledDotProductAttention with a scoreMod: the CPU backend's results", async () => {
    const r = mulberry32(14);
    const [q, k, v] = [uniform(2 * 4 * 5 * 8, 1, r), uniform(2 * 4 * 5 * 8, 1, r), uniform(2 * 4 * 5 * 8, 1, r)];
    const options = { batchSize: 2, numHeads: 4, seqLen: 5, headDim: 8, isCausal: true };
    expect((await engines.wasm.linearAttention(q, k, v, options)).output).toEqual((await engines.cpu.linearAttention(q, k, v, options)).output);
    const sdpa = { ...options, scoreMod };
    expect((await engines.wasm.scaledDotProductAttention(q, k, v, sdpa)).output).toEqual((await engines.cpu.scaledDotProductAttention(q, k, v, sdpa)).output);
  });
});
