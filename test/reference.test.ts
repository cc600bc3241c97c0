// The CPU reference against values computed by hand, on cases small enough to follow on paper.

import { describe, expect, test } from 'vitest';
import { type ForwardOptions, type MultiHeadAttentionConfig, quantizeWeights, referenceMultiHeadAttention, referenceOutput, ShapeMismatchError } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

// E = 2, H = 1 (Dh = 2), identity projections and zero biases, so Q = K = V = X.
// X = [[1, 0], [0, 1]]: scores = X·Xᵀ/√2 = [[a, 0], [0, a]] with a = 1/√2.
const a = 1 / Math.SQRT2;
const identity3 = Float32Array.from([1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1]); // [3E, E] = [I; I; I]
const identity = Float32Array.from([1, 0, 0, 1]);
const x = Float32Array.from([1, 0, 0, 1]); // [B=1, S=2, E=2]
const config = { embedDim: 2, numHeads: 1, bias: false };

describe('referenceMultiHeadAttention by hand', () => {
  test('non-causal: softmax([a, 0]) mixes the two value rows', () => {
    const r = referenceMultiHeadAttention(config, { in_proj_weight: identity3, 'out_proj.weight': identity }, x, { batchSize: 1, seqLen: 2 });
    expect(Array.from(r.q)).toEqual([1, 0, 0, 1]);
    expect(Array.from(r.k)).toEqual([1, 0, 0, 1]);
    expect(Array.from(r.v)).toEqual([1, 0, 0, 1]);
    const scores = Array.from(r.scores!);
    [a, 0, 0, a].forEach((s, i) => {
      expect(scores[i]).toBeCloseTo(s, 15);
    });
    const p = Math.exp(a) / (Math.exp(a) + 1); // weight on the matching key
    const probs = Array.from(r.probs!);
    [p, 1 - p, 1 - p, p].forEach((v, i) => {
      expect(probs[i]).toBeCloseTo(v, 15);
    });
    // O row i = Σ_j p_ij V_j, and W_O = I: Y = O.
    [p, 1 - p, 1 - p, p].forEach((v, i) => {
      expect(r.output[i]).toBeCloseTo(v, 15);
    });
  });

  test('causal: row 0 sees only key 0; row 1 sees both', () => {
    const r = referenceMultiHeadAttention(config, { in_proj_weight: identity3, 'out_proj.weight': identity }, x, { batchSize: 1, seqLen: 2, isCausal: true });
    expect(r.scores![1]).toBe(-Infinity); // masked, and the probabilities there are exactly 0
    expect(Array.from(r.probs!.subarray(0, 2))).toEqual([1, 0]);
    const p = Math.exp(a) / (Math.exp(a) + 1);
    [1, 0, 1 - p, p].forEach((v, i) => {
      expect(r.output[i]).toBeCloseTo(v, 15);
    });
  });

  test('biases and the output projection: Y = O·W_Oᵀ + b_O', () => {
    // V = X + b_v with b_v = [1, 1]; W_O swaps the two channels; b_O = [10, 20].
    const sd = {
      in_proj_weight: identity3,
      in_proj_bias: Float32Array.from([0, 0, 0, 0, 1, 1]),
      'out_proj.weight': Float32Array.from([0, 1, 1, 0]),
      'out_proj.bias': Float32Array.from([10, 20]),
    };
    // One token: softmax over one key is 1, so O = V = [1 + 1, 0 + 1] = [2, 1]; swapped: [1, 2]; plus b_O.
    const r = referenceMultiHeadAttention({ embedDim: 2, numHeads: 1 }, sd, Float32Array.from([1, 0]), { batchSize: 1, seqLen: 1 });
    expect(Array.from(r.attention)).toEqual([2, 1]);
    expect(Array.from(r.output)).toEqual([11, 22]);
  });

  test('two heads split the channels; grouped-query heads share one key/value head', () => {
    // E = 4, H = 2, G = 1: in_proj_weight is [(H + 2G)·Dh, E] = [8, 4]: q rows 0-3, k rows 4-5, v rows 6-7.
    const w = new Float32Array(8 * 4);
    for (let r = 0; r < 4; r++) w[r * 4 + r] = 1; // Q = X
    w[4 * 4 + 0] = 1;
    w[5 * 4 + 1] = 1; // K = X[:, 0:2]
    w[6 * 4 + 2] = 1;
    w[7 * 4 + 3] = 1; // V = X[:, 2:4]
    const r = referenceMultiHeadAttention(
      { embedDim: 4, numHeads: 2, numKvHeads: 1, bias: false },
      { in_proj_weight: w, 'out_proj.weight': Float32Array.from([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]) },
      Float32Array.from([1, 2, 3, 4]),
      { batchSize: 1, seqLen: 1 },
    );
    expect(Array.from(r.q)).toEqual([1, 2, 3, 4]); // head 0: [1, 2], head 1: [3, 4]
    expect(Array.from(r.k)).toEqual([1, 2]);
    expect(Array.from(r.v)).toEqual([3, 4]);
    // One key: both heads output V; concat(heads) = [3, 4, 3, 4].
    expect(Array.from(r.output)).toEqual([3, 4, 3, 4]);
  });
});

