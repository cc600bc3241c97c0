// Attention options, WebGPU against the float64 CPU reference: masks (key padding, additive and
// boolean attnMask, fully masked rows), cross-attention (Skv ≠ Sq, kdim/vdim ≠ E, causal both ways),
// sliding windows, head masks, packed variable-length batches, and the attention-only entry point.
// Every case checks the output and, where there are any, the probabilities.

import { describe, expect, test } from 'vitest';
import { type ForwardOptions, referenceMultiHeadAttention } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance, maxAbsFinite, probabilityTolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { withErrorScopes } from './helpers/gpu.ts';

const engines = useEngines();

interface Layer {
  embedDim: number;
  numHeads: number;
  numKvHeads?: number;
  kdim?: number;
  vdim?: number;
  bias?: boolean;
}

function bits(n: number, seed: number, p: number): Uint8Array {
  const r = mulberry32(seed);
  return Uint8Array.from({ length: n }, () => (r() < p ? 1 : 0));
}

/** Runs one call on both backends and compares output (and weights, when asked). */
async function check(layer: Layer, stateDict: Record<string, Float32Array>, query: Float32Array, options: ForwardOptions, what: string) {
  const a = engines.gpu.createMultiHeadAttention(layer, stateDict);
  const b = engines.cpu.createMultiHeadAttention(layer, stateDict);
  try {
    const g = await withErrorScopes(engines.gpu.device!, () => a.forward(query, options));
    const c = await b.forward(query, options);
    for (const v of g.output) expect(Number.isNaN(v)).toBe(false);
    const cu = options.cuSeqlens;
    const Skv = cu ? Math.max(...cu.subarray(1).map((end, i) => end - cu[i])) : (options.kvSeqLen ?? options.seqLen);
    expectClose(g.output, c.output, f32Tolerance([layer.kdim ?? layer.embedDim, Skv, layer.embedDim]), `${what}: output`);
    if (!options.cuSeqlens && options.needWeights) {
      const logits = referenceMultiHeadAttention(layer, stateDict, query, options).scores!;
      expectClose(g.attentionWeights!, c.attentionWeights!, probabilityTolerance(layer.embedDim, Skv, maxAbsFinite(logits)), `${what}: attentionWeights`);
    }
    return { gpu: g, cpu: c };
  } finally {
    a.dispose();
    b.dispose();
  }
}

const L = { embedDim: 32, numHeads: 4 };
const sdL = randomStateDict(L, 9);
const shapes: [number, number][] = [
  [1, 1],
  [2, 7],
  [1, 33],
  [2, 70],
];

describe('masks', () => {
  test.each(shapes)('keyPaddingMask B=%i S=%i', async (B, S) => {
    const x = uniform(B * S * 32, 1, mulberry32(S));
    const pad = bits(B * S, S, 0.3);
    for (const isCausal of [false, true]) {
      await check(L, sdL, x, { batchSize: B, seqLen: S, keyPaddingMask: pad, isCausal, needWeights: true }, `padding causal=${isCausal}`);
    }
  });

  test.each(shapes)('float attnMask, shared and per head, B=%i S=%i', async (B, S) => {
    const x = uniform(B * S * 32, 1, mulberry32(S + 1));
    await check(L, sdL, x, { batchSize: B, seqLen: S, attnMask: uniform(S * S, 2, mulberry32(3)), needWeights: true }, 'shared');
    await check(L, sdL, x, { batchSize: B, seqLen: S, attnMask: uniform(B * 4 * S * S, 2, mulberry32(4)), isCausal: true, needWeights: true }, 'per head');
  });

  test.each(shapes)('bool attnMask (1 = not allowed) equals a float mask of −Infinity, B=%i S=%i', async (B, S) => {
    const x = uniform(B * S * 32, 1, mulberry32(S + 2));
    const bool = bits(S * S, 7 + S, 0.4);
    const float = Float32Array.from(bool, (v) => (v ? -Infinity : 0));
    const r1 = await check(L, sdL, x, { batchSize: B, seqLen: S, attnMask: bool, needWeights: true }, 'bool');
    const r2 = await check(L, sdL, x, { batchSize: B, seqLen: S, attnMask: float, needWeights: true }, 'float');
    expect(Array.from(r1.gpu.output)).toEqual(Array.from(r2.gpu.output));
  });

  test('a row with no visible key gives probabilities 0 and output = out_proj.bias, never NaN', async () => {
    const B = 2;
    const S = 5;
    const x = uniform(B * S * 32, 1, mulberry32(11));
    const pad = new Uint8Array(B * S);
    pad.fill(1, 0, S); // every key of batch 0 ignored
    const mask = new Float32Array(S * S);
    mask.fill(-Infinity, 2 * S, 3 * S); // row 2 sees nothing
    const { gpu: g, cpu: c } = await check(L, sdL, x, { batchSize: B, seqLen: S, keyPaddingMask: pad, attnMask: mask, needWeights: true }, 'fully masked');
    for (const r of [g, c]) {
      const bias = sdL['out_proj.bias'];
      for (let i = 0; i < S * 32; i++) expect(r.output[i]).toBeCloseTo(bias[i % 32], 6); // batch 0: every row
      for (let e = 0; e < 32; e++) expect(r.output[(S + 2) * 32 + e]).toBeCloseTo(bias[e], 6); // batch 1, row 2
      for (let h = 0; h < 4; h++) for (let j = 0; j < S; j++) expect(r.attentionWeights![((1 * 4 + h) * S + 2) * S + j]).toBe(0);
    }
  });
});

