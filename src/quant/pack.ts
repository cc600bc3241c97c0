// From any quantized format to the one layout the kernels read (types.ts PackedWeight): unsigned 4- or
// 8-bit quants in 32-bit words, row after row, and a (scale, offset) pair per group of weights along K,
// w = scale·q − offset. Made once when a layer is created; the GPU and wasm kernels dequantize it in
// their GEMM/GEMV loops, so float weights never exist on the device.
//
// The block decoders follow ggml-quants.c's dequantize_row_q4_0 / q8_0 / q4_K / q6_K (the bit layouts
// of each block) and ONNX Runtime's MatMulNBits (contrib_ops/cpu/quantization/matmul_nbits.cc).
// Arguments are checked before (validate.ts); this file assumes well-formed tensors.

import { halfToFloat } from '../util/f16.ts';
import type { NBitsTensor, PackedWeight, QuantizedTensor } from './types.ts';

/** Bytes of one block, and weights per block, of each GGUF type. */
export const GGUF_BLOCKS = {
  q4_0: { bytes: 18, weights: 32 },
  q8_0: { bytes: 34, weights: 32 },
  q4_k: { bytes: 144, weights: 256 },
  q6_k: { bytes: 210, weights: 256 },
} as const;

/** ggml's get_scale_min_k4: the j-th (of 8) 6-bit scale and min of a q4_K block's 12 packed bytes at `at`. */
export function q4kScaleMin(data: Uint8Array, at: number, j: number): [scale: number, min: number] {
  if (j < 4) return [data[at + j] & 63, data[at + j + 4] & 63];
  return [(data[at + j + 4] & 0xf) | ((data[at + j - 4] >> 6) << 4), (data[at + j + 4] >> 4) | ((data[at + j] >> 6) << 4)];
}

/**
 * Calls `put(k, q)` for every weight k of row `n` (q unsigned, 0 … 2^bits − 1) and `group(g, scale,
 * offset, zero)` for every group g (weights g·group … of the packed layout), so that w[n, k] = scale·q − offset. Formats
 * with an integer zero also give it (offset = scale·zero): their exact value is (q − zero)·scale, as
 * ggml and ONNX Runtime compute it. The float32 arithmetic of scale and offset is ggml's.
 */
export function decodeRow(
  t: QuantizedTensor,
  n: number,
  put: (k: number, q: number) => void,
  group: (g: number, scale: number, offset: number, zero?: number) => void,
): void {
  const K = t.shape[1];
  const f = Math.fround;
  if (t.dtype === 'nbits') {
    decodeNBitsRow(t, n, put, group);
    return;
  }
  const { bytes, weights } = GGUF_BLOCKS[t.dtype];
  const blocks = K / weights;
  const d8 = t.data;
  for (let blk = 0; blk < blocks; blk++) {
    const at = (n * blocks + blk) * bytes;
    const k0 = blk * weights;
    switch (t.dtype) {
      case 'q4_0': {
        // { f16 d; u8 qs[16] }: weight j in the low nibble of qs[j], weight j + 16 in its high nibble; w = (q − 8)·d
        const d = halfToFloat(d8[at] | (d8[at + 1] << 8));
        group(blk, d, f(8 * d), 8);
        for (let j = 0; j < 16; j++) {
          const b = d8[at + 2 + j];
          put(k0 + j, b & 0xf);
          put(k0 + j + 16, b >> 4);
        }
        break;
      }
      case 'q8_0': {
        // { f16 d; i8 qs[32] }: w = q·d, stored as q + 128
        const d = halfToFloat(d8[at] | (d8[at + 1] << 8));
        group(blk, d, f(128 * d), 128);
        for (let j = 0; j < 32; j++) put(k0 + j, (d8[at + 2 + j] ^ 0x80) & 0xff);
        break;
      }
      case 'q4_k': {
        // { f16 d; f16 dmin; u8 scales[12]; u8 qs[128] }: 4 chunks of 64 weights, each 32 low nibbles then
        // 32 high nibbles of 32 bytes; sub-block s (of 8, 32 weights) has 6-bit scale sc and min m:
        // w = (d·sc)·q − (dmin·m)
        const d = halfToFloat(d8[at] | (d8[at + 1] << 8));
        const dmin = halfToFloat(d8[at + 2] | (d8[at + 3] << 8));
        for (let s = 0; s < 8; s++) {
          const [sc, m] = q4kScaleMin(d8, at + 4, s);
          group(blk * 8 + s, f(d * sc), f(dmin * m));
        }
        for (let c = 0; c < 4; c++) {
          const qs = at + 16 + 32 * c;
          for (let l = 0; l < 32; l++) {
            put(k0 + 64 * c + l, d8[qs + l] & 0xf);
            put(k0 + 64 * c + 32 + l, d8[qs + l] >> 4);
          }
        }
        break;
      }
      case 'q6_k': {
        // { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d }: 2 halves of 128 weights; in half h, weight
        // 32·i + l (i < 4, l < 32) has low 4 bits from ql[64h + l + 32·(i & 1)] (low nibble for i < 2,
        // high for i ≥ 2) and high 2 bits from qh[32h + l] >> 2i; sub-block of 16 weights s = 8h + 2i + l/16
        // has int8 scale sc: w = (d·sc)·(q − 32)
        const d = halfToFloat(d8[at + 208] | (d8[at + 209] << 8));
        for (let s = 0; s < 16; s++) {
          const sc = (d8[at + 192 + s] << 24) >> 24;
          const scale = f(d * sc);
          group(blk * 16 + s, scale, f(32 * scale), 32);
        }
        for (let h = 0; h < 2; h++) {
          const ql = at + 64 * h;
          const qh = at + 128 + 32 * h;
          for (let l = 0; l < 32; l++) {
            const high = d8[qh + l];
            put(k0 + 128 * h + l, (d8[ql + l] & 0xf) | ((high & 3) << 4));
            put(k0 + 128 * h + 32 + l, (d8[ql + l + 32] & 0xf) | (((high >> 2) & 3) << 4));
            put(k0 + 128 * h + 64 + l, (d8[ql + l] >> 4) | (((high >> 4) & 3) << 4));
            put(k0 + 128 * h + 96 + l, (d8[ql + l + 32] >> 4) | (((high >> 6) & 3) << 4));
          }
        }
        break;
      }
    }
  }
}

