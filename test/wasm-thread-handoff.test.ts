// How a pass reaches the 'wasm' backend's workers (src/wasm/threads.ts): offered through shared memory,
// taken by a worker waiting there or after a 'join' message, revoked when no list is left; answered in
// memory or by message. Every case checks the results against the transposition computed here, and
// which way the passes went (ThreadPool.handoffs), so that each path is known to have run.

import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { AttentionError, DisposedError } from '../src/errors.ts';
import { mulberry32, uniform } from './helpers/random.ts';
import { compileKernels, WasmKernels } from '../src/wasm/kernels.ts';
import { type KernelCall, ThreadPool, type ThreadPort } from '../src/wasm/threads.ts';

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
 * Until the worker waits in memory with every message handled (it then takes the next offer at once):
 * a tiny pass (which sends it a join if it is away) and a millisecond's pause at a time, for up to 5 s.
 * On a loaded machine a worker was seen back in its event loop with no pass for 250 ms (its linger
 * over) between two of a test's back-to-back passes, and one handling an 'open' takes a while; the
 * paths the tests check need the worker waiting first, which this establishes rather than assumes.
 */
async function untilWaiting(pool: ThreadPool, kernels: WasmKernels): Promise<void> {
  const tiny = setUp(kernels, 1, 99);
  for (const until = performance.now() + 5000; !pool.waitingInMemory(0) && performance.now() < until; ) {
    await kernels.run([[tiny.call(0)], [tiny.call(1)]]);
    await new Promise((r) => setTimeout(r, 1));
  }
  expect(pool.waitingInMemory(0), 'the worker waits in memory after a pass').toBe(true);
}

/** The calling thread's own list: its calls run here, `before` first. */
function localRunner(kernels: WasmKernels, before: () => void) {
  return (calls: KernelCall[]) => {
    before();
    const k = kernels.k as unknown as Record<string, (...args: number[]) => void>;
    for (const [name, ...args] of calls) k[name](...args);
  };
}

function spin(ms: number): void {
  for (const until = performance.now() + ms; performance.now() < until; );
}

