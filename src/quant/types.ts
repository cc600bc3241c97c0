// Quantized projection weights: the tensors a user passes (the bytes of a GGUF file's ggml types, or
// ONNX Runtime's MatMulNBits initializers, unchanged), and the one packed layout the GPU and wasm
// kernels read (pack.ts makes it from any of them).
//
// Every weight is row-major [N, K] = [out, in] as nn.Linear's, and its blocks run along K.

/** The GGUF block types this engine reads (ggml's names, lower case). */
export type GgufQuantType = 'q4_0' | 'q8_0' | 'q4_k' | 'q6_k';

/**
 * A weight in one of ggml's block types: `data` holds the blocks exactly as a GGUF file stores them,
 * row after row (a row is K / blockSize blocks). K must be a multiple of 32 (q4_0, q8_0) or of 256
 * (q4_k, q6_k). Block sizes in bytes: q4_0 18 (f16 d, 16 bytes of nibbles), q8_0 34 (f16 d, 32 int8),
 * q4_k 144 (f16 d, f16 dmin, 12 bytes of packed 6-bit scales and mins, 128 bytes of nibbles), q6_k 210
 * (128 bytes of low 4 bits, 64 of high 2 bits, 16 int8 scales, f16 d). Dequantized as ggml's
 * `dequantize_row_*` (ggml-quants.c).
 */
export interface GgufQuantizedTensor {
  dtype: GgufQuantType;
  shape: readonly [number, number];
  data: Uint8Array;
}

/**
 * A weight in ONNX Runtime's MatMulNBits layout (com.microsoft domain), as its initializers hold it:
 *   data        [N, ceil(K / blockSize), blockSize·bits / 8] uint8, low nibble first for 4 bits
 *   scales      [N · ceil(K / blockSize)] float32, or float16 as its bits (Uint16Array)
 *   zeroPoints  [N, ceil(ceil(K / blockSize)·bits / 8)] uint8 (each row starts on a new byte; low nibble
 *               first for 4 bits); default 2^(bits − 1)
 * w = scale · (q − zeroPoint). K need not be a multiple of blockSize (the last block is partial).
 */
export interface NBitsTensor {
  dtype: 'nbits';
  bits: 4 | 8;
  blockSize: 16 | 32 | 64 | 128 | 256;
  shape: readonly [number, number];
  data: Uint8Array;
  scales: Float32Array | Uint16Array;
  zeroPoints?: Uint8Array;
}

/** A quantized weight, in any of the formats this engine reads. */
export type QuantizedTensor = GgufQuantizedTensor | NBitsTensor;

/** A projection weight as a state_dict may hold it: float32, or quantized (kept packed, never expanded on the GPU). */
export type WeightTensor = Float32Array | QuantizedTensor;

/** The `dtype`s of quantized tensors. */
export const QUANTIZED_DTYPES = ['q4_0', 'q8_0', 'q4_k', 'q6_k', 'nbits'] as const;
export type QuantizedDtype = (typeof QUANTIZED_DTYPES)[number];

/**
 * The one layout the kernels read (GPU and wasm), made once at upload from any format (pack.ts):
 *   w[n, k] = scaleOffset[2·(n·groups + g)] · q[n, k] − scaleOffset[2·(n·groups + g) + 1],  g = floor(k / group)
 * - `quants`: row n starts at word n·wordsPerRow; weight k of the row is, for 4 bits, nibble k % 8 of
 *   word k / 8 (bits 4·(k % 8) … +3, so the low nibble first), for 8 bits byte k % 4 of word k / 4. A row is
 *   padded with zeros to a whole number of words (wordsPerRow = ceil(K·bits / 32)).
 * - q is unsigned (0 … 2^bits − 1): signed formats are stored with their zero folded into `offset`
 *   (q8_0: q + 128 and offset 128·d; q4_0: offset 8·d; q6_k: offset 32·d·sc; nbits: offset scale·zeroPoint;
 *   q4_k: scale d·sc and offset dmin·m exactly as ggml computes them).
 * - `group`: weights per (scale, offset) pair along K: 16 (q6_k; nbits 16), 32 (q4_0, q8_0, q4_k), or the
 *   nbits block size; groups = ceil(K / group). All 32-bit words: no 18- or 34-byte blocks to straddle.
 * Memory per weight: 4 bits + 64 / group (6 bits at group 32), 8 bits + 64 / group.
 */
export interface PackedWeight {
  readonly bits: 4 | 8;
  readonly group: number;
  /** N (output features). */
  readonly rows: number;
  /** K (input features). */
  readonly cols: number;
  readonly wordsPerRow: number;
  /** ceil(cols / group). */
  readonly groups: number;
  /** [rows · wordsPerRow]. */
  readonly quants: Uint32Array;
  /** [rows · groups · 2]: (scale, offset) of each group. */
  readonly scaleOffset: Float32Array;
  /** What it was made from (for errors and stats). */
  readonly dtype: QuantizedDtype;
}

/** Whether a state_dict value is a quantized tensor (an object with a quantized `dtype`), not a Float32Array. */
export function isQuantized(value: unknown): value is QuantizedTensor {
  return (
    typeof value === 'object' &&
    value !== null &&
    !ArrayBuffer.isView(value) &&
    (QUANTIZED_DTYPES as readonly string[]).includes((value as { dtype?: unknown }).dtype as string)
  );
}
