// quantizeWeights: a float32 state_dict's projection weights (in_proj_weight, q/k/v_proj_weight,
// out_proj.weight) turned into quantized tensors, round to nearest, as the formats' own reference
// quantizers do, so that a user with float weights can shrink them (as transformers.js's dtypes do):
//   q4_0   quantize_row_q4_0_ref: per 32 weights d = (the value of largest |w|) / −8, q = MIN(15, (int)(w/d + 8.5))
//   q8_0   quantize_row_q8_0_ref: d = max|w| / 127, q = roundf(w/d)
//   q4_k   quantize_row_q4_K_ref, q6_k quantize_row_q6_K_ref: ggml's own reference algorithms
//          (make_qkx2_quants / make_qx_quants searches, then 6- and 8-bit sub-block scales), quantize-k.ts
//   nbits  ONNX Runtime's MatMulNBits RTN (MlasQuantizeBlockwise): asymmetric by default, per block
//          min' = min(min, 0), max' = max(max, 0), scale = (max' − min') / (2^bits − 1), zero point =
//          roundf(−min'/scale) clamped to [0, 2^bits − 1], q = clamp(roundf(w/scale + zp)); symmetric:
//          scale = (the value of largest |w|) / −2^(bits−1), zero point 2^(bits−1) (none stored)
// All in float32 arithmetic (Math.fround) in the C order; f16 scales round to nearest even (util/f16.ts).
// Cost in Node on one core: q4_0 / q8_0 / nbits ~0.2 s per million weights, q6_k ~1.8 s, q4_k ~2.5 s
// (ggml's searches): an offline step, like llama-quantize, not something to run per page load.

import { InvalidArgumentError, ShapeMismatchError, UnsupportedError } from '../errors.ts';
import { expectedWeights, resolveLayerSpec } from '../plan/layer.ts';
import type { MultiHeadAttentionConfig, QuantizedStateDict } from '../types.ts';
import { describe, rejectUnknownKeys, requireObject } from '../validate.ts';
import { floatToHalfBits, halfToFloat } from '../util/f16.ts';
import { quantizeBlockQ4_0, quantizeBlockQ8_0, roundf } from './blocks.ts';

export { quantizeBlockQ4_0, quantizeBlockQ8_0 } from './blocks.ts';
import { GGUF_BLOCKS } from './pack.ts';
import { quantizeRowQ4K, quantizeRowQ6K } from './quantize-k.ts';
import type { GgufQuantType, NBitsTensor, QuantizedDtype, QuantizedTensor } from './types.ts';

const WHERE = 'quantizeWeights';
const f = Math.fround;
const NBITS_BLOCKS = [16, 32, 64, 128, 256] as const;
const PROJECTIONS = ['in_proj_weight', 'q_proj_weight', 'k_proj_weight', 'v_proj_weight', 'out_proj.weight'];
const OPTION_KEYS = ['dtype', 'blockSize', 'bits', 'symmetric', 'scales', 'config'];

/** How quantizeWeights quantizes. */
export interface QuantizeOptions {
  /** The format: a GGUF block type, or ONNX Runtime's MatMulNBits ('nbits'). */
  dtype: 'q4_0' | 'q8_0' | 'q4_k' | 'q6_k' | 'nbits';
  /** nbits: weights per block along K, default 32. GGUF types: left out, or their own block (32; 256 for q4_k / q6_k). */
  blockSize?: number;
  /** nbits: 4 (default) or 8. */
  bits?: 4 | 8;
  /** nbits: no zero points (each block's zero is 2^(bits−1)); default false (asymmetric, as ONNX Runtime's quantizer). */
  symmetric?: boolean;
  /** nbits: scales stored as float32 (default) or float16 bits (transformers.js 'q4f16'). */
  scales?: 'f32' | 'f16';
  /**
   * The layer's config, when K of a weight cannot be told from the state_dict (k/v_proj_weight with
   * kdim or vdim ≠ embedDim). Otherwise embedDim is read from out_proj.weight ([E, E]).
   */
  config?: MultiHeadAttentionConfig;
}

/**
 * A copy of `stateDict` whose projection weights are quantized (round to nearest, as the formats'
 * reference quantizers; see the file header), the other entries (biases) unchanged. Every weight is
 * [N, K] row-major, its blocks along K. Feed the result to createMultiHeadAttention, or dequantize()
 * it to see what the layer will compute with.
 */
