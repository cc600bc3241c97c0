// Paged KV caches on the WebGPU backend (issue 40, item 3): one paged call for all sequences, against each
// sequence run alone through a plain WebGPU KvCache (same layer, same tokens, same steps) and against the
// 'cpu' backend's paged call (the float64 reference): mixed lengths, steps, prefills beside steps, fork
// (copy-on-write), truncate, remove and block reuse, block sizes 1 … 64, GQA/MQA, rotary, score options,
// padded heads, an f16 engine, trees with acceptPath, two layers sharing a table, refusals.

import { describe, expect, test } from 'vitest';
import { type AttentionEngine, DeviceLostError, InvalidArgumentError, quantizeWeights, type KvCache, type MultiHeadAttention, type PagedKvCache } from '../src/index.ts';
import { pagedPipelinesCompiled } from '../src/webgpu/kernels/paged-attention.ts';
import { expectClose, f16Tolerance, f32Tolerance, type Tolerance } from '../src/util/tolerance.ts';
import { FAST_COMPILING, useEngines } from './helpers/engines.ts';
import { createGpuEngine } from './helpers/gpu.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';

const engines = useEngines({ webgpu: FAST_COMPILING }, 'webgpu', 'cpu');

type Config = { embedDim: number; numHeads: number; numKvHeads?: number; headDim?: number; rotary?: { base: number } };
const GQA_ROTARY: Config = { embedDim: 64, numHeads: 4, numKvHeads: 2, rotary: { base: 10000 } };

type CallOptions = { window?: number; softcap?: number; sinks?: Float32Array; scale?: number; alibiSlopes?: Float32Array };

/**
 * A paged cache on the GPU and on the CPU, driven by the same operations, beside a plain WebGPU KvCache
 * per sequence (the solo runs) fed the same tokens; every call's outputs compared all three ways.
 */
class Harness {
  readonly gpu: PagedKvCache;
  readonly cpu: PagedKvCache;
  readonly solo = new Map<number, { cache: KvCache; history: Float32Array[] }>();
  private readonly rng;

  constructor(
    readonly gpuLayer: MultiHeadAttention,
    readonly cpuLayer: MultiHeadAttention,
    readonly E: number,
    options: { blockSize: number; maxBlocks: number },
    readonly tolerance: (Skv: number) => Tolerance,
    seed = 1,
    sharing?: Harness,
  ) {
    this.gpu = gpuLayer.createPagedKvCache(sharing ? { sharing: sharing.gpu } : options);
    this.cpu = cpuLayer.createPagedKvCache(sharing ? { sharing: sharing.cpu } : options);
    this.rng = mulberry32(seed);
  }

  private soloCache(): KvCache {
    return this.gpuLayer.createKvCache({ batchSize: 1, maxSeqLen: 260 });
  }

  add(): number {
    const id = this.gpu.addSequence();
    expect(this.cpu.addSequence()).toBe(id);
    this.solo.set(id, { cache: this.soloCache(), history: [] });
    return id;
  }

  async fork(id: number): Promise<number> {
    const child = this.gpu.fork(id);
    expect(this.cpu.fork(id)).toBe(child);
    const history = [...this.solo.get(id)!.history];
    const cache = this.soloCache();
    const rows = concat(history);
    if (rows.length) await this.gpuLayer.forward(rows, { batchSize: 1, seqLen: rows.length / this.E, kvCache: cache, isCausal: true });
    this.solo.set(child, { cache, history });
    return child;
  }

  truncate(id: number, length: number): void {
    this.gpu.truncate(id, length);
    this.cpu.truncate(id, length);
    const s = this.solo.get(id)!;
    s.cache.truncate(length);
    s.history = [concat(s.history).slice(0, length * this.E)];
  }

  remove(id: number): void {
    this.gpu.remove(id);
    this.cpu.remove(id);
    this.solo.get(id)!.cache.dispose();
    this.solo.delete(id);
  }

