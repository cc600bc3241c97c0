// The grid every forced kernel variant runs (test/kernel-variants.test.ts: the GPU-first variants;
// test/kernel-variants-software.test.ts: those written for CPU rasterizers), against the float64 CPU
// reference, f32 and f16, over shapes no tile divides: S = 1, odd, just past the 32- and 64-row query
// tiles and the GEMMs' 32/64-row tiles; head sizes 4, 20 (not a power of two; grouped-query and
// multi-query) and 128 (past 64, where the software bodies keep their head-size loops as loops);
// causal or not; with a key padding mask and a sliding window; a packed variable-length batch; a
// KV-cache decode step with split-KV. The main grid (gpu-vs-cpu.test.ts) runs the built-in choice for
// the adapter kind.
//
// Compile cost: each variant compiles once per head size and precision (lavapipe: LLVM, 1–50 s a
// pipeline), so the grid uses three head sizes in f32 and one (20) in f16; all engines of a file share
// one device, and the files share the run's Mesa cache (test/global-setup.ts), so the tuner's gate in
// tuning.test.ts (every variant at head size 20) reads these kernels back.
// The subgroup variants run twice: on the adapter's subgroups (lavapipe: 8 lanes), and as if each
// subgroup had 4 lanes (subgroupEmulation: the kernels' SUBGROUP_LANES), so their size-dependent
// arithmetic (keys per lane, A steps per shuffled load) also runs at another size.

import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type AttentionEngine, type ForwardOptions, referenceMultiHeadAttention } from '../../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './random.ts';
import { type AttentionVariant, needsSubgroups, type ProjectionVariant, subgroupEmulation, TIER0 } from '../../src/webgpu/variants.ts';
import { expectClose, f16Tolerance, f32Tolerance, maxAbsFinite } from '../../src/util/tolerance.ts';
import { createGpuEngine, withErrorScopes } from './gpu.ts';

interface Layer {
  embedDim: number;
  numHeads: number;
  numKvHeads?: number;
}

const layers: Layer[] = [
  { embedDim: 4, numHeads: 1 }, // Dh 4
  { embedDim: 40, numHeads: 2 }, // Dh 20
  { embedDim: 60, numHeads: 3, numKvHeads: 1 }, // Dh 20, multi-query
  { embedDim: 80, numHeads: 4, numKvHeads: 2 }, // Dh 20, grouped-query
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

// The kernels a group does not test run as tier 0 (the variants that compile fastest), not as the
// built-in choice by call size: that choice (gpu-vs-cpu.test.ts, head-sizes.test.ts) is slow to compile
// at these head sizes, and each group would otherwise compile it again for its shapes, at 4 lanes too.
const projections = (v: ProjectionVariant) => ({ ...TIER0, qkv_projection: v, output_projection: v });
const attention = (v: AttentionVariant) => ({ ...TIER0, flash_attention: v });

/** The groups of one grid: each variant, then the subgroup ones among them again on 4 lanes. */
function variantEngines(projectionVariants: readonly ProjectionVariant[], attentionVariants: readonly AttentionVariant[]) {
  return [
    ...projectionVariants.map((v) => ({ name: `projections ${v}`, kernels: projections(v), lanes: 0 })),
    ...attentionVariants.map((v) => ({ name: `attention ${v}`, kernels: attention(v), lanes: 0 })),
    ...projectionVariants.filter(needsSubgroups).map((v) => ({ name: `projections ${v} on 4 lanes`, kernels: projections(v), lanes: 4 })),
    ...attentionVariants.filter(needsSubgroups).map((v) => ({ name: `attention ${v} on 4 lanes`, kernels: attention(v), lanes: 4 })),
  ];
}

/** Registers the grid for these variants in the calling test file (one device for all its engines). */
export function describeVariantGrid(projectionVariants: readonly ProjectionVariant[], attentionVariants: readonly AttentionVariant[]): void {
  let owner: AttentionEngine;
  beforeAll(async () => {
    owner = await createGpuEngine();
  });
  afterAll(() => owner?.dispose());

  describe.each(variantEngines(projectionVariants, attentionVariants))('$name', ({ kernels, lanes }) => {
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
}
