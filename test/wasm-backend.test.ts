// The 'wasm' backend (float32, WebAssembly SIMD) against the float64 CPU backend, over a grid of
// shapes that no tile divides: S = 1, 2, 7, 33, 100 (the attention's tiles are 4 rows × 64 keys,
// the GEMM's 4 rows × 8 columns), head sizes 1 … 256 (odd ones included: the kernels' f32x4 loops
// have scalar tails), grouped-query and multi-query layers, with and without bias, causal or not.
// The masks, score options, cross-attention, packed batches and needWeights: wasm-options.test.ts.

import { describe, expect, test, vi } from 'vitest';
import {
  AttentionError,
  type AttentionEngine,
  createAttentionEngine,
  DeviceLimitError,
  DisposedError,
  InvalidArgumentError,
  type KvCache,
  type MultiHeadAttention,
  UnsupportedError,
} from '../src/index.ts';
import { compileKernels, WasmKernels } from '../src/wasm/kernels.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';

interface LayerCase {
  embedDim: number;
  numHeads: number;
  numKvHeads?: number;
  bias?: boolean;
}

const layers: LayerCase[] = [
  { embedDim: 3, numHeads: 3 }, // Dh 1
  { embedDim: 6, numHeads: 2, bias: false }, // Dh 3, no bias
  { embedDim: 4, numHeads: 1 }, // Dh 4
  { embedDim: 14, numHeads: 2 }, // Dh 7
  { embedDim: 40, numHeads: 2 }, // Dh 20
  { embedDim: 132, numHeads: 3 }, // Dh 44
  { embedDim: 128, numHeads: 2 }, // Dh 64
  { embedDim: 254, numHeads: 2 }, // Dh 127
  { embedDim: 256, numHeads: 1 }, // Dh 256
  { embedDim: 64, numHeads: 8, numKvHeads: 2 }, // grouped-query: 4 query heads per key/value head
  { embedDim: 60, numHeads: 4, numKvHeads: 1 }, // multi-query, Dh 15
];

const shapes: [number, number][] = [
  [1, 1],
  [3, 1],
  [2, 2],
  [1, 7],
  [3, 33],
  [1, 100],
];

const engines = useEngines('wasm', 'cpu');

function caseName(l: LayerCase): string {
  return `E=${l.embedDim} H=${l.numHeads}${l.numKvHeads ? ` G=${l.numKvHeads}` : ''} Dh=${l.embedDim / l.numHeads}${l.bias === false ? ' no bias' : ''}`;
}

describe.each(layers)('wasm vs CPU reference, $embedDim/$numHeads', (l) => {
  test.each(shapes.flatMap(([B, S]) => [[B, S, false] as const, [B, S, true] as const]))(`${caseName(l)} B=%i S=%i causal=%s`, async (B, S, isCausal) => {
    const seed = 1000 * l.embedDim + 10 * S + B;
    const sd = randomStateDict(l, seed);
    const query = uniform(B * S * l.embedDim, 1, mulberry32(seed + 1));
    const wasm = engines.wasm.createMultiHeadAttention(l, sd);
    const cpu = engines.cpu.createMultiHeadAttention(l, sd);
    try {
      const { output } = await wasm.forward(query, { batchSize: B, seqLen: S, isCausal });
      const ref = await cpu.forward(query, { batchSize: B, seqLen: S, isCausal });
      expect(output.length).toBe(B * S * l.embedDim);
      expectClose(output, ref.output, f32Tolerance([l.embedDim, S, l.embedDim]), `${caseName(l)} B=${B} S=${S}${isCausal ? ' causal' : ''}`);
    } finally {
      wasm.dispose();
      cpu.dispose();
    }
  });
});

