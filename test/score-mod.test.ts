// Custom score modifications (config.scoreMod, scaledDotProductAttention's scoreMod): the caller's
// WGSL compiled into the attention kernels and its JavaScript twin run by the CPU backend agree, with
// i the query's position among the keys (the cache included; within each sequence for varlen) and j
// the key's; a scoreMod equal to softcap gives what the softcap option gives; a WGSL compile error is
// an InvalidArgumentError quoting the compiler with the line in the caller's source.

import { describe, expect, test } from 'vitest';
import { type ForwardOptions, InvalidArgumentError, type ScoreMod } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { withErrorScopes } from './helpers/gpu.ts';

const engines = useEngines();
const L = { embedDim: 32, numHeads: 4, numKvHeads: 2 };
const sd = randomStateDict(L, 51);

/** A learned-bias-like modification: a per-head slope on the distance, and a bonus for key 0 (an "attention sink" by hand). */
const relative: ScoreMod = {
  wgsl: `fn scoreMod(score: f32, b: u32, h: u32, i: u32, j: u32) -> f32 {
  let distance = f32(abs(i32(i) - i32(j)));
  return score - 0.05 * f32(h + 1u) * distance + select(0.0, 1.5, j == 0u) + 0.25 * f32(b);
}`,
  reference: (score, b, h, i, j) => score - 0.05 * (h + 1) * Math.abs(i - j) + (j === 0 ? 1.5 : 0) + 0.25 * b,
};

async function both(config: object, query: Float32Array, options: object) {
  const outputs: Float32Array[] = [];
  for (const engine of [engines.gpu, engines.cpu]) {
    const mha = engine.createMultiHeadAttention({ ...L, ...config }, sd);
    outputs.push((await withErrorScopes(engines.gpu.device!, () => mha.forward(query, options as ForwardOptions))).output);
    mha.dispose();
  }
  return outputs;
}

describe('scoreMod, GPU against CPU', () => {
  test.each([
    [1, 1, {}],
    [2, 9, { isCausal: true }],
    [2, 40, { isCausal: true, needWeights: true, softcap: 3 }],
  ] as const)('B=%i S=%i %o', async (B, S, extra) => {
    const x = uniform(B * S * L.embedDim, 1, mulberry32(S));
    const [g, c] = await both({ scoreMod: relative }, x, { batchSize: B, seqLen: S, ...extra });
    expectClose(g, c, f32Tolerance([L.embedDim, S, L.embedDim]), 'output');
  });

  test('varlen: i and j within each sequence', async () => {
    const cuSeqlens = Int32Array.from([0, 3, 17]);
    const x = uniform(17 * L.embedDim, 1, mulberry32(3));
    const [g, c] = await both({ scoreMod: relative }, x, { cuSeqlens, isCausal: true });
    expectClose(g, c, f32Tolerance([L.embedDim, 14, L.embedDim]), 'output');
  });

  test('KV-cache decoding: i counts the cached positions', async () => {
    const S = 9;
    const x = uniform(S * L.embedDim, 1, mulberry32(4));
    const [, whole] = await both({ scoreMod: relative }, x, { batchSize: 1, seqLen: S, isCausal: true });
    const mha = engines.gpu.createMultiHeadAttention({ ...L, scoreMod: relative }, sd);
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: S });
    const out = new Float32Array(S * L.embedDim);
    out.set((await mha.forward(x.subarray(0, 6 * L.embedDim), { batchSize: 1, seqLen: 6, kvCache: cache, isCausal: true })).output);
    for (let t = 6; t < S; t++) {
      out.set((await mha.forward(x.subarray(t * L.embedDim, (t + 1) * L.embedDim), { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true })).output, t * L.embedDim);
    }
    expectClose(out, whole, f32Tolerance([L.embedDim, S, L.embedDim]), 'decoded');
    mha.dispose();
  });

  test('a scoreMod that soft-caps equals the softcap option', async () => {
    const cap: ScoreMod = {
      wgsl: 'fn scoreMod(score: f32, b: u32, h: u32, i: u32, j: u32) -> f32 { return 2.0 * tanh(score / 2.0); }',
      reference: (s) => 2 * Math.tanh(s / 2),
    };
    const x = uniform(2 * 11 * L.embedDim, 1, mulberry32(5));
    const options = { batchSize: 2, seqLen: 11, isCausal: true };
    const [byMod] = await both({ scoreMod: cap }, x, options);
    const [byOption] = await both({}, x, { ...options, softcap: 2 });
    expectClose(byMod, byOption, f32Tolerance([L.embedDim, 11, L.embedDim]), 'output');
  });

  test('scaledDotProductAttention takes it as an option', async () => {
    const r = mulberry32(6);
    const [B, H, G, S, Dh] = [1, 4, 2, 6, 8];
    const q = uniform(B * H * S * Dh, 1, r);
    const k = uniform(B * G * S * Dh, 1, r);
    const opts = { batchSize: B, numHeads: H, numKvHeads: G, seqLen: S, headDim: Dh, isCausal: true, scoreMod: relative };
    const g = await withErrorScopes(engines.gpu.device!, () => engines.gpu.scaledDotProductAttention(q, k, k, opts));
    const c = await engines.cpu.scaledDotProductAttention(q, k, k, opts);
    expectClose(g.output, c.output, f32Tolerance([Dh, S]), 'output');
  });
});

describe('bad scoreMods', () => {
  test('a WGSL compile error quotes the compiler and the line in the caller source', async () => {
    const broken: ScoreMod = { wgsl: 'fn scoreMod(score: f32, b: u32, h: u32, i: u32, j: u32) -> f32 {\n  return score + undefinedThing;\n}', reference: (s) => s };
    const mha = engines.gpu.createMultiHeadAttention({ ...L, scoreMod: broken }, sd);
    const error = await mha.forward(new Float32Array(2 * L.embedDim), { batchSize: 1, seqLen: 2 }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toContain('config.scoreMod.wgsl');
    expect((error as Error).message).toContain('line 2');
    expect((error as Error).message).toContain('undefinedThing');
    mha.dispose();
  });

  test.each([
    [{ wgsl: 3, reference: (s: number) => s }, 'config.scoreMod.wgsl'],
    [{ wgsl: 'fn other() {}', reference: (s: number) => s }, 'config.scoreMod.wgsl'],
    [{ wgsl: relative.wgsl }, 'config.scoreMod.reference'],
    [{ ...relative, extra: 1 }, 'config.scoreMod.extra'],
    ['x', 'config.scoreMod'],
  ])('%o', (scoreMod, argument) => {
    for (const engine of [engines.gpu, engines.cpu]) {
      expect(() => engine.createMultiHeadAttention({ ...L, scoreMod } as never, sd)).toThrow(InvalidArgumentError);
      expect(() => engine.createMultiHeadAttention({ ...L, scoreMod } as never, sd)).toThrow(argument);
    }
  });
});
