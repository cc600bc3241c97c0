// Paged KV caches on the 'wasm' backend (src/wasm/paged-kv-cache.ts's pool, src/wasm/paged-attention.ts's
// one pass for all sequences, wasm/paged.ts's attendPaged reading K and V in place through the block
// tables). Every call is checked against each sequence run alone on a plain 'wasm' KvCache (the same
// tokens, steps, forks as caches started from the parent's past, truncate, trees and acceptPath) and
// against the 'cpu' backend's paged call of the same weights (the float64 reference per sequence).

import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { type AttentionEngine, createAttentionEngine, type KvCache, type MultiHeadAttention, type PagedKvCache } from '../src/index.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { ThreadPool } from '../src/wasm/threads.ts';
import { setThreadChoiceMode } from '../src/wasm/thread-choice.ts';

// The passes this file spies on run on the threads whatever their measured choice (thread-choice.ts ThreadChoice).
beforeAll(() => setThreadChoiceMode('always'));
afterAll(() => setThreadChoiceMode('measured'));

let wasm1: AttentionEngine;
let wasm2: AttentionEngine;
let cpu: AttentionEngine;
beforeAll(async () => {
  wasm1 = await createAttentionEngine({ backend: 'wasm', threads: 1 });
  wasm2 = await createAttentionEngine({ backend: 'wasm', threads: 2 });
  cpu = await createAttentionEngine({ backend: 'cpu' });
});
afterAll(() => {
  for (const e of [wasm1, wasm2, cpu]) e.dispose();
});

type Config = Parameters<AttentionEngine['createMultiHeadAttention']>[0];
type Score = { window?: number; softcap?: number; sinks?: Float32Array; alibiSlopes?: Float32Array; scale?: number };
const MAX_SEQ = 256;

/**
 * One layer's paged cache on 'wasm' beside the same layer's paged cache on 'cpu' and, per sequence, a
 * plain 'wasm' KvCache that sees the same tokens alone. Ids agree between the two paged caches (both
 * count from 0 the same way).
 */
class Mirror {
  readonly mha: MultiHeadAttention;
  readonly ref: MultiHeadAttention;
  readonly paged: PagedKvCache;
  readonly refPaged: PagedKvCache;
  readonly solo = new Map<number, KvCache>();
  private readonly rng: () => number;

  constructor(
    engine: AttentionEngine,
    readonly config: Config,
    seed: number,
    cache: { blockSize: number; maxBlocks: number } | { sharing: Mirror },
  ) {
    const sd = randomStateDict(config as Parameters<typeof randomStateDict>[0], seed);
    this.mha = engine.createMultiHeadAttention(config, sd);
    this.ref = cpu.createMultiHeadAttention(config, sd);
    if ('sharing' in cache) {
      this.paged = this.mha.createPagedKvCache({ sharing: cache.sharing.paged });
      this.refPaged = this.ref.createPagedKvCache({ sharing: cache.sharing.refPaged });
      for (const id of this.paged.sequenceIds) this.solo.set(id, this.newSolo());
    } else {
      this.paged = this.mha.createPagedKvCache(cache);
      this.refPaged = this.ref.createPagedKvCache(cache);
    }
    this.rng = mulberry32(seed + 1);
  }

  get E(): number {
    return this.config.embedDim;
  }

  private newSolo(): KvCache {
    return this.mha.createKvCache({ batchSize: 1, maxSeqLen: MAX_SEQ });
  }

  add(): number {
    const id = this.paged.addSequence();
    expect(this.refPaged.addSequence()).toBe(id);
    this.solo.set(id, this.newSolo());
    return id;
  }

  /** For layers sharing this one's table: a sequence they added. */
  adopt(id: number): void {
    this.solo.set(id, this.newSolo());
  }

  async fork(id: number): Promise<number> {
    const child = this.paged.fork(id);
    expect(this.refPaged.fork(id)).toBe(child);
    const parent = this.solo.get(id)!;
    const { key, value } = await parent.read();
    this.solo.set(child, this.mha.createKvCache({ batchSize: 1, maxSeqLen: MAX_SEQ, key, value, length: parent.length }));
    return child;
  }

  truncate(id: number, length: number): void {
    this.paged.truncate(id, length);
    this.refPaged.truncate(id, length);
    this.solo.get(id)!.truncate(length);
  }