describe('a pool of two threads', () => {
  let pool: ThreadPool;
  let kernels: WasmKernels;
  beforeAll(async () => {
    pool = await ThreadPool.create(2);
    kernels = new WasmKernels(await compileKernels('shared'), pool);
    const warm = setUp(kernels, 1, 98);
    await kernels.run([[warm.call(0)], [warm.call(1)]]);
  });
  afterAll(() => pool.dispose());

  test('every offer is taken or revoked; a worker waiting in memory takes them and runs lists; the results are the calling thread’s', async () => {
    const passes = Array.from({ length: 8 }, (_, i) => setUp(kernels, 1 + 37 * i, i));
    const before = { ...pool.handoffs };
    for (const { call } of passes) {
      await untilWaiting(pool, kernels);
      const b = { ...pool.handoffs };
      // Eight lists of 40 transpositions: the worker is awake long before they are all claimed.
      await kernels.run(Array.from({ length: 8 }, (_, t) => Array.from({ length: 40 }, () => call(t % 2))));
      expect(pool.handoffs.taken + pool.handoffs.revoked - b.taken - b.revoked, JSON.stringify(pool.handoffs)).toBe(1);
    }
    expect(pool.handoffs.taken - before.taken, JSON.stringify(pool.handoffs)).toBeGreaterThanOrEqual(1);
    expect(pool.handoffs.lists - before.lists, 'lists the worker ran').toBeGreaterThanOrEqual(1);
    expect(pool.workerKernels.has('transpose')).toBe(true);
    for (const { result, expected } of passes) {
      expect(result(1)).toEqual(expected);
      expect(result(0)).toEqual(expected);
    }
  });

  test('a worker back in its event loop is sent a join, and the pass is right whoever runs its lists', async () => {
    const { call, result, expected } = setUp(kernels, 300, 15);
    for (let i = 0; i < 3; i++) {
      await new Promise((r) => setTimeout(r, 400)); // past LINGER_MS: the worker goes back to its event loop
      expect(pool.waitingInMemory(0)).toBe(false);
      const before = { ...pool.handoffs };
      await kernels.run(Array.from({ length: 8 }, (_, t) => Array.from({ length: 20 }, () => call(t % 2))));
      expect(pool.handoffs.joined - before.joined).toBe(1);
      expect(result(0)).toEqual(expected);
      expect(result(1)).toEqual(expected);
    }
  });

  test('a worker still running past the wait in memory is answered by message', async () => {
    const { call, result, expected } = setUp(kernels, 16 * 1024, 11);
    const long = Array.from({ length: 200 }, () => call(1)); // 50M floats moved: tens of ms
    let answered = 0;
    for (let attempt = 0; attempt < 5 && answered === 0; attempt++) {
      await untilWaiting(pool, kernels);
      const before = { ...pool.handoffs };
      // The caller claims the first list and holds it 20 ms (the worker meanwhile takes the long one),
      // then finds the long list still running.
      let first = true;
      const local = localRunner(kernels, () => {
        if (first) spin(20);
        first = false;
      });
      await pool.run(kernels.id, [[call(0)], long], local);
      answered = pool.handoffs.answeredByMessage - before.answeredByMessage;
    }
    expect(answered, JSON.stringify(pool.handoffs)).toBe(1);
    expect(result(1)).toEqual(expected);
  });

  test('lists longer than the job area go in several passes', async () => {
    const { call, result, expected } = setUp(kernels, 100, 12);
    const before = { ...pool.handoffs };
    await kernels.run([[call(0)], Array.from({ length: 6000 }, () => call(1)), Array.from({ length: 6000 }, () => call(1))]);
    expect(result(0)).toEqual(expected);
    expect(result(1)).toEqual(expected);
    const offers = pool.handoffs.taken + pool.handoffs.revoked - before.taken - before.revoked;
    expect(offers, JSON.stringify(pool.handoffs)).toBeGreaterThanOrEqual(2);
  });

  test('a kernel instance opened right after a pass gets its first pass after the open (messages go first)', async () => {
    const module = await compileKernels('shared');
    for (let i = 0; i < 3; i++) {
      const warm = setUp(kernels, 50, 20 + i);
      await kernels.run([[warm.call(0)], [warm.call(1)]]);
      await untilWaiting(pool, kernels); // the worker now waits in memory
      const fresh = new WasmKernels(module, pool);
      const { call, result, expected } = setUp(fresh, 70, 30 + i);
      await fresh.run(Array.from({ length: 8 }, (_, t) => Array.from({ length: 10 }, () => call(t % 2))));
      expect(result(1)).toEqual(expected);
      expect(result(0)).toEqual(expected);
      fresh.dispose();
    }
  });

  test('a list that throws rejects the pass with what went wrong, on whichever thread ran it, and the pool goes on', async () => {
    const { call, result, expected } = setUp(kernels, 90, 13);
    for (let i = 0; i < 3; i++) {
      if (i > 0) await untilWaiting(pool, kernels);
      const lists = (): KernelCall[][] => [[call(0)], [['noSuchKernel', 1, 2]], ...Array.from({ length: 6 }, () => [call(1)])];
      await expect(kernels.run(lists())).rejects.toThrow(/no kernel noSuchKernel|noSuchKernel is not a function|k\[name\] is not a function/);
    }
    // On a worker: the caller holds its first list until the worker has run the rest.
    let first = true;
    const local = localRunner(kernels, () => {
      if (first) spin(30);
      first = false;
    });
    await untilWaiting(pool, kernels);
    await expect(pool.run(kernels.id, [[call(0)], [['noSuchKernel', 1, 2]]], local)).rejects.toThrow(AttentionError);
    await kernels.run([[call(0)], [call(1)]]);
    expect(result(1)).toEqual(expected);
  });
});

test('a worker that never takes an offer costs a pass nothing: the caller runs every list, the offer is revoked', async () => {
  // A stand-in worker: ready at once, then deaf (as one whose core is taken by another process for long).
  const deaf = (): ThreadPort => ({
    post: () => {},
    listen: (onMessage) => setTimeout(() => onMessage({ ready: true })),
    hold: () => {},
    terminate: () => {},
  });
  const pool = await ThreadPool.create(2, deaf);
  const kernels = new WasmKernels(await compileKernels('shared'), pool);
  const { call, result, expected } = setUp(kernels, 64, 16);
  const t0 = performance.now();
  await kernels.run(Array.from({ length: 8 }, (_, t) => [call(t % 2)]));
  expect(performance.now() - t0).toBeLessThan(1000);
  expect(pool.handoffs.revoked).toBe(1);
  expect(pool.handoffs.taken).toBe(0);
  expect(result(0)).toEqual(expected);
  expect(result(1)).toEqual(expected);
  pool.dispose();
});

test('a pool disposed while its worker waits in memory refuses later passes with DisposedError', async () => {
  const pool = await ThreadPool.create(2);
  const kernels = new WasmKernels(await compileKernels('shared'), pool);
  const { call } = setUp(kernels, 10, 14);
  await kernels.run([[call(0)], [call(1)]]);
  pool.dispose();
  await expect(kernels.run([[call(0)], [call(1)]])).rejects.toThrow(DisposedError);
});
