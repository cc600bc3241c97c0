// A small GGUF writer for tests (versions 2 and 3, little-endian), laid out as llama.cpp's gguf writer
// lays files out: header, metadata, tensor table, padding to the alignment, then each tensor's bytes
// padded to the alignment. Plus helpers that make tensor bytes: float32, float16 and bfloat16 values,
// and random block bytes of the quantized types.

import { floatToHalfBits } from '../../src/util/f16.ts';
import { GGML_TYPES } from '../../src/weights/gguf.ts';
import type { GgufValueType } from '../../src/weights/gguf.ts';

/** A metadata value with its GGUF type (u64/i64 values as bigint). */
export type GgufWriterValue =
  | { type: Exclude<GgufValueType, 'array'>; value: number | bigint | boolean | string }
  | { type: 'array'; itemType: Exclude<GgufValueType, 'array'>; value: (number | bigint | boolean | string)[] }
  | { type: 'array'; itemType: 'array'; value: GgufWriterValue[] };

export interface GgufWriterTensor {
  name: string;
  /** ggml order: dims[0] varies fastest ([K, N] for a row-major [N, K] weight). */
  dims: number[];
  /** ggml type id. */
  type: number;
  data: Uint8Array;
}

export interface GgufWriterOptions {
  version?: 2 | 3;
  /** Written as general.alignment (u32) unless the metadata has it. Default 32 (then not written). */
  alignment?: number;
  metadata?: Record<string, GgufWriterValue>;
  tensors?: GgufWriterTensor[];
  /** Replaces the tensor table's offsets (for broken files). */
  offsets?: number[];
}

const TYPE_IDS: Record<GgufValueType, number> = { u8: 0, i8: 1, u16: 2, i16: 3, u32: 4, i32: 5, f32: 6, bool: 7, string: 8, array: 9, u64: 10, i64: 11, f64: 12 };

class Bytes {
  private buf: Uint8Array<ArrayBuffer> = new Uint8Array(1024);
  private view = new DataView(this.buf.buffer);
  length = 0;
  private grow(n: number) {
    if (this.length + n <= this.buf.length) return;
    const next = new Uint8Array(Math.max(2 * this.buf.length, this.length + n));
    next.set(this.buf);
    this.buf = next;
    this.view = new DataView(next.buffer);
  }
  bytes(b: Uint8Array) {
    this.grow(b.length);
    this.buf.set(b, this.length);
    this.length += b.length;
  }
  scalar(type: Exclude<GgufValueType, 'array' | 'string'>, v: number | bigint | boolean) {
    const size = { u8: 1, i8: 1, bool: 1, u16: 2, i16: 2, u32: 4, i32: 4, f32: 4, u64: 8, i64: 8, f64: 8 }[type];
    this.grow(size);
    const at = this.length;
    const n = Number(v);
    if (type === 'u8' || type === 'bool') this.view.setUint8(at, n);
    else if (type === 'i8') this.view.setInt8(at, n);
    else if (type === 'u16') this.view.setUint16(at, n, true);
    else if (type === 'i16') this.view.setInt16(at, n, true);
    else if (type === 'u32') this.view.setUint32(at, n, true);
    else if (type === 'i32') this.view.setInt32(at, n, true);
    else if (type === 'f32') this.view.setFloat32(at, n, true);
    else if (type === 'f64') this.view.setFloat64(at, n, true);
    else if (type === 'u64') this.view.setBigUint64(at, BigInt(v), true);
    else this.view.setBigInt64(at, BigInt(v), true);
    this.length += size;
  }
  string(s: string) {
    const b = new TextEncoder().encode(s);
    this.scalar('u64', BigInt(b.length));
    this.bytes(b);
  }
  pad(alignment: number) {
    const n = (alignment - (this.length % alignment)) % alignment;
    this.bytes(new Uint8Array(n));
  }
  done() {
    return this.buf.slice(0, this.length);
  }
}

function writeValue(out: Bytes, type: GgufValueType, value: unknown, item?: GgufWriterValue) {
  if (type === 'string') out.string(value as string);
  else if (type === 'array') {
    const v = item as Extract<GgufWriterValue, { type: 'array' }>;
    out.scalar('u32', TYPE_IDS[v.itemType]);
    out.scalar('u64', BigInt(v.value.length));
    for (const x of v.value) {
      if (v.itemType === 'array') writeValue(out, 'array', undefined, x as GgufWriterValue);
      else writeValue(out, v.itemType, x);
    }
  } else out.scalar(type, value as number | bigint | boolean);
}

/** The bytes of a GGUF file. */
export function writeGguf(options: GgufWriterOptions): Uint8Array<ArrayBuffer> {
  const { version = 3, tensors = [] } = options;
  const metadata = { ...options.metadata };
  if (options.alignment !== undefined && !metadata['general.alignment']) metadata['general.alignment'] = { type: 'u32', value: options.alignment };
  const alignment = Number(metadata['general.alignment']?.value ?? 32);
  const out = new Bytes();
  out.bytes(new TextEncoder().encode('GGUF'));
  out.scalar('u32', version);
  out.scalar('u64', BigInt(tensors.length));
  out.scalar('u64', BigInt(Object.keys(metadata).length));
  for (const [key, v] of Object.entries(metadata)) {
    out.string(key);
    out.scalar('u32', TYPE_IDS[v.type]);
    writeValue(out, v.type, v.value, v);
  }
  let offset = 0;
  tensors.forEach((t, i) => {
    out.string(t.name);
    out.scalar('u32', t.dims.length);
    for (const d of t.dims) out.scalar('u64', BigInt(d));
    out.scalar('u32', t.type);
    out.scalar('u64', BigInt(options.offsets?.[i] ?? offset));
    offset += Math.ceil(t.data.length / alignment) * alignment;
  });
  out.pad(alignment);
  for (const t of tensors) {
    out.bytes(t.data);
    out.pad(alignment);
  }
  return out.done();
}

/** ggml type ids by name. */
export const GGML = Object.fromEntries(Object.entries(GGML_TYPES).map(([id, t]) => [t.name, Number(id)])) as Record<string, number>;

export const f32Bytes = (values: ArrayLike<number>) => new Uint8Array(Float32Array.from(values).buffer);

export const f16Bytes = (values: ArrayLike<number>) => new Uint8Array(Uint16Array.from(Array.from(values, floatToHalfBits)).buffer);
/** bfloat16 by truncation (exact for values with 8 significant bits). */
export const bf16Bytes = (values: ArrayLike<number>) =>
  new Uint8Array(Uint16Array.from(Array.from(new Uint32Array(Float32Array.from(values).buffer), (u) => u >>> 16)).buffer);

/** Random block bytes of a quantized type for a row-major [rows, K] tensor, with finite f16 scales. */
export function randomBlocks(typeName: 'Q4_0' | 'Q8_0' | 'Q4_K' | 'Q6_K', rows: number, K: number, rng: () => number): Uint8Array {
  const t = GGML_TYPES[GGML[typeName]];
  const blocks = (rows * K) / t.blockSize;
  const data = new Uint8Array(blocks * t.typeSize);
  for (let i = 0; i < data.length; i++) data[i] = Math.floor(rng() * 256);
  // Where each block keeps its f16 scale(s): a small finite value there.
  const scaleAt = { Q4_0: [0], Q8_0: [0], Q4_K: [0, 2], Q6_K: [208] }[typeName];
  const view = new DataView(data.buffer);
  for (let b = 0; b < blocks; b++) for (const at of scaleAt) view.setUint16(b * t.typeSize + at, floatToHalfBits((rng() - 0.5) / 16), true);
  return data;
}
