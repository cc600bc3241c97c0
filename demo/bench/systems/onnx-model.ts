// An ONNX model of the layer, written in the page for one shape, for the "ort" peer. Two graphs:
//
// 'attention' (what ORT users deploy; ORT's fused kernels):
//   query [B, S, E]
//     │ com.microsoft.Attention   input, weights [E, 3E] (= in_proj_weightᵀ), bias [3E];
//     │                           num_heads = H, unidirectional = 1 when causal; scale defaults to 1/√Dh
//   attention [B, S, E]           the heads already concatenated
//     │ MatMul                    · out_proj.weightᵀ [E, E]
//     │ Add                       + out_proj.bias [E]
//   output [B, S, E]
// Attention's weight columns are Q, then K, then V, each H blocks of Dh: exactly the rows of
// PyTorch's in_proj_weight, so its transpose is the weight (ORT's contrib op docs, com.microsoft.Attention:
// weights (input_hidden_size, 3 * hidden_size), hidden_size = num_heads · head_size).
//
// 'standard' (ai.onnx ops only, every intermediate materialised, like the TF.js peer):
//   query [B, S, E] ─MatMul W_inᵀ [E, 3E]─Add b_in─▶ qkv [B, S, 3E] ─Split axis 2─▶ q, k, v [B, S, E]
//   q, v ─Reshape [B, S, H, Dh]─Transpose (0 2 1 3)─▶ [B, H, S, Dh];  k ─Reshape─Transpose (0 2 3 1)─▶ kᵀ [B, H, Dh, S]
//   scores = MatMul(q, kᵀ) · 1/√Dh (+ mask [S, S]: 0 where j ≤ i, −1e9 above, when causal) [B, H, S, S]
//   o = MatMul(Softmax(scores, axis −1), v) [B, H, S, Dh] ─Transpose (0 2 1 3)─Reshape [B, S, E]─▶
//   MatMul out_proj.weightᵀ ─Add out_proj.bias─▶ output [B, S, E]
// (−1e9 + a score rounds to −1e9 in f32 and exp(−1e9 − rowMax) is 0; every causal row sees key 0.)
//
// ModelProto is encoded with protobufjs from the subset of onnx.proto below (field numbers exactly
// as in onnx/onnx.proto; proto2, as there). Weights are initializers with little-endian raw_data.
// ir_version 8; opsets: ai.onnx 17, com.microsoft 1.

import type { BenchLayer } from '../types.ts';

type Protobuf = typeof import('protobufjs');

const ONNX_SUBSET_PROTO = `
syntax = "proto2";
package onnx;

message AttributeProto {
  enum AttributeType {
    UNDEFINED = 0; FLOAT = 1; INT = 2; STRING = 3; TENSOR = 4; GRAPH = 5; SPARSE_TENSOR = 11;
    FLOATS = 6; INTS = 7; STRINGS = 8; TENSORS = 9; GRAPHS = 10; SPARSE_TENSORS = 12;
  }
  optional string name = 1;
  optional string doc_string = 13;
  optional AttributeType type = 20;
  optional float f = 2;
  optional int64 i = 3;
  optional bytes s = 4;
  optional TensorProto t = 5;
  repeated float floats = 7;
  repeated int64 ints = 8;
  repeated bytes strings = 9;
}

message ValueInfoProto {
  optional string name = 1;
  optional TypeProto type = 2;
  optional string doc_string = 3;
}

message NodeProto {
  repeated string input = 1;
  repeated string output = 2;
  optional string name = 3;
  optional string op_type = 4;
  optional string domain = 7;
  repeated AttributeProto attribute = 5;
  optional string doc_string = 6;
}

message ModelProto {
  optional int64 ir_version = 1;
  repeated OperatorSetIdProto opset_import = 8;
  optional string producer_name = 2;
  optional string producer_version = 3;
  optional string domain = 4;
  optional int64 model_version = 5;
  optional string doc_string = 6;
  optional GraphProto graph = 7;
}

message GraphProto {
  repeated NodeProto node = 1;
  optional string name = 2;
  repeated TensorProto initializer = 5;
  optional string doc_string = 10;
  repeated ValueInfoProto input = 11;
  repeated ValueInfoProto output = 12;
  repeated ValueInfoProto value_info = 13;
}

message TensorProto {
  enum DataType {
    UNDEFINED = 0; FLOAT = 1; UINT8 = 2; INT8 = 3; UINT16 = 4; INT16 = 5; INT32 = 6; INT64 = 7;
    STRING = 8; BOOL = 9; FLOAT16 = 10; DOUBLE = 11; UINT32 = 12; UINT64 = 13;
  }
  repeated int64 dims = 1;
  optional int32 data_type = 2;
  repeated float float_data = 4 [packed = true];
  repeated int32 int32_data = 5 [packed = true];
  repeated int64 int64_data = 7 [packed = true];
  optional string name = 8;
  optional string doc_string = 12;
  optional bytes raw_data = 9;
}

message TensorShapeProto {
  message Dimension {
    oneof value {
      int64 dim_value = 1;
      string dim_param = 2;
    }
    optional string denotation = 3;
  }
  repeated Dimension dim = 1;
}

message TypeProto {
  message Tensor {
    optional int32 elem_type = 1;
    optional TensorShapeProto shape = 2;
  }
  oneof value {
    Tensor tensor_type = 1;
  }
  optional string denotation = 6;
}

message OperatorSetIdProto {
  optional string domain = 1;
  optional int64 version = 2;
}
`;

