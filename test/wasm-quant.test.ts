// The 'wasm' backend with quantized weights (issue 25): the kernels qgemv (≤ 8 rows, decode) and
// qgemm (prefill) of wasm/qgemm.ts, which read the weights packed and dequantize them in their loops.
//   1. the kernels, called directly: every type (q4_0, q8_0, q4_k, q6_k, nbits 4/8 at every block
//      size, K not a multiple of the block, zero points or not, f16 or f32 scales), rows 1 … 8 (qgemv)
//      and more (qgemm), odd N: close to the float64 product with dequantize()'s weights, and qgemm bit
//      for bit what gemm gives on the float32 weights unpackWeight stands for (qgemv within float32's rule:
//      it sums x·q per group, then scales);
//   2. layers: prefill and KV-cache decode steps, GQA, B > 1, odd N, q/k/v of different types, against
//      the float64 CPU backend given the dequantized weights as float32 (the oracle);
//   3. threads: 2 threads give the same bits as 1, with quantized kernels run on the worker;
//   4. no float copy: the layer's memory holds the packed bytes, not float32 weights.
// Random block bytes with sane f16 scales stand for real quantized weights.

import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { type AttentionEngine, createAttentionEngine, type MultiHeadAttentionConfig, type StateDict } from '../src/index.ts';
import { dequantize } from '../src/quant/dequantize.ts';
import { packWeight, unpackWeight } from '../src/quant/pack.ts';
import type { QuantizedTensor } from '../src/quant/types.ts';
import { type Kind, randomQuantized } from './helpers/quantized.ts';
import { mulberry32, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { compileKernels, packBias, packWeights, WasmKernels } from '../src/wasm/kernels.ts';
import { setThreadChoiceMode } from '../src/wasm/thread-choice.ts';
import { panelQuantized } from '../src/wasm/projection.ts';
import { ThreadPool } from '../src/wasm/threads.ts';
import { useEngines } from './helpers/engines.ts';

// The passes this file spies on run on the threads whatever their measured choice (thread-choice.ts ThreadChoice).
beforeAll(() => setThreadChoiceMode('always'));
afterAll(() => setThreadChoiceMode('measured'));

const engines = useEngines('wasm', 'cpu');

const KINDS: [Kind, number][] = [
  // [kind, K]: K a multiple of the format's block (GGUF), else one that leaves a partial block and word
  ['q4_0', 96],
  ['q8_0', 64],
  ['q4_k', 256],
  ['q6_k', 512],
  ['nbits4-16', 44],
  ['nbits4-32', 100],
  ['nbits4-64', 60],
  ['nbits4-128', 300],
  ['nbits4-256', 270],
  ['nbits8-16', 50],
  ['nbits8-32', 66],
  ['nbits8-64', 64],
  ['nbits8-128', 130],
  ['nbits8-256', 258],
  ['nbits4-32-zp', 70],
  ['nbits8-32-zp', 35],
  ['nbits4-64-f32', 68],
  ['nbits8-16-f32', 33],
];

let single: Promise<WebAssembly.Module> | null = null;
async function kernelInstance(): Promise<WasmKernels> {
  single ??= compileKernels('single');
  return new WasmKernels(await single);
}

describe('gemm (float weights): a row gives the same bits alone, among fewer than 4 rows (two panels a pass) and in the 4-row micro-kernel', () => {
  test.each([
    [8, 1],
    [16, 7],
    [21, 64],
    [24, 33],
    [40, 130],
  ])('N=%i, K=%i (an odd number of panels, a partial one)', async (N, K) => {
    for (const simd of ['relaxed', 'simd128'] as const) {
      const kernels = new WasmKernels(await compileKernels('single', simd));
      const W = uniform(N * K, 1, mulberry32(N + K));
      const bias = uniform(N, 0.1, mulberry32(N));
      const [pw, pb] = [kernels.put(packWeights(W, N, K)), kernels.put(packBias(bias, 0, N))];
      const M = 8;
      const xs = uniform(M * K, 1, mulberry32(K));
      const x = kernels.put(xs);
      const y8 = kernels.alloc(M * N); // two quads: the 4-row micro-kernel
      kernels.k.gemm(x, K, M, K, pw, N, pb, y8, N);
      const all = kernels.take(y8, M * N);
      const ref = new Float64Array(M * N);
      for (let m = 0; m < M; m++)
        for (let n = 0; n < N; n++) {
          let sum = bias[n];
          for (let k = 0; k < K; k++) sum += xs[m * K + k] * W[n * K + k];
          ref[m * N + n] = sum;
        }
      expectClose(all, ref, f32Tolerance([K]), `${simd} N=${N} K=${K} against the float64 product`);
      for (const rows of [1, 2, 3]) {
        for (let m0 = 0; m0 + rows <= M; m0 += rows) {
          const y = kernels.alloc(rows * N);
          kernels.k.gemm(x + 4 * m0 * K, K, rows, K, pw, N, pb, y, N);
          expect(kernels.take(y, rows * N), `${simd}: rows ${m0} … ${m0 + rows - 1} as a call of ${rows}`).toEqual(all.subarray(m0 * N, (m0 + rows) * N));
        }
      }
      kernels.dispose();
    }
  });
});

describe('qgemv and qgemm: bit for bit gemm on the unpacked weights, and close to the float64 product', () => {
  test.each(KINDS)('%s, K=%i', async (kind, K) => {
    const kernels = await kernelInstance();
    const N = 21; // odd: a partial 4-column panel and a partial 8-column one
    const t = randomQuantized(kind, N, K, K * 7 + kind.length);
    const packed = packWeight(t);
    const { wq, so } = panelQuantized(packed);
    const unpacked = unpackWeight(packed);
    const exact = dequantize(t);
    const bias = uniform(N, 0.1, mulberry32(3));
    const [pw, pb] = [kernels.put(packWeights(unpacked, N, K)), kernels.put(packBias(bias, 0, N))];
    const [pq, ps] = [kernels.putBytes(new Uint8Array(wq.buffer)), kernels.put(so)];
    for (const M of [1, 2, 3, 4, 5, 8, 9, 70]) {
      const mark = kernels.mark();
      const xs = uniform(M * K, 1, mulberry32(M));
      const x = kernels.put(xs);
      const [yFloat, yQuant] = [kernels.alloc(M * N), kernels.alloc(M * N)];
      kernels.k.gemm(x, K, M, K, pw, N, pb, yFloat, N);
      if (M <= 8) kernels.k.qgemv(x, K, M, K, pq, ps, N, pb, yQuant, N, packed.bits, packed.group, kernels.alloc(M * (2 * packed.groups + K)));
      else kernels.k.qgemm(x, K, M, K, pq, ps, N, pb, yQuant, N, packed.bits, packed.group, kernels.alloc((K + 7) * 8));
      const [float, quant] = [kernels.take(yFloat, M * N), kernels.take(yQuant, M * N)];
      // qgemm runs gemm's micro-kernel on the dequantized panel: the same bits. qgemv sums x·q per group first.
      if (M > 8) expect(quant, `${kind} M=${M}: qgemm = gemm on unpackWeight's weights`).toEqual(float);
      else expectClose(quant, float, f32Tolerance([K]), `${kind} M=${M}: qgemv against gemm on unpackWeight's weights`);
      const ref = new Float64Array(M * N);
      for (let m = 0; m < M; m++) {
        for (let n = 0; n < N; n++) {
          let sum = bias[n];
          for (let k = 0; k < K; k++) sum += xs[m * K + k] * exact[n * K + k];
          ref[m * N + n] = sum;
        }
      }
      expectClose(quant, ref, f32Tolerance([K]), `${kind} M=${M} against the float64 product with dequantize()'s weights`);
      if (M > 1 && M <= 8) {
        // A row alone (groupPanel for one row) gives the bits it gets among several (two rows a pass).
        for (let m = 0; m < M; m++) {
          const y1 = kernels.alloc(N);
          kernels.k.qgemv(x + 4 * m * K, K, 1, K, pq, ps, N, pb, y1, N, packed.bits, packed.group, kernels.alloc(2 * packed.groups + K));
          expect(kernels.take(y1, N), `${kind}: row ${m} of ${M} alone`).toEqual(quant.subarray(m * N, (m + 1) * N));
        }
      }
      kernels.release(mark);
    }
    kernels.dispose();
  });

  // qgemv takes x as 16-bit integer pairs scaled per group of the weights (wasm/qgemm.ts HL): activations
  // whose sizes differ by many orders (LLM outlier channels), a group of zeros, subnormals, and values next
  // to a power of two stay within float32's rule; a NaN or an infinity makes the row's outputs NaN.
  test.each([
    ['q4_0', 256],
    ['q8_0', 96],
    ['nbits4-256', 512],
    ['nbits8-16-f32', 33],
  ] as const)('qgemv on activations of very different sizes, %s K=%i', async (kind, K) => {
    const kernels = await kernelInstance();
    const N = 12;
    const t = randomQuantized(kind, N, K, K + 11);
    const packed = packWeight(t);
    const { wq, so } = panelQuantized(packed);
    const exact = dequantize(t);
    const [pq, ps, pb] = [kernels.putBytes(new Uint8Array(wq.buffer)), kernels.put(so), kernels.put(packBias(null, 0, N))];
    const M = 3;
    const rng = mulberry32(K);
    const xs = new Float32Array(M * K);
    for (let k = 0; k < K; k++) {
      xs[k] = (rng() - 0.5) * (k % 37 === 5 ? 3e4 : k % 11 === 0 ? 1e-3 : 1); // outliers and small ones
      xs[K + k] = k < 32 ? 0 : k % 2 ? 2 ** -20 * (1 - 2 ** -24) : -(2 ** (k % 9)); // zeros, just under and at powers of two
      xs[2 * K + k] = (rng() - 0.5) * 1e-39; // subnormals
    }
    const run = (values: Float32Array) => {
      const mark = kernels.mark();
      const y = kernels.alloc(M * N);
      kernels.k.qgemv(kernels.put(values), K, M, K, pq, ps, N, pb, y, N, packed.bits, packed.group, kernels.alloc(M * (2 * packed.groups + K)));
      const out = kernels.take(y, M * N);
      kernels.release(mark);
      return out;
    };
    const out = run(xs);
    for (let m = 0; m < M; m++) {
      const mark = kernels.mark();
      const y = kernels.alloc(N);
      kernels.k.qgemv(kernels.put(xs.subarray(m * K, (m + 1) * K)), K, 1, K, pq, ps, N, pb, y, N, packed.bits, packed.group, kernels.alloc(2 * packed.groups + K));
      expect(kernels.take(y, N), `row ${m} alone`).toEqual(out.subarray(m * N, (m + 1) * N));
      kernels.release(mark);
    }
    for (let m = 0; m < 2; m++) {
      // Float32's rule at the size of the products: outputs are not O(1) here, and may cancel.
      const [ref, size] = [new Float64Array(N), new Float64Array(N)];
      for (let n = 0; n < N; n++) {
        for (let k = 0; k < K; k++) {
          ref[n] += xs[m * K + k] * exact[n * K + k];
          size[n] += Math.abs(xs[m * K + k] * exact[n * K + k]);
        }
      }
      const { atol, rtol } = f32Tolerance([K]);
      expectClose(out.subarray(m * N, (m + 1) * N), ref, { atol: atol * Math.max(...size), rtol }, `${kind} row ${m}`);
    }
    for (let n = 0; n < N; n++) expect(Math.abs(out[2 * N + n])).toBeLessThan(1e-35); // the subnormal row: about 0, finite
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY]) {
      const withBad = xs.slice();
      withBad[K + (K >> 1)] = bad;
      const got = run(withBad);
      expect(got.subarray(N, 2 * N).every(Number.isNaN), `${bad} in row 1: its outputs NaN`).toBe(true);
      expect(got.subarray(0, N)).toEqual(out.subarray(0, N)); // the other rows as before
    }
    kernels.dispose();
  });

  // qgemv touches the quant and scale streams 2 KiB and 1 KiB ahead of what it reads (wasm/qgemm.ts
  // touchAhead), past the arrays' ends at the last panels: clamped to memory, so weights that end where
  // the memory ends still run (a load past it would trap) and give the bits they give elsewhere.
  test.each(['q4_0', 'q8_0', 'nbits4-256'] as const)('qgemv with the weights at the very end of memory, %s', async (kind) => {
    const kernels = await kernelInstance();
    const [N, K] = [9, 512];
    const t = randomQuantized(kind, N, K, 77);
    const packed = packWeight(t);
    const { wq, so } = panelQuantized(packed);
    const xs = uniform(K, 1, mulberry32(9));
    const [x, pb, scratch] = [kernels.put(xs), kernels.put(packBias(null, 0, N)), kernels.alloc(2 * packed.groups + K)];
    const [yEnd, yElsewhere] = [kernels.alloc(N), kernels.alloc(N)];
    const [q1, s1] = [kernels.putBytes(new Uint8Array(wq.buffer)), kernels.put(so)];
    kernels.k.qgemv(x, K, 1, K, q1, s1, N, pb, yElsewhere, N, packed.bits, packed.group, scratch);
    // A filler up to where the second copy of the weights ends at the memory's last byte.
    const bytes = wq.byteLength + so.byteLength;
    let room = kernels.memory.buffer.byteLength - kernels.mark();
    if (room < bytes) {
      kernels.alloc(room, true);
      kernels.alloc(bytes, true); // grows the memory by a page or more
      kernels.release(kernels.mark() - bytes);
      room = kernels.memory.buffer.byteLength - kernels.mark();
    }
    kernels.alloc(room - bytes, true);
    const [q2, s2] = [kernels.putBytes(new Uint8Array(wq.buffer)), kernels.put(so)];
    expect(s2 + so.byteLength, 'the scales end at the memory end').toBe(kernels.memory.buffer.byteLength);
    kernels.k.qgemv(x, K, 1, K, q2, s2, N, pb, yEnd, N, packed.bits, packed.group, scratch);
    expect(kernels.take(yEnd, N)).toEqual(kernels.take(yElsewhere, N));
    kernels.dispose();
  });

  test('the panels hold the packed bits (≈ 4 or 8 bits a weight + 2 floats a group), nothing dequantized', () => {
    const t = randomQuantized('q4_0', 64, 256, 1);
    const { wq, so } = panelQuantized(packWeight(t));
    expect(wq.byteLength).toBe((64 * 256) / 2); // 4 bits a weight
    expect(so.length).toBe(64 * (256 / 32) * 2); // a (scale, offset) per block of 32
  });
});