export function quantizeWeights(stateDict: Record<string, unknown>, options: QuantizeOptions): QuantizedStateDict {
  const sd = requireObject(WHERE, 'stateDict', stateDict, 'Pass a float32 state_dict (names → Float32Array).');
  const o = requireObject(WHERE, 'options', options, "Pass { dtype: 'q4_0' | 'q8_0' | 'q4_k' | 'q6_k' | 'nbits', blockSize? }.");
  rejectUnknownKeys(WHERE, 'options', o, OPTION_KEYS);
  const dtype = o.dtype;
  if (!['q4_0', 'q8_0', 'q4_k', 'q6_k', 'nbits'].includes(dtype as string)) {
    throw new InvalidArgumentError({
      where: WHERE,
      argument: 'options.dtype',
      expected: "one of 'q4_0', 'q8_0', 'q4_k', 'q6_k', 'nbits'",
      given: describe(dtype),
      fix: "GGUF's Q4_K_M files are mostly 'q4_k'; transformers.js's 'q4' is 'nbits' with bits 4.",
    });
  }
  const block = resolveBlock(dtype as QuantizedDtype, o);
  const nbits = dtype === 'nbits' ? resolveNBits(o) : null;
  for (const [name, value] of Object.entries(sd)) {
    if (!(value instanceof Float32Array)) {
      throw new InvalidArgumentError({
        where: WHERE,
        argument: `stateDict["${name}"]`,
        expected: 'a Float32Array (quantizeWeights takes float32 weights)',
        given: describe(value),
        fix: 'Leave quantized tensors out and add them to the result, or dequantize() them first.',
      });
    }
  }
  const shapes = weightShapes(sd as Record<string, Float32Array>, o.config);
  const out: QuantizedStateDict = {};
  for (const [name, value] of Object.entries(sd as Record<string, Float32Array>)) {
    const shape = shapes[name];
    if (!shape) {
      out[name] = value;
      continue;
    }
    const [N, K] = shape;
    if (nbits) {
      out[name] = quantizeNBits(value, N, K, nbits.bits, block as NBitsTensor['blockSize'], nbits.symmetric, nbits.f16);
      continue;
    }
    if (K % block !== 0) {
      throw new UnsupportedError({
        where: WHERE,
        argument: `stateDict["${name}"]`,
        expected: `K (its input features, ${K}) a multiple of ${block}, the ${dtype} block`,
        given: `[${N}, ${K}]`,
        fix: block === 256 ? "Use 'q4_0' or 'q8_0' (blocks of 32), or 'nbits' (K need not be a multiple)." : "Use 'nbits', whose last block may be partial.",
      });
    }
    out[name] = quantizeGguf(value, N, K, dtype as GgufQuantType);
  }
  return out;
}

function resolveBlock(dtype: QuantizedDtype, o: Record<string, unknown>): number {
  const own = dtype === 'nbits' ? null : GGUF_BLOCKS[dtype].weights;
  const given = o.blockSize;
  if (given === undefined) return own ?? 32;
  if (own !== null && given !== own) {
    throw new InvalidArgumentError({
      where: WHERE,
      argument: 'options.blockSize',
      expected: `left out or ${own} (${dtype}'s block is fixed)`,
      given: describe(given),
      fix: "Only 'nbits' takes a block size.",
    });
  }
  if (own === null && !(NBITS_BLOCKS as readonly unknown[]).includes(given)) {
    throw new InvalidArgumentError({ where: WHERE, argument: 'options.blockSize', expected: `one of ${NBITS_BLOCKS.join(', ')}`, given: describe(given) });
  }
  return given as number;
}

function resolveNBits(o: Record<string, unknown>): { bits: 4 | 8; symmetric: boolean; f16: boolean } {
  const bits = o.bits ?? 4;
  if (bits !== 4 && bits !== 8) {
    throw new UnsupportedError({ where: WHERE, argument: 'options.bits', expected: '4 or 8', given: describe(bits) });
  }
  if (o.symmetric !== undefined && typeof o.symmetric !== 'boolean') {
    throw new InvalidArgumentError({ where: WHERE, argument: 'options.symmetric', expected: 'a boolean', given: describe(o.symmetric) });
  }
  if (o.scales !== undefined && o.scales !== 'f32' && o.scales !== 'f16') {
    throw new InvalidArgumentError({ where: WHERE, argument: 'options.scales', expected: "'f32' or 'f16'", given: describe(o.scales) });
  }
  return { bits, symmetric: o.symmetric === true, f16: o.scales === 'f16' };
}

