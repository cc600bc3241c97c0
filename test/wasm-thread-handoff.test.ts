// How a pass reaches the 'wasm' backend's workers (src/wasm/threads.ts): by message, or through the
// pool's shared control block while a worker waits after a pass. Every case checks the workers'
// results against the same kernel on the calling thread and against the transposition computed here,
// and which way the passes went (ThreadPool.handoffs), so that each path is known to have run.

import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { AttentionError, DisposedError } from '../src/errors.ts';
import { mulberry32, uniform } from './helpers/random.ts';
import { compileKernels, WasmKernels } from '../src/wasm/kernels.ts';
import { type KernelCall, ThreadPool } from '../src/wasm/threads.ts';

const Dh = 16;

/** K [rows, Dh] in `kernels`' memory, and where each thread's Kᵀ goes (transpose: blocks of 64 keys [⌈rows/64⌉, Dh, 64]). */
function setUp(kernels: WasmKernels, rows: number, seed: number) {
  const values = uniform(rows * Dh, 1, mulberry32(seed));
  const k = kernels.alloc(rows * Dh);
  kernels.f32.set(values, k / 4);
  const size = Math.ceil(rows / 64) * Dh * 64;
  const outs = [kernels.alloc(size), kernels.alloc(size)];
  const expected = new Float32Array(size);
  for (let r = 0; r < rows; r++) for (let d = 0; d < Dh; d++) expected[(Math.floor(r / 64) * Dh + d) * 64 + (r % 64)] = values[r * Dh + d];
  const call = (t: number): KernelCall => ['transpose', k, Dh, rows, Dh, outs[t]];
  const result = (t: number) => kernels.f32.slice(outs[t] / 4, outs[t] / 4 + size);
  return { call, result, expected };
}

/**
 * Until the worker waits in memory with every message handled (what sends the next pass through
 * memory): a tiny pass at a time, at most 50. On a loaded machine a worker was seen back in its event
 * loop with no pass for 250 ms (its linger over) between two of a test's back-to-back passes; the paths
 * the tests check need the worker waiting first, which this establishes rather than assumes.
 */
async function untilWaiting(pool: ThreadPool, kernels: WasmKernels): Promise<void> {
  const tiny = setUp(kernels, 1, 99);
  for (let i = 0; i < 50 && !pool.waitingInMemory(0); i++) await kernels.run([[], [tiny.call(1)]]);
  expect(pool.waitingInMemory(0), 'the worker waits in memory after a pass').toBe(true);
}

describe('a pool of two threads', () => {
  let pool: ThreadPool;
  let kernels: WasmKernels;
  beforeAll(async () => {
    pool = await ThreadPool.create(2);
    kernels = new WasmKernels(await compileKernels('shared'), pool);
    // The first pass offered to a waiting worker registers the kernel's name with it, and goes by message.
    const warm = setUp(kernels, 1, 98);
    await untilWaiting(pool, kernels);
    await kernels.run([[], [warm.call(1)]]);
  });
  afterAll(() => pool.dispose());

  test('passes right after a pass go through memory, with the calling thread’s results', async () => {
    const passes = Array.from({ length: 8 }, (_, i) => setUp(kernels, 1 + 37 * i, i));
    for (const { call } of passes) {
      await untilWaiting(pool, kernels);
      const before = { ...pool.handoffs };
      await kernels.run([[call(0)], [call(1)]]);
      expect(pool.handoffs.memory - before.memory, JSON.stringify(pool.handoffs)).toBe(1);
      expect(pool.handoffs.message - before.message).toBe(0);
    }
    for (const { result, expected } of passes) {
      expect(result(1)).toEqual(expected);
      expect(result(0)).toEqual(expected);
    }
  });

  test('a worker part longer than the caller waits for in memory is answered by message', async () => {
    const { call, result, expected } = setUp(kernels, 16 * 1024, 11);
    const long = Array.from({ length: 400 }, () => call(1)); // the worker moves 100M floats, the caller nothing: tens of ms
    await kernels.run([[], [call(1)]]);
    await untilWaiting(pool, kernels);
    const before = { ...pool.handoffs };
    await kernels.run([[], long]);
    expect(pool.handoffs.memory - before.memory, JSON.stringify([before, pool.handoffs])).toBe(1);
    expect(pool.handoffs.answeredByMessage - before.answeredByMessage).toBe(1);
    expect(result(1)).toEqual(expected);
  });

  test('a pass too long for the job area goes by message', async () => {
    const { call, result, expected } = setUp(kernels, 100, 12);
    await kernels.run([[call(0)], [call(1)]]);
    await untilWaiting(pool, kernels);
    const before = { ...pool.handoffs };
    await kernels.run([[call(0)], Array.from({ length: 1000 }, () => call(1))]);
    expect(result(1)).toEqual(expected);
    expect(pool.handoffs.message - before.message).toBe(1);
  });

  test('a kernel instance opened right after a pass gets its first pass after the open (messages go first)', async () => {
    const module = await compileKernels('shared');
    for (let i = 0; i < 3; i++) {
      const warm = setUp(kernels, 50, 20 + i);
      await kernels.run([[warm.call(0)], [warm.call(1)]]);
      await untilWaiting(pool, kernels); // the worker now waits in memory
      const fresh = new WasmKernels(module, pool);
      const { call, result, expected } = setUp(fresh, 70, 30 + i);
      await fresh.run([[call(0)], [call(1)]]);
      expect(result(1)).toEqual(expected);
      fresh.dispose();
    }
  });

  test('a worker whose calls throw rejects the pass with what went wrong, by message or through memory, and the pool goes on', async () => {
    const { call, result, expected } = setUp(kernels, 90, 13);
    for (let i = 0; i < 3; i++) {
      if (i > 0) await untilWaiting(pool, kernels);
      const before = { ...pool.handoffs };
      await expect(kernels.run([[call(0)], [['noSuchKernel', 1, 2]]])).rejects.toThrow(AttentionError);
      await expect(kernels.run([[call(0)], [['noSuchKernel', 1, 2]]])).rejects.toThrow(/'wasm' backend threads: .*no kernel noSuchKernel/);
      if (i > 0) expect(pool.handoffs.memory - before.memory, JSON.stringify(pool.handoffs)).toBeGreaterThanOrEqual(1);
    }
    await kernels.run([[call(0)], [call(1)]]);
    expect(result(1)).toEqual(expected);
  });
});

test('a pool disposed while its worker waits in memory refuses later passes with DisposedError', async () => {
  const pool = await ThreadPool.create(2);
  const kernels = new WasmKernels(await compileKernels('shared'), pool);
  const { call } = setUp(kernels, 10, 14);
  await kernels.run([[call(0)], [call(1)]]);
  pool.dispose();
  await expect(kernels.run([[call(0)], [call(1)]])).rejects.toThrow(DisposedError);
});
