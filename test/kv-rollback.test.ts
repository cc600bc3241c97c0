// KV cache rollback and speculative-decoding trees (issue 40, parts 2 and 4), on every backend:
// - cache.truncate(length): what follows equals a cache that never saw the dropped positions;
// - forward(x, { kvCache, treeParents }): every node's output equals its root-to-node path run alone
//   through a plain cache, and cache.acceptPath(path) then a next step equals the path-alone run's step;
// - a property loop over random trees and paths; the bad inputs (typed errors, nothing changed).

import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { createAttentionEngine, InvalidArgumentError, type KvCache, type MultiHeadAttention, ShapeMismatchError, UnsupportedError } from '../src/index.ts';
import { expectClose, f16Tolerance, f32Tolerance, type Tolerance } from '../src/util/tolerance.ts';
import { FAST_COMPILING, useEngines } from './helpers/engines.ts';
import { createGpuEngine } from './helpers/gpu.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

const engines = useEngines({ webgpu: FAST_COMPILING }, 'webgpu', 'wasm', 'cpu');
const BACKENDS = ['cpu', 'wasm', 'webgpu'] as const;

/** GQA with rotary, and plain MHA without. */
const GQA_ROTARY = { embedDim: 64, numHeads: 4, numKvHeads: 2, rotary: { base: 10000 } };
const MHA = { embedDim: 32, numHeads: 4 };
type Layer = typeof GQA_ROTARY | typeof MHA;

/** Rows s0 … s1 − 1 of every batch element of x [B, S, E]. */
function rows(x: Float32Array, B: number, S: number, E: number, s0: number, s1: number): Float32Array {
  const out = new Float32Array(B * (s1 - s0) * E);
  for (let b = 0; b < B; b++) out.set(x.subarray((b * S + s0) * E, (b * S + s1) * E), b * (s1 - s0) * E);
  return out;
}

/** Rows `which` of x [n, E] (batch 1), stacked. */
function pick(x: Float32Array, E: number, which: readonly number[]): Float32Array {
  const out = new Float32Array(which.length * E);
  for (let i = 0; i < which.length; i++) out.set(x.subarray(which[i] * E, (which[i] + 1) * E), i * E);
  return out;
}

/** The root-to-node path of node i (root first). */
function pathTo(parents: Int32Array, i: number): number[] {
  const path: number[] = [];
  for (let a = i; a >= 0; a = parents[a]) path.unshift(a);
  return path;
}

const step = (mha: MultiHeadAttention, cache: KvCache, x: Float32Array, B: number, n: number) =>
  mha.forward(x, { batchSize: B, seqLen: n, kvCache: cache, isCausal: true }).then((r) => r.output);

describe.each(BACKENDS)('truncate then continue equals a cache that never saw the dropped positions (%s)', (backend) => {
  test.each([
    [GQA_ROTARY, 2],
    [MHA, 3],
  ] as const)('%o B=%i', async (layer: Layer, B) => {
    const E = layer.embedDim;
    const S = 14;
    const mha = engines.of(backend).createMultiHeadAttention(layer, randomStateDict(layer, 11));
    const x = uniform(B * S * E, 1, mulberry32(5 + B));
    const junk = uniform(B * 5 * E, 1, mulberry32(99));
    const tol = f32Tolerance([E, S, E]);

    // A: prefill 9, truncate to 4 (an edited prompt), draft 5 junk tokens, truncate them away, continue.
    const a = mha.createKvCache({ batchSize: B, maxSeqLen: 16 });
    await step(mha, a, rows(x, B, S, E, 0, 9), B, 9);
    a.truncate(4);
    expect(a.length).toBe(4);
    await step(mha, a, rows(x, B, S, E, 4, 7), B, 3);
    await step(mha, a, junk, B, 5);
    expect(a.length).toBe(12);
    a.truncate(7);
    const gotA = [await step(mha, a, rows(x, B, S, E, 7, 8), B, 1), await step(mha, a, rows(x, B, S, E, 8, S), B, S - 8)];

    // B: only ever the kept prefix, then the same steps.
    const b = mha.createKvCache({ batchSize: B, maxSeqLen: 16 });
    await step(mha, b, rows(x, B, S, E, 0, 4), B, 4);
    await step(mha, b, rows(x, B, S, E, 4, 7), B, 3);
    const gotB = [await step(mha, b, rows(x, B, S, E, 7, 8), B, 1), await step(mha, b, rows(x, B, S, E, 8, S), B, S - 8)];
    expect(a.length).toBe(S);
    expect(b.length).toBe(S);
    for (let i = 0; i < gotA.length; i++) expectClose(gotA[i], gotB[i], tol, `step ${i} after truncate`);
    const [ra, rb] = [await a.read(), await b.read()];
    expectClose(ra.key, rb.key, tol, 'keys');
    expectClose(ra.value, rb.value, tol, 'values');

    // To 0: as a new cache.
    a.truncate(0);
    expect(a.length).toBe(0);
    const fresh = mha.createKvCache({ batchSize: B, maxSeqLen: 16 });
    expectClose(await step(mha, a, rows(x, B, S, E, 0, 5), B, 5), await step(mha, fresh, rows(x, B, S, E, 0, 5), B, 5), tol, 'after truncate(0)');
    for (const c of [a, b, fresh]) c.dispose();
    mha.dispose();
  });
});