  /** One paged call of these sequences' new tokens (random), checked against the CPU's paged call and each solo run. */
  async call(parts: readonly { id: number; length: number }[], options: CallOptions = {}, what = 'call'): Promise<Float32Array> {
    const E = this.E;
    const xs = parts.map((p) => uniform(p.length * E, 1, this.rng));
    const x = concat(xs);
    const sequences = parts.map((p) => ({ id: p.id, length: p.length }));
    const got = (await this.gpuLayer.forward(x, { kvCache: this.gpu, sequences, ...options })).output;
    const ref = (await this.cpuLayer.forward(x, { kvCache: this.cpu, sequences, ...options })).output;
    let row = 0;
    for (const [i, p] of parts.entries()) {
      const s = this.solo.get(p.id)!;
      const Skv = s.cache.length + p.length;
      const alone = (await this.gpuLayer.forward(xs[i], { batchSize: 1, seqLen: p.length, kvCache: s.cache, isCausal: true, ...options })).output;
      s.history.push(xs[i]);
      const mine = got.subarray(row * E, (row + p.length) * E);
      expectClose(mine, alone, this.tolerance(Skv), `${what}: sequence ${p.id} against its solo run`);
      expectClose(mine, ref.subarray(row * E, (row + p.length) * E), this.tolerance(Skv), `${what}: sequence ${p.id} against cpu`);
      expect(this.gpu.lengthOf(p.id)).toBe(this.cpu.lengthOf(p.id));
      row += p.length;
    }
    return got;
  }

  /** The pool's contents of every sequence against the solo caches' and the CPU's. */
  async checkContents(): Promise<void> {
    for (const [id, s] of this.solo) {
      const got = await this.gpu.read(id);
      const plain = await s.cache.read();
      const ref = await this.cpu.read(id);
      const tol = this.tolerance(s.cache.length);
      expectClose(got.key, plain.key, tol, `keys of ${id}`);
      expectClose(got.value, plain.value, tol, `values of ${id}`);
      expectClose(got.key, ref.key, tol, `keys of ${id} (cpu)`);
      expectClose(got.value, ref.value, tol, `values of ${id} (cpu)`);
    }
  }