/** [N, K] of each projection weight in the state_dict. */
function weightShapes(sd: Record<string, Float32Array>, config: unknown): Record<string, [number, number]> {
  const shapes: Record<string, [number, number]> = {};
  if (config !== undefined) {
    const spec = resolveLayerSpec(config);
    const separate = sd.in_proj_weight === undefined;
    for (const { name, shape } of expectedWeights(spec, separate)) if (shape.length === 2 && sd[name]) shapes[name] = [shape[0], shape[1]];
  } else {
    const out = sd['out_proj.weight'];
    const E = out ? Math.round(Math.sqrt(out.length)) : 0;
    if (!out || E * E !== out.length) {
      throw new ShapeMismatchError({
        where: WHERE,
        argument: 'stateDict["out_proj.weight"]',
        expected: 'a Float32Array [E, E] (it gives embedDim, the K of every projection)',
        given: out ? `length ${out.length}, not a square` : 'nothing',
        fix: 'Pass options.config (the layer config) so that every weight has its shape; a layer with config.headDim (H·Dh ≠ E, out_proj.weight [E, H·Dh]) always needs it.',
      });
    }
    for (const name of PROJECTIONS) if (sd[name]) shapes[name] = [sd[name].length / E, E];
  }
  for (const [name, [N, K]] of Object.entries(shapes)) {
    if (!Number.isInteger(N) || N * K !== sd[name].length) {
      throw new ShapeMismatchError({
        where: WHERE,
        argument: `stateDict["${name}"]`,
        expected: `a whole number of rows of K = ${K}${Number.isInteger(N) ? ` ([${N}, ${K}] = ${N * K})` : ''}`,
        given: `length ${sd[name].length}`,
        fix: config === undefined ? 'With kdim or vdim ≠ embedDim pass options.config.' : 'Check the weights against the config.',
      });
    }
  }
  return shapes;
}

function quantizeGguf(w: Float32Array, N: number, K: number, dtype: GgufQuantType): QuantizedTensor {
  const { bytes, weights } = GGUF_BLOCKS[dtype];
  const rowBytes = (K / weights) * bytes;
  const data = new Uint8Array(N * rowBytes);
  for (let n = 0; n < N; n++) {
    const row = w.subarray(n * K, (n + 1) * K);
    if (dtype === 'q4_k') quantizeRowQ4K(row, data, n * rowBytes);
    else if (dtype === 'q6_k') quantizeRowQ6K(row, data, n * rowBytes);
    else for (let b = 0; b < K / 32; b++) (dtype === 'q4_0' ? quantizeBlockQ4_0 : quantizeBlockQ8_0)(row.subarray(32 * b, 32 * b + 32), data, n * rowBytes + b * bytes);
  }
  return { dtype, shape: [N, K], data };
}

/** MatMulNBits RTN (ONNX Runtime's MlasQuantizeBlockwise), one weight [N, K]. */
function quantizeNBits(w: Float32Array, N: number, K: number, bits: 4 | 8, blockSize: NBitsTensor['blockSize'], symmetric: boolean, f16: boolean): NBitsTensor {
  const blocks = Math.ceil(K / blockSize);
  const blob = (blockSize * bits) / 8;
  const data = new Uint8Array(N * blocks * blob); // [N, blocks, blob]; a partial last block is zero-padded
  const scales32 = new Float32Array(N * blocks);
  const scales16 = new Uint16Array(N * blocks);
  const zpRow = Math.ceil((blocks * bits) / 8);
  const zeroPoints = symmetric ? null : new Uint8Array(N * zpRow);
  const qmax = (1 << bits) - 1;
  const mid = 1 << (bits - 1);
  for (let n = 0; n < N; n++) {
    for (let b = 0; b < blocks; b++) {
      const k0 = b * blockSize;
      const k1 = Math.min(K, k0 + blockSize);
      let min = Number.MAX_VALUE;
      let max = -Number.MAX_VALUE;
      for (let k = k0; k < k1; k++) {
        const v = w[n * K + k];
        if (v < min) min = v;
        if (v > max) max = v;
      }
      let scale: number;
      let zp = mid;
      if (symmetric) {
        // range2scale: the value of largest magnitude over −2^(bits−1)
        scale = f((Math.abs(max) > Math.abs(min) ? max : min) / -mid);
      } else {
        // range2scalezp
        min = Math.min(min, 0);
        max = Math.max(max, 0);
        scale = f(f(max - min) / qmax);
        const zf = scale !== 0 ? f(0 - f(min / scale)) : min;
        zp = zf < 0 ? 0 : zf > qmax ? qmax : roundf(zf);
      }
      const s = n * blocks + b;
      // the scale as stored (float16 rounds it), then used for the quants, as ORT reads it back
      if (f16) {
        scales16[s] = floatToHalfBits(scale);
        scale = halfToFloat(scales16[s]);
      } else {
        scales32[s] = scale;
      }
      if (zeroPoints) zeroPoints[n * zpRow + ((b * bits) >> 3)] |= bits === 8 ? zp : zp << (4 * (b & 1));
      const recip = scale ? f(1 / scale) : 0;
      for (let k = k0; k < k1; k++) {
        const q = Math.min(qmax, Math.max(0, roundf(f(f(w[n * K + k] * recip) + zp))));
        const j = k - k0;
        if (bits === 8) data[s * blob + j] = q;
        else data[s * blob + (j >> 1)] |= q << (4 * (j & 1));
      }
    }
  }
  return {
    dtype: 'nbits',
    bits,
    blockSize,
    shape: [N, K],
    data,
    scales: f16 ? scales16 : scales32,
    ...(zeroPoints ? { zeroPoints } : {}),
  };
}
