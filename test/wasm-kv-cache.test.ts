// KV caches on the 'wasm' backend: K and V live in the layer's WebAssembly memory (a block held
// below each call's arena, src/wasm/kv-cache.ts), so a decode step copies only its new rows. Here:
// a long decode equals the full causal forward; several caches of one layer; a cache made while a
// forward runs (placed by the next forward); the blocks of disposed caches are reused, so the memory
// does not grow across create/dispose cycles; threads (the workers read the cache in place).

import { afterAll, beforeAll, expect, test, vi } from 'vitest';
import { type AttentionEngine, createAttentionEngine, type MultiHeadAttention } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import type { WasmKernels } from '../src/wasm/kernels.ts';
import { setThreadChoiceMode } from '../src/wasm/thread-choice.ts';
import { ThreadPool } from '../src/wasm/threads.ts';

// The passes this file spies on run on the threads whatever their measured choice (thread-choice.ts ThreadChoice).
beforeAll(() => setThreadChoiceMode('always'));
afterAll(() => setThreadChoiceMode('measured'));

let wasm: AttentionEngine;
let threaded: AttentionEngine;
let cpu: AttentionEngine;
beforeAll(async () => {
  wasm = await createAttentionEngine({ backend: 'wasm', threads: 1 });
  threaded = await createAttentionEngine({ backend: 'wasm', threads: 2 });
  cpu = await createAttentionEngine({ backend: 'cpu' });
});
afterAll(() => {
  for (const e of [wasm, threaded, cpu]) e.dispose();
});

/** The layer's kernel instance (its memory holds the caches). */
function kernelsOf(mha: MultiHeadAttention): WasmKernels {
  return (mha as unknown as { impl: { kernels: WasmKernels } }).impl.kernels;
}

/** Rows t0 … t1 − 1 of every sequence of x [B, S, E]. */
function rows(x: Float32Array, B: number, S: number, E: number, t0: number, t1: number): Float32Array {
  const out = new Float32Array(B * (t1 - t0) * E);
  for (let b = 0; b < B; b++) out.set(x.subarray((b * S + t0) * E, (b * S + t1) * E), b * (t1 - t0) * E);
  return out;
}

test.each([
  ['1 thread', () => wasm],
  ['2 threads', () => threaded],
])('a 300-step decode (B=2, GQA, Dh 12) equals the full causal forward, %s', async (_name, engine) => {
  const config = { embedDim: 48, numHeads: 4, numKvHeads: 2 };
  const [B, S, E, prefill] = [2, 305, 48, 5];
  const sd = randomStateDict(config, 11);
  const x = uniform(B * S * E, 1, mulberry32(12));
  const mha = engine().createMultiHeadAttention(config, sd);
  const full = (await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true })).output;
  const reference = (await cpu.createMultiHeadAttention(config, sd).forward(x, { batchSize: B, seqLen: S, isCausal: true })).output;
  const cache = mha.createKvCache({ batchSize: B, maxSeqLen: S });
  const decoded = new Float32Array(B * S * E);
  const place = (y: Float32Array, t0: number, t1: number) => {
    for (let b = 0; b < B; b++) decoded.set(y.subarray(b * (t1 - t0) * E, (b + 1) * (t1 - t0) * E), (b * S + t0) * E);
  };
  place((await mha.forward(rows(x, B, S, E, 0, prefill), { batchSize: B, seqLen: prefill, kvCache: cache, isCausal: true })).output, 0, prefill);
  for (let t = prefill; t < S; t++) {
    place((await mha.forward(rows(x, B, S, E, t, t + 1), { batchSize: B, seqLen: 1, kvCache: cache, isCausal: true })).output, t, t + 1);
  }
  expect(cache.length).toBe(S);
  expectClose(decoded, full, f32Tolerance([E, S, E]), 'decoded vs full causal forward');
  expectClose(decoded, reference, f32Tolerance([E, S, E]), 'decoded vs the float64 reference');
  mha.dispose();
});

test('chunks of 64 through a cache on 2 threads: the workers attend over the cache in place, = 1 thread bit for bit', async () => {
  const config = { embedDim: 128, numHeads: 4, numKvHeads: 2 };
  const [B, S, E, chunk] = [2, 512, 128, 64];
  const sd = randomStateDict(config, 21);
  const x = uniform(B * S * E, 1, mulberry32(22));
  const outputs: Float32Array[][] = [];
  const run = vi.spyOn(ThreadPool.prototype, 'run');
  try {
    for (const engine of [wasm, threaded]) {
      const mha = engine.createMultiHeadAttention(config, sd);
      const cache = mha.createKvCache({ batchSize: B, maxSeqLen: S });
      const steps: Float32Array[] = [];
      for (let t = 0; t < S; t += chunk)
        steps.push((await mha.forward(rows(x, B, S, E, t, t + chunk), { batchSize: B, seqLen: chunk, kvCache: cache, isCausal: true })).output);
      outputs.push(steps);
      mha.dispose();
    }
    // From Skv = 256 on, a chunk's Q·Kᵀ (B·H·64·Skv·Dh multiply-adds) is over the split threshold.
    const onWorkers = new Set(run.mock.calls.flatMap(([, lists]) => lists.slice(1).flatMap((calls) => calls.map(([name]) => name))));
    expect(onWorkers.has('attend')).toBe(true);
    expect(onWorkers.has('transpose'), 'the cache keeps Kᵀ: no transpose').toBe(false);
  } finally {
    run.mockRestore();
  }
  expect(outputs[1]).toEqual(outputs[0]);
  const full = (await cpu.createMultiHeadAttention(config, sd).forward(x, { batchSize: B, seqLen: S, isCausal: true })).output;
  const last = outputs[1][S / chunk - 1];
  expectClose(last, rows(full, B, S, E, S - chunk, S), f32Tolerance([E, S, E]), 'the last chunk vs the float64 reference');
});

