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
// ModelProto is encoded with protobufjs from the subset of onnx.proto below (field numbers as in
// onnx/onnx.proto, as demo/bench/systems/onnx-model.ts does): ir_version 8, opsets ai.onnx 17 and
// com.microsoft 1; initializers with raw_data.

import { beforeAll, expect, test } from 'vitest';
import { dequantize, type NBitsTensor, quantizeWeights } from '../src/index.ts';
import { floatToHalfBits } from '../src/quant/half.ts';
import { halfToFloat } from '../src/quant/pack.ts';
import { mulberry32, uniform } from '../src/util/random.ts';
import { expectClose, f16Tolerance, f32Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';

const PROTO = `
syntax = "proto2";
package onnx;
message AttributeProto { optional string name = 1; optional int32 type = 20; optional int64 i = 3; }
message NodeProto { repeated string input = 1; repeated string output = 2; optional string name = 3; optional string op_type = 4; optional string domain = 7; repeated AttributeProto attribute = 5; }
message TensorProto { repeated int64 dims = 1; optional int32 data_type = 2; optional string name = 8; optional bytes raw_data = 9; }
message TensorShapeProto { message Dimension { optional int64 dim_value = 1; } repeated Dimension dim = 1; }
message TypeProto { message Tensor { optional int32 elem_type = 1; optional TensorShapeProto shape = 2; } optional Tensor tensor_type = 1; }
message ValueInfoProto { optional string name = 1; optional TypeProto type = 2; }
message GraphProto { repeated NodeProto node = 1; optional string name = 2; repeated TensorProto initializer = 5; repeated ValueInfoProto input = 11; repeated ValueInfoProto output = 12; }
message OperatorSetIdProto { optional string domain = 1; optional int64 version = 2; }
message ModelProto { optional int64 ir_version = 1; repeated OperatorSetIdProto opset_import = 8; optional GraphProto graph = 7; }
`;
const FLOAT = 1;
const UINT8 = 2;
const FLOAT16 = 10;
const ATTRIBUTE_INT = 2;

type Ort = typeof import('onnxruntime-web');
let ort: Ort;
let ModelProto: import('protobufjs').Type;

beforeAll(async () => {
  ort = await import('onnxruntime-web');
  ort.env.wasm.numThreads = 1;
  ort.env.logLevel = 'error';
  const mod = (await import('protobufjs')) as typeof import('protobufjs') & { default?: typeof import('protobufjs') };
  const protobuf = typeof mod.parse === 'function' ? mod : (mod.default as typeof import('protobufjs'));
  ModelProto = protobuf.parse(PROTO, { keepCase: true }).root.lookupType('onnx.ModelProto');
});

function valueInfo(name: string, dims: number[], elemType = FLOAT) {
  return { name, type: { tensor_type: { elem_type: elemType, shape: { dim: dims.map((d) => ({ dim_value: d })) } } } };
}

/**
 * The bytes of a model Y = MatMulNBits(A, B, scales[, zero_points]) with this weight as its initializers;
 * float16 scales (Uint16Array) make A, scales and Y float16 (MatMulNBits' T1 is one type).
 */
function matMulNBitsModel(w: NBitsTensor, M: number): Uint8Array {
  const [N, K] = w.shape;
  const blocks = Math.ceil(K / w.blockSize);
  const scales = w.scales;
  const elem = scales instanceof Uint16Array ? FLOAT16 : FLOAT;
  const initializer = [
    { name: 'B', dims: [N, blocks, (w.blockSize * w.bits) / 8], data_type: UINT8, raw_data: w.data },
    { name: 'scales', dims: [N * blocks], data_type: elem, raw_data: new Uint8Array(scales.buffer, scales.byteOffset, scales.byteLength) },
  ];
  const inputs = ['A', 'B', 'scales'];
  if (w.zeroPoints) {
    initializer.push({ name: 'zero_points', dims: [w.zeroPoints.length], data_type: UINT8, raw_data: w.zeroPoints });
    inputs.push('zero_points');
  }
  const attribute = (name: string, i: number) => ({ name, type: ATTRIBUTE_INT, i });
  const model = {
    ir_version: 8,
    opset_import: [
      { domain: '', version: 17 },
      { domain: 'com.microsoft', version: 1 },
    ],
    graph: {
      name: 'matmulnbits',
      node: [
        {
          name: 'mm',
          op_type: 'MatMulNBits',
          domain: 'com.microsoft',
          input: inputs,
          output: ['Y'],
          attribute: [attribute('K', K), attribute('N', N), attribute('bits', w.bits), attribute('block_size', w.blockSize)],
        },
      ],
      initializer,
      input: [valueInfo('A', [M, K], elem)],
      output: [valueInfo('Y', [M, N], elem)],
    },
  };
  return ModelProto.encode(ModelProto.fromObject(model)).finish();
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
  const session = await ort.InferenceSession.create(matMulNBitsModel(t, M), { executionProviders: ['wasm'] });
  try {
    const out = await session.run({ A: new ort.Tensor('float32', x, [M, K]) });
    const y = out.Y.data as Float32Array;
    expect(out.Y.dims).toEqual([M, N]);
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
  const session = await ort.InferenceSession.create(matMulNBitsModel(t, M), { executionProviders: ['wasm'] });
  try {
    const y = (await session.run({ A: new ort.Tensor('float32', x, [M, K]) })).Y.data as Float32Array;
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
  const session = await ort.InferenceSession.create(matMulNBitsModel(t, M), { executionProviders: ['wasm'] });
  try {
    const out = await session.run({ A: new ort.Tensor('float16', xBits, [M, K]) });
    const y = Float32Array.from(out.Y.data as Uint16Array, halfToFloat);
    const want = matmulT(x, dequantize(t), M, N, K);
    // Y is rounded to float16 (and ORT may accumulate in float16): the float16 rule of this engine
    expectClose(y, want, f16Tolerance([K], maxAbsFinite(want)), 'ORT MatMulNBits (float16) vs x·dequantize(w)ᵀ');
  } finally {
    await session.release();
  }
});
