// Paged KV caches (issue 40, items 3 and 4 on paged sequences): every sequence of a paged call equals
// its run alone through a plain KvCache of the same layer (test/helpers/paged.ts SoloMirror), with
// |out − ref| ≤ 2e-4 + 2e-3·|ref|:
// - mixed prefills (1 … 70) in one call, steps of all, continuous batching; MHA, GQA, MQA, rotary,
//   QK-norm, no bias; window, softcap, sinks, ALiBi, scale; block sizes 1, 4, 16 around block edges;
// - fork (copy-on-write of a shared partial block: one block; the parent unchanged), truncate, remove,
//   block reuse (stale rows never read); trees on paged sequences and acceptPath; two layers sharing
//   one block table; a property loop of random operations against solo runs and a block-count model;
// - bad input: typed errors naming the argument, and nothing changed (lengths, free blocks, contents).

import { describe, expect, test } from 'vitest';
import {
  DisposedError,
  InvalidArgumentError,
  type MultiHeadAttention,
  type MultiHeadAttentionConfig,
  type PagedKvCache,
  ShapeMismatchError,
  UnsupportedError,
} from '../src/index.ts';
import { expectClose } from '../src/util/tolerance.ts';
import { FAST_COMPILING, useEngines } from './helpers/engines.ts';
import { BlockModel, type MirrorPart, PAGED_TOLERANCE, type PagedScoreOptions, SoloMirror } from './helpers/paged.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

/** The backends with paged caches (createPagedStorage and forwardPaged): every test below runs on each. */
const BACKENDS = ['cpu', 'wasm', 'webgpu'] as const;
type Backend = (typeof BACKENDS)[number];

const engines = useEngines({ webgpu: FAST_COMPILING }, ...BACKENDS);

const E = 32;
const normWeights = (n: number, seed: number) => uniform(n, 1, mulberry32(seed)).map((v) => 1 + 0.5 * v);
const LAYERS: Record<string, MultiHeadAttentionConfig> = {
  MHA: { embedDim: E, numHeads: 4 },
  'GQA 4/2': { embedDim: E, numHeads: 4, numKvHeads: 2 },
  'MQA 4/1': { embedDim: E, numHeads: 4, numKvHeads: 1 },
  'GQA rotary': { embedDim: E, numHeads: 4, numKvHeads: 2, rotary: { base: 10000 } },
  'QK-norm, rotary': { embedDim: E, numHeads: 4, numKvHeads: 2, rotary: {}, qkNorm: { query: normWeights(8, 3), key: normWeights(8, 4), over: 'head' } },
  'no bias, MQA rotary': { embedDim: E, numHeads: 4, numKvHeads: 1, bias: false, rotary: {} },
};
const ROTARY = LAYERS['GQA rotary'];

function layer(backend: Backend, config: MultiHeadAttentionConfig, seed: number): MultiHeadAttention {
  const sd = randomStateDict({ embedDim: config.embedDim, numHeads: config.numHeads, numKvHeads: config.numKvHeads, bias: config.bias }, seed);
  return engines.of(backend).createMultiHeadAttention(config, sd);
}