/** A tree of 7 nodes, two branches from one root, depth 3; and a forest of two roots. */
const TREES = [Int32Array.of(-1, 0, 0, 1, 2, 3, 4), Int32Array.of(-1, -1, 0, 1, 2, 2, 5)];

/**
 * The tree after a context of P tokens against each root-to-node path run alone: every node's output,
 * then acceptPath(path to `accept`) and one more step against the path-alone cache's next step.
 */
async function checkTree(
  mha: MultiHeadAttention,
  layer: Layer,
  parents: Int32Array,
  accept: number | null,
  seed: number,
  P: number,
  tolerance?: Tolerance,
): Promise<void> {
  const E = layer.embedDim;
  const k = parents.length;
  const rng = mulberry32(seed);
  const context = uniform(P * E, 1, rng);
  const drafts = uniform(k * E, 1, rng);
  const next = uniform(E, 1, rng);
  const tol = tolerance ?? f32Tolerance([E, P + k, E]);
  const maxSeqLen = P + k + 2;

  const cache = mha.createKvCache({ batchSize: 1, maxSeqLen });
  await step(mha, cache, context, 1, P);
  const tree = (await mha.forward(drafts, { batchSize: 1, seqLen: k, kvCache: cache, treeParents: parents })).output;
  expect(cache.length).toBe(P + k);

  const alone = async (path: number[]) => {
    const c = mha.createKvCache({ batchSize: 1, maxSeqLen });
    await step(mha, c, context, 1, P);
    const out = path.length ? await step(mha, c, pick(drafts, E, path), 1, path.length) : new Float32Array(0);
    return { cache: c, out };
  };
  for (let i = 0; i < k; i++) {
    const path = pathTo(parents, i);
    const { cache: c, out } = await alone(path);
    // Every node on the path: its row of the tree call equals its row of the path run alone.
    expectClose(pick(tree, E, path), out, tol, `tree nodes ${path} vs the path alone`);
    c.dispose();
  }

  const path = accept === null ? [] : pathTo(parents, accept);
  cache.acceptPath(path);
  expect(cache.length).toBe(P + path.length);
  const { cache: ref } = await alone(path);
  const [got, want] = [await cache.read(), await ref.read()];
  expectClose(got.key, want.key, tol, 'keys after acceptPath');
  expectClose(got.value, want.value, tol, 'values after acceptPath');
  expectClose(await step(mha, cache, next, 1, 1), await step(mha, ref, next, 1, 1), tol, 'the step after acceptPath');
  cache.dispose();
  ref.dispose();
}

describe.each(BACKENDS)('speculative-decoding trees against each path run alone (%s)', (backend) => {
  test.each([
    [GQA_ROTARY, 0, 5],
    [GQA_ROTARY, 1, 6],
    [MHA, 0, 4],
  ] as const)('%o tree %i, accept the path to node %i', async (layer: Layer, t, accept) => {
    const mha = engines.of(backend).createMultiHeadAttention(layer, randomStateDict(layer, 21));
    await checkTree(mha, layer, TREES[t], accept, 31 + t, 6);
    mha.dispose();
  });

  test('a chain accepted whole moves nothing; an empty path keeps none; a one-node tree is a step', async () => {
    const mha = engines.of(backend).createMultiHeadAttention(GQA_ROTARY, randomStateDict(GQA_ROTARY, 22));
    await checkTree(mha, GQA_ROTARY, Int32Array.of(-1, 0, 1, 2), 3, 41, 3);
    await checkTree(mha, GQA_ROTARY, TREES[0], null, 42, 5);
    await checkTree(mha, GQA_ROTARY, Int32Array.of(-1), 0, 43, 1);
    mha.dispose();
  });
});