const FLOAT = 1; // TensorProto.DataType.FLOAT
const INT64 = 7; // TensorProto.DataType.INT64
const ATTRIBUTE_INT = 2; // AttributeProto.AttributeType.INT

let modelTypePromise: Promise<import('protobufjs').Type> | null = null;

/** onnx.ModelProto, parsed once per page. */
function modelProtoType(): Promise<import('protobufjs').Type> {
  modelTypePromise ??= (async () => {
    const mod = (await import('protobufjs')) as Protobuf & { default?: Protobuf };
    // protobufjs is CommonJS: depending on the bundler's interop its API is the namespace or its default.
    const protobuf = typeof mod.parse === 'function' ? mod : mod.default;
    if (!protobuf || typeof protobuf.parse !== 'function') throw new Error('protobufjs loaded without its parse() (full build needed)');
    return protobuf.parse(ONNX_SUBSET_PROTO, { keepCase: true }).root.lookupType('onnx.ModelProto');
  })();
  modelTypePromise.catch(() => {
    modelTypePromise = null;
  });
  return modelTypePromise;
}

/** Little-endian f32 bytes, whatever the platform's byte order. */
function f32Bytes(values: Float32Array): Uint8Array {
  const bytes = new Uint8Array(values.length * 4);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < values.length; i++) view.setFloat32(4 * i, values[i], true);
  return bytes;
}

/** [rows, cols] row-major → [cols, rows] row-major. */
function transpose(a: Float32Array, rows: number, cols: number): Float32Array {
  const t = new Float32Array(a.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) t[c * rows + r] = a[r * cols + c];
  return t;
}

function initializer(name: string, dims: number[], values: Float32Array) {
  return { name, dims, data_type: FLOAT, raw_data: f32Bytes(values) };
}

/** A 1-D int64 initializer (shapes, split sizes), little-endian. */
function int64Initializer(name: string, values: number[]) {
  const bytes = new Uint8Array(values.length * 8);
  const view = new DataView(bytes.buffer);
  for (const [i, v] of values.entries()) view.setBigInt64(8 * i, BigInt(v), true);
  return { name, dims: [values.length], data_type: INT64, raw_data: bytes };
}

function intsAttribute(name: string, values: number[]) {
  return { name, type: 7 /* AttributeType.INTS */, ints: values };
}

function tensorValueInfo(name: string, dims: number[]) {
  return { name, type: { tensor_type: { elem_type: FLOAT, shape: { dim: dims.map((d) => ({ dim_value: d })) } } } };
}

function intAttribute(name: string, value: number) {
  return { name, type: ATTRIBUTE_INT, i: value };
}

function checkLength(name: string, array: Float32Array | undefined, expected: number, shape: string): Float32Array {
  if (!array) throw new Error(`ort: stateDict['${name}'] is missing; expected a Float32Array ${shape}`);
  if (array.length !== expected) throw new Error(`ort: stateDict['${name}'].length must be ${shape} = ${expected}; got ${array.length}`);
  return array;
}