function decodeNBitsRow(t: NBitsTensor, n: number, put: (k: number, q: number) => void, group: (g: number, scale: number, offset: number, zero?: number) => void): void {
  const K = t.shape[1];
  const { bits, blockSize } = t;
  const blocks = Math.ceil(K / blockSize);
  const blockBytes = (blockSize * bits) / 8;
  const zpBytesPerRow = Math.ceil((blocks * bits) / 8);
  const f = Math.fround;
  for (let blk = 0; blk < blocks; blk++) {
    const s = n * blocks + blk;
    const scale = t.scales instanceof Uint16Array ? halfToFloat(t.scales[s]) : t.scales[s];
    const zero = nbitsZero(t, n, blk, zpBytesPerRow);
    group(blk, scale, f(scale * zero), zero);
    const at = s * blockBytes;
    const end = Math.min(blockSize, K - blk * blockSize);
    for (let j = 0; j < end; j++) {
      const q = bits === 8 ? t.data[at + j] : (t.data[at + (j >> 1)] >> ((j & 1) * 4)) & 0xf;
      put(blk * blockSize + j, q);
    }
  }
}

/** Block blk of row n's zero point: its packed zero point (low nibble first), else 2^(bits−1). */
function nbitsZero(t: NBitsTensor, n: number, blk: number, zpBytesPerRow: number): number {
  if (!t.zeroPoints) return 1 << (t.bits - 1);
  const zp = t.zeroPoints[n * zpBytesPerRow + ((blk * t.bits) >> 3)];
  return t.bits === 8 ? zp : blk & 1 ? zp >> 4 : zp & 0xf;
}

/**
 * MatMulNBits rows straight into the packed layout, decodeRow's bits (as packBlocks32): a row's quants
 * are already in its order (weight k at byte k·bits/8, the low nibble first), so the bytes of weights
 * k < K go into words 4 at a time, the first lowest (a partial last byte's low nibble alone; the rest of
 * the row's words stay zero), and each block's scale and zero point give its pair.
 */
function packNBits(t: NBitsTensor, quants: Uint32Array, scaleOffset: Float32Array, wordsPerRow: number): void {
  const [N, K] = t.shape;
  const { bits, blockSize } = t;
  const blocks = Math.ceil(K / blockSize);
  const rowBytes = (blocks * blockSize * bits) / 8;
  const used = (K * bits) >> 3; // whole bytes of weights k < K
  const zpBytesPerRow = Math.ceil((blocks * bits) / 8);
  const d8 = t.data;
  for (let n = 0; n < N; n++) {
    const from = n * rowBytes;
    const row = n * wordsPerRow;
    let i = 0;
    for (; i + 4 <= used; i += 4) quants[row + (i >> 2)] = byteWord(d8, from + i);
    for (; i < used; i++) quants[row + (i >> 2)] |= d8[from + i] << (8 * (i & 3));
    if ((K * bits) & 7) quants[row + (used >> 2)] |= (d8[from + used] & 0xf) << (8 * (used & 3)); // K odd, 4 bits
    for (let blk = 0; blk < blocks; blk++) {
      const s = n * blocks + blk;
      const scale = t.scales instanceof Uint16Array ? halfToFloat(t.scales[s]) : t.scales[s];
      scaleOffset[2 * s] = scale;
      scaleOffset[2 * s + 1] = Math.fround(scale * nbitsZero(t, n, blk, zpBytesPerRow));
    }
  }
}

