// The 'wasm' backend on worker threads (Node): threaded and single-threaded engines agree, and
// exactly (workers checked to have run kernels): a thread computes whole rows of a GEMM and whole heads of the attention with the same
// instructions in the same order as one thread would. Also: the threads option, concurrent calls on
// one layer (they share its memory: run one at a time), KV caches and needWeights across threads.

import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { availableParallelism } from 'node:os';
import { type AttentionEngine, createAttentionEngine, DisposedError, InvalidArgumentError, type MultiHeadAttentionConfig } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { resolveThreads, type ThreadEnvironment, threadSupport } from '../src/wasm/thread-support.ts';
import { ThreadPool, type ThreadPort } from '../src/wasm/threads.ts';
import { setThreadChoiceMode } from '../src/wasm/thread-choice.ts';

// The passes this file spies on run on the threads whatever their measured choice (thread-choice.ts ThreadChoice).
beforeAll(() => setThreadChoiceMode('always'));
afterAll(() => setThreadChoiceMode('measured'));

let one: AttentionEngine;
let two: AttentionEngine;
let three: AttentionEngine;
beforeAll(async () => {
  one = await createAttentionEngine({ backend: 'wasm', threads: 1 });
  two = await createAttentionEngine({ backend: 'wasm', threads: 2 });
  three = await createAttentionEngine({ backend: 'wasm', threads: 3 }); // more than the pieces of some calls
});
afterAll(() => {
  for (const e of [one, two, three]) e.dispose();
});

test('engine.threads and threadsNote', async () => {
  expect([one.threads, two.threads, three.threads]).toEqual([1, 2, 3]);
  expect([one.threadsNote, two.threadsNote, three.threadsNote]).toEqual([null, null, null]);
  const byDefault = await createAttentionEngine({ backend: 'wasm' });
  expect(byDefault.threads).toBe(availableParallelism());
  byDefault.dispose();
  const cpu = await createAttentionEngine({ backend: 'cpu' });
  expect([cpu.threads, cpu.threadsNote]).toEqual([1, null]);
  cpu.dispose();
});

