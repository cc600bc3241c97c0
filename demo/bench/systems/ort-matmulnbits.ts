// ONNX models of com.microsoft.MatMulNBits nodes, for ONNX Runtime Web: the oracle of the nbits format
// (test/quant-ort.test.ts) and the benchmark's peer (scripts/bench-quantized.ts; in Chromium demo/bench/quantized-page.ts).
//   Y_i [M, N_i] = MatMulNBits(A [M, K], B_i uint8 [N_i, n_blocks, blob], scales_i [N_i·n_blocks], zero_points_i?)
// attributes K, N, bits, block_size; float16 scales (Uint16Array) make A, the scales and Y float16
// (MatMulNBits' T1 is one type). ModelProto is encoded with protobufjs from the subset of onnx.proto
// below (field numbers as in onnx/onnx.proto, as demo/bench/systems/onnx-model.ts does): ir_version 8,
// opsets ai.onnx 17 and com.microsoft 1; initializers with raw_data.

import type { NBitsTensor } from '../../../src/quant/types.ts';

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

let modelProto: import('protobufjs').Type | undefined;

async function proto(): Promise<import('protobufjs').Type> {
  if (!modelProto) {
    const mod = (await import('protobufjs')) as typeof import('protobufjs') & { default?: typeof import('protobufjs') };
    const protobuf = typeof mod.parse === 'function' ? mod : (mod.default as typeof import('protobufjs'));
    modelProto = protobuf.parse(PROTO, { keepCase: true }).root.lookupType('onnx.ModelProto');
  }
  return modelProto;
}

function valueInfo(name: string, dims: number[], elemType: number) {
  return { name, type: { tensor_type: { elem_type: elemType, shape: { dim: dims.map((d) => ({ dim_value: d })) } } } };
}

/** A model with input A [M, K] and, for each [name, weight], an output Y_name = MatMulNBits(A, weight). */
export async function matMulNBitsModel(M: number, K: number, weights: readonly (readonly [string, NBitsTensor])[]): Promise<Uint8Array> {
  const ModelProto = await proto();
  const elem = weights[0][1].scales instanceof Uint16Array ? FLOAT16 : FLOAT;
  const initializer: { name: string; dims: number[]; data_type: number; raw_data: Uint8Array }[] = [];
  const node = [];
  const output = [];
  for (const [name, w] of weights) {
    const [N] = w.shape;
    const blocks = Math.ceil(K / w.blockSize);
    const s = w.scales;
    initializer.push(
      { name: `B_${name}`, dims: [N, blocks, (w.blockSize * w.bits) / 8], data_type: UINT8, raw_data: w.data },
      { name: `scales_${name}`, dims: [N * blocks], data_type: elem, raw_data: new Uint8Array(s.buffer, s.byteOffset, s.byteLength) },
    );
    const input = ['A', `B_${name}`, `scales_${name}`];
    if (w.zeroPoints) {
      initializer.push({ name: `zero_points_${name}`, dims: [w.zeroPoints.length], data_type: UINT8, raw_data: w.zeroPoints });
      input.push(`zero_points_${name}`);
    }
    const attribute = (a: string, i: number) => ({ name: a, type: ATTRIBUTE_INT, i });
    node.push({
      name: `mm_${name}`,
      op_type: 'MatMulNBits',
      domain: 'com.microsoft',
      input,
      output: [`Y_${name}`],
      attribute: [attribute('K', K), attribute('N', N), attribute('bits', w.bits), attribute('block_size', w.blockSize)],
    });
    output.push(valueInfo(`Y_${name}`, [M, N], elem));
  }
  const model = {
    ir_version: 8,
    opset_import: [
      { domain: '', version: 17 },
      { domain: 'com.microsoft', version: 1 },
    ],
    graph: { name: 'matmulnbits', node, initializer, input: [valueInfo('A', [M, K], elem)], output },
  };
  return ModelProto.encode(ModelProto.fromObject(model)).finish();
}

/** The four projections of a decode step (one token, A [1, K]). */
export function ortProjectionsModel(K: number, weights: readonly (readonly [string, NBitsTensor])[]): Promise<Uint8Array> {
  return matMulNBitsModel(1, K, weights);
}