/** Weights per (scale, offset) group, and quant bits, of a format in the packed layout. */
export function packedGeometry(t: QuantizedTensor): { bits: 4 | 8; group: number } {
  switch (t.dtype) {
    case 'q4_0':
    case 'q4_k':
      return { bits: 4, group: 32 };
    case 'q8_0':
      return { bits: 8, group: 32 };
    case 'q6_k':
      return { bits: 8, group: 16 };
    case 'nbits':
      return { bits: t.bits, group: t.blockSize };
  }
}

/** The packed layout (types.ts PackedWeight) of a quantized weight; `t` is assumed valid (validate.ts). */
export function packWeight(t: QuantizedTensor): PackedWeight {
  const [N, K] = t.shape;
  const { bits, group } = packedGeometry(t);
  const wordsPerRow = Math.ceil((K * bits) / 32);
  const groups = Math.ceil(K / group);
  const quants = new Uint32Array(N * wordsPerRow);
  const scaleOffset = new Float32Array(N * groups * 2);
  // Block by block, each format's bits straight into words (decodeRow's values, without a call per weight).
  if (t.dtype === 'nbits') packNBits(t, quants, scaleOffset, wordsPerRow);
  else if (t.dtype === 'q4_k') packQ4K(t, quants, scaleOffset);
  else if (t.dtype === 'q6_k') packQ6K(t, quants, scaleOffset);
  else packBlocks32(t, quants, scaleOffset);
  return { bits, group, rows: N, cols: K, wordsPerRow, groups, quants, scaleOffset, dtype: t.dtype };
}

/**
 * q4_0 and q8_0 (blocks of 32 weights: an f16 d, then 16 bytes of nibbles or 32 int8s) straight into the
 * packed words and (scale, offset) pairs: decodeRow's values, the same bits, without a call per weight
 * (a q4_0 layer of E 2048, G 4 spent 83 ms of its 126–172 ms creation in decodeRow's calls). Block s of the tensor is row
 * ⌊s / blocks⌋'s block s mod blocks: its words start at 4s (q4_0) or 8s (q8_0), its pair at 2s.
 */
function packBlocks32(t: QuantizedTensor, quants: Uint32Array, scaleOffset: Float32Array): void {
  const [N, K] = t.shape;
  const q4 = t.dtype === 'q4_0';
  const { bytes } = GGUF_BLOCKS[q4 ? 'q4_0' : 'q8_0'];
  const d8 = t.data;
  const count = (N * K) / 32;
  for (let s = 0; s < count; s++) {
    const at = s * bytes;
    const d = halfToFloat(d8[at] | (d8[at + 1] << 8));
    scaleOffset[2 * s] = d;
    scaleOffset[2 * s + 1] = Math.fround((q4 ? 8 : 128) * d);
    if (q4) {
      // weights 0 … 15: the low nibbles of qs[0 … 15] (words 0, 1); 16 … 31: their high nibbles (words 2, 3)
      for (let h = 0; h < 2; h++) nibbleWords(d8, at + 2 + 8 * h, quants, 4 * s + h, 4 * s + 2 + h);
    } else {
      // 4 int8s a word, each stored as q + 128
      for (let w = 0; w < 8; w++) quants[8 * s + w] = byteWord(d8, at + 2 + 4 * w) ^ 0x80808080;
    }
  }
}

/**
 * q4_K blocks (256 weights: f16 d and dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles)
 * straight into the packed words and pairs, decodeRow's bits (as packBlocks32). Block s's words start at
 * 32s, its 8 groups at 8s: chunk c's weights 64c + l (l < 32) are the low nibbles of its 32 bytes
 * (words 8c … 8c + 3), 64c + 32 + l their high nibbles (words 8c + 4 … 8c + 7).
 */
