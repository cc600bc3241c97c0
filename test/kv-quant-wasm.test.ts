// Quantized KV caches on the 'wasm' backend (issue 40, docs in src/wasm/kv-cache.ts): 'f16', 'q8_0' and
// 'q4_0' rows stored in the layer's kernel memory and read in place by wasm/attention.ts (a block of 64
// keys decoded into a scratch at a time). The oracle is the float64 attention of the float64 queries
// against the cache's own dequantized values (cache.read()): what the kernel must compute whatever the
// rounding. The bytes are checked against quant/kv.ts's encodeKvRows (ggml's rule) bit for bit.

import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { type AttentionEngine, createAttentionEngine, InvalidArgumentError, type KvCache, type KvCacheDtype, type MultiHeadAttention } from '../src/index.ts';
import { decodeKvRows, encodeKvRows, kvRowBytes } from '../src/quant/kv.ts';
import type { StateDict } from '../src/types.ts';
import { compileKernels, WasmKernels } from '../src/wasm/kernels.ts';
import { ThreadPool } from '../src/wasm/threads.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { setThreadChoiceMode } from '../src/wasm/thread-choice.ts';

// The passes this file spies on run on the threads whatever their measured choice (thread-choice.ts ThreadChoice).
beforeAll(() => setThreadChoiceMode('always'));
afterAll(() => setThreadChoiceMode('measured'));

let wasm: AttentionEngine;
let threaded: AttentionEngine;
beforeAll(async () => {
  wasm = await createAttentionEngine({ backend: 'wasm', threads: 1 });
  threaded = await createAttentionEngine({ backend: 'wasm', threads: 2 });
});
afterAll(() => {
  wasm.dispose();
  threaded.dispose();
});

const DTYPES = ['f16', 'q8_0', 'q4_0'] as const;

interface Shape {
  E: number;
  H: number;
  G: number;
}

/**
 * The float64 output of a call of Sq new tokens x [B, Sq, E] (causal) against K, V [B, G, Skv, Dh]
 * (the cache after the call, dequantized): Q = x·W_qᵀ + b_q, softmax(Q·Kᵀ/√Dh)·V, then the output projection.
 */
function reference(
  sd: StateDict,
  { E, H, G }: Shape,
  x: Float32Array,
  B: number,
  Sq: number,
  key: Float32Array,
  value: Float32Array,
  Skv: number,
  probs?: Float64Array, // [B, H, Sq, Skv]
): Float64Array {
  const Dh = E / H;
  const W = sd.in_proj_weight as Float32Array;
  const bias = sd.in_proj_bias as Float32Array;
  const Wo = sd['out_proj.weight'] as Float32Array;
  const bo = sd['out_proj.bias'] as Float32Array;
  const out = new Float64Array(B * Sq * E);
  const o = new Float64Array(H * Dh);
  const q = new Float64Array(Dh);
  const s = new Float64Array(Skv);
  for (let b = 0; b < B; b++) {
    for (let i = 0; i < Sq; i++) {
      const xr = x.subarray((b * Sq + i) * E, (b * Sq + i + 1) * E);
      const ip = Skv - Sq + i;
      for (let h = 0; h < H; h++) {
        const g = Math.floor(h / (H / G));
        for (let d = 0; d < Dh; d++) {
          let acc = bias[h * Dh + d];
          for (let e = 0; e < E; e++) acc += W[(h * Dh + d) * E + e] * xr[e];
          q[d] = acc;
        }
        let max = -Infinity;
        for (let j = 0; j <= ip; j++) {
          let dot = 0;
          for (let d = 0; d < Dh; d++) dot += q[d] * key[((b * G + g) * Skv + j) * Dh + d];
          s[j] = dot / Math.sqrt(Dh);
          max = Math.max(max, s[j]);
        }
        let sum = 0;
        for (let j = 0; j <= ip; j++) sum += s[j] = Math.exp(s[j] - max);
        for (let d = 0; d < Dh; d++) {
          let acc = 0;
          for (let j = 0; j <= ip; j++) acc += s[j] * value[((b * G + g) * Skv + j) * Dh + d];
          o[h * Dh + d] = acc / sum;
        }
        if (probs) for (let j = 0; j <= ip; j++) probs[((b * H + h) * Sq + i) * Skv + j] = s[j] / sum;
      }
      for (let e = 0; e < E; e++) {
        let acc = bo[e];
        for (let c = 0; c < H * Dh; c++) acc += Wo[e * H * Dh + c] * o[c];
        out[(b * Sq + i) * E + e] = acc;
      }
    }
  }
  return out;
}