export const ONNX_INPUT_NAME = 'query';
export const ONNX_OUTPUT_NAME = 'output';

export type OnnxGraph = 'attention' | 'standard';

interface Node {
  name: string;
  op_type: string;
  domain?: string;
  input: string[];
  output: string[];
  attribute?: object[];
}

/** The serialized ModelProto of the layer for its one shape, as `graph` (see the top of this file). */
export async function buildAttentionModel(layer: BenchLayer, graph: OnnxGraph = 'attention'): Promise<Uint8Array> {
  const { batchSize: B, seqLen: S, embedDim: E, numHeads: H, isCausal } = layer.shape;
  if (!(E % H === 0)) throw new Error(`ort: embedDim ${E} must be divisible by numHeads ${H}`);
  const Dh = E / H;
  const sd = layer.stateDict;
  const wIn = checkLength('in_proj_weight', sd.in_proj_weight, 3 * E * E, '[3E, E]');
  const wOut = checkLength('out_proj.weight', sd['out_proj.weight'], E * E, '[E, E]');
  const bIn = sd.in_proj_bias ? checkLength('in_proj_bias', sd.in_proj_bias, 3 * E, '[3E]') : new Float32Array(3 * E);
  const bOut = sd['out_proj.bias'] ? checkLength('out_proj.bias', sd['out_proj.bias'], E, '[E]') : new Float32Array(E);

  const inProjT = initializer('in_proj_weight_t', [E, 3 * E], transpose(wIn, 3 * E, E)); // [E, 3E] = in_proj_weightᵀ
  const inBias = initializer('in_proj_bias', [3 * E], bIn); // [3E]
  const outProj: Node[] = [
    { name: 'out_proj_matmul', op_type: 'MatMul', input: ['attention', 'out_proj_weight_t'], output: ['out_proj'] },
    { name: 'out_proj_add', op_type: 'Add', input: ['out_proj', 'out_proj_bias'], output: [ONNX_OUTPUT_NAME] },
  ];
  const outInitializers = [
    initializer('out_proj_weight_t', [E, E], transpose(wOut, E, E)), // [E, E] = out_proj.weightᵀ
    initializer('out_proj_bias', [E], bOut), // [E]
  ];

  let nodes: Node[];
  let initializers: object[];
  if (graph === 'attention') {
    nodes = [
      {
        name: 'attention',
        op_type: 'Attention',
        domain: 'com.microsoft',
        input: [ONNX_INPUT_NAME, 'in_proj_weight_t', 'in_proj_bias'],
        output: ['attention'],
        attribute: [intAttribute('num_heads', H), ...(isCausal ? [intAttribute('unidirectional', 1)] : [])],
      },
      ...outProj,
    ];
    initializers = [inProjT, inBias, ...outInitializers];
  } else {
    const toHeads = (x: string, perm: number[]): Node[] => [
      { name: `${x}_reshape`, op_type: 'Reshape', input: [x, 'heads_shape'], output: [`${x}_bshd`] }, // [B, S, H, Dh]
      { name: `${x}_transpose`, op_type: 'Transpose', input: [`${x}_bshd`], output: [`${x}_heads`], attribute: [intsAttribute('perm', perm)] },
    ];
    nodes = [
      { name: 'qkv_matmul', op_type: 'MatMul', input: [ONNX_INPUT_NAME, 'in_proj_weight_t'], output: ['qkv_nobias'] }, // [B, S, 3E]
      { name: 'qkv_add', op_type: 'Add', input: ['qkv_nobias', 'in_proj_bias'], output: ['qkv'] },
      { name: 'qkv_split', op_type: 'Split', input: ['qkv', 'qkv_split'], output: ['q', 'k', 'v'], attribute: [intAttribute('axis', 2)] },
      ...toHeads('q', [0, 2, 1, 3]), // [B, H, S, Dh]
      ...toHeads('k', [0, 2, 3, 1]), // kᵀ [B, H, Dh, S]
      ...toHeads('v', [0, 2, 1, 3]), // [B, H, S, Dh]
      { name: 'scores_matmul', op_type: 'MatMul', input: ['q_heads', 'k_heads'], output: ['scores_raw'] }, // [B, H, S, S]
      { name: 'scores_scale', op_type: 'Mul', input: ['scores_raw', 'scale'], output: [isCausal ? 'scores_unmasked' : 'scores'] },
      ...(isCausal ? [{ name: 'causal_mask', op_type: 'Add', input: ['scores_unmasked', 'mask'], output: ['scores'] }] : []),
      { name: 'softmax', op_type: 'Softmax', input: ['scores'], output: ['probs'], attribute: [intAttribute('axis', -1)] },
      { name: 'pv_matmul', op_type: 'MatMul', input: ['probs', 'v_heads'], output: ['o_heads'] }, // [B, H, S, Dh]
      { name: 'o_transpose', op_type: 'Transpose', input: ['o_heads'], output: ['o_bshd'], attribute: [intsAttribute('perm', [0, 2, 1, 3])] },
      { name: 'o_reshape', op_type: 'Reshape', input: ['o_bshd', 'concat_shape'], output: ['attention'] }, // [B, S, E]
      ...outProj,
    ];
    const mask = new Float32Array(S * S);
    for (let i = 0; i < S; i++) for (let j = i + 1; j < S; j++) mask[i * S + j] = -1e9;
    initializers = [
      inProjT,
      inBias,
      int64Initializer('qkv_split', [E, E, E]),
      int64Initializer('heads_shape', [B, S, H, Dh]),
      int64Initializer('concat_shape', [B, S, E]),
      initializer('scale', [], new Float32Array([1 / Math.sqrt(Dh)])),
      ...(isCausal ? [initializer('mask', [S, S], mask)] : []),
      ...outInitializers,
    ];
  }

  const model = {
    ir_version: 8,
    opset_import: [
      { domain: '', version: 17 },
      { domain: 'com.microsoft', version: 1 },
    ],
    producer_name: 'webgpu-attention bench',
    producer_version: '0.1.0',
    graph: {
      name: `multihead_attention_${graph}`,
      node: nodes,
      initializer: initializers,
      input: [tensorValueInfo(ONNX_INPUT_NAME, [B, S, E])],
      output: [tensorValueInfo(ONNX_OUTPUT_NAME, [B, S, E])],
    },
  };

  const ModelProto = await modelProtoType();
  const problem = ModelProto.verify(model);
  if (problem) throw new Error(`ort: the ONNX model does not fit onnx.ModelProto: ${problem}`);
  return ModelProto.encode(ModelProto.fromObject(model)).finish();
}