  remove(id: number): void {
    this.paged.remove(id);
    this.refPaged.remove(id);
    this.solo.get(id)!.dispose();
    this.solo.delete(id);
  }

  acceptPath(id: number, path: number[]): void {
    this.paged.acceptPath(id, path);
    this.refPaged.acceptPath(id, path);
    this.solo.get(id)!.acceptPath(path);
  }

  /**
   * One paged call of these sequences (new random rows, or `x`), checked against each sequence's solo run
   * and the 'cpu' paged call; returns x and the output.
   */
  async step(
    entries: { id: number; length: number; treeParents?: Int32Array }[],
    score: Score = {},
    x?: Float32Array,
  ): Promise<{ x: Float32Array; output: Float32Array }> {
    const E = this.E;
    const T = entries.reduce((s, e) => s + e.length, 0);
    const input = x ?? uniform(T * E, 1, this.rng);
    const { output } = await this.mha.forward(input, { kvCache: this.paged, sequences: entries, ...score });
    const { output: expected } = await this.ref.forward(input, { kvCache: this.refPaged, sequences: entries, ...score });
    let row = 0;
    for (const e of entries) {
      const solo = this.solo.get(e.id)!;
      const rows = input.subarray(row * E, (row + e.length) * E);
      const alone = (
        await this.mha.forward(rows, {
          batchSize: 1,
          seqLen: e.length,
          kvCache: solo,
          isCausal: true,
          ...(e.treeParents ? { treeParents: e.treeParents } : {}),
          ...score,
        })
      ).output;
      const mine = output.subarray(row * E, (row + e.length) * E);
      const tol = f32Tolerance([E, solo.length, E]);
      expectClose(mine, alone, tol, `sequence ${e.id} (${e.length} new, ${solo.length} in all) vs its run alone on a plain wasm cache`);
      expectClose(mine, expected.subarray(row * E, (row + e.length) * E), tol, `sequence ${e.id} vs the cpu paged call`);
      expect(this.paged.lengthOf(e.id)).toBe(solo.length);
      row += e.length;
    }
    return { x: input, output };
  }

  /** Every sequence's K and V in the pool equal its solo cache's. */
  async checkContents(): Promise<void> {
    for (const [id, solo] of this.solo) {
      const mine = await this.paged.read(id);
      const alone = await solo.read();
      expect(mine.key.length).toBe(alone.key.length);
      expectClose(mine.key, alone.key, f32Tolerance([this.E]), `keys of sequence ${id}`);
      expectClose(mine.value, alone.value, f32Tolerance([this.E]), `values of sequence ${id}`);
    }
  }
}

const engines = [
  ['1 thread', () => wasm1],
  ['2 threads', () => wasm2],
] as const;

