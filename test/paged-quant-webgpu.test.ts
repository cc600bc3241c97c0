// Paged KV pools of every dtype on WebGPU ('f32', 'f16', 'q8_0', 'q4_0', on an f32 and an f16 engine):
// one paged call for all sequences against each sequence run alone through a plain WebGPU KvCache of the
// same dtype (same layer, same tokens, same steps): mixed prefills and steps, fork (copy-on-write of a
// partial block), truncate, remove and block reuse, a tree and acceptPath with Dh 32 (a row's one scale
// shares a word with the next row's), block sizes 1, 4, 16, GQA; the pool's stored values (read()) equal
// to the plain cache's; the pools' bytes.

import { describe, expect, test } from 'vitest';
import type { AttentionEngine, KvCache, KvCacheDtype, MultiHeadAttention, PagedKvCache } from '../src/index.ts';
import { expectClose, f16Tolerance, f32Tolerance, type Tolerance } from '../src/util/tolerance.ts';
import { FAST_COMPILING, useEngines } from './helpers/engines.ts';
import { createGpuEngine } from './helpers/gpu.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

const engines = useEngines({ webgpu: FAST_COMPILING }, 'webgpu');

type Config = { embedDim: number; numHeads: number; numKvHeads?: number; rotary?: { base: number } };
const DH32: Config = { embedDim: 96, numHeads: 3, numKvHeads: 1, rotary: { base: 10000 } }; // Dh 32: one block a row
const DH64: Config = { embedDim: 128, numHeads: 2, rotary: { base: 10000 } }; // Dh 64, MHA
const DTYPES: readonly KvCacheDtype[] = ['f32', 'f16', 'q8_0', 'q4_0'];

/** A paged pool of `dtype` beside a plain cache of the same dtype per sequence, fed the same tokens. */
class Harness {
  readonly paged: PagedKvCache;
  readonly solo = new Map<number, { cache: KvCache; history: Float32Array[] }>();
  private readonly rng;

  constructor(
    readonly layer: MultiHeadAttention,
    readonly E: number,
    readonly dtype: KvCacheDtype,
    options: { blockSize: number; maxBlocks: number },
    readonly tolerance: (Skv: number) => Tolerance,
    seed: number,
  ) {
    this.paged = layer.createPagedKvCache({ ...options, dtype });
    expect(this.paged.dtype).toBe(dtype);
    this.rng = mulberry32(seed);
  }

