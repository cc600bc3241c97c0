// Paged KV pools of every dtype on the 'wasm' backend ('f32', 'f16', 'q8_0', 'q4_0'; src/wasm/paged-kv-cache.ts's
// rows, wasm/paged.ts's attendPaged decoding f16 and q-dtype rows 64 keys at a time with wasm/attention.ts's
// decoder): one paged call for all sequences against each sequence run alone through a plain 'wasm'
// KvCache of the same dtype (same layer, same tokens, same steps): mixed prefills and steps, fork
// (copy-on-write of a partial block), truncate, remove and block reuse, a tree and acceptPath; block sizes
// 16 and 64, Dh 32 (GQA, 4 query heads a key/value head) and 64 (MHA), 1 and 2 threads; the pools' rows
// (read()) equal the plain caches' exactly; the pools' bytes; a q-dtype with Dh not a multiple of 32 refused.

import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import {
  type AttentionEngine,
  createAttentionEngine,
  InvalidArgumentError,
  type KvCache,
  type KvCacheDtype,
  type MultiHeadAttention,
  type PagedKvCache,
} from '../src/index.ts';
import { kvRowBytes } from '../src/quant/kv.ts';
import { expectClose, type Tolerance } from '../src/util/tolerance.ts';
import { ThreadPool } from '../src/wasm/threads.ts';
import { PAGED_TOLERANCE, type PagedScoreOptions } from './helpers/paged.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { setThreadChoiceMode } from '../src/wasm/thread-choice.ts';

// The passes this file spies on run on the threads whatever their measured choice (thread-choice.ts ThreadChoice).
beforeAll(() => setThreadChoiceMode('always'));
afterAll(() => setThreadChoiceMode('measured'));

let wasm1: AttentionEngine;
let wasm2: AttentionEngine;
beforeAll(async () => {
  wasm1 = await createAttentionEngine({ backend: 'wasm', threads: 1 });
  wasm2 = await createAttentionEngine({ backend: 'wasm', threads: 2 });
});

/** The largest |paged − plain| seen, and its largest share of the tolerance (atol + rtol·|ref|), per dtype. */
const seen = new Map<KvCacheDtype, { diff: number; share: number }>();
afterAll(() => {
  for (const e of [wasm1, wasm2]) e?.dispose();
  const rows = [...seen].map(([dtype, s]) => `${dtype}: max |paged − plain| ${s.diff.toExponential(2)}, ${(100 * s.share).toFixed(3)}% of the tolerance`);
  if (rows.length) console.log(`paged-quant-wasm, against plain caches of the same dtype:\n  ${rows.join('\n  ')}`);
});

type Config = { embedDim: number; numHeads: number; numKvHeads?: number; rotary?: { base: number } };
const DH32: Config = { embedDim: 128, numHeads: 4, numKvHeads: 1, rotary: { base: 10000 } }; // Dh 32: one block of 32 a row; MQA
const DH64: Config = { embedDim: 256, numHeads: 4, rotary: { base: 10000 } }; // Dh 64, MHA
const DTYPES: readonly KvCacheDtype[] = ['f32', 'f16', 'q8_0', 'q4_0'];
const MAX_SEQ = 256;

/** got against want within `tolerance`, recording the largest difference for the summary. */
function check(dtype: KvCacheDtype, got: Float32Array, want: Float32Array, tolerance: Tolerance, what: string): void {
  expectClose(got, want, tolerance, what);
  const s = seen.get(dtype) ?? { diff: 0, share: 0 };
  for (let i = 0; i < got.length; i++) {
    const d = Math.abs(got[i] - want[i]);
    s.diff = Math.max(s.diff, d);
    s.share = Math.max(s.share, d / (tolerance.atol + tolerance.rtol * Math.abs(want[i])));
  }
  seen.set(dtype, s);
}