/** |out − ref| ≤ 2e-4 + 2e-3·|ref| everywhere; a NaN fails. */
function expectNear(out: Float32Array, ref: Float64Array, what: string): void {
  expect(out.length).toBe(ref.length);
  let worst = -Infinity;
  let at = -1;
  for (let i = 0; i < out.length; i++) {
    const excess = Number.isNaN(out[i]) ? Infinity : Math.abs(out[i] - ref[i]) - (2e-4 + 2e-3 * Math.abs(ref[i]));
    if (excess > worst) [worst, at] = [excess, i];
  }
  expect(worst, `${what}: worst at ${at}: ${out[at]} vs ${ref[at]}`).toBeLessThanOrEqual(0);
}

/** Rows t0 … t1 − 1 of every sequence of x [B, S, E]. */
function rows(x: Float32Array, B: number, S: number, E: number, t0: number, t1: number): Float32Array {
  const out = new Float32Array(B * (t1 - t0) * E);
  for (let b = 0; b < B; b++) out.set(x.subarray((b * S + t0) * E, (b * S + t1) * E), b * (t1 - t0) * E);
  return out;
}

/** One call through the cache, checked against the float64 reference over the cache's dequantized values. */
async function step(mha: MultiHeadAttention, sd: StateDict, shape: Shape, cache: KvCache, x: Float32Array, B: number, Sq: number, what: string): Promise<Float32Array> {
  const { output } = await mha.forward(x, { batchSize: B, seqLen: Sq, kvCache: cache, isCausal: true });
  const { key, value } = await cache.read();
  expectNear(output, reference(sd, shape, x, B, Sq, key, value, cache.length), what);
  return output;
}

/** The layer's kernel instance (its memory holds the caches). */
function kernelsOf(mha: MultiHeadAttention): WasmKernels {
  return (mha as unknown as { impl: { kernels: WasmKernels } }).impl.kernels;
}

describe('prefill, then decode steps, against the float64 reference over the dequantized cache', () => {
  // MHA, GQA, MQA; Dh 32, 64, 128; B 1 and 3; prefill lengths across the 64-key blocks.
  const cases: [string, Shape, number, number, number][] = [
    ['MHA Dh 32, B 2, prefill 31', { E: 64, H: 2, G: 2 }, 2, 31, 3],
    ['GQA Dh 64, B 1, prefill 65', { E: 256, H: 4, G: 2 }, 1, 65, 4],
    ['MQA Dh 32, B 3, prefill 1', { E: 128, H: 4, G: 1 }, 3, 1, 66],
    ['GQA Dh 128, B 1, prefill 33', { E: 512, H: 4, G: 2 }, 1, 33, 3],
    ['MHA Dh 64, B 1, prefill 128 (whole blocks), then 64 steps', { E: 128, H: 2, G: 2 }, 1, 128, 64],
  ];
  test.each(DTYPES.flatMap((dtype) => cases.map((c) => [dtype, ...c] as const)))('%s, %s', async (dtype, _name, shape, B, prefill, steps) => {
    const config = { embedDim: shape.E, numHeads: shape.H, numKvHeads: shape.G };
    const sd = randomStateDict(config, shape.E + shape.G);
    const mha = wasm.createMultiHeadAttention(config, sd);
    const S = prefill + steps;
    const x = uniform(B * S * shape.E, 1, mulberry32(S));
    const cache = mha.createKvCache({ batchSize: B, maxSeqLen: S, dtype });
    expect(cache.dtype).toBe(dtype);
    await step(mha, sd, shape, cache, rows(x, B, S, shape.E, 0, prefill), B, prefill, 'prefill');
    for (let t = prefill; t < S; t++) await step(mha, sd, shape, cache, rows(x, B, S, shape.E, t, t + 1), B, 1, `step ${t}`);
    expect(cache.length).toBe(S);
    mha.dispose();
  });
});

