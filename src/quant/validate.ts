// Checks of a quantized weight on the host, before any GPU work: its dtype, its shape against the
// layer, and the lengths of its arrays against the shape and the format. Each failure names the
// state_dict entry, what was expected and how to fix it.

import { InvalidArgumentError, ShapeMismatchError, UnsupportedError } from '../errors.ts';
import { describe } from '../validate.ts';
import { GGUF_BLOCKS } from './pack.ts';
import { type NBitsTensor, QUANTIZED_DTYPES, type QuantizedTensor } from './types.ts';

const NBITS_BLOCKS = [16, 32, 64, 128, 256];

/** Bytes of `data` a tensor of this format and shape must have. */
export function quantizedBytes(t: Pick<QuantizedTensor, 'dtype' | 'shape'> & Partial<Pick<NBitsTensor, 'bits' | 'blockSize'>>): number {
  const [N, K] = t.shape;
  if (t.dtype === 'nbits') return N * Math.ceil(K / (t.blockSize ?? 32)) * (((t.blockSize ?? 32) * (t.bits ?? 4)) / 8);
  const { bytes, weights } = GGUF_BLOCKS[t.dtype];
  return (N * K * bytes) / weights;
}

/**
 * `value` as a quantized tensor of shape [N, K] (throws a typed error naming `argument` otherwise).
 * `shapeText` says where the shape comes from, e.g. "[(H + 2·G)·Dh, E] = [96, 32]".
 */
export function checkQuantized(where: string, argument: string, value: unknown, shape: readonly [number, number], shapeText: string): QuantizedTensor {
  const t = value as Record<string, unknown>;
  const dtype = t.dtype;
  if (typeof dtype !== 'string' || !(QUANTIZED_DTYPES as readonly string[]).includes(dtype)) {
    throw new InvalidArgumentError({
      where,
      argument: `${argument}.dtype`,
      expected: `one of ${QUANTIZED_DTYPES.map((d) => `'${d}'`).join(', ')}`,
      given: describe(dtype),
      fix: 'A weight is a Float32Array, a GGUF block tensor { dtype, shape, data } or an ONNX MatMulNBits tensor { dtype: "nbits", bits, blockSize, shape, data, scales, zeroPoints? }.',
    });
  }
  const given = t.shape;
  if (!Array.isArray(given) || given.length !== 2 || given[0] !== shape[0] || given[1] !== shape[1]) {
    throw new ShapeMismatchError({
      where,
      argument: `${argument}.shape`,
      expected: `[${shape.join(', ')}] (${shapeText}, row-major [out, in] as nn.Linear)`,
      given: Array.isArray(given) ? `[${given.join(', ')}]` : describe(given),
      fix: "The layer fixes each weight's shape; check embedDim, numHeads and numKvHeads against the model.",
    });
  }
  const [N, K] = shape;
  if (!(t.data instanceof Uint8Array)) {
    throw new InvalidArgumentError({
      where,
      argument: `${argument}.data`,
      expected: 'a Uint8Array of the packed blocks',
      given: describe(t.data),
      fix: "Pass the tensor's bytes as stored, e.g. new Uint8Array(buffer, offset, length).",
    });
  }
  if (dtype === 'nbits') return checkNBits(where, argument, t, N, K);
  const { weights } = GGUF_BLOCKS[dtype as keyof typeof GGUF_BLOCKS];
  if (K % weights !== 0) {
    throw new UnsupportedError({
      where,
      argument: `${argument}.shape`,
      expected: `K (the input features, ${K}) a multiple of ${weights}, the ${dtype} block`,
      given: `K = ${K}`,
      fix: `ggml's ${dtype} blocks run along K; a file with K % ${weights} ≠ 0 would not store this type.`,
    });
  }
  const bytes = quantizedBytes({ dtype: dtype as QuantizedTensor['dtype'], shape });
  if (t.data.length !== bytes) {
    throw new ShapeMismatchError({
      where,
      argument: `${argument}.data`,
      expected: `${bytes} bytes (${N} rows × ${K / weights} blocks × ${GGUF_BLOCKS[dtype as keyof typeof GGUF_BLOCKS].bytes} bytes of ${dtype})`,
      given: `${t.data.length} bytes`,
    });
  }
  return { dtype: dtype as GgufType, shape: [N, K], data: t.data };
}

type GgufType = keyof typeof GGUF_BLOCKS;