test('several caches of one layer (different batch sizes, interleaved) each decode as alone', async () => {
  const config = { embedDim: 32, numHeads: 4, numKvHeads: 1 };
  const sd = randomStateDict(config, 13);
  const x = uniform(3 * 9 * 32, 1, mulberry32(14));
  const mha = wasm.createMultiHeadAttention(config, sd);
  const decode = async (B: number, caches: number) => {
    const made = Array.from({ length: caches }, () => mha.createKvCache({ batchSize: B, maxSeqLen: 12 }));
    const outputs: Float32Array[][] = made.map(() => []);
    for (let t = 0; t < 9; t++) {
      for (const [i, cache] of made.entries())
        outputs[i].push((await mha.forward(x.subarray(t * B * 32, (t + 1) * B * 32), { batchSize: B, seqLen: 1, kvCache: cache })).output);
    }
    for (const cache of made) cache.dispose();
    return outputs;
  };
  const [alone1] = await decode(1, 1);
  const [alone3] = await decode(3, 1);
  const together = [mha.createKvCache({ batchSize: 1, maxSeqLen: 12 }), mha.createKvCache({ batchSize: 3, maxSeqLen: 10 })];
  for (let t = 0; t < 9; t++) {
    expect((await mha.forward(x.subarray(t * 32, (t + 1) * 32), { batchSize: 1, seqLen: 1, kvCache: together[0] })).output).toEqual(alone1[t]);
    expect((await mha.forward(x.subarray(t * 96, (t + 1) * 96), { batchSize: 3, seqLen: 1, kvCache: together[1] })).output).toEqual(alone3[t]);
  }
  mha.dispose();
});

test('a cache made while a forward runs is placed by the next forward; read() before that gives its past', async () => {
  const config = { embedDim: 24, numHeads: 2 };
  const mha = wasm.createMultiHeadAttention(config, randomStateDict(config, 15));
  const x = uniform(2 * 200 * 24, 1, mulberry32(16));
  const first = mha.createKvCache({ batchSize: 2, maxSeqLen: 210 });
  await mha.forward(x, { batchSize: 2, seqLen: 200, kvCache: first, isCausal: true });
  const past = await first.read();
  const running = mha.forward(x, { batchSize: 2, seqLen: 200, isCausal: true }); // its buffers fill the arena meanwhile
  const layer = (mha as unknown as { impl: { running: boolean } }).impl;
  for (let i = 0; i < 1000 && !layer.running; i++) await Promise.resolve(); // into the forward, at one of its awaits
  expect(layer.running).toBe(true);
  const heldEnd = kernelsOf(mha).heldEnd;
  const late = mha.createKvCache({ batchSize: 2, maxSeqLen: 210, ...past });
  expect(kernelsOf(mha).heldEnd, 'not placed while the forward runs').toBe(heldEnd);
  expect(await late.read()).toEqual(past);
  const next = { batchSize: 2, seqLen: 1, isCausal: true };
  const y = x.subarray(0, 2 * 24);
  const [lateOut] = await Promise.all([mha.forward(y, { ...next, kvCache: late }), running]);
  expect(kernelsOf(mha).heldEnd).toBeGreaterThan(heldEnd);
  expect(lateOut.output).toEqual((await mha.forward(y, { ...next, kvCache: first })).output);
  expect(await late.read()).toEqual(await first.read());
  mha.dispose();
});

test('disposed caches give their memory back: 40 create/decode/dispose cycles do not grow it', async () => {
  const config = { embedDim: 64, numHeads: 4 };
  const mha = wasm.createMultiHeadAttention(config, randomStateDict(config, 17));
  const kernels = kernelsOf(mha);
  const heldEnd = kernels.heldEnd;
  const x = uniform(64, 1, mulberry32(18));
  const sizes: number[] = [];
  for (let i = 0; i < 40; i++) {
    const keep = mha.createKvCache({ batchSize: 1, maxSeqLen: 1000 + (i % 3) * 500 }); // sizes differ: gaps are reused first-fit
    const other = mha.createKvCache({ batchSize: 2, maxSeqLen: 2000 });
    await mha.forward(x, { batchSize: 1, seqLen: 1, kvCache: keep });
    other.dispose();
    keep.dispose();
    sizes.push(kernels.memory.buffer.byteLength);
  }
  expect(sizes[39]).toBe(sizes[2]);
  expect(kernels.heldEnd).toBe(heldEnd); // nothing left held
  mha.dispose();
});

test('reset() empties a cache in place; the next prefill decodes as in a new cache', async () => {
  const config = { embedDim: 20, numHeads: 4 };
  const mha = wasm.createMultiHeadAttention(config, randomStateDict(config, 19));
  const x = uniform(3 * 20, 1, mulberry32(20));
  const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: 8 });
  await mha.forward(x, { batchSize: 1, seqLen: 3, kvCache: cache, isCausal: true });
  cache.reset();
  expect(await cache.read()).toEqual({ key: new Float32Array(0), value: new Float32Array(0) });
  const again = (await mha.forward(x, { batchSize: 1, seqLen: 3, kvCache: cache, isCausal: true })).output;
  const fresh = (await mha.forward(x, { batchSize: 1, seqLen: 3, kvCache: mha.createKvCache({ batchSize: 1, maxSeqLen: 8 }), isCausal: true })).output;
  expect(again).toEqual(fresh);
  mha.dispose();
});