// referenceOutput: the same passes without the scores and probabilities, so its output must be
// referenceMultiHeadAttention's to the bit, whatever the layer and the call.
describe('referenceOutput equals referenceMultiHeadAttention(...).output bit for bit', () => {
  const E = 16;
  const base = { embedDim: E, numHeads: 4 };
  const x = uniform(2 * 5 * E, 1, mulberry32(3)); // [B=2, S=5, E]
  const kv = uniform(2 * 7 * E, 1, mulberry32(4)); // [B=2, Skv=7, E]
  const cases: [string, MultiHeadAttentionConfig, ForwardOptions][] = [
    ['plain', base, { batchSize: 2, seqLen: 5 }],
    ['causal, grouped-query heads', { ...base, numKvHeads: 2 }, { batchSize: 2, seqLen: 5, isCausal: true }],
    ['cross-attention, window', base, { batchSize: 2, seqLen: 5, key: kv, value: kv, kvSeqLen: 7, window: 3 }],
    ['packed sequences', base, { cuSeqlens: Int32Array.from([0, 3, 10]) }],
    ['rotary, softcap', { ...base, rotary: { dim: 4 } }, { batchSize: 2, seqLen: 5, isCausal: true, softcap: 2 }],
    ['linear attention', { ...base, attention: 'linear' }, { batchSize: 2, seqLen: 5, isCausal: true }],
  ];
  test.each(cases)('%s', async (_name, config, options) => {
    const sd = randomStateDict(config, 7);
    const passes: number[] = [];
    const y = await referenceOutput(config, sd, x, options, (pass) => {
      passes.push(pass);
    });
    expect(passes).toEqual([1, 2, 3]);
    expect(y).toEqual(referenceMultiHeadAttention(config, sd, x, options).output);
  });
  test('quantized weights (q8_0), dequantized as referenceMultiHeadAttention does', async () => {
    const config = { embedDim: 32, numHeads: 2 };
    const sd = quantizeWeights(randomStateDict(config, 8), { dtype: 'q8_0', config });
    const q = uniform(3 * 32, 1, mulberry32(9));
    const options = { batchSize: 1, seqLen: 3, isCausal: true };
    expect(await referenceOutput(config, sd, q, options)).toEqual(referenceMultiHeadAttention(config, sd, q, options).output);
  });
  test('checks its arguments as forward does', async () => {
    await expect(referenceOutput(base, randomStateDict(base, 1), x, { batchSize: 2, seqLen: 4 })).rejects.toThrow(ShapeMismatchError);
  });
});