/** The run's error (or a failure when it does not throw). */
async function errorOf(run: () => unknown): Promise<Error> {
  try {
    await run();
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected a refusal; the call succeeded');
}

/** A typed refusal of `run`: the class, and a message that matches (naming the argument). */
async function refuses(run: () => unknown, Class: new (...args: never[]) => Error, message: RegExp): Promise<void> {
  const error = await errorOf(run);
  expect(error, String(error)).toBeInstanceOf(Class);
  expect(error.message).toMatch(message);
}

/** Lengths that straddle block edges for every block size here (sum 205). */
const MIXED = [1, 15, 16, 17, 33, 70, 4, 49];
const BLOCK_SIZES = [1, 4, 16] as const;

describe.each(BACKENDS)('paged calls against each sequence run alone (%s)', (backend) => {
  const grid = Object.keys(LAYERS).flatMap((name) => BLOCK_SIZES.map((bs) => [name, bs] as const));
  test.each(grid)('%s, blockSize %i: mixed prefills 1…70, steps of all, continuous batching', async (name, blockSize) => {
    const mha = layer(backend, LAYERS[name], 7);
    const paged = mha.createPagedKvCache({ blockSize, maxBlocks: Math.ceil(400 / blockSize) + 16 });
    expect(paged.freeBlocks).toBe(paged.maxBlocks);
    expect(paged.blockSize).toBe(blockSize);
    const m = new SoloMirror(mha, paged, {}, 160, 11);
    const ids = MIXED.map(() => m.add());
    expect(paged.sequenceIds).toEqual(ids);
    await m.call(MIXED.map((length, i) => ({ id: ids[i], length })));
    // Alone in the table, each sequence holds ⌈length / blockSize⌉ blocks (checked by the model too).
    expect(paged.maxBlocks - paged.freeBlocks).toBe(MIXED.reduce((n, l) => n + Math.ceil(l / blockSize), 0));
    for (let s = 0; s < 3; s++) await m.call(ids.map((id) => ({ id, length: 1 })));
    // Continuous batching: new sequences' prefills beside steps and a chunked prefill, in a shuffled order.
    const [p, q] = [m.add(), m.add()];
    await m.call([
      { id: p, length: 20 },
      { id: ids[0], length: 1 },
      { id: q, length: 9 },
      { id: ids[5], length: 1 },
      { id: ids[1], length: 3 },
    ]);
    await m.call([...ids, p, q].reverse().map((id) => ({ id, length: 1 })));
    for (const id of [ids[0], ids[3], ids[5], p]) await m.checkContents(id, true);
    m.dispose();
    paged.dispose();
    mha.dispose();
  });

  const H = 4;
  const SCORE: [string, PagedScoreOptions][] = [
    ['window 5', { window: 5 }],
    ['softcap 1.5', { softcap: 1.5 }],
    ['sinks', { sinks: Float32Array.from([0.5, -1, 2, 0]) }],
    ['alibiSlopes', { alibiSlopes: Float32Array.from({ length: H }, (_, h) => 2 ** -(h + 1)) }],
    ['scale 0.3', { scale: 0.3 }],
    ['all of them', { window: 9, softcap: 2, sinks: Float32Array.from([0, 1, -1, 0.5]), alibiSlopes: Float32Array.from([0.5, 0.25, 0.125, 0.0625]), scale: 0.4 }],
  ];
  test.each(SCORE)('%s (GQA rotary, blockSize 4) per sequence as in a plain call', async (_, options) => {
    const mha = layer(backend, ROTARY, 8);
    const paged = mha.createPagedKvCache({ blockSize: 4, maxBlocks: 64 });
    const m = new SoloMirror(mha, paged, options, 96, 12);
    const ids = [3, 17, 8, 1, 12].map(() => m.add());
    await m.call([3, 17, 8, 1, 12].map((length, i) => ({ id: ids[i], length })));
    await m.call(ids.map((id) => ({ id, length: 1 })));
    await m.call([
      { id: ids[2], length: 5 },
      { id: ids[0], length: 1 },
    ]);
    await m.call(ids.map((id) => ({ id, length: 1 })));
    await m.checkContents(ids[1], true);
    m.dispose();
    paged.dispose();
    mha.dispose();
  });
});

describe.each(BACKENDS)('fork, truncate, remove and block reuse (%s)', (backend) => {
  test('fork mid-block: copy-on-write takes one block, the parent is unchanged, both continue as their solo runs', async () => {
    const mha = layer(backend, ROTARY, 9);
    const paged = mha.createPagedKvCache({ blockSize: 4, maxBlocks: 32 });
    const m = new SoloMirror(mha, paged, {}, 64, 13);
    const parent = m.add();
    await m.call([{ id: parent, length: 6 }]); // blocks [0 … 3], [4, 5 | free rows]
    expect(paged.freeBlocks).toBe(30);
    const before = await paged.read(parent);
    const child = await m.fork(parent);
    expect(paged.freeBlocks).toBe(30); // shared, nothing taken
    await m.call([{ id: child, length: 1 }]); // writes position 6 into the shared block: one copy
    expect(paged.freeBlocks).toBe(29);
    expect(await paged.read(parent)).toEqual(before);
    await m.call([{ id: parent, length: 1 }]); // the parent's block 1 is its own again: nothing taken
    expect(paged.freeBlocks).toBe(29);
    const again = await paged.read(parent);
    const Dh = 8;
    // The parent's first 6 positions are as they were (key heads [G, 7, Dh] against [G, 6, Dh]).
    for (let g = 0; g < 2; g++) expect(again.key.subarray(g * 7 * Dh, (g * 7 + 6) * Dh)).toEqual(before.key.subarray(g * 6 * Dh, (g + 1) * 6 * Dh));
    // A grandchild, then all three in one call (prefills past the next block edge), then steps.
    const grandchild = await m.fork(child);
    await m.call([
      { id: grandchild, length: 3 },
      { id: parent, length: 5 },
      { id: child, length: 2 },
    ]);
    for (let s = 0; s < 3; s++) await m.call([parent, child, grandchild].map((id) => ({ id, length: 1 })));
    for (const id of [parent, child, grandchild]) await m.checkContents(id, true);
    // A fork of an empty sequence is an empty sequence.
    const empty = m.add();
    const emptyChild = await m.fork(empty);
    await m.call([
      { id: emptyChild, length: 5 },
      { id: empty, length: 2 },
    ]);
    m.dispose();
    paged.dispose();
    mha.dispose();
  });

  test('fork at a block boundary: no copy, each takes its own next block', async () => {
    const mha = layer(backend, LAYERS['MQA 4/1'], 10);
    const paged = mha.createPagedKvCache({ blockSize: 4, maxBlocks: 16 });
    const m = new SoloMirror(mha, paged, {}, 64, 14);
    const parent = m.add();
    await m.call([{ id: parent, length: 8 }]);
    const before = await paged.read(parent);
    const child = await m.fork(parent);
    expect(paged.freeBlocks).toBe(14);
    await m.call([{ id: child, length: 1 }]);
    expect(paged.freeBlocks).toBe(13);
    expect(await paged.read(parent)).toEqual(before);
    await m.call([{ id: parent, length: 1 }]);
    expect(paged.freeBlocks).toBe(12);
    await m.call([
      { id: parent, length: 4 },
      { id: child, length: 7 },
    ]);
    for (const id of [parent, child]) await m.checkContents(id, true);
    m.dispose();
    paged.dispose();
    mha.dispose();
  });

  test('truncate frees whole blocks past the new length; what follows equals a sequence that never saw the dropped positions', async () => {
    const mha = layer(backend, ROTARY, 11);
    const paged = mha.createPagedKvCache({ blockSize: 4, maxBlocks: 16 });
    const m = new SoloMirror(mha, paged, {}, 64, 15);
    const a = m.add();
    await m.call([{ id: a, length: 13 }]); // 4 blocks
    expect(paged.freeBlocks).toBe(12);
    m.truncate(a, 9); // 3 blocks
    expect(paged.freeBlocks).toBe(13);
    m.truncate(a, 9); // to its own length: nothing
    expect(paged.freeBlocks).toBe(13);
    m.truncate(a, 8); // 2 blocks
    expect(paged.freeBlocks).toBe(14);
    await m.call([{ id: a, length: 3 }]);
    await m.call([{ id: a, length: 1 }]);
    await m.checkContents(a, true); // against its kept history replayed on a fresh cache
    // Within a block: the rows past the length stay in the block and are never read.
    m.truncate(a, 10);
    await m.call([{ id: a, length: 1 }]);
    await m.checkContents(a, true);
    // A forked sequence truncated: the shared blocks stay with the other, the next write copies.
    const b = await m.fork(a);
    const before = await paged.read(a);
    m.truncate(b, 5);
    await m.call([{ id: b, length: 6 }]);
    expect(await paged.read(a)).toEqual(before);
    await m.call([
      { id: a, length: 2 },
      { id: b, length: 1 },
    ]);
    for (const id of [a, b]) await m.checkContents(id, true);
    m.truncate(a, 0);
    m.truncate(b, 0);
    expect(paged.freeBlocks).toBe(16);
    await m.call([
      { id: b, length: 3 },
      { id: a, length: 5 },
    ]);
    m.dispose();
    paged.dispose();
    mha.dispose();
  });

  test('remove gives blocks back (shared ones stay with the other); block reuse never reads stale rows', async () => {
    const mha = layer(backend, LAYERS['GQA 4/2'], 12);
    const paged = mha.createPagedKvCache({ blockSize: 16, maxBlocks: 6 });
    const m = new SoloMirror(mha, paged, {}, 96, 16);
    const a = m.add();
    await m.call([{ id: a, length: 40 }], uniform(40 * E, 8, mulberry32(3))); // large rows: stale ones would show
    const b = await m.fork(a);
    await m.call([{ id: b, length: 1 }]); // copies block 2
    expect(paged.freeBlocks).toBe(2);
    m.remove(a); // blocks 0 and 1 stay with b; a's own block 2 is free
    expect(paged.freeBlocks).toBe(3);
    expect(paged.sequenceIds).toEqual([b]);
    await m.call([{ id: b, length: 2 }]);
    await m.checkContents(b, true);
    m.remove(b);
    expect(paged.freeBlocks).toBe(6);
    expect(paged.sequenceIds).toEqual([]);
    // New sequences take the freed blocks: short prefills into blocks that held 16 rows each.
    const c = m.add();
    const d = m.add();
    await m.call([
      { id: c, length: 5 },
      { id: d, length: 1 },
    ]);
    for (let s = 0; s < 4; s++)
      await m.call([
        { id: d, length: 1 },
        { id: c, length: 1 },
      ]);
    await m.call([{ id: d, length: 20 }]);
    for (const id of [c, d]) await m.checkContents(id, true);
    // All blocks: 6 of 16 positions; a sequence of 96 takes them all.
    m.remove(c);
    m.remove(d);
    const e = m.add();
    await m.call([{ id: e, length: 96 }]);
    expect(paged.freeBlocks).toBe(0);
    m.dispose();
    paged.dispose();
    mha.dispose();
  });
});

/** A tree of 7 nodes, two branches from one root, depth 3; a forest of two roots; a chain. */
const TREES = [Int32Array.of(-1, 0, 0, 1, 2, 3, 4), Int32Array.of(-1, -1, 0, 1, 2, 2, 5), Int32Array.of(-1, 0, 1, 2, 3)];

describe.each(BACKENDS)('trees on paged sequences (%s)', (backend) => {
  test.each(BLOCK_SIZES)('blockSize %i: trees beside ordinary sequences, each node equal to its path alone; acceptPath then a step', async (blockSize) => {
    const mha = layer(backend, ROTARY, 13);
    const paged = mha.createPagedKvCache({ blockSize, maxBlocks: Math.ceil(160 / blockSize) + 8 });
    const m = new SoloMirror(mha, paged, {}, 64, 17);
    const [a, b, c, d] = [m.add(), m.add(), m.add(), m.add()];
    await m.call([
      { id: a, length: 6 },
      { id: b, length: 3 },
      { id: c, length: 15 },
      { id: d, length: 2 },
    ]);
    const forked = await m.fork(c); // a tree written into a shared partial block copies it first
    const before = await paged.read(c);
    await m.call([
      { id: a, length: 7, treeParents: TREES[0] },
      { id: b, length: 1 },
      { id: forked, length: 7, treeParents: TREES[1] },
      { id: d, length: 5, treeParents: TREES[2] },
    ]);
    expect(await paged.read(c)).toEqual(before);
    m.acceptPath(a, [0, 1, 3, 5]);
    m.acceptPath(forked, []); // keeps none
    m.acceptPath(d, [0, 1, 2, 3, 4]); // a chain accepted whole: nothing moves
    for (const id of [a, forked, d]) await m.checkContents(id, true);
    await m.call([a, b, c, d, forked].map((id) => ({ id, length: 1 })));
    // A tree again on the same sequence, a one-node tree, then steps.
    await m.call([
      { id: a, length: 7, treeParents: TREES[1] },
      { id: c, length: 1, treeParents: Int32Array.of(-1) },
    ]);
    m.acceptPath(a, [0, 2, 5, 6]);
    m.acceptPath(c, [0]);
    await m.call([a, b, c].map((id) => ({ id, length: 2 })));
    for (const id of [a, b, c, d, forked]) await m.checkContents(id, true);
    m.dispose();
    paged.dispose();
    mha.dispose();
  });

  test('after acceptPath, truncate(id, lengthOf(id)) leaves ⌈length / blockSize⌉ blocks; the next steps equal the path alone', async () => {
    const mha = layer(backend, ROTARY, 17);
    const paged = mha.createPagedKvCache({ blockSize: 4, maxBlocks: 8 });
    const m = new SoloMirror(mha, paged, {}, 32, 19);
    const a = m.add();
    await m.call([{ id: a, length: 4 }]);
    await m.call([{ id: a, length: 9, treeParents: Int32Array.from({ length: 9 }, (_, i) => i - 1) }]); // a chain over three blocks
    expect(paged.freeBlocks).toBe(4);
    m.acceptPath(a, [0]);
    expect(paged.lengthOf(a)).toBe(5);
    m.truncate(a, 5);
    expect(paged.maxBlocks - paged.freeBlocks).toBe(2);
    await m.call([{ id: a, length: 1 }]);
    await m.call([{ id: a, length: 6 }]);
    await m.checkContents(a, true);
    m.dispose();
    paged.dispose();
    mha.dispose();
  });

  // fork(id) while id's tree is pending would share the blocks the parent's acceptPath rearranges: the
  // fork is refused (a typed error naming id); were it allowed, the fork's contents must stay unchanged.
  test('fork with a tree pending, then the parent accepts a path: the fork is unchanged (or the fork is refused)', async () => {
    const mha = layer(backend, ROTARY, 18);
    const paged = mha.createPagedKvCache({ blockSize: 4, maxBlocks: 8 });
    const a = paged.addSequence();
    await mha.forward(uniform(4 * E, 1, mulberry32(6)), { kvCache: paged, sequences: [{ id: a, length: 4 }] });
    await mha.forward(uniform(3 * E, 1, mulberry32(7)), { kvCache: paged, sequences: [{ id: a, length: 3, treeParents: Int32Array.of(-1, 0, 0) }] });
    let child: number | null = null;
    try {
      child = paged.fork(a);
    } catch (e) {
      expect(e).toBeInstanceOf(InvalidArgumentError);
      expect((e as Error).message).toMatch(/PagedKvCache\.fork: id/);
    }
    if (child !== null) {
      const before = await paged.read(child);
      paged.acceptPath(a, [0, 2]); // moves position 6 to 5, in block 1, which the fork holds too
      expect(await paged.read(child)).toEqual(before);
    }
    paged.dispose();
    mha.dispose();
  });

  test('a tree pending is ended by the next call or truncate (acceptPath then refused, nothing changed)', async () => {
    const mha = layer(backend, ROTARY, 14);
    const paged = mha.createPagedKvCache({ blockSize: 4, maxBlocks: 16 });
    const m = new SoloMirror(mha, paged, {}, 64, 18);
    const a = m.add();
    await m.call([{ id: a, length: 3 }]);
    await m.call([{ id: a, length: 3, treeParents: Int32Array.of(-1, 0, 0) }]);
    const { output } = await mha.forward(uniform(E, 1, mulberry32(4)), { kvCache: paged, sequences: [{ id: a, length: 1 }] });
    expect(output.length).toBe(E);
    await refuses(() => paged.acceptPath(a, [0]), InvalidArgumentError, /PagedKvCache\.acceptPath: id must be a sequence with a tree pending/);
    expect(paged.lengthOf(a)).toBe(7);
    paged.truncate(a, 3);
    await mha.forward(uniform(2 * E, 1, mulberry32(5)), { kvCache: paged, sequences: [{ id: a, length: 2, treeParents: Int32Array.of(-1, 0) }] });
    paged.truncate(a, 5);
    await refuses(() => paged.acceptPath(a, [0]), InvalidArgumentError, /PagedKvCache\.acceptPath: id must be a sequence with a tree pending/);
    expect(paged.lengthOf(a)).toBe(5);
    m.dispose();
    paged.dispose();
    mha.dispose();
  });
});

describe.each(BACKENDS)('layers sharing one block table (%s)', (backend) => {
  test('a two-layer stack over 3 sequences with fork and truncate equals two plain caches per sequence', async () => {
    const mha1 = layer(backend, ROTARY, 15);
    const mha2 = layer(backend, LAYERS['QK-norm, rotary'], 16);
    const paged1 = mha1.createPagedKvCache({ blockSize: 4, maxBlocks: 40 });
    const paged2 = mha2.createPagedKvCache({ sharing: paged1 });
    expect([paged2.blockSize, paged2.maxBlocks, paged2.dtype]).toEqual([paged1.blockSize, paged1.maxBlocks, paged1.dtype]);
    expect(paged2.bytes).toBe(paged1.bytes); // one pool per layer, of the same shape
    expect(paged2.bytes).toBeGreaterThan(0);
    const model = new BlockModel(4, 40);
    const rng = mulberry32(19);
    const history = new Map<number, Float32Array>();
    const plain = new Map<number, [ReturnType<MultiHeadAttention['createKvCache']>, ReturnType<MultiHeadAttention['createKvCache']>]>();
    const maxSeqLen = 64;
    const newPlain = async (past: Float32Array) => {
      const pair = [mha1.createKvCache({ batchSize: 1, maxSeqLen }), mha2.createKvCache({ batchSize: 1, maxSeqLen })] as const;
      const n = past.length / E;
      if (n > 0) {
        const h = await mha1.forward(past, { batchSize: 1, seqLen: n, kvCache: pair[0], isCausal: true });
        await mha2.forward(h.output, { batchSize: 1, seqLen: n, kvCache: pair[1], isCausal: true });
      }
      return [...pair] as [(typeof pair)[0], (typeof pair)[1]];
    };
    const add = async (via: PagedKvCache) => {
      const id = via.addSequence();
      expect([paged1.lengthOf(id), paged2.lengthOf(id)]).toEqual([0, 0]);
      model.add(id);
      history.set(id, new Float32Array(0));
      plain.set(id, await newPlain(new Float32Array(0)));
      return id;
    };
    const fork = async (id: number) => {
      const child = paged1.fork(id);
      model.fork(id, child);
      history.set(child, history.get(id)!.slice());
      plain.set(child, await newPlain(history.get(id)!));
      expect(paged2.lengthOf(child)).toBe(paged2.lengthOf(id));
      return child;
    };
    const truncate = (via: PagedKvCache, id: number, length: number) => {
      via.truncate(id, length);
      model.truncate(id, length);
      history.set(id, history.get(id)!.slice(0, length * E));
      for (const c of plain.get(id)!) c.truncate(length);
      expect([paged1.lengthOf(id), paged2.lengthOf(id)]).toEqual([length, length]);
    };
    const step = async (parts: { id: number; length: number }[]) => {
      const T = parts.reduce((n, p) => n + p.length, 0);
      const x = uniform(T * E, 1, rng);
      const starts = parts.map((p) => paged1.lengthOf(p.id));
      // One model step: layer after layer, the same sequences list.
      const h = await mha1.forward(x, { kvCache: paged1, sequences: parts });
      expect(paged2.lengthOf(parts[0].id)).toBe(starts[0]); // layer 2 has not appended yet
      const y = await mha2.forward(h.output, { kvCache: paged2, sequences: parts });
      model.write(parts.map((p, i) => ({ ...p, start: starts[i] })));
      expect(paged1.freeBlocks).toBe(model.freeBlocks);
      expect(paged2.freeBlocks).toBe(model.freeBlocks);
      let row = 0;
      for (const [i, p] of parts.entries()) {
        const rows = x.subarray(row * E, (row + p.length) * E);
        const [c1, c2] = plain.get(p.id)!;
        const r1 = await mha1.forward(rows, { batchSize: 1, seqLen: p.length, kvCache: c1, isCausal: true });
        const r2 = await mha2.forward(r1.output, { batchSize: 1, seqLen: p.length, kvCache: c2, isCausal: true });
        expectClose(h.output.subarray(row * E, (row + p.length) * E), r1.output, PAGED_TOLERANCE, `layer 1, sequence ${p.id}`);
        expectClose(y.output.subarray(row * E, (row + p.length) * E), r2.output, PAGED_TOLERANCE, `layer 2, sequence ${p.id}`);
        const old = history.get(p.id)!;
        const grown = new Float32Array(old.length + rows.length);
        grown.set(old);
        grown.set(rows, old.length);
        history.set(p.id, grown);
        expect([paged1.lengthOf(p.id), paged2.lengthOf(p.id)]).toEqual([starts[i] + p.length, starts[i] + p.length]);
        row += p.length;
      }
    };
    const [a, b] = [await add(paged1), await add(paged2)]; // either layer's cache adds to the table
    const c = await add(paged1);
    await step([
      { id: a, length: 10 },
      { id: b, length: 5 },
      { id: c, length: 17 },
    ]);
    for (let s = 0; s < 2; s++) await step([a, b, c].map((id) => ({ id, length: 1 })));
    const d = await fork(a); // mid-block: a has 12 positions … 13
    await step([
      { id: d, length: 1 },
      { id: a, length: 1 },
      { id: b, length: 3 },
    ]);
    truncate(paged2, c, 9);
    await step([
      { id: c, length: 2 },
      { id: d, length: 1 },
    ]);
    paged1.remove(b);
    model.remove(b);
    expect(paged2.sequenceIds).toEqual([a, c, d]);
    await step([c, d, a].map((id) => ({ id, length: 1 })));
    for (const id of [a, c, d]) {
      const [c1, c2] = plain.get(id)!;
      for (const [paged, cache] of [
        [paged1, c1],
        [paged2, c2],
      ] as const) {
        const [got, want] = [await paged.read(id), await cache.read()];
        expectClose(got.key, want.key, PAGED_TOLERANCE, `sequence ${id} keys`);
        expectClose(got.value, want.value, PAGED_TOLERANCE, `sequence ${id} values`);
      }
    }
    // Disposing one layer's pool leaves the table with the other.
    paged2.dispose();
    expect(paged2.bytes).toBe(0);
    await refuses(() => paged2.addSequence(), DisposedError, /PagedKvCache/);
    const e = paged1.addSequence();
    await mha1.forward(uniform(3 * E, 1, rng), { kvCache: paged1, sequences: [{ id: e, length: 3 }] });
    expect(paged1.lengthOf(e)).toBe(3);
    for (const pair of plain.values()) for (const cache of pair) cache.dispose();
    paged1.dispose();
    mha1.dispose();
    mha2.dispose();
  });
});

/** Random operations on a paged cache, against solo runs and the block model (SoloMirror checks both after each). */
async function randomSession(
  backend: Backend,
  seed: number,
  config: MultiHeadAttentionConfig,
  blockSize: number,
  maxBlocks: number,
  options: PagedScoreOptions,
  operations: number,
) {
  const mha = layer(backend, config, 100 + seed);
  const paged = mha.createPagedKvCache({ blockSize, maxBlocks });
  const maxSeqLen = 96;
  const m = new SoloMirror(mha, paged, options, maxSeqLen, seed);
  const rng = mulberry32(seed * 7919);
  const int = (lo: number, hi: number) => lo + Math.floor(rng() * (hi - lo + 1)); // [lo, hi]
  const pickOne = <T>(list: readonly T[]): T => list[int(0, list.length - 1)];
  const trees = options.window === undefined && options.alibiSlopes === undefined;
  const counts = { add: 0, fork: 0, call: 0, tree: 0, truncate: 0, remove: 0, refusedOutOfBlocks: 0 };
  for (let op = 0; op < operations; op++) {
    const ids = paged.sequenceIds;
    expect(ids.length).toBe(m.history.size);
    const r = rng();
    if (ids.length === 0 || (r < 0.12 && ids.length < 8)) {
      m.add();
      counts.add++;
    } else if (r < 0.25 && ids.length < 8) {
      await m.fork(pickOne(ids));
      counts.fork++;
    } else if (r < 0.32) {
      const id = pickOne(ids);
      m.truncate(id, int(0, paged.lengthOf(id)));
      counts.truncate++;
    } else if (r < 0.37) {
      m.remove(pickOne(ids));
      counts.remove++;
    } else {
      // A call: random sequences in a random order, steps mostly, prefills sometimes, a tree sometimes.
      const order = [...ids].sort(() => rng() - 0.5).slice(0, int(1, Math.min(5, ids.length)));
      const parts: MirrorPart[] = [];
      for (const id of order) {
        const room = maxSeqLen - paged.lengthOf(id) - 8;
        if (room < 1) continue;
        const length = Math.min(room, rng() < 0.6 ? 1 : int(2, 24));
        if (trees && length > 1 && rng() < 0.25) {
          const treeParents = Int32Array.from({ length }, (_, i) => int(-1, i - 1));
          parts.push({ id, length, treeParents });
        } else parts.push({ id, length });
      }
      if (parts.length === 0) {
        m.truncate(order[0], 0);
        continue;
      }
      const starts = parts.map((p) => ({ id: p.id, start: paged.lengthOf(p.id), length: p.length }));
      const need = m.model!.need(starts);
      if (need > paged.freeBlocks) {
        // Out of blocks: refused, naming the need and the free count; nothing changed.
        const snapshot = m.snapshot();
        await refuses(
          () => mha.forward(uniform(starts.reduce((n, p) => n + p.length, 0) * E, 1, rng), { kvCache: paged, sequences: parts, ...options }),
          InvalidArgumentError,
          new RegExp(`options\\.sequences .*needs ${need} block\\(s\\) of ${blockSize} positions.*${paged.freeBlocks} free of ${maxBlocks}`),
        );
        expect(m.snapshot()).toEqual(snapshot);
        counts.refusedOutOfBlocks++;
        // As a server would: preempt the longest sequence.
        m.remove(paged.sequenceIds.reduce((x, y) => (paged.lengthOf(y) > paged.lengthOf(x) ? y : x)));
        counts.remove++;
        continue;
      }
      await m.call(parts);
      counts.call++;
      for (const p of parts) {
        if (!p.treeParents) continue;
        counts.tree++;
        const node = int(-1, p.length - 1);
        const path: number[] = [];
        for (let a = node; a >= 0; a = p.treeParents[a]) path.unshift(a);
        m.acceptPath(p.id, path);
        // acceptPath keeps the blocks the tree took (the model does not count its release); truncate to the kept length gives back whole blocks past it.
        m.truncate(p.id, paged.lengthOf(p.id));
      }
    }
    for (const id of paged.sequenceIds) expect(paged.lengthOf(id)).toBe(m.history.get(id)!.length);
    expect(paged.freeBlocks).toBeGreaterThanOrEqual(0);
    if (paged.sequenceIds.length === 1) {
      const [only] = paged.sequenceIds;
      expect(paged.maxBlocks - paged.freeBlocks).toBe(Math.ceil(paged.lengthOf(only) / blockSize));
    }
    if (op % 40 === 39) for (const id of paged.sequenceIds) await m.checkContents(id, true);
  }
  for (const id of paged.sequenceIds) await m.checkContents(id, true);
  for (const id of paged.sequenceIds) m.remove(id);
  expect(paged.freeBlocks).toBe(maxBlocks);
  m.dispose();
  paged.dispose();
  mha.dispose();
  return counts;
}

describe.each(BACKENDS)('random interleavings of add, fork, calls, trees, truncate, remove (%s)', (backend) => {
  test.each([
    [1, 'GQA rotary', 4, 56, {}],
    [2, 'MQA 4/1', 1, 240, {}],
    [3, 'QK-norm, rotary', 16, 18, { softcap: 2, sinks: Float32Array.from([0, 1, -1, 0.5]) }],
    [4, 'MHA', 4, 56, { window: 6, alibiSlopes: Float32Array.from([0.5, 0.25, 0.125, 0.0625]) }],
  ] as const)(
    'seed %i: %s, blockSize %i, maxBlocks %i, %o: 200 operations against solo runs',
    async (seed, name, blockSize, maxBlocks, options) => {
      const counts = await randomSession(backend, seed, LAYERS[name], blockSize, maxBlocks, options, 200);
      // The session exercised what it is for.
      expect(counts.call).toBeGreaterThan(50);
      expect(counts.fork).toBeGreaterThan(5);
      expect(counts.truncate + counts.remove).toBeGreaterThan(10);
    },
    120_000,
  );
});

describe.each(BACKENDS)('bad input: typed errors naming the argument, nothing changed (%s)', (backend) => {
  // A second layer's forward on a cache sharing the table, while the first layer's is in flight, is refused
  // (its reservation would copy blocks in the first layer's pool under it).
  test('a forward on a cache sharing the table while another layer’s forward is in flight is refused', async () => {
    const mha = layer(backend, ROTARY, 24);
    const other = layer(backend, ROTARY, 25);
    const paged = mha.createPagedKvCache({ blockSize: 4, maxBlocks: 8 });
    const shared = other.createPagedKvCache({ sharing: paged });
    const id = paged.addSequence();
    const rng = mulberry32(26);
    const first = mha.forward(uniform(E, 1, rng), { kvCache: paged, sequences: [{ id, length: 1 }] });
    const second = other.forward(uniform(5 * E, 1, rng), { kvCache: shared, sequences: [{ id, length: 5 }] }).then(
      () => null,
      (e: Error) => e,
    );
    await first;
    const error = await second;
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toMatch(/options\.kvCache must be not in use/);
    expect(shared.lengthOf(id)).toBe(0);
    expect(paged.freeBlocks).toBe(7);
    mha.dispose();
    other.dispose();
  });

  test('calls, sequences, trees, truncate, blocks, options, caches', async () => {
    const mha = layer(backend, ROTARY, 20);
    const other = layer(backend, ROTARY, 21);
    const paged = mha.createPagedKvCache({ blockSize: 4, maxBlocks: 8 });
    const m = new SoloMirror(mha, paged, {}, 40, 22);
    const [a, b] = [m.add(), m.add()];
    await m.call([
      { id: a, length: 6 },
      { id: b, length: 3 },
    ]);
    const removed = m.add();
    m.remove(removed);
    expect(paged.freeBlocks).toBe(5);
    const snapshot = m.snapshot();
    const contents = [await paged.read(a), await paged.read(b)];
    const unchanged = async (what: string) => {
      expect(m.snapshot(), what).toEqual(snapshot);
      expect([await paged.read(a), await paged.read(b)], what).toEqual(contents);
    };
    const rng = mulberry32(23);
    const x = (T: number) => uniform(T * E, 1, rng);
    const call = (T: number, options: Record<string, unknown>) => () => mha.forward(x(T), { kvCache: paged, ...options } as never);
    const one = [{ id: a, length: 1 }];

    // Sequences.
    await refuses(
      call(1, { sequences: [{ id: 99, length: 1 }] }),
      InvalidArgumentError,
      /options\.sequences\[0\]\.id must be the id of a sequence of this cache.*got 99, an unknown or removed id/,
    );
    await refuses(
      call(2, {
        sequences: [
          { id: a, length: 1 },
          { id: removed, length: 1 },
        ],
      }),
      InvalidArgumentError,
      new RegExp(`options\\.sequences\\[1\\]\\.id .*got ${removed}, an unknown or removed id`),
    );
    await refuses(call(1, { sequences: [{ id: '0', length: 1 }] }), InvalidArgumentError, /options\.sequences\[0\]\.id/);
    await refuses(
      call(2, {
        sequences: [
          { id: a, length: 1 },
          { id: a, length: 1 },
        ],
      }),
      InvalidArgumentError,
      new RegExp(`options\\.sequences\\[1\\]\\.id must be an id not listed before in this call; got ${a} again`),
    );
    await refuses(
      call(2, {
        sequences: [
          { id: a, length: 2 },
          { id: b, length: 1 },
        ],
      }),
      ShapeMismatchError,
      /query\.length must be \[T, embedDim\] with T = Σ sequences\[i\]\.length = 3.*got 64/,
    );
    await refuses(
      call(4, {
        sequences: [
          { id: a, length: 2 },
          { id: b, length: 1 },
        ],
      }),
      ShapeMismatchError,
      /query\.length/,
    );
    await refuses(call(0, { sequences: [{ id: a, length: 0 }] }), InvalidArgumentError, /options\.sequences\[0\]\.length must be a positive integer/);
    await refuses(call(1, { sequences: [{ id: a, length: 1.5 }] }), InvalidArgumentError, /options\.sequences\[0\]\.length/);
    await refuses(call(1, { sequences: [{ id: a, length: 1, extra: 1 }] }), InvalidArgumentError, /options\.sequences\[0\]/);
    await refuses(call(1, { sequences: [] }), InvalidArgumentError, /options\.sequences must be a non-empty array/);
    await refuses(call(1, { sequences: one[0] }), InvalidArgumentError, /options\.sequences/);
    await refuses(call(1, {}), InvalidArgumentError, /options\.sequences/);
    await refuses(() => mha.forward(x(1), { sequences: one } as never), InvalidArgumentError, /options\.kvCache must be a PagedKvCache/);
    const plainCache = mha.createKvCache({ batchSize: 1, maxSeqLen: 4 });
    await refuses(() => mha.forward(x(1), { kvCache: plainCache, sequences: one } as never), InvalidArgumentError, /options\.kvCache must be a PagedKvCache/);
    plainCache.dispose();
    await unchanged('after bad sequences');

    // Trees.
    const tree = (parents: unknown, n = 3, extra: Record<string, unknown> = {}) => call(n, { sequences: [{ id: a, length: n, treeParents: parents }], ...extra });
    await refuses(tree(Int32Array.of(-1, 1, 0)), InvalidArgumentError, /options\.sequences\[0\]\.treeParents\[1\] must be in \[−1, 1\).*got 1/);
    await refuses(tree(Int32Array.of(-2, 0, 0)), InvalidArgumentError, /options\.sequences\[0\]\.treeParents\[0\] must be in \[−1, 0\).*got -2/);
    await refuses(tree(Int32Array.of(-1, 0, 2)), InvalidArgumentError, /options\.sequences\[0\]\.treeParents\[2\]/);
    await refuses(tree(Int32Array.of(-1, 0)), ShapeMismatchError, /options\.sequences\[0\]\.treeParents must be of length options\.sequences\[0\]\.length = 3/);
    await refuses(tree([-1, 0, 0]), InvalidArgumentError, /options\.sequences\[0\]\.treeParents must be an Int32Array/);
    await refuses(tree(Int32Array.of(-1, 0, 0), 3, { window: 4 }), InvalidArgumentError, /options\.window must be left out with treeParents/);
    await refuses(tree(Int32Array.of(-1, 0, 0), 3, { alibiSlopes: new Float32Array(4) }), InvalidArgumentError, /options\.alibiSlopes must be left out with treeParents/);
    await refuses(() => paged.acceptPath(a, [0]), InvalidArgumentError, /PagedKvCache\.acceptPath: id must be a sequence with a tree pending/);
    await refuses(() => paged.acceptPath(removed, []), InvalidArgumentError, /PagedKvCache\.acceptPath: id .*an unknown or removed id/);
    await unchanged('after bad trees');

    // truncate and the other table operations.
    await refuses(
      () => paged.truncate(a, 7),
      InvalidArgumentError,
      new RegExp(`PagedKvCache\\.truncate: length must be an integer in \\[0, lengthOf\\(${a}\\) = 6\\]; got 7`),
    );
    for (const bad of [-1, 1.5, Number.NaN, '2', undefined])
      await refuses(() => paged.truncate(a, bad as number), InvalidArgumentError, /PagedKvCache\.truncate: length/);
    await refuses(() => paged.truncate(removed, 0), InvalidArgumentError, /PagedKvCache\.truncate: id .*unknown or removed/);
    await refuses(() => paged.fork(removed), InvalidArgumentError, /PagedKvCache\.fork: id .*unknown or removed/);
    await refuses(() => paged.remove(removed), InvalidArgumentError, /PagedKvCache\.remove: id .*unknown or removed/);
    await refuses(() => paged.lengthOf(removed), InvalidArgumentError, /PagedKvCache\.lengthOf: id .*unknown or removed/);
    await refuses(() => paged.read(removed), InvalidArgumentError, /PagedKvCache\.read: id/);
    await unchanged('after bad table operations');

    // Out of blocks (5 free of 8): one sequence, and two whose sum does not fit (the first's blocks not taken either).
    await refuses(
      call(22, { sequences: [{ id: b, length: 22 }] }),
      InvalidArgumentError,
      /options\.sequences must be new positions that fit the free blocks: this call needs 6 block\(s\) of 4 positions; got a cache with 5 free of 8/,
    );
    await refuses(
      call(25, {
        sequences: [
          { id: a, length: 8 },
          { id: b, length: 17 },
        ],
      }),
      InvalidArgumentError,
      /needs 6 block\(s\).*5 free of 8/,
    );
    await refuses(call(27, { sequences: [{ id: a, length: 27 }] }), InvalidArgumentError, /options\.sequences\[0\]\.length must be at most 26/);
    await unchanged('after out of blocks');

    // Options not allowed with sequences.
    await refuses(call(1, { sequences: one, isCausal: false }), InvalidArgumentError, /options\.isCausal must be true or left out with sequences/);
    for (const [name, value] of [
      ['batchSize', 1],
      ['seqLen', 1],
      ['attnMask', new Uint8Array(7)],
      ['needWeights', true],
      ['positionIds', Int32Array.of(6)],
      ['cuSeqlens', Int32Array.of(0, 1)],
      ['keyPaddingMask', new Uint8Array(7)],
      ['headMask', new Float32Array(4)],
      ['key', new Float32Array(E)],
      ['kvSeqLen', 1],
      ['returnBuffer', true],
      ['treeParents', Int32Array.of(-1)],
    ] as const) {
      await refuses(call(1, { sequences: one, [name]: value }), InvalidArgumentError, new RegExp(`options\\.${name} must be left out with sequences`));
    }
    await refuses(call(1, { sequences: one, window: 0 }), InvalidArgumentError, /options\.window/);
    await refuses(call(1, { sequences: one, softcap: -1 }), InvalidArgumentError, /options\.softcap/);
    await refuses(call(1, { sequences: one, sinks: new Float32Array(3) }), ShapeMismatchError, /options\.sinks/);
    await refuses(call(1, { sequences: one, dropout: 0.1 }), UnsupportedError, /options\.dropout/);
    await refuses(call(1, { sequences: one, bogus: 1 }), InvalidArgumentError, /options/);
    await unchanged('after options not allowed');

    // Caches: another layer's, a disposed one, one in use.
    await refuses(() => other.forward(x(1), { kvCache: paged, sequences: one }), InvalidArgumentError, /options\.kvCache must be a PagedKvCache made by this layer/);
    const gone = mha.createPagedKvCache({ blockSize: 4, maxBlocks: 2 });
    const goneId = gone.addSequence();
    gone.dispose();
    expect(gone.disposed).toBe(true);
    await refuses(
      () => mha.forward(x(1), { kvCache: gone, sequences: [{ id: goneId, length: 1 }] }),
      InvalidArgumentError,
      /options\.kvCache must be a live PagedKvCache; got a disposed one/,
    );
    await refuses(() => gone.addSequence(), DisposedError, /PagedKvCache/);
    await refuses(() => mha.createPagedKvCache({ sharing: gone }), InvalidArgumentError, /options\.sharing .*got a disposed one/);
    await unchanged('after bad caches');

    // createPagedKvCache's options.
    const create = (options: unknown) => () => mha.createPagedKvCache(options as never);
    for (const bs of [3, 12, 0, -4, 2048, 1.5]) await refuses(create({ blockSize: bs, maxBlocks: 4 }), InvalidArgumentError, /options\.blockSize/);
    for (const mb of [0, -1, 2.5, undefined])
      await refuses(create({ blockSize: 4, maxBlocks: mb }), InvalidArgumentError, /options\.maxBlocks must be a positive integer/);
    await refuses(
      create({ sharing: paged, blockSize: 8 }),
      InvalidArgumentError,
      /options\.blockSize must be left out or equal to the shared table's \(4\) with sharing; got 8/,
    );
    await refuses(create({ sharing: paged, maxBlocks: 9 }), InvalidArgumentError, /options\.maxBlocks must be left out or equal to the shared table's/);
    await refuses(create({ sharing: {} }), InvalidArgumentError, /options\.sharing/);
    await refuses(create({ blockSize: 4, maxBlocks: 4, pages: 1 }), InvalidArgumentError, /options/);
    await refuses(create(undefined), InvalidArgumentError, /options/);
    await refuses(create({ blockSize: 4, maxBlocks: 4, dtype: 'q8_0' }), InvalidArgumentError, /options\.dtype .*headDim 8 is not a multiple of 32/);
    expect(paged.sequenceIds).toEqual([a, b]);
    await unchanged('after bad createPagedKvCache options');

    // In use: a forward in flight on this cache, or on another layer's cache sharing its table. Every attempt
    // starts before the first await (the in-flight call may finish at any await).
    const shared = other.createPagedKvCache({ sharing: paged });
    const inFlight = m.call([{ id: b, length: 1 }]);
    const settle = (p: Promise<unknown>) =>
      p.then(
        () => null,
        (e: Error) => e,
      );
    const sync = (run: () => unknown) => {
      try {
        run();
        return null;
      } catch (e) {
        return e as Error;
      }
    };
    const attempts: [string, Promise<Error | null> | Error | null, RegExp][] = [
      ['a forward on the same cache', settle(mha.forward(x(1), { kvCache: paged, sequences: one })), /options\.kvCache must be not in use by another forward/],
      ['addSequence', sync(() => paged.addSequence()), /PagedKvCache\.addSequence: this cache must be not in use by a forward/],
      ['truncate via the sharing cache', sync(() => shared.truncate(a, 1)), /PagedKvCache\.truncate: this cache must be not in use/],
      ['fork via the sharing cache', sync(() => shared.fork(a)), /PagedKvCache\.fork: this cache must be not in use/],
      ['remove', sync(() => paged.remove(a)), /PagedKvCache\.remove: this cache must be not in use/],
    ];
    await inFlight;
    for (const [what, attempt, message] of attempts) {
      const error = await attempt;
      expect(error, `${what}, while a forward is in flight: refused`).toBeInstanceOf(InvalidArgumentError);
      expect((error as Error).message).toMatch(message);
    }
    shared.dispose();

    // After every refusal: the sequences continue as their solo runs.
    await m.call([
      { id: b, length: 2 },
      { id: a, length: 1 },
    ]);
    await m.call([{ id: a, length: 7, treeParents: Int32Array.of(-1, 0, 0, 1, 2, 3, 4) }]);
    expect(() => paged.acceptPath(a, [1])).toThrow(/PagedKvCache\.acceptPath: indices\[0\] must be a root of the last tree/);
    expect(() => paged.acceptPath(a, [0, 3])).toThrow(/indices\[1\] must be a child of indices\[0\] = 0/);
    expect(() => paged.acceptPath(a, [0, 7])).toThrow(/indices\[1\] must be a node of the last tree/);
    expect(paged.lengthOf(a)).toBe(14);
    m.acceptPath(a, [0, 2, 4]);
    await m.call([{ id: a, length: 1 }]);
    for (const id of [a, b]) await m.checkContents(id, true);
    m.dispose();
    paged.dispose();
    mha.dispose();
    other.dispose();
  });
});