describe('cross-attention', () => {
  const sizes: [number, number, number][] = [
    [1, 3, 40],
    [2, 40, 3],
    [1, 1, 65],
    [2, 33, 33],
  ];
  test.each(sizes)('B=%i Sq=%i Skv=%i, causal and not', async (B, Sq, Skv) => {
    const x = uniform(B * Sq * 32, 1, mulberry32(Sq));
    const kv = uniform(B * Skv * 32, 1, mulberry32(Skv));
    for (const isCausal of [false, true]) {
      await check(L, sdL, x, { batchSize: B, seqLen: Sq, key: kv, value: kv, kvSeqLen: Skv, isCausal, needWeights: true }, `cross causal=${isCausal}`);
    }
  });

  test('kdim and vdim ≠ embedDim, separate q/k/v_proj_weight, key ≠ value', async () => {
    const layer = { embedDim: 32, numHeads: 2, kdim: 12, vdim: 20 };
    const r = mulberry32(5);
    const sd = {
      q_proj_weight: uniform(32 * 32, 0.3, r),
      k_proj_weight: uniform(32 * 12, 0.3, r),
      v_proj_weight: uniform(32 * 20, 0.3, r),
      in_proj_bias: uniform(96, 0.1, r),
      'out_proj.weight': uniform(32 * 32, 0.2, r),
      'out_proj.bias': uniform(32, 0.1, r),
    };
    const B = 2,
      Sq = 9,
      Skv = 37;
    await check(
      layer,
      sd,
      uniform(B * Sq * 32, 1, r),
      {
        batchSize: B,
        seqLen: Sq,
        kvSeqLen: Skv,
        key: uniform(B * Skv * 12, 1, r),
        value: uniform(B * Skv * 20, 1, r),
        needWeights: true,
      },
      'kdim/vdim',
    );
  });

  test('q/k/v_proj_weight with kdim = vdim = E give what the packed in_proj_weight gives', async () => {
    const E = 32;
    const sep = {
      q_proj_weight: sdL.in_proj_weight.slice(0, E * E),
      k_proj_weight: sdL.in_proj_weight.slice(E * E, 2 * E * E),
      v_proj_weight: sdL.in_proj_weight.slice(2 * E * E),
      in_proj_bias: sdL.in_proj_bias,
      'out_proj.weight': sdL['out_proj.weight'],
      'out_proj.bias': sdL['out_proj.bias'],
    };
    const x = uniform(3 * 32, 1, mulberry32(1));
    const a = engines.gpu.createMultiHeadAttention(L, sep);
    const b = engines.gpu.createMultiHeadAttention(L, sdL);
    expect(Array.from((await a.forward(x, { batchSize: 1, seqLen: 3 })).output)).toEqual(Array.from((await b.forward(x, { batchSize: 1, seqLen: 3 })).output));
    a.dispose();
    b.dispose();
  });
});