function checkNBits(where: string, argument: string, t: Record<string, unknown>, N: number, K: number): NBitsTensor {
  const { bits, blockSize } = t;
  if (bits !== 4 && bits !== 8) {
    throw new UnsupportedError({
      where,
      argument: `${argument}.bits`,
      expected: '4 or 8',
      given: describe(bits),
      fix: 'MatMulNBits with 2, 3 or other widths is not supported; requantize to 4 or 8 bits.',
    });
  }
  if (!NBITS_BLOCKS.includes(blockSize as number)) {
    throw new InvalidArgumentError({ where, argument: `${argument}.blockSize`, expected: `one of ${NBITS_BLOCKS.join(', ')}`, given: describe(blockSize) });
  }
  const bs = blockSize as NBitsTensor['blockSize'];
  const blocks = Math.ceil(K / bs);
  const bytes = quantizedBytes({ dtype: 'nbits', shape: [N, K], bits, blockSize: bs });
  const data = t.data as Uint8Array;
  if (data.length !== bytes) {
    throw new ShapeMismatchError({
      where,
      argument: `${argument}.data`,
      expected: `${bytes} bytes ([N, ceil(K / blockSize), blockSize·bits / 8] = [${N}, ${blocks}, ${(bs * bits) / 8}])`,
      given: `${data.length} bytes`,
    });
  }
  const scales = t.scales;
  if (scales === undefined) {
    throw new InvalidArgumentError({
      where,
      argument: `${argument}.scales`,
      expected: `a Float32Array or Uint16Array (float16 bits) of ${N * blocks} scales`,
      given: 'nothing',
      fix: "MatMulNBits' scales initializer: one per block of each row.",
    });
  }
  if (!(scales instanceof Float32Array || scales instanceof Uint16Array)) {
    throw new InvalidArgumentError({ where, argument: `${argument}.scales`, expected: 'a Float32Array, or a Uint16Array holding float16 bits', given: describe(scales) });
  }
  if (scales.length !== N * blocks) {
    throw new ShapeMismatchError({
      where,
      argument: `${argument}.scales`,
      expected: `length N·ceil(K / blockSize) = ${N}·${blocks} = ${N * blocks}`,
      given: `length ${scales.length}`,
    });
  }
  const zp = t.zeroPoints;
  if (zp !== undefined) {
    const zpBytes = N * Math.ceil((blocks * bits) / 8);
    if (!(zp instanceof Uint8Array)) {
      throw new InvalidArgumentError({
        where,
        argument: `${argument}.zeroPoints`,
        expected: 'a Uint8Array (packed uint8 zero points) or left out',
        given: describe(zp),
        fix: 'Float zero points are not supported.',
      });
    }
    if (zp.length !== zpBytes) {
      throw new ShapeMismatchError({
        where,
        argument: `${argument}.zeroPoints`,
        expected: `${zpBytes} bytes ([N, ceil(ceil(K / blockSize)·bits / 8)] = [${N}, ${zpBytes / N}])`,
        given: `${zp.length} bytes`,
      });
    }
  }
  return { dtype: 'nbits', bits, blockSize: bs, shape: [N, K], data, scales, ...(zp ? { zeroPoints: zp as Uint8Array } : {}) };
}

/** Rows r0 … r1 − 1 of a quantized tensor, as a tensor of its own (views, no copy): blocks never straddle rows. */
export function sliceRows(t: QuantizedTensor, r0: number, r1: number): QuantizedTensor {
  const [N, K] = t.shape;
  const rowBytes = quantizedBytes(t) / N;
  const data = t.data.subarray(r0 * rowBytes, r1 * rowBytes);
  if (t.dtype !== 'nbits') return { dtype: t.dtype, shape: [r1 - r0, K], data };
  const blocks = Math.ceil(K / t.blockSize);
  const zpRow = Math.ceil((blocks * t.bits) / 8);
  return {
    ...t,
    shape: [r1 - r0, K],
    data,
    scales: t.scales.subarray(r0 * blocks, r1 * blocks),
    ...(t.zeroPoints ? { zeroPoints: t.zeroPoints.subarray(r0 * zpRow, r1 * zpRow) } : {}),
  };
}

/** A private copy of a quantized tensor (the caller may reuse its arrays). */
export function copyQuantized(t: QuantizedTensor): QuantizedTensor {
  if (t.dtype !== 'nbits') return { dtype: t.dtype, shape: [t.shape[0], t.shape[1]], data: t.data.slice() };
  return { ...t, shape: [t.shape[0], t.shape[1]], data: t.data.slice(), scales: t.scales.slice(), ...(t.zeroPoints ? { zeroPoints: t.zeroPoints.slice() } : {}) };
}

/** Bytes a weight takes as given: a Float32Array's, or a quantized tensor's arrays together. */
export function weightBytes(w: Float32Array | QuantizedTensor): number {
  if (w instanceof Float32Array) return w.byteLength;
  return w.data.byteLength + (w.dtype === 'nbits' ? w.scales.byteLength + (w.zeroPoints?.byteLength ?? 0) : 0);
}
