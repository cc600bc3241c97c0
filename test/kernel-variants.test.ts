// Every kernel variant the tuner can choose (src/webgpu/variants.ts), forced, against the float64 CPU
// reference, f32 and f16, over shapes no tile divides: S = 1, odd, just past the 32- and 64-row query
// tiles and the GEMMs' 32/64-row tiles; head sizes 4…128; grouped-query and multi-query; causal or not;
// with a key padding mask and a sliding window; a packed variable-length batch; a KV-cache decode step
// with split-KV. The main grid (gpu-vs-cpu.test.ts) runs the built-in choice for the adapter kind.
// All engines share one device, so each pipeline is compiled once (software drivers compile slowly).
// The subgroup variants run twice: on the adapter's subgroups (lavapipe: 8 lanes), and as if each
// subgroup had 4 lanes (subgroupEmulation: the kernels' SUBGROUP_LANES), so their size-dependent
// arithmetic (keys per lane, A steps per shuffled load) also runs at another size.

import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type AttentionEngine, type ForwardOptions, referenceMultiHeadAttention } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from '../src/util/random.ts';
import { ATTENTION_VARIANTS, needsSubgroups, PROJECTION_VARIANTS, subgroupEmulation } from '../src/webgpu/variants.ts';
import { expectClose, f16Tolerance, f32Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';

interface Layer {
  embedDim: number;
  numHeads: number;
  numKvHeads?: number;
}

const layers: Layer[] = [
  { embedDim: 4, numHeads: 1 }, // Dh 4
  { embedDim: 40, numHeads: 2 }, // Dh 20
  { embedDim: 96, numHeads: 3, numKvHeads: 1 }, // Dh 32, multi-query
  { embedDim: 128, numHeads: 4, numKvHeads: 2 }, // Dh 32, grouped-query
  { embedDim: 128, numHeads: 1 }, // Dh 128
];
const shapes: [B: number, S: number][] = [
  [1, 1],
  [2, 7],
  [1, 65],
  [3, 33],
  [1, 130],
];

function cases(): [Layer, number, number, boolean][] {
  return layers.flatMap((l) => shapes.map(([B, S], i) => [l, B, S, i % 2 === 1] as [Layer, number, number, boolean]));
}

async function check(engine: AttentionEngine, layer: Layer, x: Float32Array, options: ForwardOptions, seed: number, what: string) {
  const sd = randomStateDict(layer, seed);
  const mha = engine.createMultiHeadAttention(layer, sd);
  try {
    const { output } = await withErrorScopes(engine.device!, () => mha.forward(x, options));
    const ref = referenceMultiHeadAttention(layer, sd, x, options);
    const Skv = options.cuSeqlens ? x.length / layer.embedDim : (options.kvSeqLen ?? options.seqLen);
    const tol =
      engine.precision === 'f16'
        ? f16Tolerance([layer.embedDim, Skv, layer.embedDim], maxAbsFinite(ref.output), ref.scores ? maxAbsFinite(ref.scores) : 0)
        : f32Tolerance([layer.embedDim, Skv, layer.embedDim]);
    expectClose(output, ref.output, tol, what);
  } finally {
    mha.dispose();
  }
}

const projections = (v: (typeof PROJECTION_VARIANTS)[number]) => ({ qkv_projection: v, output_projection: v });
const variantEngines = [
  ...PROJECTION_VARIANTS.map((v) => ({ name: `projections ${v}`, kernels: projections(v), lanes: 0 })),
  ...ATTENTION_VARIANTS.map((v) => ({ name: `attention ${v}`, kernels: { flash_attention: v }, lanes: 0 })),
  ...PROJECTION_VARIANTS.filter(needsSubgroups).map((v) => ({ name: `projections ${v} on 4 lanes`, kernels: projections(v), lanes: 4 })),
  ...ATTENTION_VARIANTS.filter(needsSubgroups).map((v) => ({ name: `attention ${v} on 4 lanes`, kernels: { flash_attention: v }, lanes: 4 })),
];

let owner: AttentionEngine;
beforeAll(async () => {
  owner = await createGpuEngine();
});
afterAll(() => owner?.dispose());

describe.each(variantEngines)('$name', ({ kernels, lanes }) => {
  let engine: AttentionEngine;
  let half: AttentionEngine;
  beforeAll(async () => {
    subgroupEmulation.lanes = lanes;
    engine = await createGpuEngine({ device: owner.device!, tuning: { mode: 'off', kernels } });
    half = await createGpuEngine({ device: owner.device!, tuning: { mode: 'off', kernels }, precision: 'f16' });
  });
  afterAll(() => {
    subgroupEmulation.lanes = 0;
    engine?.dispose();
    half?.dispose();
  });

  test('the engine reports the forced variants', () => {
    expect(engine.tuning!.forced).toEqual(kernels);
    // Subgroup variants need the feature; the adapters these tests run on (lavapipe, SwiftShader) have it.
    if (Object.values(kernels).some(needsSubgroups)) expect(engine.device!.features.has('subgroups')).toBe(true);
  });

  test.each(cases())('f32 %o B=%i S=%i causal=%s', async (l, B, S, isCausal) => {
    const x = uniform(B * S * l.embedDim, 1, mulberry32(B * 1000 + S));
    await check(engine, l, x, { batchSize: B, seqLen: S, isCausal }, S + l.embedDim, `B=${B} S=${S}`);
  });

  test.each([
    [layers[1], 2, 7, false],
    [layers[3], 1, 65, true],
    [layers[2], 3, 33, false],
  ] as const)('f16 %o B=%i S=%i causal=%s', async (l, B, S, isCausal) => {
    expect(half.precision).toBe('f16');
    const x = uniform(B * S * l.embedDim, 1, mulberry32(B * 1000 + S + 1));
    await check(half, l, x, { batchSize: B, seqLen: S, isCausal }, S + l.embedDim + 1, `f16 B=${B} S=${S}`);
  });

  test('key padding mask and a sliding window', async () => {
    const l = layers[3];
    const [B, S] = [2, 70];
    const keyPaddingMask = new Uint8Array(B * S);
    for (let j = 50; j < S; j++) keyPaddingMask[S + j] = 1; // the second sequence's last 20 keys are padding
    const x = uniform(B * S * l.embedDim, 1, mulberry32(5));
    await check(engine, l, x, { batchSize: B, seqLen: S, keyPaddingMask, isCausal: true, window: 17 }, 6, 'padding + window');
  });

  test('a packed variable-length batch', async () => {
    const l = layers[1];
    const lengths = [1, 70, 33];
    const cuSeqlens = Int32Array.from([0, 1, 71, 104]);
    const x = uniform(lengths.reduce((a, b) => a + b) * l.embedDim, 1, mulberry32(7));
    await check(engine, l, x, { cuSeqlens, isCausal: true }, 8, 'packed');
  });

  test('a KV-cache decode step over 600 keys (split-KV)', async () => {
    const l = layers[2];
    const sd = randomStateDict(l, 9);
    const mha = engine.createMultiHeadAttention(l, sd);
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: 640 });
    try {
      const prompt = uniform(600 * l.embedDim, 1, mulberry32(10));
      const step = uniform(l.embedDim, 1, mulberry32(11));
      await withErrorScopes(engine.device!, () => mha.forward(prompt, { batchSize: 1, seqLen: 600, isCausal: true, kvCache: cache }));
      const { output } = await withErrorScopes(engine.device!, () => mha.forward(step, { batchSize: 1, seqLen: 1, isCausal: true, kvCache: cache }));
      const all = new Float32Array(601 * l.embedDim);
      all.set(prompt);
      all.set(step, 600 * l.embedDim);
      const ref = referenceMultiHeadAttention(l, sd, all, { batchSize: 1, seqLen: 601, isCausal: true });
      expectClose(output, ref.output.subarray(600 * l.embedDim), f32Tolerance([l.embedDim, 601, l.embedDim]), 'decode step');
    } finally {
      cache.dispose();
      mha.dispose();
    }
  });
});