describe('sliding window', () => {
  test.each([
    [1, 1, 1],
    [2, 7, 3],
    [1, 100, 1],
    [1, 100, 40],
    [2, 70, 33],
  ])('B=%i S=%i window=%i', async (B, S, w) => {
    const x = uniform(B * S * 32, 1, mulberry32(S * w));
    await check(L, sdL, x, { batchSize: B, seqLen: S, window: w, needWeights: true }, 'window');
  });

  test('window with cross-attention aligns to the end of the keys', async () => {
    const x = uniform(2 * 5 * 32, 1, mulberry32(2));
    const kv = uniform(2 * 50 * 32, 1, mulberry32(3));
    await check(L, sdL, x, { batchSize: 2, seqLen: 5, key: kv, value: kv, kvSeqLen: 50, window: 8, needWeights: true }, 'cross window');
  });
});

describe('head mask', () => {
  test.each([[4], [8]])('headMask of length %i', async (n) => {
    const x = uniform(2 * 9 * 32, 1, mulberry32(n));
    const headMask = Float32Array.from({ length: n }, (_, i) => [1, 0, 0.5, 2][i % 4]);
    await check(L, sdL, x, { batchSize: 2, seqLen: 9, headMask, isCausal: true, needWeights: true }, 'headMask');
  });
});

describe('grouped-query layers with masks', () => {
  test('G = 2 of H = 8, padding + window + causal', async () => {
    const l = { embedDim: 64, numHeads: 8, numKvHeads: 2 };
    const sd = randomStateDict(l, 4);
    const x = uniform(2 * 40 * 64, 1, mulberry32(40));
    await check(l, sd, x, { batchSize: 2, seqLen: 40, keyPaddingMask: bits(80, 1, 0.2), window: 16, isCausal: true, needWeights: true }, 'gqa');
  });
});

describe('packed variable-length batches', () => {
  test.each([[[5, 300, 17]], [[1]], [[8, 8, 8, 8]], [[33, 1, 64]]])('lengths %j equal each sequence run alone', async (lengths) => {
    const cu = Int32Array.from([0, ...lengths.map((_, i) => lengths.slice(0, i + 1).reduce((a, b) => a + b, 0))]);
    const T = cu[cu.length - 1];
    const x = uniform(T * 32, 1, mulberry32(T));
    for (const isCausal of [false, true]) {
      const packed = await check(L, sdL, x, { cuSeqlens: cu, isCausal }, `packed causal=${isCausal}`);
      const mha = engines.gpu.createMultiHeadAttention(L, sdL);
      for (const [i, len] of lengths.entries()) {
        const alone = await mha.forward(x.subarray(cu[i] * 32, cu[i + 1] * 32), { batchSize: 1, seqLen: len, isCausal });
        expectClose(packed.gpu.output.subarray(cu[i] * 32, cu[i + 1] * 32), alone.output, f32Tolerance([32, len, 32]), `sequence ${i}`);
      }
      mha.dispose();
    }
  });
});

describe('scaledDotProductAttention', () => {
  test.each([
    [1, 4, 4, 7, 7, 8, false],
    [2, 8, 2, 33, 40, 16, true],
    [1, 4, 1, 1, 65, 64, false],
    [2, 2, 2, 70, 20, 32, true],
  ])('B=%i H=%i G=%i Sq=%i Skv=%i Dh=%i causal=%s', async (B, H, G, Sq, Skv, Dh, isCausal) => {
    const r = mulberry32(Sq * Skv);
    const q = uniform(B * H * Sq * Dh, 1, r);
    const k = uniform(B * G * Skv * Dh, 1, r);
    const v = uniform(B * G * Skv * Dh, 1, r);
    const options = { batchSize: B, numHeads: H, numKvHeads: G, seqLen: Sq, kvSeqLen: Skv, headDim: Dh, isCausal, attnMask: uniform(Sq * Skv, 1, r), needWeights: true };
    const g = await withErrorScopes(engines.gpu.device!, () => engines.gpu.scaledDotProductAttention(q, k, v, options));
    const c = await engines.cpu.scaledDotProductAttention(q, k, v, options);
    expect(g.output.length).toBe(B * H * Sq * Dh);
    expectClose(g.output, c.output, f32Tolerance([Dh, Skv]), 'sdpa output');
    expectClose(g.attentionWeights!, c.attentionWeights!, probabilityTolerance(Dh, Skv, 3 * Math.sqrt(Dh)), 'sdpa weights');
  });
});