describe.each(engines)('paged wasm, %s', (_name, engine) => {
  test('mixed lengths 1 … 70 in one call (GQA, rotary), then steps of all, then mixed prefills and steps', async () => {
    const m = new Mirror(engine(), { embedDim: 64, numHeads: 8, numKvHeads: 2, rotary: {} }, 1, { blockSize: 16, maxBlocks: 64 });
    const lengths = [1, 70, 17, 33, 5, 64, 2];
    const ids = lengths.map(() => m.add());
    await m.step(ids.map((id, i) => ({ id, length: lengths[i] })));
    for (let t = 0; t < 3; t++) await m.step(ids.map((id) => ({ id, length: 1 })));
    await m.step([
      { id: ids[3], length: 9 },
      { id: ids[0], length: 1 },
      { id: ids[5], length: 20 },
      { id: ids[1], length: 1 },
    ]);
    await m.checkContents();
  });

  test.each([1, 4, 16, 64])('blockSize %i: lengths straddling blocks, then steps across block ends', async (bs) => {
    const m = new Mirror(engine(), { embedDim: 48, numHeads: 4, numKvHeads: 2, rotary: {} }, 10 + bs, { blockSize: bs, maxBlocks: Math.ceil(600 / bs) });
    const lengths = [Math.max(1, bs - 1), bs, bs + 1, 2 * bs + 3].map((n) => Math.min(n, 70));
    const ids = lengths.map(() => m.add());
    await m.step(ids.map((id, i) => ({ id, length: lengths[i] })));
    for (let t = 0; t < 3; t++) await m.step(ids.map((id) => ({ id, length: 1 })));
    await m.step(ids.map((id, i) => ({ id, length: 1 + ((i * 3) % 5) })));
    await m.checkContents();
  });

  test.each([
    ['MHA', { embedDim: 32, numHeads: 4, numKvHeads: 4 }],
    ['GQA', { embedDim: 48, numHeads: 6, numKvHeads: 2, rotary: { dim: 6 } }],
    ['MQA, Dh 10', { embedDim: 40, numHeads: 4, numKvHeads: 1, headDim: 10, rotary: {} }],
    ['Dh 6 (not a multiple of 4), interleaved rotary', { embedDim: 24, numHeads: 4, numKvHeads: 2, rotary: { interleaved: true } }],
  ] as [string, Config][])('%s', async (_label, config) => {
    const m = new Mirror(engine(), config, 3, { blockSize: 4, maxBlocks: 80 });
    const ids = [m.add(), m.add(), m.add()];
    await m.step([
      { id: ids[0], length: 7 },
      { id: ids[1], length: 1 },
      { id: ids[2], length: 13 },
    ]);
    for (let t = 0; t < 2; t++) await m.step(ids.map((id) => ({ id, length: 1 })));
    await m.checkContents();
  });

  test.each([
    ['window 5', { window: 5 }],
    ['softcap 0.8 and scale 0.9', { softcap: 0.8, scale: 0.9 }],
    ['sinks', { sinks: Float32Array.from([0.5, -1, 2, 0]) }],
    ['ALiBi', { alibiSlopes: Float32Array.from([0.5, 0.25, 0.125, 0.0625]) }],
    ['window, softcap and sinks', { window: 9, softcap: 1.5, sinks: Float32Array.from([1, 0, -2, 0.5]) }],
  ] as [string, Score][])('score options: %s', async (_label, score) => {
    const m = new Mirror(engine(), { embedDim: 32, numHeads: 4, numKvHeads: 2, rotary: {} }, 4, { blockSize: 8, maxBlocks: 40 });
    const ids = [m.add(), m.add()];
    await m.step(
      [
        { id: ids[0], length: 20 },
        { id: ids[1], length: 3 },
      ],
      score,
    );
    for (let t = 0; t < 3; t++)
      await m.step(
        ids.map((id) => ({ id, length: 1 })),
        score,
      );
  });

  test('fork copy-on-write: the parent is unchanged by its children writes; children diverge', async () => {
    const m = new Mirror(engine(), { embedDim: 32, numHeads: 4, numKvHeads: 2, rotary: {} }, 5, { blockSize: 4, maxBlocks: 40 });
    const parent = m.add();
    await m.step([{ id: parent, length: 10 }]); // 2 full blocks and half of a third
    const before = await m.paged.read(parent);
    const free = m.paged.freeBlocks;
    const a = await m.fork(parent);
    const b = await m.fork(parent);
    expect(m.paged.freeBlocks).toBe(free); // nothing copied yet
    await m.step([
      { id: a, length: 1 },
      { id: b, length: 3 },
    ]);
    expect(m.paged.freeBlocks).toBe(free - 2 - 1); // each child copied the shared half block; b also took a new one
    const after = await m.paged.read(parent);
    expect(after.key).toEqual(before.key);
    expect(after.value).toEqual(before.value);
    await m.step([
      { id: parent, length: 2 },
      { id: a, length: 1 },
      { id: b, length: 1 },
    ]);
    await m.checkContents();
  });

  test('truncate, remove and block reuse', async () => {
    const m = new Mirror(engine(), { embedDim: 32, numHeads: 4, numKvHeads: 1, rotary: {} }, 6, { blockSize: 4, maxBlocks: 12 });
    const [a, b] = [m.add(), m.add()];
    await m.step([
      { id: a, length: 17 },
      { id: b, length: 9 },
    ]);
    expect(m.paged.freeBlocks).toBe(12 - 5 - 3);
    m.truncate(a, 6); // keeps 2 blocks
    expect(m.paged.freeBlocks).toBe(12 - 2 - 3);
    await m.step([
      { id: a, length: 1 },
      { id: b, length: 1 },
    ]);
    m.remove(b);
    expect(m.paged.freeBlocks).toBe(12 - 2);
    const c = m.add(); // takes b's and a's old blocks (stale rows in them)
    await m.step([
      { id: c, length: 30 },
      { id: a, length: 2 },
    ]);
    expect(m.paged.freeBlocks).toBe(12 - 8 - 3);
    await expect(m.mha.forward(new Float32Array(12 * 32), { kvCache: m.paged, sequences: [{ id: c, length: 12 }] })).rejects.toThrow(/needs 3 block/);
    expect(m.paged.lengthOf(c)).toBe(30);
    await m.step([{ id: c, length: 1 }]);
    await m.checkContents();
  });

  test('a tree on a paged sequence, beside a plain step, then acceptPath and a step', async () => {
    const m = new Mirror(engine(), { embedDim: 48, numHeads: 4, numKvHeads: 2, rotary: {} }, 7, { blockSize: 4, maxBlocks: 40 });
    const [a, b] = [m.add(), m.add()];
    await m.step([
      { id: a, length: 6 },
      { id: b, length: 5 },
    ]);
    const treeParents = Int32Array.from([-1, 0, 0, 1, 2, 4]);
    await m.step([
      { id: a, length: 6, treeParents },
      { id: b, length: 1 },
    ]);
    m.acceptPath(a, [0, 2, 4, 5]);
    expect(m.paged.lengthOf(a)).toBe(10);
    await m.step([
      { id: a, length: 1 },
      { id: b, length: 1 },
    ]);
    await m.checkContents();
    // A tree of one token: a decode step of a group of heads with its mask.
    await m.step([{ id: b, length: 1, treeParents: Int32Array.from([-1]) }]);
  });

  test('two layers sharing a block table: a model step runs layer after layer', async () => {
    const config = { embedDim: 32, numHeads: 4, numKvHeads: 2, rotary: {} };
    const first = new Mirror(engine(), config, 8, { blockSize: 8, maxBlocks: 30 });
    const [a, b] = [first.add(), first.add()];
    const second = new Mirror(engine(), config, 9, { sharing: first });
    expect(second.paged.sequenceIds).toEqual([a, b]);
    const run = async (entries: { id: number; length: number }[]) => {
      const { output } = await first.step(entries);
      await second.step(entries, {}, output);
    };
    await run([
      { id: a, length: 12 },
      { id: b, length: 3 },
    ]);
    const c = await first.fork(a);
    second.solo.set(c, second.mha.createKvCache({ batchSize: 1, maxSeqLen: MAX_SEQ, ...(await second.solo.get(a)!.read()), length: 12 }));
    await run([
      { id: c, length: 1 },
      { id: a, length: 1 },
      { id: b, length: 1 },
    ]);
    await first.checkContents();
    await second.checkContents();
  });
});