describe('where threads cannot run: one thread, and threadsNote says why and what to do', () => {
  const browser = (over: Partial<ThreadEnvironment>): ThreadEnvironment => ({
    node: false,
    crossOriginIsolated: true,
    sharedArrayBuffer: true,
    workers: true,
    ...over,
  });

  test('the decision (threadSupport)', () => {
    expect(threadSupport(browser({}))).toBeNull();
    expect(threadSupport({ node: true, crossOriginIsolated: undefined, sharedArrayBuffer: true, workers: false })).toBeNull();
    const notIsolated = threadSupport(browser({ crossOriginIsolated: false, sharedArrayBuffer: false }));
    expect(notIsolated).toContain('not cross-origin isolated');
    expect(notIsolated).toContain('Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp');
    expect(threadSupport(browser({ crossOriginIsolated: undefined }))).toContain('not cross-origin isolated');
    expect(threadSupport(browser({ workers: false }))).toContain('Web Workers are not available');
    expect(threadSupport(browser({ sharedArrayBuffer: false }))).toContain('SharedArrayBuffer is not available');
  });

  test('a page that is not cross-origin isolated starts no worker', async () => {
    const start = vi.fn();
    const { pool, note } = await resolveThreads(2, browser({ crossOriginIsolated: false, sharedArrayBuffer: false }), start);
    expect([pool, start.mock.calls.length]).toEqual([null, 0]);
    expect(note).toContain('Cross-Origin-Embedder-Policy: require-corp');
    expect(await resolveThreads(1, browser({ crossOriginIsolated: false }), start)).toEqual({ pool: null, note: null }); // asked for one
  });

  /** A worker that fails to start, as a blob: worker blocked by a Content-Security-Policy does. */
  const failing = (how: 'throws' | 'fails'): ThreadPort => {
    if (how === 'throws') throw new Error("Failed to construct 'Worker': access to the script at 'blob:…' is denied");
    return {
      post: () => {},
      listen: (_onMessage, onFailure) => setTimeout(() => onFailure('a worker failed: its script could not be loaded or run'), 1),
      hold: () => {},
      terminate: () => {},
    };
  };

  test.each(['throws', 'fails'] as const)('workers that cannot start (the constructor %s): one thread, the reason in the note', async (how) => {
    const { pool, note } = await resolveThreads(3, browser({}), () => failing(how));
    expect(pool).toBeNull();
    expect(note).toMatch(/^worker threads could not be started \(.*(denied|could not be loaded)/);
    expect(note).toContain('worker-src blob:');
    expect(note).toContain("the 'wasm' backend runs on one thread");
  });
});

test.each([
  [{ backend: 'wasm', threads: 0 }, 'options.threads must be a positive integer'],
  [{ backend: 'wasm', threads: 1.5 }, 'options.threads must be a positive integer'],
  [{ backend: 'cpu', threads: 2 }, "options.threads must be left out unless backend: 'wasm'"],
  [{ threads: 2 }, "options.threads must be left out unless backend: 'wasm'"],
])('createAttentionEngine(%o) is refused', async (options, message) => {
  await expect(createAttentionEngine(options as never)).rejects.toThrow(InvalidArgumentError);
  await expect(createAttentionEngine(options as never)).rejects.toThrow(message);
});

// Passes under MIN_WORK_PER_THREAD multiply-adds run on one thread; these are above it where it
// matters (the names say what is split), and each test checks that workers did get work.
// The last column: which kernels must run on workers when there are any.
const layers: [string, MultiHeadAttentionConfig, number, number, string[]][] = [
  ['E=64 H=4, B=1 S=1 (too small to split)', { embedDim: 64, numHeads: 4 }, 1, 1, []],
  ['E=128 H=4 G=2, B=2 S=300 (rows of the projections, heads)', { embedDim: 128, numHeads: 4, numKvHeads: 2 }, 2, 300, ['gemm', 'attend']],
  ['E=60 H=4 G=1 (Dh 15), B=3 S=200 (rows of the projections, heads)', { embedDim: 60, numHeads: 4, numKvHeads: 1 }, 3, 200, ['attend', 'gemm']],
  ['E=128 H=1, B=1 S=257 (rows; one head: one thread attends)', { embedDim: 128, numHeads: 1 }, 1, 257, ['gemm']],
  ['E=1024 H=8, B=2 S=1 (columns of the projections: few rows)', { embedDim: 1024, numHeads: 8 }, 2, 1, ['gemm']],
];

/** Which kernels the workers (not the calling thread) ran during `fn`. */
async function onWorkers<T>(fn: () => Promise<T>): Promise<{ result: T; kernels: Set<string> }> {
  const run = vi.spyOn(ThreadPool.prototype, 'run');
  try {
    const result = await fn();
    const kernels = new Set(run.mock.calls.flatMap(([, lists]) => lists.slice(1).flatMap((calls) => calls.map(([name]) => name))));
    return { result, kernels };
  } finally {
    run.mockRestore();
  }
}

describe('threaded = single-threaded, bit for bit', () => {
  test.each(layers)('%s, causal, needWeights', async (name, config, B, S, split) => {
    const sd = randomStateDict(config, S);
    const x = uniform(B * S * config.embedDim, 1, mulberry32(S + 1));
    const options = { batchSize: B, seqLen: S, isCausal: true, needWeights: true, alibiSlopes: uniform(config.numHeads, 0.5, mulberry32(2)) };
    const results = [];
    for (const engine of [one, two, three]) {
      const mha = engine.createMultiHeadAttention(config, sd);
      const { result, kernels } = await onWorkers(() => mha.forward(x, options));
      results.push(result);
      mha.dispose();
      const expected = engine === one ? [] : [...split].sort();
      expect([...kernels].filter((k) => k === 'gemm' || k === 'attend').sort(), `${name}: kernels on workers, ${engine.threads} thread(s)`).toEqual(expected);
    }
    for (const r of results.slice(1)) {
      expect(r.output).toEqual(results[0].output);
      expect(r.attentionWeights).toEqual(results[0].attentionWeights);
    }
  });

  test('KV-cache decoding and scaledDotProductAttention', async () => {
    const config = { embedDim: 32, numHeads: 4, numKvHeads: 2 };
    const sd = randomStateDict(config, 3);
    const x = uniform(2 * 20 * 32, 1, mulberry32(4));
    const outputs: Float32Array[][] = [];
    for (const engine of [one, two]) {
      const mha = engine.createMultiHeadAttention(config, sd);
      const cache = mha.createKvCache({ batchSize: 2, maxSeqLen: 24 });
      const steps = [(await mha.forward(x, { batchSize: 2, seqLen: 20, kvCache: cache, isCausal: true })).output];
      for (let t = 0; t < 4; t++) steps.push((await mha.forward(x.subarray(0, 64), { batchSize: 2, seqLen: 1, kvCache: cache, isCausal: true })).output);
      const r = mulberry32(5);
      const [q, k, v] = [uniform(2 * 4 * 7 * 8, 1, r), uniform(2 * 2 * 9 * 8, 1, r), uniform(2 * 2 * 9 * 8, 1, r)];
      steps.push(
        (await engine.scaledDotProductAttention(q, k, v, { batchSize: 2, numHeads: 4, numKvHeads: 2, seqLen: 7, kvSeqLen: 9, headDim: 8, isCausal: true })).output,
      );
      outputs.push(steps);
      mha.dispose();
    }
    expect(outputs[1]).toEqual(outputs[0]);
  });
});

test('concurrent calls on one layer give what the same calls give one after another', async () => {
  const config = { embedDim: 64, numHeads: 4 };
  const mha = two.createMultiHeadAttention(config, randomStateDict(config, 6));
  const inputs = [7, 40, 3, 65].map((S) => ({ x: uniform(S * 64, 1, mulberry32(S)), S }));
  const together = await Promise.all(inputs.map(({ x, S }) => mha.forward(x, { batchSize: 1, seqLen: S })));
  for (const [i, { x, S }] of inputs.entries()) expect((await mha.forward(x, { batchSize: 1, seqLen: S })).output).toEqual(together[i].output);
  mha.dispose();
});

test('disposing a threaded engine fails its unfinished calls with DisposedError', async () => {
  const engine = await createAttentionEngine({ backend: 'wasm', threads: 2 });
  const config = { embedDim: 64, numHeads: 4 };
  const mha = engine.createMultiHeadAttention(config, randomStateDict(config, 8));
  const x = uniform(300 * 64, 1, mulberry32(9));
  const call = mha.forward(x, { batchSize: 1, seqLen: 300 });
  engine.dispose();
  await expect(call).rejects.toThrow(DisposedError);
});