function packQ4K(t: QuantizedTensor, quants: Uint32Array, scaleOffset: Float32Array): void {
  const [N, K] = t.shape;
  const { bytes } = GGUF_BLOCKS.q4_k;
  const d8 = t.data;
  const f = Math.fround;
  const count = (N * K) / 256;
  for (let s = 0; s < count; s++) {
    const at = s * bytes;
    const d = halfToFloat(d8[at] | (d8[at + 1] << 8));
    const dmin = halfToFloat(d8[at + 2] | (d8[at + 3] << 8));
    for (let j = 0; j < 8; j++) {
      const [sc, m] = q4kScaleMin(d8, at + 4, j);
      scaleOffset[2 * (8 * s + j)] = f(d * sc);
      scaleOffset[2 * (8 * s + j) + 1] = f(dmin * m);
    }
    for (let c = 0; c < 4; c++) {
      for (let w = 0; w < 4; w++) nibbleWords(d8, at + 16 + 32 * c + 8 * w, quants, 32 * s + 8 * c + w, 32 * s + 8 * c + 4 + w);
    }
  }
}

/**
 * q6_K blocks (256 weights: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, f16 d) straight
 * into the packed words (8 bits: weight k is byte k % 4 of word k / 4) and pairs, decodeRow's bits (as
 * packBlocks32): a block's 256 quants in order into a scratch, then 4 to a word. Block s's words start
 * at 64s, its 16 groups at 16s.
 */
function packQ6K(t: QuantizedTensor, quants: Uint32Array, scaleOffset: Float32Array): void {
  const [N, K] = t.shape;
  const { bytes } = GGUF_BLOCKS.q6_k;
  const d8 = t.data;
  const out = new Uint8Array(256);
  const f = Math.fround;
  const count = (N * K) / 256;
  for (let s = 0; s < count; s++) {
    const at = s * bytes;
    const d = halfToFloat(d8[at + 208] | (d8[at + 209] << 8));
    for (let j = 0; j < 16; j++) {
      const scale = f(d * ((d8[at + 192 + j] << 24) >> 24));
      scaleOffset[2 * (16 * s + j)] = scale;
      scaleOffset[2 * (16 * s + j) + 1] = f(32 * scale);
    }
    for (let h = 0; h < 2; h++) {
      const ql = at + 64 * h;
      const qh = at + 128 + 32 * h;
      const k0 = 128 * h;
      for (let l = 0; l < 32; l++) {
        const high = d8[qh + l];
        out[k0 + l] = (d8[ql + l] & 0xf) | ((high & 3) << 4);
        out[k0 + 32 + l] = (d8[ql + l + 32] & 0xf) | (((high >> 2) & 3) << 4);
        out[k0 + 64 + l] = (d8[ql + l] >> 4) | (((high >> 4) & 3) << 4);
        out[k0 + 96 + l] = (d8[ql + l + 32] >> 4) | (((high >> 6) & 3) << 4);
      }
    }
    for (let w = 0; w < 64; w++) quants[64 * s + w] = byteWord(out, 4 * w);
  }
}

/** The 4 bytes at d8[at …] as one word, the first lowest (the packed 8-bit layout's order). */
function byteWord(d8: Uint8Array, at: number): number {
  return d8[at] | (d8[at + 1] << 8) | (d8[at + 2] << 16) | (d8[at + 3] << 24);
}

/** The low nibbles of the 8 bytes at d8[at …] into quants[lo], their high nibbles into quants[hi] (the first lowest). */
function nibbleWords(d8: Uint8Array, at: number, quants: Uint32Array, lo: number, hi: number): void {
  let l = 0;
  let h = 0;
  for (let i = 0; i < 8; i++) {
    const b = d8[at + i];
    l |= (b & 0xf) << (4 * i);
    h |= (b >> 4) << (4 * i);
  }
  quants[lo] = l;
  quants[hi] = h;
}

/** The float32 weights a packed weight stands for (w = scale·q − offset, in float32): what the kernels compute. */
export function unpackWeight(p: PackedWeight): Float32Array {
  const out = new Float32Array(p.rows * p.cols);
  const perWord = 32 / p.bits;
  const mask = (1 << p.bits) - 1;
  for (let n = 0; n < p.rows; n++) {
    for (let k = 0; k < p.cols; k++) {
      const q = (p.quants[n * p.wordsPerRow + Math.floor(k / perWord)] >>> (p.bits * (k % perWord))) & mask;
      const g = 2 * (n * p.groups + Math.floor(k / p.group));
      out[n * p.cols + k] = Math.fround(p.scaleOffset[g] * q) - p.scaleOffset[g + 1];
    }
  }
  return out;
}