test.each(DTYPES)('%s: 2 threads, B 2, a past of 1200 positions (each decode step splits the heads over the threads), chunks, = 1 thread bit for bit', async (dtype) => {
  const shape = { E: 512, H: 8, G: 2 };
  const config = { embedDim: shape.E, numHeads: shape.H, numKvHeads: shape.G };
  const sd = randomStateDict(config, 5);
  const [B, past, Dh] = [2, 1200, 64]; // a step: B·H·Skv·Dh ≥ MIN_WORK_PER_THREAD (2^20) multiply-adds, split over the threads
  const r = mulberry32(6);
  const key = uniform(B * shape.G * past * Dh, 1, r);
  const value = uniform(B * shape.G * past * Dh, 1, r);
  const x = uniform(B * 40 * shape.E, 1, r);
  const outputs: Float32Array[][] = [];
  const run = vi.spyOn(ThreadPool.prototype, 'run');
  for (const engine of [threaded, wasm]) {
    const mha = engine.createMultiHeadAttention(config, sd);
    const cache = mha.createKvCache({ batchSize: B, maxSeqLen: past + 40, key, value, dtype });
    const outs = [await step(mha, sd, shape, cache, rows(x, B, 40, shape.E, 0, 37), B, 37, 'a chunk of 37')];
    for (let t = 37; t < 40; t++) outs.push(await step(mha, sd, shape, cache, rows(x, B, 40, shape.E, t, t + 1), B, 1, `step ${t}`));
    outputs.push(outs);
    mha.dispose();
  }
  // The decode steps' attendHeads went to both threads.
  const split = run.mock.calls.filter(([, lists]) => lists.filter((l) => l.some(([name]) => name === 'attendHeads')).length >= 2);
  run.mockRestore();
  expect(split.length).toBe(3);
  for (const [i, o] of outputs[0].entries()) expect(o).toEqual(outputs[1][i]);
});

describe('the stored bytes are quant/kv.ts’s encoding (ggml’s rule) bit for bit', () => {
  const shape = { E: 128, H: 4, G: 2 };
  const config = { embedDim: shape.E, numHeads: shape.H, numKvHeads: shape.G };
  const Dh = 32;

  test.each(DTYPES)('%s: a past via createKvCache({ key, value, dtype }): readEncoded = encodeKvRows; read() = their values', async (dtype) => {
    const mha = wasm.createMultiHeadAttention(config, randomStateDict(config, 1));
    const [B, L] = [2, 70];
    const r = mulberry32(2);
    // Values of every size, zeros, a row's block all zero, and f16's subnormals and overflow.
    const key = Float32Array.from(uniform(B * shape.G * L * Dh, 3, r), (v, i) => (i % 97 === 0 ? 0 : i % 89 === 0 ? 1e-6 : i % 83 === 0 ? -7e4 : v));
    const value = uniform(B * shape.G * L * Dh, 1, r);
    value.fill(0, 5 * Dh, 6 * Dh);
    const cache = mha.createKvCache({ batchSize: B, maxSeqLen: 100, key, value, dtype });
    const enc = await cache.storage.readEncoded(L);
    expect(enc.key).toEqual(encodeKvRows(dtype, key, Dh));
    expect(enc.value).toEqual(encodeKvRows(dtype, value, Dh));
    const read = await cache.read();
    expect(read.key).toEqual(decodeKvRows(dtype, enc.key, Dh));
    expect(read.value).toEqual(decodeKvRows(dtype, enc.value, Dh));
    // writeEncoded of those bytes into a new cache holds them unchanged.
    const other = mha.createKvCache({ batchSize: B, maxSeqLen: 70, dtype });
    other.storage.writeEncoded(enc.key, enc.value, L);
    expect(await other.storage.readEncoded(L)).toEqual(enc);
    mha.dispose();
  });

  test.each(DTYPES)('%s: the rows a forward wrote = encodeKvRows of the float32 rows an f32 cache of the same layer and call holds', async (dtype) => {
    // The same layer and inputs compute the same float32 K and V rows (same kernels, same order) whatever
    // the cache: an 'f32' cache's rows are those rows, and the q cache must hold their encoding.
    const mha = wasm.createMultiHeadAttention(config, randomStateDict(config, 3));
    const B = 2;
    const x = uniform(B * 67 * shape.E, 1, mulberry32(4));
    const caches = [mha.createKvCache({ batchSize: B, maxSeqLen: 80, dtype: 'f32' }), mha.createKvCache({ batchSize: B, maxSeqLen: 80, dtype })];
    for (const cache of caches) {
      await mha.forward(rows(x, B, 67, shape.E, 0, 66), { batchSize: B, seqLen: 66, kvCache: cache, isCausal: true });
      await mha.forward(rows(x, B, 67, shape.E, 66, 67), { batchSize: B, seqLen: 1, kvCache: cache, isCausal: true });
    }
    const f32 = await caches[0].read();
    const enc = await caches[1].storage.readEncoded(67);
    expect(enc.key).toEqual(encodeKvRows(dtype, f32.key, Dh));
    expect(enc.value).toEqual(encodeKvRows(dtype, f32.value, Dh));
    mha.dispose();
  });

  test.each(DTYPES)('%s: a cache made while a forward runs (pending until placed) keeps its past bit for bit, and serves the next forward', async (dtype) => {
    const mha = wasm.createMultiHeadAttention(config, randomStateDict(config, 7));
    const r = mulberry32(8);
    const key = uniform(shape.G * 40 * Dh, 1, r);
    const value = uniform(shape.G * 40 * Dh, 1, r);
    const first = mha.createKvCache({ batchSize: 1, maxSeqLen: 50 });
    const running = mha.forward(uniform(3 * shape.E, 1, r), { batchSize: 1, seqLen: 3, kvCache: first, isCausal: true });
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: 50, key, value, dtype });
    const pending = await cache.storage.readEncoded(40);
    expect(pending.key).toEqual(encodeKvRows(dtype, key, Dh));
    await running;
    const sd = randomStateDict(config, 7);
    await step(mha, sd, shape, cache, uniform(2 * shape.E, 1, r), 1, 2, 'after placement');
    expect((await cache.storage.readEncoded(40)).value).toEqual(encodeKvRows(dtype, value, Dh));
    mha.dispose();
  });
});