describe('trees over a long context (split-KV decode), f16 storage and the default (auto) engine', () => {
  test.each(['wasm', 'webgpu'] as const)('%s: a tree after 600 cached positions', async (backend) => {
    const mha = engines.of(backend).createMultiHeadAttention(GQA_ROTARY, randomStateDict(GQA_ROTARY, 25));
    await checkTree(mha, GQA_ROTARY, Int32Array.of(-1, 0, 0, 1), 3, 51, 600);
    mha.dispose();
  });

  test("webgpu precision 'f16': the moved rows are half-precision rows", async () => {
    const engine = await createGpuEngine({ ...FAST_COMPILING, precision: 'f16' });
    expect(engine.precision).toBe('f16'); // lavapipe has shader-f16
    const mha = engine.createMultiHeadAttention(GQA_ROTARY, randomStateDict(GQA_ROTARY, 26));
    await checkTree(mha, GQA_ROTARY, TREES[0], 6, 52, 5, f16Tolerance([64, 12, 64], 2));
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: 8 });
    await step(mha, cache, uniform(6 * 64, 1, mulberry32(7)), 1, 6);
    cache.truncate(2);
    expect(cache.length).toBe(2);
    engine.dispose();
  });

  test('the default engine (wasm and WebGPU on a software adapter): truncate, a tree, acceptPath', async () => {
    const engine = await createAttentionEngine();
    const mha = engine.createMultiHeadAttention(GQA_ROTARY, randomStateDict(GQA_ROTARY, 27));
    await checkTree(mha, GQA_ROTARY, TREES[1], 5, 53, 4);
    const E = GQA_ROTARY.embedDim;
    const x = uniform(9 * E, 1, mulberry32(8));
    const a = mha.createKvCache({ batchSize: 1, maxSeqLen: 12 });
    const b = mha.createKvCache({ batchSize: 1, maxSeqLen: 12 });
    await step(mha, a, x, 1, 9);
    a.truncate(5);
    await step(mha, b, x.subarray(0, 5 * E), 1, 5);
    const y = uniform(E, 1, mulberry32(9));
    expectClose(await step(mha, a, y, 1, 1), await step(mha, b, y, 1, 1), f32Tolerance([E, 10, E]), 'after truncate');
    engine.dispose();
  });
});

describe('random trees (property)', () => {
  /** A tree of 1 … 8 nodes (each parent −1 or an earlier node) and a node whose path is accepted (or none). */
  const trees = fc
    .integer({ min: 1, max: 8 })
    .chain((k) =>
      fc.tuple(
        fc.tuple(...Array.from({ length: k }, (_, i) => fc.integer({ min: -1, max: i - 1 }))),
        fc.option(fc.integer({ min: 0, max: k - 1 }), { nil: null }),
        fc.integer({ min: 1, max: 7 }),
        fc.integer(),
      ),
    );

  test.each([
    ['cpu', 30],
    ['wasm', 12],
    ['webgpu', 10],
  ] as const)('%s: %i random trees, paths and contexts', async (backend, numRuns) => {
    const mha = engines.of(backend).createMultiHeadAttention(GQA_ROTARY, randomStateDict(GQA_ROTARY, 23));
    await fc.assert(
      fc.asyncProperty(trees, async ([parents, accept, P, seed]) => {
        await checkTree(mha, GQA_ROTARY, Int32Array.from(parents), accept, seed, P);
      }),
      { numRuns, seed: 40 },
    );
    mha.dispose();
  });
});