  dispose(): void {
    for (const s of this.solo.values()) s.cache.dispose();
    this.gpu.dispose();
    this.cpu.dispose();
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

function layers(config: Config, seed: number, gpu?: AttentionEngine): [MultiHeadAttention, MultiHeadAttention] {
  const sd = randomStateDict(config, seed);
  return [(gpu ?? engines.gpu).createMultiHeadAttention(config, sd), engines.cpu.createMultiHeadAttention(config, sd)];
}

function harness(config: Config, options: { blockSize: number; maxBlocks: number }, seed = 1): Harness {
  const [g, c] = layers(config, seed);
  const E = config.embedDim;
  return new Harness(g, c, E, options, (Skv) => f32Tolerance([E, Skv, E]), seed);
}

describe('webgpu paged calls equal each sequence run alone and the cpu paged call', () => {
  test('mixed lengths 1 … 70 in one call, then steps, then prefills beside steps', async () => {
    const h = harness(GQA_ROTARY, { blockSize: 16, maxBlocks: 64 });
    const lengths = [1, 70, 5, 17, 33, 2, 16, 4];
    const ids = lengths.map(() => h.add());
    await h.call(
      ids.map((id, i) => ({ id, length: lengths[i] })),
      {},
      'prefill',
    );
    for (let step = 0; step < 3; step++)
      await h.call(
        ids.map((id) => ({ id, length: 1 })),
        {},
        `step ${step}`,
      );
    await h.call(
      ids.map((id, i) => ({ id, length: i % 3 === 0 ? 9 : 1 })),
      {},
      'prefills beside steps',
    );
    await h.checkContents();
    h.dispose();
  });

  test("steps and prefills on the bodies' loop pipelines, then on their unrolled ones once compiled", async () => {
    const h = harness(GQA_ROTARY, { blockSize: 8, maxBlocks: 60 }, 20);
    const ids = [h.add(), h.add(), h.add()];
    await h.call(
      ids.map((id, i) => ({ id, length: [30, 1, 60][i] })),
      {},
      'prefill',
    );
    await h.call(
      ids.map((id) => ({ id, length: 1 })),
      {},
      'step (the loop pipeline, or the unrolled one if another test compiled it)',
    );
    await pagedPipelinesCompiled(engines.gpu.device!);
    await h.call(
      ids.map((id) => ({ id, length: 1 })),
      {},
      'step on the unrolled pipeline',
    );
    await h.call(
      ids.map((id, i) => ({ id, length: [9, 1, 6][i] })),
      {},
      "prefills beside a step (the rows body's unrolled pipeline, its compile started by the first prefill)",
    );
    await pagedPipelinesCompiled(engines.gpu.device!);
    await h.call(
      ids.map((id, i) => ({ id, length: [1, 33, 7][i] })),
      {},
      'prefills beside a step on the unrolled pipelines',
    );
    await h.checkContents();
    h.dispose();
  });

  test('fork (copy-on-write: the parent unchanged by the children), truncate, remove and block reuse', async () => {
    const h = harness(GQA_ROTARY, { blockSize: 4, maxBlocks: 40 }, 2);
    const a = h.add();
    await h.call([{ id: a, length: 10 }], {}, 'prefill a');
    const b = await h.fork(a);
    const c = await h.fork(a);
    const free = h.gpu.freeBlocks;
    // Each child writes into the shared last block (10 of 12 positions used): each copies it, and c takes one more.
    await h.call(
      [
        { id: b, length: 1 },
        { id: c, length: 3 },
      ],
      {},
      'children',
    );
    expect(h.gpu.freeBlocks).toBe(free - 3);
    await h.call([{ id: a, length: 1 }], {}, 'parent after its children');
    await h.checkContents();
    h.truncate(b, 6);
    await h.call(
      [
        { id: b, length: 2 },
        { id: a, length: 1 },
      ],
      {},
      'after truncate',
    );
    const before = h.gpu.freeBlocks;
    h.remove(c);
    expect(h.gpu.freeBlocks).toBe(before + 2); // its own copy of the shared block, and the one after it
    const d = h.add();
    await h.call(
      [
        { id: d, length: 13 },
        { id: a, length: 1 },
        { id: b, length: 1 },
      ],
      {},
      'a new sequence in reused blocks',
    );
    await h.checkContents();
    h.dispose();
  });

  test.each([1, 4, 16, 64])('blockSize %i with lengths straddling blocks', async (blockSize) => {
    const h = harness(GQA_ROTARY, { blockSize, maxBlocks: Math.ceil(300 / blockSize) + 4 }, 3);
    const ids = [h.add(), h.add(), h.add()];
    const first = [blockSize - 1 || 1, blockSize + 1, 2 * blockSize];
    await h.call(
      ids.map((id, i) => ({ id, length: Math.min(first[i], 70) })),
      {},
      'prefill',
    );
    await h.call(
      ids.map((id) => ({ id, length: 1 })),
      {},
      'step',
    );
    await h.call(
      ids.map((id, i) => ({ id, length: i + 2 })),
      {},
      'short prefills',
    );
    await h.checkContents();
    h.dispose();
  });

  test.each([
    ['MQA', { embedDim: 64, numHeads: 4, numKvHeads: 1 }],
    ['MHA, Dh 64', { embedDim: 256, numHeads: 4 }],
    ['GQA, Dh 40', { embedDim: 160, numHeads: 4, numKvHeads: 2, rotary: { base: 10000 } }],
    ['H·Dh ≠ E (Qwen3-like), GQA 4:1', { embedDim: 64, numHeads: 8, numKvHeads: 2, headDim: 32, rotary: { base: 10000 } }],
    ['padded heads, Dh 21', { embedDim: 42, numHeads: 2 }],
    ['padded heads with rotary, Dh 22, GQA', { embedDim: 88, numHeads: 4, numKvHeads: 2, rotary: { base: 10000 } }],
  ] as [string, Config][])('%s', async (_name, config) => {
    const h = harness(config, { blockSize: 8, maxBlocks: 40 }, 4);
    const ids = [h.add(), h.add(), h.add()];
    await h.call(
      ids.map((id, i) => ({ id, length: [1, 12, 37][i] })),
      {},
      'prefill',
    );
    await h.call(
      ids.map((id) => ({ id, length: 1 })),
      {},
      'step',
    );
    await h.checkContents();
    h.dispose();
  });

  test('QK-norm, value norm and an output gate (Qwen3 / Gemma / Qwen3-Next heads)', async () => {
    const config = {
      embedDim: 64,
      numHeads: 4,
      numKvHeads: 2,
      rotary: { base: 10000 },
      qkNorm: { query: uniform(16, 1, mulberry32(30)), key: uniform(16, 1, mulberry32(31)) },
      vNorm: true,
      outputGate: true,
    };
    const sd = { ...randomStateDict(config, 16), gate_proj_weight: uniform(64 * 64, 0.2, mulberry32(32)), gate_proj_bias: uniform(64, 0.1, mulberry32(33)) };
    const E = 64;
    const h = new Harness(
      engines.gpu.createMultiHeadAttention(config, sd),
      engines.cpu.createMultiHeadAttention(config, sd),
      E,
      { blockSize: 4, maxBlocks: 40 },
      (Skv) => f32Tolerance([E, Skv, E]),
      17,
    );
    const ids = [h.add(), h.add()];
    await h.call(
      ids.map((id, i) => ({ id, length: [2, 19][i] })),
      {},
      'prefill',
    );
    await h.call(
      ids.map((id) => ({ id, length: 1 })),
      {},
      'step',
    );
    await h.checkContents();
    h.dispose();
  });

  test('quantized weights (q8_0 in_proj and out_proj: the projections read them packed)', async () => {
    const sd = quantizeWeights(randomStateDict(GQA_ROTARY, 21), { dtype: 'q8_0' });
    const E = 64;
    const h = new Harness(
      engines.gpu.createMultiHeadAttention(GQA_ROTARY, sd),
      engines.cpu.createMultiHeadAttention(GQA_ROTARY, sd),
      E,
      { blockSize: 8, maxBlocks: 30 },
      (Skv) => f32Tolerance([E, Skv, E]),
      22,
    );
    const ids = [h.add(), h.add()];
    await h.call(
      ids.map((id, i) => ({ id, length: [11, 1][i] })),
      {},
      'prefill',
    );
    await h.call(
      ids.map((id) => ({ id, length: 1 })),
      {},
      'step',
    );
    h.dispose();
  });

  test.each([
    ['window', { window: 5 }],
    ['softcap and scale', { softcap: 3, scale: 0.5 }],
    ['sinks', { sinks: Float32Array.of(0.5, -1, 2, 0) }],
    ['alibi', { alibiSlopes: Float32Array.of(0.5, 0.25, 0.125, 0.0625) }],
  ] as [string, CallOptions][])('score options: %s', async (_name, options) => {
    const h = harness(GQA_ROTARY, { blockSize: 4, maxBlocks: 40 }, 5);
    const ids = [h.add(), h.add()];
    await h.call(
      ids.map((id, i) => ({ id, length: [3, 21][i] })),
      options,
      'prefill',
    );
    await h.call(
      ids.map((id) => ({ id, length: 1 })),
      options,
      'step',
    );
    await h.call(
      ids.map((id, i) => ({ id, length: [6, 1][i] })),
      options,
      'mixed',
    );
    h.dispose();
  });

  test('two layers sharing a block table, each appending at its own length', async () => {
    const [g1, c1] = layers(GQA_ROTARY, 6);
    const [g2, c2] = layers(GQA_ROTARY, 7);
    const tol = (Skv: number) => f32Tolerance([64, Skv, 64]);
    const first = new Harness(g1, c1, 64, { blockSize: 4, maxBlocks: 30 }, tol, 8);
    const second = new Harness(g2, c2, 64, { blockSize: 4, maxBlocks: 30 }, tol, 9, first);
    const a = first.add();
    second.solo.set(a, { cache: g2.createKvCache({ batchSize: 1, maxSeqLen: 260 }), history: [] });
    const b = first.add();
    second.solo.set(b, { cache: g2.createKvCache({ batchSize: 1, maxSeqLen: 260 }), history: [] });
    const parts = [
      { id: a, length: 6 },
      { id: b, length: 1 },
    ];
    await first.call(parts, {}, 'layer 1');
    await second.call(parts, {}, 'layer 2');
    await first.call(parts, {}, 'layer 1 again');
    await second.call(parts, {}, 'layer 2 again');
    expect(first.gpu.lengthOf(a)).toBe(12);
    expect(second.gpu.lengthOf(a)).toBe(12);
    await first.checkContents();
    await second.checkContents();
    second.dispose();
    first.dispose();
  });

  test('a tree of drafts per sequence, then acceptPath, equals the path run alone', async () => {
    const [g, c] = layers(GQA_ROTARY, 10);
    const E = 64;
    const paged = g.createPagedKvCache({ blockSize: 4, maxBlocks: 30 });
    const ref = c.createPagedKvCache({ blockSize: 4, maxBlocks: 30 });
    const rng = mulberry32(11);
    const ids = [paged.addSequence(), paged.addSequence()];
    ref.addSequence();
    ref.addSequence();
    const context = [uniform(7 * E, 1, rng), uniform(2 * E, 1, rng)];
    const ctx = concat(context);
    const seqs = [
      { id: ids[0], length: 7 },
      { id: ids[1], length: 2 },
    ];
    await g.forward(ctx, { kvCache: paged, sequences: seqs });
    await c.forward(ctx, { kvCache: ref, sequences: seqs });
    const parents = Int32Array.of(-1, 0, 0, 1, 2, 3, 4);
    const drafts = uniform(parents.length * E, 1, rng);
    const step = uniform(E, 1, rng);
    // Sequence 0 takes a tree of 7 (the rows body), sequence 1 a step beside it; then sequence 1 a tree of 3 (the keys body).
    const x = concat([drafts, step]);
    const call = [
      { id: ids[0], length: 7, treeParents: parents },
      { id: ids[1], length: 1 },
    ];
    const got = (await g.forward(x, { kvCache: paged, sequences: call })).output;
    const want = (await c.forward(x, { kvCache: ref, sequences: call })).output;
    expectClose(got, want, f32Tolerance([E, 16, E]), 'tree beside a step, against cpu');
    const small = Int32Array.of(-1, 0, 0);
    const x2 = uniform(3 * E, 1, rng);
    const call2 = [{ id: ids[1], length: 3, treeParents: small }];
    expectClose(
      (await g.forward(x2, { kvCache: paged, sequences: call2 })).output,
      (await c.forward(x2, { kvCache: ref, sequences: call2 })).output,
      f32Tolerance([E, 16, E]),
      'small tree, against cpu',
    );
    // Each node against its path run alone on a plain cache.
    for (const node of [3, 6]) {
      const path: number[] = [];
      for (let a = node; a >= 0; a = parents[a]) path.unshift(a);
      const solo = g.createKvCache({ batchSize: 1, maxSeqLen: 40 });
      await g.forward(context[0], { batchSize: 1, seqLen: 7, kvCache: solo, isCausal: true });
      const rows = concat(path.map((p) => drafts.subarray(p * E, (p + 1) * E)));
      const alone = (await g.forward(rows, { batchSize: 1, seqLen: path.length, kvCache: solo, isCausal: true })).output;
      expectClose(got.subarray(node * E, (node + 1) * E), alone.subarray((path.length - 1) * E), f32Tolerance([E, 16, E]), `node ${node}`);
      solo.dispose();
    }
    // Accept the path to node 6 (0, 2, 4, 6) and step: as the path alone.
    paged.acceptPath(ids[0], [0, 2, 4, 6]);
    ref.acceptPath(ids[0], [0, 2, 4, 6]);
    expect(paged.lengthOf(ids[0])).toBe(11);
    const next = uniform(E, 1, rng);
    const after = (await g.forward(next, { kvCache: paged, sequences: [{ id: ids[0], length: 1 }] })).output;
    const solo = g.createKvCache({ batchSize: 1, maxSeqLen: 40 });
    await g.forward(concat([context[0], ...[0, 2, 4, 6].map((p) => drafts.subarray(p * E, (p + 1) * E))]), { batchSize: 1, seqLen: 11, kvCache: solo, isCausal: true });
    const alone = (await g.forward(next, { batchSize: 1, seqLen: 1, kvCache: solo, isCausal: true })).output;
    expectClose(after, alone, f32Tolerance([E, 16, E]), 'the step after acceptPath');
    const [pk, sk] = [await paged.read(ids[0]), await solo.read()];
    expectClose(pk.key, sk.key, f32Tolerance([E, 16, E]), 'keys after acceptPath');
    expectClose(pk.value, sk.value, f32Tolerance([E, 16, E]), 'values after acceptPath');
    solo.dispose();
    paged.dispose();
    ref.dispose();
  });

  test('refused calls leave nothing written; other dtypes are refused', async () => {
    const h = harness(GQA_ROTARY, { blockSize: 4, maxBlocks: 4 }, 12);
    const a = h.add();
    await h.call([{ id: a, length: 5 }], {}, 'prefill');
    const before = await h.gpu.read(a);
    const free = h.gpu.freeBlocks;
    const x = uniform(12 * 64, 1, mulberry32(1));
    await expect(h.gpuLayer.forward(x, { kvCache: h.gpu, sequences: [{ id: a, length: 12 }] })).rejects.toThrow(InvalidArgumentError);
    await expect(h.gpuLayer.forward(x, { kvCache: h.gpu, sequences: [{ id: 99, length: 12 }] })).rejects.toThrow(InvalidArgumentError);
    await expect(h.gpuLayer.forward(x, { kvCache: h.gpu, sequences: [{ id: a, length: 11 }] })).rejects.toThrow(); // lengths ≠ T
    expect(h.gpu.freeBlocks).toBe(free);
    expect(h.gpu.lengthOf(a)).toBe(5);
    const after = await h.gpu.read(a);
    expect(after.key).toEqual(before.key);
    expect(after.value).toEqual(before.value);
    await h.call([{ id: a, length: 1 }], {}, 'after the refusals');
    h.gpuLayer.createPagedKvCache({ blockSize: 4, maxBlocks: 4, dtype: 'f16' }).dispose(); // every dtype has a pool (test/paged-quant-webgpu.test.ts)
    const [wide, wideCpu] = layers({ embedDim: 64, numHeads: 2 }, 15); // Dh 32: q8_0 and q4_0 fit the layer
    for (const dtype of ['q8_0', 'q4_0'] as const) expect(wide.createPagedKvCache({ blockSize: 4, maxBlocks: 4, dtype }).bytes).toBeGreaterThan(0);
    wide.dispose();
    wideCpu.dispose();
    h.dispose();
  });
});

describe('device loss', () => {
  test('a pool lost with its device says so (forward and read); a new pool on the new device works', async () => {
    const gpu = await createGpuEngine(FAST_COMPILING);
    try {
      const sd = randomStateDict(GQA_ROTARY, 18);
      const mha = gpu.createMultiHeadAttention(GQA_ROTARY, sd);
      const paged = mha.createPagedKvCache({ blockSize: 4, maxBlocks: 20 });
      const id = paged.addSequence();
      const x = uniform(6 * 64, 1, mulberry32(19));
      await mha.forward(x, { kvCache: paged, sequences: [{ id, length: 6 }] });
      gpu.device!.destroy();
      await expect(mha.forward(x.subarray(0, 64), { kvCache: paged, sequences: [{ id, length: 1 }] })).rejects.toThrow(DeviceLostError);
      expect(paged.lengthOf(id)).toBe(6);
      await expect(paged.read(id)).rejects.toThrow(DeviceLostError);
      const fresh = mha.createPagedKvCache({ blockSize: 4, maxBlocks: 20 });
      const again = fresh.addSequence();
      const got = (await mha.forward(x, { kvCache: fresh, sequences: [{ id: again, length: 6 }] })).output;
      const ref = engines.cpu.createMultiHeadAttention(GQA_ROTARY, sd);
      const refCache = ref.createPagedKvCache({ blockSize: 4, maxBlocks: 20 });
      const refId = refCache.addSequence();
      expectClose(got, (await ref.forward(x, { kvCache: refCache, sequences: [{ id: refId, length: 6 }] })).output, f32Tolerance([64, 6, 64]));
      for (const c of [paged, fresh, refCache]) c.dispose();
      mha.dispose();
      ref.dispose();
    } finally {
      gpu.dispose();
    }
  });
});

describe('an f16 engine', () => {
  test('paged calls at f16 against the solo f16 runs and the cpu', async () => {
    const gpu = await createGpuEngine({ ...FAST_COMPILING, precision: 'f16' });
    try {
      const [g, c] = layers(GQA_ROTARY, 13, gpu);
      const E = 64;
      const h = new Harness(g, c, E, { blockSize: 8, maxBlocks: 40 }, (Skv) => f16Tolerance([E, Skv, E], 4), 14);
      expect(h.gpu.dtype).toBe('f16');
      const ids = [h.add(), h.add(), h.add()];
      await h.call(
        ids.map((id, i) => ({ id, length: [1, 9, 30][i] })),
        {},
        'prefill',
      );
      await h.call(
        ids.map((id) => ({ id, length: 1 })),
        {},
        'step',
      );
      g.createPagedKvCache({ blockSize: 4, maxBlocks: 4, dtype: 'f32' }).dispose(); // an f32 pool on an f16 engine (test/paged-quant-webgpu.test.ts)
      h.dispose();
    } finally {
      gpu.dispose();
    }
  });
});