/**
 * A one-layer ONNX model y = x·W + b (MatMul, Add): x [...dims, inDim], W [inDim, outDim] row-major,
 * b [outDim]; input 'x', output 'y'. For e2e/interop.ts, whose ONNX Runtime sessions feed the engine.
 */
export async function buildDenseModel(dims: number[], weight: Float32Array, bias: Float32Array): Promise<Uint8Array> {
  const outDim = bias.length;
  const inDim = weight.length / outDim;
  if (!Number.isInteger(inDim) || inDim !== dims[dims.length - 1]) {
    throw new Error(`buildDenseModel: weight has ${weight.length} values, bias ${outDim}: expected [${dims[dims.length - 1]}, ${outDim}]`);
  }
  const model = {
    ir_version: 8,
    opset_import: [{ domain: '', version: 17 }],
    producer_name: 'webgpu-attention interop',
    producer_version: '0.1.0',
    graph: {
      name: 'dense',
      node: [
        { name: 'matmul', op_type: 'MatMul', input: ['x', 'weight'], output: ['xw'] },
        { name: 'add', op_type: 'Add', input: ['xw', 'bias'], output: ['y'] },
      ],
      initializer: [initializer('weight', [inDim, outDim], weight), initializer('bias', [outDim], bias)],
      input: [tensorValueInfo('x', dims)],
      output: [tensorValueInfo('y', [...dims.slice(0, -1), outDim])],
    },
  };
  const ModelProto = await modelProtoType();
  const problem = ModelProto.verify(model);
  if (problem) throw new Error(`buildDenseModel: the ONNX model does not fit onnx.ModelProto: ${problem}`);
  return ModelProto.encode(ModelProto.fromObject(model)).finish();
}
