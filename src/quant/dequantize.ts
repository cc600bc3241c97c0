// Quantized weights back to float32, exactly as their own libraries compute them: ggml-quants.c's
// dequantize_row_q4_0 / q8_0 / q4_K / q6_K and ONNX Runtime's MatMulNBits ((q − zero)·scale in float32).
// The float64 reference (cpu/) and the tests use this: the oracle multiplies by the very weights the
// model's own runtime would.

import { decodeRow, packedGeometry } from './pack.ts';
import type { QuantizedTensor, WeightTensor } from './types.ts';

/** The float32 weights [N, K] a quantized tensor stands for, as ggml / ONNX Runtime dequantize them. */
export function dequantize(t: QuantizedTensor): Float32Array {
  const [N, K] = t.shape;
  const { group } = packedGeometry(t);
  const groups = Math.ceil(K / group);
  const out = new Float32Array(N * K);
  const q = new Uint8Array(K);
  const scale = new Float32Array(groups);
  const offset = new Float32Array(groups);
  const zero = new Int32Array(groups);
  const f = Math.fround;
  for (let n = 0; n < N; n++) {
    decodeRow(
      t,
      n,
      (k, value) => {
        q[k] = value;
      },
      (g, s, o, z) => {
        scale[g] = s;
        offset[g] = o;
        zero[g] = z ?? -1;
      },
    );
    for (let k = 0; k < K; k++) {
      const g = Math.floor(k / group);
      out[n * K + k] = zero[g] < 0 ? f(f(scale[g] * q[k]) - offset[g]) : f((q[k] - zero[g]) * scale[g]);
    }
  }
  return out;
}

/** A weight as float32: itself, or its dequantized values. */
export function floatWeight(w: WeightTensor): Float32Array {
  return w instanceof Float32Array ? w : dequantize(w);
}