describe('wasm vs CPU reference, long sequences (several 64-key blocks per row)', () => {
  test.each([
    [1, 257, true],
    [2, 300, false],
  ] as const)('E=64 H=2 B=%i S=%i causal=%s', async (B, S, isCausal) => {
    const l = { embedDim: 64, numHeads: 2 };
    const sd = randomStateDict(l, S);
    const query = uniform(B * S * 64, 1, mulberry32(S + 1));
    const wasm = engines.wasm.createMultiHeadAttention(l, sd);
    const cpu = engines.cpu.createMultiHeadAttention(l, sd);
    try {
      const { output } = await wasm.forward(query, { batchSize: B, seqLen: S, isCausal });
      const ref = await cpu.forward(query, { batchSize: B, seqLen: S, isCausal });
      expectClose(output, ref.output, f32Tolerance([64, S, 64]), `E=64 H=2 B=${B} S=${S}`);
    } finally {
      wasm.dispose();
      cpu.dispose();
    }
  });
});

test('NaN and ±Infinity in the input: the call completes with the right lengths, and the next normal call is right', async () => {
  const l = { embedDim: 16, numHeads: 2 };
  const sd = randomStateDict(l, 3);
  const wasm = engines.wasm.createMultiHeadAttention(l, sd);
  const cpu = engines.cpu.createMultiHeadAttention(l, sd);
  const x = uniform(2 * 9 * 16, 1, mulberry32(4));
  const bad = Float32Array.from(x);
  bad[5] = Number.NaN;
  bad[40] = Number.POSITIVE_INFINITY;
  bad[77] = Number.NEGATIVE_INFINITY;
  const odd = await wasm.forward(bad, { batchSize: 2, seqLen: 9, isCausal: true, needWeights: true });
  expect([odd.output.length, odd.attentionWeights!.length]).toEqual([2 * 9 * 16, 2 * 2 * 9 * 9]);
  const { output } = await wasm.forward(x, { batchSize: 2, seqLen: 9 });
  expectClose(output, (await cpu.forward(x, { batchSize: 2, seqLen: 9 })).output, f32Tolerance([16, 9, 16]), 'after NaN');
  wasm.dispose();
  cpu.dispose();
});

test("the weights are copied at layer creation: later changes to the caller's arrays do not leak in", async () => {
  const l = { embedDim: 16, numHeads: 2 };
  const sd = randomStateDict(l, 5);
  const x = uniform(3 * 16, 1, mulberry32(6));
  const mha = engines.wasm.createMultiHeadAttention(l, sd);
  const before = (await mha.forward(x, { batchSize: 1, seqLen: 3 })).output;
  for (const w of Object.values(sd)) w.fill(7);
  expect((await mha.forward(x, { batchSize: 1, seqLen: 3 })).output).toEqual(before);
  mha.dispose();
});

test("engine.backend is 'wasm', in float32, with nothing held on a GPU", () => {
  expect(engines.wasm.backend).toBe('wasm');
  expect(engines.wasm.precision).toBe('f32');
  expect(engines.wasm.adapterInfo).toBeNull();
  expect(engines.wasm.device).toBeNull();
  expect(engines.wasm.tuning).toBeNull();
  expect(engines.wasm.stats()).toEqual({ buffers: 0, bytes: 0, peakBytes: 0 });
});

