// The dtypes of the safetensors format, and the conversion of a tensor's bytes to float32 (the
// `.data` of the tensors parseSafetensors returns, in ./safetensors.ts, which checks the header).
//
//   - F32 is copied, F16 and BF16 are widened exactly (every half and bfloat16 value is a float32
//     value, signed zeros, subnormals, ±Infinity and NaN included), F64 is rounded to the nearest
//     float32 (a finite value beyond float32's range is refused rather than turned into Infinity).
//   - Every other dtype of the format is known here (its size checks the header's offsets), but
//     reading its `.data` throws an UnsupportedError.

import { UnsupportedError } from '../errors.ts';
import { fromF16 } from '../util/f16.ts';

/** One tensor of a safetensors file (declared here, beside the class that implements it; re-exported by ./safetensors.ts). */
export interface SafetensorsTensor {
  /** The dtype code as the file states it: 'F32', 'F16', 'BF16', 'F64', 'I64', … */
  readonly dtype: string;
  /** Row-major shape; [] for a scalar. */
  readonly shape: number[];
  /**
   * The values as float32, row-major, converted on first access and kept. Throws UnsupportedError
   * for dtypes other than F32, F16, BF16 and F64.
   */
  readonly data: Float32Array;
}

/** Bits per element of every dtype the format defines. */
export const DTYPE_BITS: Record<string, number> = {
  BOOL: 8,
  U8: 8,
  I8: 8,
  F8_E5M2: 8,
  F8_E4M3: 8,
  F8_E8M0: 8,
  I16: 16,
  U16: 16,
  F16: 16,
  BF16: 16,
  I32: 32,
  U32: 32,
  F32: 32,
  I64: 64,
  U64: 64,
  F64: 64,
  C64: 64,
  F4: 4,
  F6_E2M3: 6,
  F6_E3M2: 6,
};
export const FLOAT_DTYPES = ['F32', 'F16', 'BF16', 'F64'];

/** Names other tools use for the format's dtype codes, to suggest the right one. */
export const DTYPE_ALIASES: Record<string, string> = {
  float32: 'F32',
  float: 'F32',
  f32: 'F32',
  'torch.float32': 'F32',
  '<f4': 'F32',
  float16: 'F16',
  half: 'F16',
  f16: 'F16',
  'torch.float16': 'F16',
  '<f2': 'F16',
  bfloat16: 'BF16',
  bf16: 'BF16',
  'torch.bfloat16': 'BF16',
  float64: 'F64',
  double: 'F64',
  f64: 'F64',
  'torch.float64': 'F64',
  '<f8': 'F64',
  int64: 'I64',
  long: 'I64',
  int32: 'I32',
  int: 'I32',
  uint8: 'U8',
  int8: 'I8',
  bool: 'BOOL',
};

const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** A tensor of a parsed file: its bytes (a view of the parsed buffer) become float32 on the first read of `.data`. */
export class LazyTensor implements SafetensorsTensor {
  #bytes: Uint8Array | null;
  #data: Float32Array | null = null;
  constructor(
    readonly name: string,
    readonly dtype: string,
    readonly shape: number[],
    bytes: Uint8Array,
  ) {
    this.#bytes = bytes;
  }

  get data(): Float32Array {
    if (!this.#data) {
      this.#data = toFloat32(this.name, this.dtype, this.shape, this.#bytes!);
      this.#bytes = null;
    }
    return this.#data;
  }
}

/** The bytes copied to an aligned buffer of their own. */
function aligned(bytes: Uint8Array): ArrayBuffer {
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return copy.buffer;
}

function readUint16(bytes: Uint8Array): Uint16Array {
  if (LITTLE_ENDIAN_HOST) return new Uint16Array(aligned(bytes));
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return Uint16Array.from({ length: bytes.byteLength / 2 }, (_, i) => view.getUint16(2 * i, true));
}

function toFloat32(name: string, dtype: string, shape: number[], bytes: Uint8Array): Float32Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  switch (dtype) {
    case 'F32':
      if (LITTLE_ENDIAN_HOST) return new Float32Array(aligned(bytes));
      return Float32Array.from({ length: bytes.byteLength / 4 }, (_, i) => view.getFloat32(4 * i, true));
    case 'F16':
      return fromF16(readUint16(bytes));
    case 'BF16': {
      // bfloat16 is the top half of a float32's bits.
      const halves = readUint16(bytes);
      const bits = new Uint32Array(halves.length);
      for (let i = 0; i < halves.length; i++) bits[i] = halves[i] << 16;
      return new Float32Array(bits.buffer);
    }
    case 'F64': {
      const n = bytes.byteLength / 8;
      const doubles = LITTLE_ENDIAN_HOST ? new Float64Array(aligned(bytes)) : Float64Array.from({ length: n }, (_, i) => view.getFloat64(8 * i, true));
      const out = Float32Array.from(doubles);
      for (let i = 0; i < n; i++) {
        if (!Number.isFinite(out[i]) && Number.isFinite(doubles[i])) {
          throw new UnsupportedError({
            where: 'SafetensorsTensor.data',
            argument: `tensor "${name}"[${i}]`,
            expected: "an F64 value within float32's range (|x| < 3.4e38)",
            given: String(doubles[i]),
            fix: 'This engine computes in float32; such a weight cannot be represented. Check the file.',
          });
        }
      }
      return out;
    }
    default:
      throw new UnsupportedError({
        where: 'SafetensorsTensor.data',
        argument: `tensor "${name}" (dtype ${dtype}, shape [${shape.join(', ')}])`,
        expected: `of dtype ${FLOAT_DTYPES.join(', ')} to be read as float32`,
        given: `dtype ${dtype}`,
        fix: 'Only floating-point tensors are read; this one is not a weight the attention layer uses (an index or mask buffer?), so leave it unread, or convert the file to float32.',
      });
  }
}