describe('truncate, acceptPath, reset move and zero whole stored rows', () => {
  const shape = { E: 128, H: 4, G: 2 };
  const config = { embedDim: shape.E, numHeads: shape.H, numKvHeads: shape.G };
  const Dh = 32;
  test.each(DTYPES)('%s', async (dtype) => {
    const sd = randomStateDict(config, 9);
    const mha = wasm.createMultiHeadAttention(config, sd);
    const B = 2;
    const x = uniform(B * 80 * shape.E, 1, mulberry32(10));
    const cache = mha.createKvCache({ batchSize: B, maxSeqLen: 80, dtype });
    const rowBytes = kvRowBytes(dtype, Dh);
    await step(mha, sd, shape, cache, rows(x, B, 80, shape.E, 0, 70), B, 70, 'prefill 70');
    const before = await cache.storage.readEncoded(70);
    // truncate to 63: rows 0 … 62 unchanged, 63 … 69 zero; the next step sees 63 positions.
    cache.truncate(63);
    const after = await cache.storage.readEncoded(70);
    for (let bg = 0; bg < B * shape.G; bg++) {
      const keep = (a: Uint8Array) => a.subarray(bg * 70 * rowBytes, (bg * 70 + 63) * rowBytes);
      const dropped = (a: Uint8Array) => a.subarray((bg * 70 + 63) * rowBytes, (bg + 1) * 70 * rowBytes);
      expect(keep(after.key)).toEqual(keep(before.key));
      expect(keep(after.value)).toEqual(keep(before.value));
      expect(dropped(after.key).every((v) => v === 0)).toBe(true);
      expect(dropped(after.value).every((v) => v === 0)).toBe(true);
    }
    await step(mha, sd, shape, cache, rows(x, B, 80, shape.E, 70, 71), B, 1, 'a step after truncate');
    // A tree of 3 (one root, two children) at 64 … 66; keep the path [0, 2]: rows 64, 66 → 64, 65.
    const drafts = uniform(3 * shape.E, 1, mulberry32(11));
    const one = mha.createKvCache({ batchSize: 1, maxSeqLen: 80, dtype });
    await mha.forward(rows(x, B, 80, shape.E, 0, 64).subarray(0, 64 * shape.E), { batchSize: 1, seqLen: 64, kvCache: one, isCausal: true });
    await mha.forward(drafts, { batchSize: 1, seqLen: 3, kvCache: one, treeParents: Int32Array.of(-1, 0, 0) });
    const tree = await one.storage.readEncoded(67);
    one.acceptPath([0, 2]);
    expect(one.length).toBe(66);
    const path = await one.storage.readEncoded(67);
    for (let g = 0; g < shape.G; g++) {
      const row = (a: Uint8Array, r: number) => a.subarray((g * 67 + r) * rowBytes, (g * 67 + r + 1) * rowBytes);
      for (const [to, from] of [
        [63, 63],
        [64, 64],
        [65, 66],
      ]) {
        expect(row(path.key, to)).toEqual(row(tree.key, from));
        expect(row(path.value, to)).toEqual(row(tree.value, from));
      }
      expect(row(path.key, 66).every((v) => v === 0)).toBe(true);
      expect(row(path.value, 66).every((v) => v === 0)).toBe(true);
    }
    await step(mha, sd, shape, one, drafts.subarray(0, shape.E), 1, 1, 'a step after acceptPath');
    // reset: everything zero; a new prefill is the reference's.
    cache.reset();
    const zero = await cache.storage.readEncoded(80);
    expect(zero.key.every((v) => v === 0) && zero.value.every((v) => v === 0)).toBe(true);
    await step(mha, sd, shape, cache, rows(x, B, 80, shape.E, 0, 5), B, 5, 'prefill after reset');
    mha.dispose();
  });
});