/** What a call throws (or rejects with), to compare between backends. */
async function thrown(fn: () => unknown): Promise<Error> {
  try {
    await fn();
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected an error, got none');
}

describe('bad input: the same typed errors as the CPU backend, before any WebAssembly work', () => {
  const l = { embedDim: 8, numHeads: 2 };
  const sd = randomStateDict(l, 1);
  const x = uniform(2 * 3 * 8, 1, mulberry32(1));
  // Each call gets a layer of its engine, made (and, for the cache, filled) before the spy starts.
  const calls: [string, (engine: AttentionEngine, mha: MultiHeadAttention, cache: KvCache) => unknown][] = [
    ['numHeads not dividing embedDim', (e) => e.createMultiHeadAttention({ embedDim: 8, numHeads: 3 }, sd)],
    ['a weight of the wrong length', (e) => e.createMultiHeadAttention(l, { ...sd, 'out_proj.weight': new Float32Array(3) })],
    ['query of the wrong length', (_e, mha) => mha.forward(x.subarray(1), { batchSize: 2, seqLen: 3 })],
    ['attnMask of the wrong length', (_e, mha) => mha.forward(x, { batchSize: 2, seqLen: 3, attnMask: new Float32Array(5) })],
    ['an unknown option', (_e, mha) => mha.forward(x, { batchSize: 2, seqLen: 3, causal: true } as never)],
    ['needWeights with cuSeqlens', (_e, mha) => mha.forward(x, { cuSeqlens: Int32Array.from([0, 2, 6]), needWeights: true } as never)],
    ['a KV cache without room', (_e, mha, cache) => mha.forward(x, { batchSize: 2, seqLen: 3, kvCache: cache })],
    ['sdpa: headDim not matching', (e) => e.scaledDotProductAttention(x, x, x, { batchSize: 1, numHeads: 2, seqLen: 3, headDim: 5 })],
  ];
  test.each(calls)('%s', async (_name, call) => {
    const prepared = await Promise.all(
      [engines.wasm, engines.cpu].map(async (engine) => {
        const mha = engine.createMultiHeadAttention(l, sd);
        const cache = mha.createKvCache({ batchSize: 2, maxSeqLen: 4 });
        await mha.forward(x, { batchSize: 2, seqLen: 3, kvCache: cache });
        return { engine, mha, cache };
      }),
    );
    const put = vi.spyOn(WasmKernels.prototype, 'put');
    try {
      const errors: Error[] = [];
      for (const { engine, mha, cache } of prepared) errors.push(await thrown(() => call(engine, mha, cache)));
      expect(put).not.toHaveBeenCalled();
      const [w, c] = errors;
      expect(w).toBeInstanceOf(AttentionError);
      expect(w.constructor).toBe(c.constructor);
      expect(w.message).toBe(c.message);
    } finally {
      put.mockRestore();
      for (const { mha } of prepared) mha.dispose();
    }
  });

  test('GPU buffers out are WebGPU only: UnsupportedError naming the backend', async () => {
    const mha = engines.wasm.createMultiHeadAttention(l, sd);
    const e = await thrown(() => mha.forward(x, { batchSize: 2, seqLen: 3, returnBuffer: true } as never));
    expect(e).toBeInstanceOf(UnsupportedError);
    expect(e.message).toContain("options.returnBuffer must be used on the WebGPU backend only; got an engine on the 'wasm' backend");
  });

  test.each([
    [{ backend: 'tpu' }, 'options.backend must be "webgpu", "cpu", "wasm" or left out'],
    [{ backend: 'wasm', tuning: { mode: 'off' } }, "options.tuning must be left out with backend: 'wasm'"],
    [{ backend: 'wasm', limits: { maxBufferSize: 1024 } }, "options.limits must be left out with backend: 'wasm'"],
  ])('createAttentionEngine(%o) is refused', async (options, message) => {
    const e = await thrown(() => createAttentionEngine(options as never));
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect(e.message).toContain(message);
  });

  test('calls still waiting when their layer is disposed reject with DisposedError', async () => {
    const mha = engines.wasm.createMultiHeadAttention(l, sd);
    const calls = [mha.forward(x, { batchSize: 2, seqLen: 3 }), mha.forward(x, { batchSize: 2, seqLen: 3 })];
    mha.dispose();
    for (const call of calls) await expect(call).rejects.toThrow(DisposedError);
  });

  test('a call past the 4 GiB of a WebAssembly memory: DeviceLimitError, and the instance stays usable', async () => {
    const kernels = new WasmKernels(await compileKernels());
    const mark = kernels.mark();
    expect(() => kernels.alloc(2 ** 30)).toThrow(DeviceLimitError);
    expect(() => kernels.alloc(2 ** 30)).toThrow('Split the batch into smaller calls, or leave out needWeights');
    expect(kernels.mark()).toBe(mark);
    expect(kernels.take(kernels.put(Float32Array.of(1, 2, 3)), 3)).toEqual(Float32Array.of(1, 2, 3));
  });

  test("precision 'f16' is noted, not obeyed", async () => {
    const engine = await createAttentionEngine({ backend: 'wasm', precision: 'f16' });
    expect(engine.precision).toBe('f32');
    expect(engine.precisionNote).toContain("the 'wasm' backend computes in float32");
    engine.dispose();
  });
});