describe.each(BACKENDS)('bad input: typed errors, nothing changed (%s)', (backend) => {
  test('truncate, treeParents and acceptPath', async () => {
    const layer = GQA_ROTARY;
    const E = layer.embedDim;
    const mha = engines.of(backend).createMultiHeadAttention(layer, randomStateDict(layer, 24));
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: 16 });
    const x = uniform(8 * E, 1, mulberry32(3));
    await step(mha, cache, x.subarray(0, 3 * E), 1, 3);
    const before = await cache.read();
    const unchanged = async (length: number) => {
      expect(cache.length).toBe(length);
      const now = await cache.read();
      // The first 3 rows of each key/value head [G, length, Dh] are as they were.
      const Dh = E / layer.numHeads;
      for (let g = 0; g < layer.numKvHeads; g++) {
        for (const [a, b] of [
          [now.key, before.key],
          [now.value, before.value],
        ]) {
          expect(a.subarray(g * length * Dh, (g * length + 3) * Dh)).toEqual(b.subarray(g * 3 * Dh, (g + 1) * 3 * Dh));
        }
      }
    };

    for (const bad of [-1, 4, 1.5, Number.NaN, '2', undefined]) {
      expect(() => cache.truncate(bad as number)).toThrow(InvalidArgumentError);
    }
    expect(() => cache.truncate(4)).toThrow(/KvCache\.truncate: length must be an integer in \[0, cache\.length = 3\]; got 4/);
    await unchanged(3);

    expect(() => cache.acceptPath([0])).toThrow(/KvCache\.acceptPath: this cache must be a tree pending/);
    const tree = (parents: Int32Array | number[], extra: Record<string, unknown> = {}, n = parents.length) =>
      mha.forward(x.subarray(0, n * E), { batchSize: 1, seqLen: n, kvCache: cache, treeParents: parents as unknown as Int32Array, ...extra });
    await expect(tree(Int32Array.of(-1, 1, 0))).rejects.toThrow(/options\.treeParents\[1\] must be in \[−1, 1\).*got 1/);
    await expect(tree(Int32Array.of(-2, 0, 0))).rejects.toThrow(/options\.treeParents\[0\] must be in \[−1, 0\).*got -2/);
    await expect(tree(Int32Array.of(-1, 0), {}, 3)).rejects.toThrow(ShapeMismatchError);
    await expect(tree([-1, 0, 0])).rejects.toThrow(/options\.treeParents must be an Int32Array/);
    await expect(tree(Int32Array.of(-1, 0, 0), { isCausal: false })).rejects.toThrow(/options\.isCausal must be true or left out with treeParents/);
    await expect(tree(Int32Array.of(-1, 0, 0), { attnMask: new Uint8Array(18) })).rejects.toThrow(UnsupportedError);
    await expect(tree(Int32Array.of(-1, 0, 0), { positionIds: Int32Array.of(3, 4, 4) })).rejects.toThrow(/options\.positionIds must be left out with treeParents/);
    await expect(tree(Int32Array.of(-1, 0, 0), { window: 4 })).rejects.toThrow(UnsupportedError);
    await expect(tree(Int32Array.of(-1, 0, 0), { batchSize: 2, seqLen: 3 }, 6)).rejects.toThrow(/options\.batchSize must be 1 with treeParents/);
    await expect(mha.forward(x.subarray(0, 3 * E), { batchSize: 1, seqLen: 3, treeParents: Int32Array.of(-1, 0, 0) })).rejects.toThrow(
      /options\.treeParents must be given with options\.kvCache/,
    );
    await unchanged(3);
    expect(() => cache.acceptPath([0])).toThrow(/must be a tree pending/);

    // A tree, then paths that are not paths of it: refused, the tree still pending and acceptable.
    await tree(Int32Array.of(-1, 0, 0, 1));
    expect(cache.length).toBe(7);
    expect(() => cache.acceptPath([1])).toThrow(/KvCache\.acceptPath: indices\[0\] must be a root of the last tree.*got 1, whose parent is 0/);
    expect(() => cache.acceptPath([0, 3])).toThrow(/indices\[1\] must be a child of indices\[0\] = 0.*got 3, whose parent is 1/);
    expect(() => cache.acceptPath([0, 4])).toThrow(/indices\[1\] must be a node of the last tree: an integer in \[0, 4\); got 4/);
    expect(() => cache.acceptPath([0, 1, 3, 2, 0])).toThrow(/indices must be a path of the last tree: at most its 4 node\(s\); got length 5/);
    expect(() => cache.acceptPath('0' as unknown as number[])).toThrow(InvalidArgumentError);
    expect(cache.length).toBe(7);
    cache.acceptPath([0, 2]);
    expect(cache.length).toBe(5);
    await unchanged(5);
    expect(() => cache.acceptPath([0])).toThrow(/must be a tree pending/); // one path per tree

    // The next call, truncate and reset each end a pending tree.
    await tree(Int32Array.of(-1, 0));
    await step(mha, cache, x.subarray(0, E), 1, 1);
    expect(() => cache.acceptPath([0])).toThrow(/must be a tree pending/);
    await tree(Int32Array.of(-1), {}, 1);
    cache.truncate(cache.length);
    expect(() => cache.acceptPath([0])).toThrow(/must be a tree pending/);
    cache.dispose();
    expect(() => cache.truncate(0)).toThrow(/disposed|dispose/);
    mha.dispose();
  });
});