test('bytes: f16 half of f32; q8_0 ≤ 0.56× and q4_0 ≤ 0.30× of f16 (the blocks: 0.53×, 0.28×)', () => {
  const config = { embedDim: 512, numHeads: 4, numKvHeads: 4 }; // Dh 128
  const mha = wasm.createMultiHeadAttention(config, randomStateDict(config, 1));
  const bytes = Object.fromEntries(
    (['f32', 'f16', 'q8_0', 'q4_0'] as KvCacheDtype[]).map((dtype) => [dtype, mha.createKvCache({ batchSize: 1, maxSeqLen: 4096, dtype }).bytes]),
  );
  // K and V of 4 heads × 4096 positions × 128 values.
  expect(bytes.f32).toBe(2 * 4 * 4096 * 128 * 4);
  expect(bytes.f16).toBe(bytes.f32 / 2);
  expect(bytes.q8_0 / bytes.f16).toBe(34 / 64);
  expect(bytes.q4_0 / bytes.f16).toBe(18 / 64);
  mha.dispose();
});

test.each(DTYPES)('%s: needWeights (the probabilities read the stored keys) and a scoreMod layer (the float64 pass over decoded rows)', async (dtype) => {
  const shape = { E: 128, H: 4, G: 2 };
  const config = { embedDim: shape.E, numHeads: shape.H, numKvHeads: shape.G };
  const sd = randomStateDict(config, 14);
  const x = uniform(2 * 71 * shape.E, 1, mulberry32(15));
  const B = 2;
  const weighted = wasm.createMultiHeadAttention(config, sd);
  const identity = { wgsl: 'fn scoreMod(score: f32, b: u32, h: u32, i: u32, j: u32) -> f32 { return score; }', reference: (score: number) => score };
  const modded = wasm.createMultiHeadAttention({ ...config, scoreMod: identity }, sd);
  for (const mha of [weighted, modded]) {
    const cache = mha.createKvCache({ batchSize: B, maxSeqLen: 71, dtype });
    await step(mha, sd, shape, cache, rows(x, B, 71, shape.E, 0, 70), B, 70, 'prefill');
    const last = rows(x, B, 71, shape.E, 70, 71);
    const { output, attentionWeights } = await mha.forward(last, { batchSize: B, seqLen: 1, kvCache: cache, isCausal: true, needWeights: mha === weighted });
    const { key, value } = await cache.read();
    const probs = new Float64Array(B * shape.H * 71);
    expectNear(output, reference(sd, shape, last, B, 1, key, value, 71, probs), 'a step');
    if (mha === weighted) {
      expect(attentionWeights).toBeDefined();
      for (let i = 0; i < probs.length; i++) expect(Math.abs(attentionWeights![i] - probs[i])).toBeLessThanOrEqual(1e-5 + 1e-3 * probs[i]);
    }
    mha.dispose();
  }
});