test('2 threads: the workers attend over the pool in place; the outputs equal 1 thread bit for bit', async () => {
  const config = { embedDim: 128, numHeads: 8, numKvHeads: 2, rotary: {} };
  const sd = randomStateDict(config, 31);
  const lengths = [140, 128, 66, 140, 1, 100];
  const T = lengths.reduce((a, b) => a + b, 0);
  const x = uniform(T * 128, 1, mulberry32(32));
  const steps = uniform(lengths.length * 128, 1, mulberry32(33));
  const outputs: Float32Array[][] = [];
  const run = vi.spyOn(ThreadPool.prototype, 'run');
  try {
    for (const engine of [wasm1, wasm2]) {
      const mha = engine.createMultiHeadAttention(config, sd);
      const paged = mha.createPagedKvCache({ blockSize: 16, maxBlocks: 64 });
      const ids = lengths.map(() => paged.addSequence());
      const prefill = (await mha.forward(x, { kvCache: paged, sequences: ids.map((id, i) => ({ id, length: lengths[i] })) })).output;
      const step = (await mha.forward(steps, { kvCache: paged, sequences: ids.map((id) => ({ id, length: 1 })) })).output;
      outputs.push([prefill, step]);
      mha.dispose();
    }
    // The prefill's Q·Kᵀ (Σ H·length·Skv·Dh ≈ 9M multiply-adds) is over a paged call's split threshold (4M).
    const onWorkers = new Set(run.mock.calls.flatMap(([, lists]) => lists.slice(1).flatMap((calls) => calls.map(([name]) => name))));
    expect(onWorkers.has('attendPaged')).toBe(true);
  } finally {
    run.mockRestore();
  }
  expect(outputs[1]).toEqual(outputs[0]);
});