/** The state_dict with every quantized weight dequantized to float32 (what the oracle multiplies by). */
function dequantized(sd: StateDict): StateDict {
  return Object.fromEntries(Object.entries(sd).map(([name, w]) => [name, w instanceof Float32Array ? w : dequantize(w as QuantizedTensor)])) as StateDict;
}

interface QuantLayerCase {
  name: string;
  config: MultiHeadAttentionConfig;
  /** in_proj_weight's kind, or q/k/v's kinds (separate weights). */
  inProj: Kind | [Kind | 'f32', Kind | 'f32', Kind | 'f32'];
  out: Kind | 'f32';
}

const layerCases: QuantLayerCase[] = [
  { name: 'E=64 H=4, in_proj q4_0, out q8_0', config: { embedDim: 64, numHeads: 4 }, inProj: 'q4_0', out: 'q8_0' },
  {
    name: 'E=256 H=8 G=2 (GQA), q q4_k, k q6_k, v q8_0, out q4_k (a Q4_K_M mix)',
    config: { embedDim: 256, numHeads: 8, numKvHeads: 2 },
    inProj: ['q4_k', 'q6_k', 'q8_0'],
    out: 'q4_k',
  },
  {
    name: 'E=60 H=4 G=1 (Dh 15, odd N), in_proj nbits 4/32 with zero points, out nbits 8/16',
    config: { embedDim: 60, numHeads: 4, numKvHeads: 1 },
    inProj: 'nbits4-32-zp',
    out: 'nbits8-16',
  },
  {
    name: 'E=66 H=6 G=3 (Dh 11), q float, k nbits 8/64, v nbits 4/128 f32 scales, out float',
    config: { embedDim: 66, numHeads: 6, numKvHeads: 3 },
    inProj: ['f32', 'nbits8-64', 'nbits4-128-f32'],
    out: 'f32',
  },
];