function concat(parts: readonly Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** A paged pool of `dtype` beside a plain cache of the same dtype per sequence, fed the same tokens. */
class Harness {
  readonly paged: PagedKvCache;
  readonly solo = new Map<number, { cache: KvCache; history: Float32Array[] }>();
  private readonly rng: () => number;
  readonly E: number;

  constructor(
    readonly layer: MultiHeadAttention,
    readonly dtype: KvCacheDtype,
    options: { blockSize: number; maxBlocks: number },
    seed: number,
    readonly score: PagedScoreOptions = {},
  ) {
    this.E = layer.embedDim;
    this.paged = layer.createPagedKvCache({ ...options, dtype });
    expect(this.paged.dtype).toBe(dtype);
    this.rng = mulberry32(seed);
  }

  private soloCache(): KvCache {
    const cache = this.layer.createKvCache({ batchSize: 1, maxSeqLen: MAX_SEQ, dtype: this.dtype });
    expect(cache.dtype).toBe(this.dtype);
    return cache;
  }

  add(): number {
    const id = this.paged.addSequence();
    this.solo.set(id, { cache: this.soloCache(), history: [] });
    return id;
  }

  async fork(id: number): Promise<number> {
    const child = this.paged.fork(id);
    const history = [...this.solo.get(id)!.history];
    const cache = this.soloCache();
    const rows = concat(history);
    if (rows.length) await this.layer.forward(rows, { batchSize: 1, seqLen: rows.length / this.E, kvCache: cache, isCausal: true, ...this.score });
    this.solo.set(child, { cache, history });
    return child;
  }

  truncate(id: number, length: number): void {
    this.paged.truncate(id, length);
    const s = this.solo.get(id)!;
    s.cache.truncate(length);
    s.history = [concat(s.history).slice(0, length * this.E)];
  }

  remove(id: number): void {
    this.paged.remove(id);
    this.solo.get(id)!.cache.dispose();
    this.solo.delete(id);
  }

  /** One paged call of `parts`, each sequence's rows against its plain cache fed the same tokens; returns the paged output. */
  async call(parts: readonly { id: number; length: number; treeParents?: Int32Array }[], what: string): Promise<Float32Array> {
    const E = this.E;
    const xs = parts.map((p) => uniform(p.length * E, 1, this.rng));
    const got = (await this.layer.forward(concat(xs), { kvCache: this.paged, sequences: parts.map((p) => ({ ...p })), ...this.score })).output;
    let row = 0;
    for (const [i, p] of parts.entries()) {
      const s = this.solo.get(p.id)!;
      const alone = (
        await this.layer.forward(xs[i], {
          batchSize: 1,
          seqLen: p.length,
          kvCache: s.cache,
          ...(p.treeParents ? { treeParents: p.treeParents } : { isCausal: true }),
          ...this.score,
        })
      ).output;
      s.history.push(xs[i]);
      check(this.dtype, got.subarray(row * E, (row + p.length) * E), alone, PAGED_TOLERANCE, `${this.dtype} ${what}: sequence ${p.id} against its solo run`);
      expect(this.paged.lengthOf(p.id)).toBe(s.cache.length);
      row += p.length;
    }
    return got;
  }

  /** Every sequence's stored values (dequantized) equal its plain cache's, exactly. */
  async checkContents(what: string): Promise<void> {
    for (const [id, s] of this.solo) {
      const got = await this.paged.read(id);
      const plain = await s.cache.read();
      expect(got.key.length).toBe(plain.key.length);
      expect(got.key, `${this.dtype} ${what}: keys of ${id}`).toEqual(plain.key);
      expect(got.value, `${this.dtype} ${what}: values of ${id}`).toEqual(plain.value);
    }
  }

  dispose(): void {
    for (const s of this.solo.values()) s.cache.dispose();
    this.paged.dispose();
  }
}

/** Mixed prefills (a chunk of 64 keys across several blocks, and several chunks) and steps, fork with a partial block, truncate, remove and reuse. */
async function session(h: Harness): Promise<void> {
  const lengths = [1, 70, 19, 130];
  const ids = lengths.map(() => h.add());
  await h.call(
    ids.map((id, i) => ({ id, length: lengths[i] })),
    'prefill',
  );
  await h.checkContents('after the prefill');
  for (let step = 0; step < 2; step++)
    await h.call(
      ids.map((id) => ({ id, length: 1 })),
      `step ${step}`,
    );
  const child = await h.fork(ids[1]); // 72 positions: a partial last block (blockSize 16 and 64)
  await h.call(
    [
      { id: child, length: 2 },
      { id: ids[1], length: 1 },
      { id: ids[3], length: 5 },
    ],
    'after fork: child and parent write into the shared block',
  );
  await h.checkContents('after fork');
  h.truncate(ids[3], 60);
  h.remove(ids[0]);
  const fresh = h.add(); // reuses the removed sequence's blocks
  await h.call(
    [
      { id: fresh, length: 7 },
      { id: ids[3], length: 1 },
      { id: ids[2], length: 3 },
      { id: child, length: 1 },
    ],
    'after truncate, remove and reuse',
  );
  await h.checkContents('at the end');
}

describe.each(DTYPES)("'wasm' paged pool of %s equals each sequence run alone on a plain 'wasm' cache of that dtype", (dtype) => {
  for (const [threads, engine] of [
    [1, () => wasm1],
    [2, () => wasm2],
  ] as const) {
    for (const [config, blockSize] of [
      [DH32, 16],
      [DH32, 64],
      [DH64, 16],
      [DH64, 64],
    ] as const) {
      test(`Dh ${config.embedDim / config.numHeads}, blockSize ${blockSize}, ${threads} thread(s)`, async () => {
        const mha = engine().createMultiHeadAttention(config, randomStateDict(config, 3));
        const h = new Harness(mha, dtype, { blockSize, maxBlocks: Math.ceil(600 / blockSize) }, 5);
        await session(h);
        h.dispose();
        mha.dispose();
      });
    }
  }

  test('a tree, then acceptPath, equals the path run alone (blockSize 16, the path across a block boundary)', async () => {
    const mha = wasm1.createMultiHeadAttention(DH32, randomStateDict(DH32, 7));
    const h = new Harness(mha, dtype, { blockSize: 16, maxBlocks: 20 }, 8);
    const other = h.add();
    const id = h.add();
    await h.call(
      [
        { id: other, length: 3 },
        { id, length: 12 },
      ],
      'prefix',
    );
    const parents = Int32Array.from([-1, 0, 0, 1, 2, 4, 5]);
    await h.call([{ id, length: 7, treeParents: parents }], 'tree');
    const path = [0, 2, 4, 5, 6];
    h.paged.acceptPath(id, path);
    h.solo.get(id)!.cache.acceptPath(path);
    expect(h.paged.lengthOf(id)).toBe(12 + path.length);
    h.solo.get(id)!.history = []; // not replayed after this
    await h.checkContents('after acceptPath');
    await h.call(
      [
        { id, length: 1 },
        { id: other, length: 1 },
      ],
      'the step after acceptPath',
    );
    h.dispose();
    mha.dispose();
  });
});

test.each(['f16', 'q8_0', 'q4_0'] as const)('%s: window, softcap, sinks and ALiBi per sequence (each head on its own: no grouped step)', async (dtype) => {
  const mha = wasm2.createMultiHeadAttention(DH32, randomStateDict(DH32, 13));
  const score: PagedScoreOptions = {
    window: 40,
    softcap: 20,
    sinks: Float32Array.from([0.5, -1, 0, 2]),
    alibiSlopes: Float32Array.from([0.5, 0.25, 0.125, 0.0625]),
  };
  const h = new Harness(mha, dtype, { blockSize: 16, maxBlocks: 30 }, 14, score);
  const ids = [h.add(), h.add(), h.add()];
  await h.call(
    [
      { id: ids[0], length: 90 },
      { id: ids[1], length: 37 },
      { id: ids[2], length: 1 },
    ],
    'prefill with score options',
  );
  await h.call(
    ids.map((id) => ({ id, length: 1 })),
    'a step with score options',
  );
  await h.checkContents('score options');
  h.dispose();
  mha.dispose();
});

test('2 threads: the workers decode and attend over q8_0, q4_0 and f16 pools in place; the outputs equal 1 thread bit for bit', async () => {
  const config = { embedDim: 256, numHeads: 8, numKvHeads: 2, rotary: {} }; // Dh 32
  const sd = randomStateDict(config, 31);
  const lengths = [140, 128, 66, 140, 1, 100];
  const T = lengths.reduce((a, b) => a + b, 0);
  const x = uniform(T * 256, 1, mulberry32(32));
  const steps = uniform(lengths.length * 256, 1, mulberry32(33));
  const run = vi.spyOn(ThreadPool.prototype, 'run');
  try {
    for (const dtype of ['q8_0', 'q4_0', 'f16'] as const) {
      run.mockClear();
      const outputs: Float32Array[][] = [];
      for (const engine of [wasm1, wasm2]) {
        const mha = engine.createMultiHeadAttention(config, sd);
        const paged = mha.createPagedKvCache({ blockSize: 16, maxBlocks: 64, dtype });
        const ids = lengths.map(() => paged.addSequence());
        const prefill = (await mha.forward(x, { kvCache: paged, sequences: ids.map((id, i) => ({ id, length: lengths[i] })) })).output;
        const step = (await mha.forward(steps, { kvCache: paged, sequences: ids.map((id) => ({ id, length: 1 })) })).output;
        outputs.push([prefill, step]);
        if (engine === wasm2) {
          // The first sequence alone on a plain cache of the dtype.
          const plain = mha.createKvCache({ batchSize: 1, maxSeqLen: 160, dtype });
          const alone = (await mha.forward(x.subarray(0, 140 * 256), { batchSize: 1, seqLen: 140, kvCache: plain, isCausal: true })).output;
          check(dtype, prefill.subarray(0, 140 * 256), alone, PAGED_TOLERANCE, `${dtype}: 2 threads' prefill of sequence 0 against its solo run`);
          const next = (await mha.forward(steps.subarray(0, 256), { batchSize: 1, seqLen: 1, kvCache: plain, isCausal: true })).output;
          check(dtype, step.subarray(0, 256), next, PAGED_TOLERANCE, `${dtype}: 2 threads' step of sequence 0 against its solo run`);
        }
        mha.dispose();
      }
      const onWorkers = new Set(run.mock.calls.flatMap(([, lists]) => lists.slice(1).flatMap((calls) => calls.map(([name]) => name))));
      expect(onWorkers.has('attendPaged'), dtype).toBe(true);
      expect(outputs[1], dtype).toEqual(outputs[0]);
    }
  } finally {
    run.mockRestore();
  }
});

test("bytes: each row its dtype's (quant/kv.ts's kvRowBytes); q8_0 ≤ 0.56×, q4_0 ≤ 0.30× of an f16 pool's", () => {
  const mha = wasm1.createMultiHeadAttention(DH64, randomStateDict(DH64, 9));
  const bytes = Object.fromEntries(
    DTYPES.map((dtype) => {
      const p = mha.createPagedKvCache({ blockSize: 16, maxBlocks: 64, dtype });
      const b = p.bytes;
      expect(b, dtype).toBe(2 * 64 * 4 * 16 * kvRowBytes(dtype, 64));
      p.dispose();
      return [dtype, b];
    }),
  );
  expect(bytes.f16).toBe(2 * 64 * 4 * 16 * 64 * 2);
  expect(bytes.f32).toBe(2 * bytes.f16);
  expect(bytes.q8_0 / bytes.f16).toBeLessThanOrEqual(0.56);
  expect(bytes.q4_0 / bytes.f16).toBeLessThanOrEqual(0.3);
  mha.dispose();
});

test("a q-dtype pool with a head size not a multiple of 32 is refused, naming the argument; 'f16' with Dh 20 works", async () => {
  const config = { embedDim: 40, numHeads: 2 }; // Dh 20
  const mha = wasm1.createMultiHeadAttention(config, randomStateDict(config, 11));
  for (const dtype of ['q8_0', 'q4_0'] as const) {
    expect(() => mha.createPagedKvCache({ blockSize: 16, maxBlocks: 4, dtype })).toThrow(InvalidArgumentError);
    expect(() => mha.createPagedKvCache({ blockSize: 16, maxBlocks: 4, dtype })).toThrow(/options\.dtype.*multiple of 32/s);
  }
  // Dh 20: f16 rows of 2 × 8 halves and a scalar tail of 4; odd lengths straddle blocks of 4.
  const h = new Harness(mha, 'f16', { blockSize: 4, maxBlocks: 40 }, 12);
  const a = h.add();
  const b = h.add();
  await h.call(
    [
      { id: a, length: 9 },
      { id: b, length: 70 },
    ],
    'Dh 20 prefill',
  );
  await h.call(
    [
      { id: a, length: 1 },
      { id: b, length: 1 },
    ],
    'Dh 20 step',
  );
  await h.checkContents('Dh 20');
  h.dispose();
  mha.dispose();
});