  private soloCache(): KvCache {
    return this.layer.createKvCache({ batchSize: 1, maxSeqLen: 128, dtype: this.dtype });
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
    if (rows.length) await this.layer.forward(rows, { batchSize: 1, seqLen: rows.length / this.E, kvCache: cache, isCausal: true });
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

  async call(parts: readonly { id: number; length: number }[], what: string): Promise<void> {
    const E = this.E;
    const xs = parts.map((p) => uniform(p.length * E, 1, this.rng));
    const got = (await this.layer.forward(concat(xs), { kvCache: this.paged, sequences: parts.map((p) => ({ ...p })) })).output;
    let row = 0;
    for (const [i, p] of parts.entries()) {
      const s = this.solo.get(p.id)!;
      const Skv = s.cache.length + p.length;
      const alone = (await this.layer.forward(xs[i], { batchSize: 1, seqLen: p.length, kvCache: s.cache, isCausal: true })).output;
      s.history.push(xs[i]);
      expectClose(got.subarray(row * E, (row + p.length) * E), alone, this.tolerance(Skv), `${this.dtype} ${what}: sequence ${p.id} against its solo run`);
      expect(this.paged.lengthOf(p.id)).toBe(s.cache.length);
      row += p.length;
    }
  }

  /** Every sequence's stored values equal its plain cache's, exactly. */
  async checkContents(what: string): Promise<void> {
    for (const [id, s] of this.solo) {
      const got = await this.paged.read(id);
      const plain = await s.cache.read();
      expect(got.key, `${this.dtype} ${what}: keys of ${id}`).toEqual(plain.key);
      expect(got.value, `${this.dtype} ${what}: values of ${id}`).toEqual(plain.value);
    }
  }

  dispose(): void {
    for (const s of this.solo.values()) s.cache.dispose();
    this.paged.dispose();
  }
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

function layer(config: Config, seed: number, gpu?: AttentionEngine): MultiHeadAttention {
  return (gpu ?? engines.gpu).createMultiHeadAttention(config, randomStateDict(config, seed));
}

/** Mixed prefills and steps, fork with a partial block, truncate, remove and reuse, checked call by call and by contents. */
async function session(h: Harness): Promise<void> {
  const lengths = [1, 13, 6, 33];
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
  const child = await h.fork(ids[1]); // 15 positions: a partial last block (blockSize 4, 16)
  await h.call(
    [
      { id: child, length: 2 },
      { id: ids[1], length: 1 },
      { id: ids[3], length: 5 },
    ],
    'after fork: child and parent write into the shared block',
  );
  await h.checkContents('after fork');
  h.truncate(ids[3], 20);
  h.remove(ids[0]);
  const fresh = h.add(); // reuses the removed sequence's blocks
  await h.call(
    [
      { id: fresh, length: 7 },
      { id: ids[3], length: 1 },
      { id: ids[2], length: 3 },
    ],
    'after truncate, remove and reuse',
  );
  await h.checkContents('at the end');
}

describe('paged pools of every dtype on webgpu equal each sequence run alone on a plain cache of that dtype', () => {
  for (const dtype of DTYPES) {
    for (const [config, blockSize] of [
      [DH32, 4],
      [DH64, 16],
      [DH32, 1],
    ] as const) {
      test(`${dtype}, Dh ${config.embedDim / config.numHeads}, blockSize ${blockSize}`, async () => {
        const E = config.embedDim;
        const h = new Harness(layer(config, 3), E, dtype, { blockSize, maxBlocks: Math.ceil(260 / blockSize) }, (Skv) => f32Tolerance([E, Skv, E]), 5);
        await session(h);
        h.dispose();
      });
    }

    test(`${dtype}: a tree, then acceptPath (Dh 32: scales sharing words move), equals the path run alone`, async () => {
      const E = DH32.embedDim;
      const mha = layer(DH32, 7);
      const paged = mha.createPagedKvCache({ blockSize: 4, maxBlocks: 20, dtype });
      const rng = mulberry32(8);
      const other = paged.addSequence();
      const id = paged.addSequence();
      const prefix = uniform(6 * E, 1, rng);
      const otherX = uniform(3 * E, 1, rng);
      await mha.forward(concat([otherX, prefix]), {
        kvCache: paged,
        sequences: [
          { id: other, length: 3 },
          { id, length: 6 },
        ],
      });
      const parents = Int32Array.from([-1, 0, 0, 1, 2, 4, 5]);
      const tree = uniform(7 * E, 1, rng);
      await mha.forward(tree, { kvCache: paged, sequences: [{ id, length: 7, treeParents: parents }] });
      const path = [0, 2, 4, 5, 6];
      paged.acceptPath(id, path);
      const solo = mha.createKvCache({ batchSize: 1, maxSeqLen: 32, dtype });
      await mha.forward(prefix, { batchSize: 1, seqLen: 6, kvCache: solo, isCausal: true });
      await mha.forward(tree, { batchSize: 1, seqLen: 7, kvCache: solo, treeParents: parents });
      solo.acceptPath(path);
      expect(paged.lengthOf(id)).toBe(solo.length);
      const [pk, sk] = [await paged.read(id), await solo.read()];
      expect(pk.key).toEqual(sk.key);
      expect(pk.value).toEqual(sk.value);
      const next = uniform(E, 1, rng);
      const got = (await mha.forward(next, { kvCache: paged, sequences: [{ id, length: 1 }] })).output;
      const alone = (await mha.forward(next, { batchSize: 1, seqLen: 1, kvCache: solo, isCausal: true })).output;
      expectClose(got, alone, f32Tolerance([E, 12, E]), `${dtype}: the step after acceptPath`);
      solo.dispose();
      paged.dispose();
    });
  }

  test("bytes: q8_0 ≤ 0.56×, q4_0 ≤ 0.30× of an f16 pool's", () => {
    const mha = layer(DH64, 9);
    const bytes = Object.fromEntries(
      DTYPES.map((dtype) => {
        const p = mha.createPagedKvCache({ blockSize: 16, maxBlocks: 64, dtype });
        const b = p.bytes;
        p.dispose();
        return [dtype, b];
      }),
    );
    expect(bytes.f16).toBe(2 * 64 * 2 * 16 * 64 * 2);
    expect(bytes.f32).toBe(2 * bytes.f16);
    expect(bytes.q8_0 / bytes.f16).toBeLessThanOrEqual(0.56);
    expect(bytes.q4_0 / bytes.f16).toBeLessThanOrEqual(0.3);
  });
});

describe('an f16 engine', () => {
  test('q8_0 and f32 pools against plain caches of the same dtype', async () => {
    const gpu = await createGpuEngine({ ...FAST_COMPILING, precision: 'f16' });
    try {
      for (const dtype of ['q8_0', 'f32'] as const) {
        const E = DH32.embedDim;
        const h = new Harness(layer(DH32, 11, gpu), E, dtype, { blockSize: 4, maxBlocks: 60 }, (Skv) => f16Tolerance([E, Skv, E], 4), 12);
        await session(h);
        h.dispose();
      }
    } finally {
      gpu.dispose();
    }
  });
});