/** A layer's state_dict with the weights of the kinds asked for (biases float). */
function quantizedStateDict(c: QuantLayerCase, seed: number): StateDict {
  const { embedDim: E, numHeads: H } = c.config;
  const G = c.config.numKvHeads ?? H;
  const Dh = E / H;
  const rng = mulberry32(seed);
  const weight = (kind: Kind | 'f32', N: number, s: number) => (kind === 'f32' ? uniform(N * E, 1 / Math.sqrt(E), rng) : randomQuantized(kind, N, E, s));
  const sd: StateDict = { in_proj_bias: uniform((H + 2 * G) * Dh, 0.1, rng), 'out_proj.bias': uniform(E, 0.1, rng) };
  if (typeof c.inProj === 'string') sd.in_proj_weight = weight(c.inProj, (H + 2 * G) * Dh, seed + 1) as never;
  else {
    sd.q_proj_weight = weight(c.inProj[0], H * Dh, seed + 2) as never;
    sd.k_proj_weight = weight(c.inProj[1], G * Dh, seed + 3) as never;
    sd.v_proj_weight = weight(c.inProj[2], G * Dh, seed + 4) as never;
  }
  sd['out_proj.weight'] = weight(c.out, E, seed + 5) as never;
  return sd;
}

/** Which kernels ran (on any thread) during fn. */
async function kernelsRun<T>(fn: () => Promise<T>): Promise<{ result: T; names: Set<string>; onWorkers: Set<string> }> {
  const run = vi.spyOn(WasmKernels.prototype, 'run');
  try {
    const result = await fn();
    const lists = run.mock.calls.map(([l]) => l);
    return {
      result,
      names: new Set(lists.flatMap((l) => l.flatMap((calls) => calls.map(([name]) => name)))),
      onWorkers: new Set(lists.flatMap((l) => l.slice(1).flatMap((calls) => calls.map(([name]) => name)))),
    };
  } finally {
    run.mockRestore();
  }
}