test('random interleavings of add, fork, step, truncate, remove and trees equal solo runs (2 threads)', async () => {
  const m = new Mirror(wasm2, { embedDim: 32, numHeads: 4, numKvHeads: 2, rotary: {} }, 41, { blockSize: 4, maxBlocks: 120 });
  const rand = mulberry32(42);
  const pick = <T>(a: T[]): T => a[Math.floor(rand() * a.length)];
  const live = () => [...m.solo.keys()];
  const pending = new Map<number, number>(); // id → tree size, until acceptPath
  for (let op = 0; op < 40; op++) {
    const ids = live();
    const r = rand();
    if (ids.length === 0 || r < 0.15) m.add();
    else if (r < 0.25) await m.fork(pick(ids));
    else if (r < 0.35) {
      const id = pick(ids);
      m.truncate(id, Math.floor(rand() * (m.paged.lengthOf(id) + 1)));
      pending.delete(id);
    } else if (r < 0.42 && ids.length > 1) {
      const id = pick(ids);
      m.remove(id);
      pending.delete(id);
    } else if (r < 0.5) {
      const id = pick(ids);
      if (pending.has(id)) {
        m.acceptPath(id, [0, 1]);
        pending.delete(id);
      } else if (m.paged.lengthOf(id) + 3 <= MAX_SEQ) {
        await m.step([{ id, length: 3, treeParents: Int32Array.from([-1, 0, 0]) }]);
        pending.set(id, 3);
      }
    } else {
      const chosen = ids.filter(() => rand() < 0.6);
      const entries = (chosen.length > 0 ? chosen : [ids[0]])
        .map((id) => ({ id, length: rand() < 0.5 ? 1 : 1 + Math.floor(rand() * 12) }))
        .filter((e) => m.paged.lengthOf(e.id) + e.length <= MAX_SEQ);
      const need = entries.reduce((n, e) => n + Math.ceil((m.paged.lengthOf(e.id) + e.length) / 4) - Math.floor(m.paged.lengthOf(e.id) / 4), 0);
      if (entries.length > 0 && need <= m.paged.freeBlocks) {
        for (const e of entries) pending.delete(e.id);
        await m.step(entries);
      }
    }
  }
  await m.checkContents();
});

test('a pool made while a forward runs is placed by the next paged call; disposed pools give their memory back', async () => {
  const config = { embedDim: 32, numHeads: 4, numKvHeads: 2 };
  const mha = wasm1.createMultiHeadAttention(config, randomStateDict(config, 51));
  const x = uniform(40 * 32, 1, mulberry32(52));
  const running = mha.forward(x, { batchSize: 1, seqLen: 40, isCausal: true });
  const paged = mha.createPagedKvCache({ blockSize: 8, maxBlocks: 16 });
  const id = paged.addSequence();
  await running;
  const { output } = await mha.forward(x.subarray(0, 10 * 32), { kvCache: paged, sequences: [{ id, length: 10 }] });
  const plain = mha.createKvCache({ batchSize: 1, maxSeqLen: 16 });
  const alone = (await mha.forward(x.subarray(0, 10 * 32), { batchSize: 1, seqLen: 10, kvCache: plain, isCausal: true })).output;
  expectClose(output, alone, f32Tolerance([32, 10, 32]), 'first call on a pool placed late');
  const memory = (mha as unknown as { impl: { kernels: { memory: WebAssembly.Memory } } }).impl.kernels.memory;
  paged.dispose();
  const bytes = memory.buffer.byteLength;
  for (let i = 0; i < 5; i++) {
    const p = mha.createPagedKvCache({ blockSize: 8, maxBlocks: 16 });
    const s = p.addSequence();
    await mha.forward(x.subarray(0, 10 * 32), { kvCache: p, sequences: [{ id: s, length: 10 }] });
    p.dispose();
  }
  expect(memory.buffer.byteLength).toBe(bytes);
  expect(paged.bytes).toBe(0);
});

test("a paged cache's dtype is 'f32' unless asked (the other dtypes: test/paged-quant-wasm.test.ts)", () => {
  const mha = wasm1.createMultiHeadAttention({ embedDim: 64, numHeads: 2 }, randomStateDict({ embedDim: 64, numHeads: 2 }, 1));
  const paged = mha.createPagedKvCache({ blockSize: 16, maxBlocks: 4 });
  expect(paged.dtype).toBe('f32');
  expect(paged.bytes).toBe(2 * 4 * 16 * 2 * 32 * 4);
});