describe('bad input', () => {
  test.each(['q8_0', 'q4_0'])('%s with headDim 48: refused before anything is allocated', (dtype) => {
    const config = { embedDim: 96, numHeads: 2 };
    const mha = wasm.createMultiHeadAttention(config, randomStateDict(config, 1));
    const kernels = kernelsOf(mha);
    const [held, top] = [kernels.heldEnd, kernels.mark()];
    expect(() => mha.createKvCache({ batchSize: 1, maxSeqLen: 10, dtype: dtype as KvCacheDtype })).toThrow(InvalidArgumentError);
    expect(() => mha.createKvCache({ batchSize: 1, maxSeqLen: 10, dtype: dtype as KvCacheDtype })).toThrow(/headDim 48 is not a multiple of 32/);
    expect([kernels.heldEnd, kernels.mark()]).toEqual([held, top]);
    // f16 takes any head size.
    expect(mha.createKvCache({ batchSize: 1, maxSeqLen: 10, dtype: 'f16' }).dtype).toBe('f16');
    mha.dispose();
  });
  test('an unknown dtype', () => {
    const config = { embedDim: 64, numHeads: 2 };
    const mha = wasm.createMultiHeadAttention(config, randomStateDict(config, 1));
    expect(() => mha.createKvCache({ batchSize: 1, maxSeqLen: 10, dtype: 'q5_1' as KvCacheDtype })).toThrow(InvalidArgumentError);
    mha.dispose();
  });
});

test("f16 with a head size not a multiple of 8 (Dh 12: the kernel's scalar tail), prefill and steps", async () => {
  const shape = { E: 48, H: 4, G: 2 };
  const config = { embedDim: shape.E, numHeads: shape.H, numKvHeads: shape.G };
  const sd = randomStateDict(config, 12);
  const mha = wasm.createMultiHeadAttention(config, sd);
  const x = uniform(75 * shape.E, 1, mulberry32(13));
  const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: 75, dtype: 'f16' });
  await step(mha, sd, shape, cache, x.subarray(0, 70 * shape.E), 1, 70, 'prefill');
  for (let t = 70; t < 75; t++) await step(mha, sd, shape, cache, x.subarray(t * shape.E, (t + 1) * shape.E), 1, 1, `step ${t}`);
  mha.dispose();
});

test('the kernel decodes f16 exactly: normals, subnormals, ±0, ±∞ (V), and subnormal keys (K)', async () => {
  // One key: O = its V row exactly (p = 1). Two keys, K[0] = t, K[1] = 0, q = (0.75/t)·e0: O mixes V's
  // rows by softmax(q·t, 0) = softmax(±0.75, 0), which shows a wrong t at once.
  const kernels = new WasmKernels(await compileKernels('single'));
  const k = kernels.k;
  const Dh = 16;
  const bits = [0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x3555, 0x0200, 0x83ff, 0x1234];
  const { halfToFloat } = await import('../src/util/f16.ts');
  const scratch = kernels.alloc(32 * (64 + Dh + 8));
  const dec = kernels.alloc(128 * Dh);
  const q = kernels.put(new Float32Array(Dh).fill(1));
  const o = kernels.alloc(Dh);
  // V: one row of the 16 values; Kᵀ block [Dh, 64] f16 all zero.
  const v = kernels.alloc((Dh * 2 * 64) / 4);
  const kt = kernels.alloc((Dh * 64 * 2) / 4);
  const u16 = () => new Uint16Array(kernels.memory.buffer);
  u16().set(bits, v >> 1);
  k.setRule(1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 2 * Dh, dec, 0);
  k.attend(q, Dh, kt, v, Dh, o, Dh, 1, 1, Dh, 0, scratch);
  const got = kernels.take(o, Dh);
  for (const [d, b] of bits.entries()) expect(got[d], `V bits ${b.toString(16)}`).toBe(halfToFloat(b) + 0); // +0: the accumulator turns −0 into 0
  // K: key 0 = t at d = 0, key 1 = 0; V rows e0 and e1.
  for (const b of [0x0001, 0x8001, 0x03ff, 0x0200, 0x0400, 0x8000, 0x0000]) {
    const t = halfToFloat(b);
    const qv = new Float32Array(Dh);
    qv[0] = t === 0 ? 1 : 0.75 / Math.abs(t);
    kernels.f32.set(qv, q >> 2);
    u16().fill(0, kt >> 1, (kt >> 1) + Dh * 64);
    u16()[kt >> 1] = b; // Kᵀ[d = 0, key 0]
    u16().fill(0, v >> 1, (v >> 1) + 2 * Dh);
    u16()[v >> 1] = 0x3c00; // V[0, 0] = 1
    u16()[(v >> 1) + Dh + 1] = 0x3c00; // V[1, 1] = 1
    k.attend(q, Dh, kt, v, Dh, o, Dh, 1, 2, Dh, 0, scratch);
    const s = qv[0] * t;
    const p0 = Math.exp(s) / (Math.exp(s) + 1);
    expect(kernels.take(o, 2)[0], `K bits ${b.toString(16)}`).toBeCloseTo(p0, 6);
  }
});