describe('quantized layers on wasm against the float64 CPU backend with the dequantized weights', () => {
  test.each(layerCases)('$name: prefill B=2 S=13, then decode steps over the KV cache', async (c) => {
    const sd = quantizedStateDict(c, c.config.embedDim);
    const E = c.config.embedDim;
    const wasm = engines.wasm.createMultiHeadAttention(c.config, sd);
    const cpu = engines.cpu.createMultiHeadAttention(c.config, dequantized(sd));
    const [wasmCache, cpuCache] = [wasm.createKvCache({ batchSize: 2, maxSeqLen: 16 }), cpu.createKvCache({ batchSize: 2, maxSeqLen: 16 })];
    try {
      const x = uniform(2 * 13 * E, 1, mulberry32(E + 1));
      const prefill = { batchSize: 2, seqLen: 13, isCausal: true };
      const { result, names } = await kernelsRun(() => wasm.forward(x, { ...prefill, kvCache: wasmCache }));
      const someFloat = typeof c.inProj !== 'string' && c.inProj[0] === 'f32';
      expect(names.has('qgemm'), 'prefill: qgemm ran').toBe(true);
      expect(names.has('gemm'), 'prefill: gemm ran (for float weights only)').toBe(someFloat);
      const ref = await cpu.forward(x, { ...prefill, kvCache: cpuCache });
      expectClose(result.output, ref.output, f32Tolerance([E, 13, E]), `${c.name} prefill`);
      for (let step = 0; step < 3; step++) {
        const xt = uniform(2 * E, 1, mulberry32(100 + step));
        const decode = { batchSize: 2, seqLen: 1, isCausal: true };
        const got = await kernelsRun(() => wasm.forward(xt, { ...decode, kvCache: wasmCache }));
        expect(got.names.has('qgemv') && !got.names.has('qgemm'), 'decode: qgemv ran, not qgemm').toBe(true);
        const want = await cpu.forward(xt, { ...decode, kvCache: cpuCache });
        expectClose(got.result.output, want.output, f32Tolerance([E, 14 + step, E]), `${c.name} decode step ${step}`);
      }
      // Without a cache, B = 3 S = 5 (not causal): qgemm over 15 rows.
      const x3 = uniform(3 * 5 * E, 1, mulberry32(E + 2));
      const plain = await wasm.forward(x3, { batchSize: 3, seqLen: 5 });
      expectClose(plain.output, (await cpu.forward(x3, { batchSize: 3, seqLen: 5 })).output, f32Tolerance([E, 5, E]), `${c.name} B=3 S=5`);
    } finally {
      wasmCache.dispose();
      cpuCache.dispose();
      wasm.dispose();
      cpu.dispose();
    }
  });

  test('a quantized layer gives the same bits as the float32 layer of the unpacked weights (prefill: qgemm)', async () => {
    // qgemm is bit-identical to gemm on unpackWeight's float32 values (above), so the layers are too.
    const c = layerCases[0];
    const sd = quantizedStateDict(c, 5);
    const unpacked = Object.fromEntries(
      Object.entries(sd).map(([name, w]) => [name, w instanceof Float32Array ? w : unpackWeight(packWeight(w as QuantizedTensor))]),
    ) as StateDict;
    const [q, f] = [engines.wasm.createMultiHeadAttention(c.config, sd), engines.wasm.createMultiHeadAttention(c.config, unpacked)];
    for (const S of [9, 20]) {
      const x = uniform(S * 64, 1, mulberry32(S));
      expect((await q.forward(x, { batchSize: 1, seqLen: S })).output).toEqual((await f.forward(x, { batchSize: 1, seqLen: S })).output);
    }
    q.dispose();
    f.dispose();
  });
});

