// ONNX Runtime Web as the oracle for the MatMulNBits format: a one-node model
//   Y [M, N] = com.microsoft.MatMulNBits(A [M, K], B uint8 [N, n_blocks, blob], scales float [N·n_blocks],
//              zero_points uint8 [N·ceil(n_blocks·bits/8)]?)   attributes K, N, bits, block_size
// run on ORT's WASM execution provider in Node, from the very bytes this engine takes, against
// x·dequantize(w)ᵀ in float64 (the tolerance of a float32 length-K reduction). For bits 4 and 8, K a
// multiple and not a multiple of blockSize, with and without zero points. If this agrees, the engine's
// reading of the layout (low nibble first, packed zero points, default zero 2^(bits−1), the partial last
// block) is ONNX Runtime's. Float16 scales too: A, scales and Y are then float16 (MatMulNBits' T1), checked
// at the float16 rule.
//
// The model is written by demo/bench/systems/ort-matmulnbits.ts (also the benchmark's peer).

import { beforeAll, expect, test } from 'vitest';
import { dequantize, type NBitsTensor, quantizeWeights } from '../src/index.ts';
import { floatToHalfBits, halfToFloat } from '../src/util/f16.ts';
import { matMulNBitsModel } from '../demo/bench/systems/ort-matmulnbits.ts';
import { mulberry32, uniform } from './helpers/random.ts';
import { expectClose, f16Tolerance, f32Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';

type Ort = typeof import('onnxruntime-web');
let ort: Ort;

beforeAll(async () => {
  ort = await import('onnxruntime-web');
  ort.env.wasm.numThreads = 1;
  ort.env.logLevel = 'error';
});

/** The bytes of a model Y = MatMulNBits(A, B, scales[, zero_points]) with this weight as its initializers. */
async function model(w: NBitsTensor, M: number): Promise<Uint8Array> {
  return matMulNBitsModel(M, w.shape[1], [['w', w]]);
}

/** x [M, K] · wᵀ, w [N, K], in float64. */
function matmulT(x: Float32Array, w: Float32Array, M: number, N: number, K: number): Float64Array {
  const y = new Float64Array(M * N);
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += x[m * K + k] * w[n * K + k];
      y[m * N + n] = s;
    }
  }
  return y;
}

const cases: [bits: 4 | 8, blockSize: 16 | 32 | 64, K: number, zeroPoints: boolean][] = [];
for (const bits of [4, 8] as const) {
  for (const zeroPoints of [true, false]) {
    cases.push([bits, 32, 64, zeroPoints]); // K a multiple of blockSize
    cases.push([bits, 16, 40, zeroPoints]); // K = 2.5 blocks: a partial last block
    cases.push([bits, 64, 96, zeroPoints]); // 1.5 blocks: odd block count (a half-used zero-point byte for 4 bits)
  }
}

test.each(cases)('bits %i, blockSize %i, K %i, zero points %s: ORT’s MatMulNBits equals x·dequantize(w)ᵀ', async (bits, blockSize, K, zeroPoints) => {
  const [M, N] = [3, 24];
  const seed = bits * 1000 + K + (zeroPoints ? 1 : 0);
  // quantizeWeights' nbits RTN writes the format; a square out_proj.weight gives it E = K
  const w = uniform(N * K, 0.5, mulberry32(seed));
  const sd = quantizeWeights({ in_proj_weight: w, 'out_proj.weight': new Float32Array(K * K) }, { dtype: 'nbits', bits, blockSize, symmetric: !zeroPoints });
  const t = sd.in_proj_weight as NBitsTensor;
  expect(Boolean(t.zeroPoints)).toBe(zeroPoints);
  const x = uniform(M * K, 1, mulberry32(seed + 7));
  const session = await ort.InferenceSession.create(await model(t, M), { executionProviders: ['wasm'] });
  try {
    const out = await session.run({ A: new ort.Tensor('float32', x, [M, K]) });
    const y = out.Y_w.data as Float32Array;
    expect(out.Y_w.dims).toEqual([M, N]);
    expectClose(y, matmulT(x, dequantize(t), M, N, K), f32Tolerance([K]), 'ORT MatMulNBits vs x·dequantize(w)ᵀ');
  } finally {
    await session.release();
  }
});

test('ORT’s MatMulNBits on bytes with random zero points and scales (not from quantizeWeights)', async () => {
  const [M, N, K, bits, blockSize] = [2, 8, 48, 4, 32] as const;
  const rng = mulberry32(99);
  const blocks = Math.ceil(K / blockSize);
  const t: NBitsTensor = {
    dtype: 'nbits',
    bits,
    blockSize,
    shape: [N, K],
    data: Uint8Array.from({ length: N * blocks * 16 }, () => Math.floor(rng() * 256)),
    scales: uniform(N * blocks, 0.1, rng),
    zeroPoints: Uint8Array.from({ length: N * Math.ceil((blocks * bits) / 8) }, () => Math.floor(rng() * 256)),
  };
  const x = uniform(M * K, 1, rng);
  const session = await ort.InferenceSession.create(await model(t, M), { executionProviders: ['wasm'] });
  try {
    const y = (await session.run({ A: new ort.Tensor('float32', x, [M, K]) })).Y_w.data as Float32Array;
    expectClose(y, matmulT(x, dequantize(t), M, N, K), f32Tolerance([K]), 'ORT MatMulNBits vs x·dequantize(w)ᵀ');
  } finally {
    await session.release();
  }
});

test('float16 scales (transformers.js q4f16): ORT’s MatMulNBits in float16 equals x·dequantize(w)ᵀ to float16', async () => {
  const [M, N, K] = [3, 16, 80];
  const sd = quantizeWeights(
    { in_proj_weight: uniform(N * K, 0.5, mulberry32(41)), 'out_proj.weight': new Float32Array(K * K) },
    { dtype: 'nbits', bits: 4, blockSize: 32, scales: 'f16' },
  );
  const t = sd.in_proj_weight as NBitsTensor;
  expect(t.scales).toBeInstanceOf(Uint16Array);
  // A in float16: the reference multiplies exactly those values
  const xBits = Uint16Array.from(uniform(M * K, 1, mulberry32(42)), floatToHalfBits);
  const x = Float32Array.from(xBits, halfToFloat);
  const session = await ort.InferenceSession.create(await model(t, M), { executionProviders: ['wasm'] });
  try {
    const out = await session.run({ A: new ort.Tensor('float16', xBits, [M, K]) });
    const y = Float32Array.from(out.Y_w.data as Uint16Array, halfToFloat);
    const want = matmulT(x, dequantize(t), M, N, K);
    // Y is rounded to float16 (and ORT may accumulate in float16): the float16 rule of this engine
    expectClose(y, want, f16Tolerance([K], maxAbsFinite(want)), 'ORT MatMulNBits (float16) vs x·dequantize(w)ᵀ');
  } finally {
    await session.release();
  }
});