test('no float copy of a quantized weight: the layer keeps ≈ the packed bytes', async () => {
  const config = { embedDim: 256, numHeads: 4 };
  const sd = quantizedStateDict({ name: '', config, inProj: 'q4_0', out: 'q4_0' }, 9);
  const put = vi.spyOn(WasmKernels.prototype, 'put');
  const putBytes = vi.spyOn(WasmKernels.prototype, 'putBytes');
  try {
    const mha = engines.wasm.createMultiHeadAttention(config, sd);
    const floats = put.mock.calls.reduce((n, [a]) => n + a.length, 0);
    const bytes = putBytes.mock.calls.reduce((n, [a]) => n + a.length, 0);
    const weights = 4 * 256 * 256;
    expect(bytes).toBe(weights / 2 + (weights / 32) * 2); // 4-bit quants, and q4_0's f16 scale per 32 alone (projection.ts halfScalesFit)
    expect(floats).toBeLessThan(weights / 64); // the biases (4·256 + 256, padded): no float scales, offsets or weights
    mha.dispose();
  } finally {
    put.mockRestore();
    putBytes.mockRestore();
  }
});

describe('threads: 2 threads give the bits 1 gives, the quantized kernels split over both', () => {
  let engines2: [AttentionEngine, AttentionEngine] | null = null;
  const both = async () => {
    engines2 ??= [await createAttentionEngine({ backend: 'wasm', threads: 1 }), await createAttentionEngine({ backend: 'wasm', threads: 2 })];
    return engines2;
  };
  test.each([
    ['decode: columns of the projections (qgemv)', { embedDim: 1024, numHeads: 8 }, 2, 1, 'qgemv', 'q4_0'],
    ['decode, E=1020 H=12 G=4 (N = 1020, 340: partial panels on the columns split)', { embedDim: 1020, numHeads: 12, numKvHeads: 4 }, 3, 1, 'qgemv', 'nbits4-64-zp'],
    ['prefill: rows of the projections (qgemm)', { embedDim: 128, numHeads: 4, numKvHeads: 2 }, 2, 300, 'qgemm', 'q4_0'],
    ['prefill, few rows: columns (qgemm)', { embedDim: 1024, numHeads: 8 }, 1, 12, 'qgemm', 'q4_0'],
  ] as const)('%s', async (_, config, B, S, kernel, inProj) => {
    const [one, two] = await both();
    const c: QuantLayerCase = { name: '', config, inProj, out: 'nbits8-32' };
    const sd = quantizedStateDict(c, S);
    const x = uniform(B * S * config.embedDim, 1, mulberry32(S + 1));
    const outputs: Float32Array[] = [];
    for (const engine of [one, two]) {
      const mha = engine.createMultiHeadAttention(config, sd);
      const pool = vi.spyOn(ThreadPool.prototype, 'run');
      try {
        outputs.push((await mha.forward(x, { batchSize: B, seqLen: S, isCausal: true })).output);
        const onWorker = new Set(pool.mock.calls.flatMap(([, lists]) => lists.slice(1).flatMap((calls) => calls.map(([name]) => name))));
        expect(onWorker.has(kernel), `${engine.threads} thread(s): ${kernel} on a worker`).toBe(engine.threads > 1);
      } finally {
        pool.mockRestore();
        mha.dispose();
      }
    }
    expect(outputs[1]).toEqual(outputs[0]);
  });
  afterAll(() => {
    for (const e of engines2 ?? []) e.dispose();
  });
});
