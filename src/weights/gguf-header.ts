// The GGUF header and tensor table (llama.cpp's model format, versions 2 and 3, little-endian),
// parsed from the first bytes of a file. ./gguf.ts reads the tensors themselves.
//
//   u32 magic "GGUF" · u32 version · u64 tensor_count · u64 kv_count
//   kv_count × { string key · u32 value type · value }       (strings: u64 length + UTF-8 bytes;
//                                                              arrays: u32 item type · u64 count · items)
//   tensor_count × { string name · u32 n_dims · n_dims × u64 ne · u32 ggml type · u64 offset }
//   padding to `general.alignment` (default 32) · the data section: each tensor at data start + offset
//
// ne is ggml's order: ne[0] varies fastest, so a row-major [N, K] weight (nn.Linear's [out, in]) has
// ne = [K, N]. Block types store ne[0] / blockSize blocks of typeSize bytes per row.
//
// The parser may be handed a prefix of the file: when it needs bytes past the prefix (but within the
// file) it throws NeedMoreBytes, and the caller reads more and starts again (./gguf.ts's loadGguf).

import { WeightFileError, type WeightFileProblem } from './safetensors.ts';

/** A ggml tensor type: its name as ggml spells it, weights per block and bytes per block. */
export interface GgmlType {
  readonly name: string;
  readonly blockSize: number;
  readonly typeSize: number;
}

/** Every type of ggml.h's `enum ggml_type` that a GGUF file may hold, by id (4, 5, 31–33, 36–38 were removed). */
export const GGML_TYPES: Readonly<Record<number, GgmlType>> = {
  0: { name: 'F32', blockSize: 1, typeSize: 4 },
  1: { name: 'F16', blockSize: 1, typeSize: 2 },
  2: { name: 'Q4_0', blockSize: 32, typeSize: 18 },
  3: { name: 'Q4_1', blockSize: 32, typeSize: 20 },
  6: { name: 'Q5_0', blockSize: 32, typeSize: 22 },
  7: { name: 'Q5_1', blockSize: 32, typeSize: 24 },
  8: { name: 'Q8_0', blockSize: 32, typeSize: 34 },
  9: { name: 'Q8_1', blockSize: 32, typeSize: 36 },
  10: { name: 'Q2_K', blockSize: 256, typeSize: 84 },
  11: { name: 'Q3_K', blockSize: 256, typeSize: 110 },
  12: { name: 'Q4_K', blockSize: 256, typeSize: 144 },
  13: { name: 'Q5_K', blockSize: 256, typeSize: 176 },
  14: { name: 'Q6_K', blockSize: 256, typeSize: 210 },
  15: { name: 'Q8_K', blockSize: 256, typeSize: 292 },
  16: { name: 'IQ2_XXS', blockSize: 256, typeSize: 66 },
  17: { name: 'IQ2_XS', blockSize: 256, typeSize: 74 },
  18: { name: 'IQ3_XXS', blockSize: 256, typeSize: 98 },
  19: { name: 'IQ1_S', blockSize: 256, typeSize: 50 },
  20: { name: 'IQ4_NL', blockSize: 32, typeSize: 18 },
  21: { name: 'IQ3_S', blockSize: 256, typeSize: 110 },
  22: { name: 'IQ2_S', blockSize: 256, typeSize: 82 },
  23: { name: 'IQ4_XS', blockSize: 256, typeSize: 136 },
  24: { name: 'I8', blockSize: 1, typeSize: 1 },
  25: { name: 'I16', blockSize: 1, typeSize: 2 },
  26: { name: 'I32', blockSize: 1, typeSize: 4 },
  27: { name: 'I64', blockSize: 1, typeSize: 8 },
  28: { name: 'F64', blockSize: 1, typeSize: 8 },
  29: { name: 'IQ1_M', blockSize: 256, typeSize: 56 },
  30: { name: 'BF16', blockSize: 1, typeSize: 2 },
  34: { name: 'TQ1_0', blockSize: 256, typeSize: 54 },
  35: { name: 'TQ2_0', blockSize: 256, typeSize: 66 },
  39: { name: 'MXFP4', blockSize: 32, typeSize: 17 },
};

/** A ggml type id's name ('Q4_K'), or 'type <id>' for an id this reader does not know (a newer ggml's). */
export const ggmlTypeName = (id: number) => GGML_TYPES[id]?.name ?? `type ${id}`;

/** GGUF metadata value types, by id (gguf.h `enum gguf_type`). */
export const GGUF_VALUE_TYPES: readonly GgufValueType[] = ['u8', 'i8', 'u16', 'i16', 'u32', 'i32', 'f32', 'bool', 'string', 'array', 'u64', 'i64', 'f64'];
/** A GGUF metadata value type, by name. */
export type GgufValueType = 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'f32' | 'bool' | 'string' | 'array' | 'u64' | 'i64' | 'f64';

/** A metadata value: numbers (u64 and i64 as bigint, exactly), booleans, strings, arrays of them. */
export type GgufValue = number | bigint | boolean | string | GgufValue[];

/** One entry of the tensor table. */
export interface GgufTensorInfo {
  readonly name: string;
  /** ggml's ne: dims[0] varies fastest; a row-major [N, K] weight has dims [K, N]. */
  readonly dims: readonly number[];
  /** Row-major shape, dims reversed: [N, K] for that weight. */
  readonly shape: readonly number[];
  /** The ggml type id (GGML_TYPES). */
  readonly type: number;
  /** Its ggml name: 'Q4_K', 'F16', … ('type <id>' for one this reader does not know). */
  readonly typeName: string;
  /** Bytes from the start of the data section. */
  readonly offset: number;
  /** Bytes of data; undefined for a type this reader does not know. */
  readonly byteLength: number | undefined;
}

/** What the header says: version, metadata (in file order), tensor table, where the data starts. */
export interface GgufHeader {
  readonly version: number;
  readonly metadata: Map<string, GgufValue>;
  /** Each key's value type: 'u32', 'string', … and 'array<string>' etc. for arrays. */
  readonly metadataTypes: Map<string, string>;
  readonly tensors: Map<string, GgufTensorInfo>;
  readonly alignment: number;
  /** Byte offset of the data section in the file. */
  readonly dataOffset: number;
}

/** Thrown when the prefix given ends before the header does: read at least `needed` bytes and parse again. */
export class NeedMoreBytes extends Error {
  constructor(readonly needed: number) {
    super(`the GGUF header needs the first ${needed} bytes`);
  }
}

type Getter = (this: DataView, at: number, littleEndian?: boolean) => number | bigint;
/** The value types of a fixed size other than bool: their bytes and the DataView getter that reads them (little-endian). */
const FIXED_SIZE = {
  u8: [1, DataView.prototype.getUint8],
  i8: [1, DataView.prototype.getInt8],
  u16: [2, DataView.prototype.getUint16],
  i16: [2, DataView.prototype.getInt16],
  u32: [4, DataView.prototype.getUint32],
  i32: [4, DataView.prototype.getInt32],
  f32: [4, DataView.prototype.getFloat32],
  u64: [8, DataView.prototype.getBigUint64],
  i64: [8, DataView.prototype.getBigInt64],
  f64: [8, DataView.prototype.getFloat64],
} as const satisfies Record<string, readonly [number, Getter]>;

const REDOWNLOAD = 'The file is incomplete (an interrupted download or copy?): download or copy it again.';

/** Parses the header from `bytes`, the first bytes (or all) of a file of `fileSize` bytes. */
export function parseGgufHeader(bytes: Uint8Array, fileSize: number, where: string): GgufHeader {
  const fail = (problem: WeightFileProblem, argument: string, expected: string, given: string, fix: string, tensor?: string): never => {
    throw new WeightFileError({ where, argument, expected, given, fix, problem, tensor });
  };
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const utf8 = new TextDecoder('utf-8');
  let pos = 0;
  let context = 'the magic number (bytes 0–3)';
  const need = (n: number) => {
    if (pos + n > fileSize) {
      fail('truncated', 'the file', `longer than ${fileSize} bytes: it ends inside ${context}`, `${fileSize} bytes`, REDOWNLOAD);
    }
    if (pos + n > bytes.byteLength) throw new NeedMoreBytes(pos + n);
  };
  /** A little-endian scalar of `size` bytes at pos, read by `get` (a DataView getter), pos moved past it. */
  const scalar = <T>(size: number, get: (this: DataView, at: number, littleEndian: boolean) => T): T => {
    need(size);
    pos += size;
    return get.call(view, pos - size, true);
  };
  const u32 = () => scalar(4, view.getUint32);
  const u64 = () => scalar(8, view.getBigUint64);
  /** A u64 count or length. One past the file's end is reported by need() as the file cut short; an absurd one (≥ 2^48) as damage. */
  const count = (what: string | (() => string)) => {
    need(8);
    const low = view.getUint32(pos, true);
    const high = view.getUint32(pos + 4, true);
    pos += 8;
    if (high >= 2 ** 16)
      fail(
        'header',
        typeof what === 'string' ? what : what(),
        'less than 2^48',
        String((BigInt(high) << 32n) | BigInt(low)),
        'The header is damaged; download or convert the file again.',
      );
    return high * 2 ** 32 + low;
  };
  const string = () => {
    const n = count(() => `the length of a string in ${context}`);
    need(n);
    const at = pos;
    pos += n;
    // Tokenizer vocabularies are hundreds of thousands of short strings: decoded here, not by TextDecoder.
    if (n <= 64) {
      const text = shortUtf8(bytes, at, pos);
      if (text !== undefined) return text;
    }
    return utf8.decode(bytes.subarray(at, pos));
  };
  const value = (type: number, key: string): GgufValue => {
    const name = GGUF_VALUE_TYPES[type];
    const fixed = FIXED_SIZE[name as keyof typeof FIXED_SIZE];
    if (fixed) return scalar<number | bigint>(fixed[0], fixed[1]);
    switch (name) {
      case 'bool':
        return scalar(1, view.getUint8) !== 0;
      case 'string':
        return string();
      case 'array': {
        const itemType = u32();
        checkType(itemType, key);
        const n = count(`the length of array "${key}"`);
        const items: GgufValue[] = [];
        const item = GGUF_VALUE_TYPES[itemType];
        if (item === 'string') for (let i = 0; i < n; i++) items.push(string());
        else if (item === 'f32' || item === 'i32' || item === 'u32') {
          // Scores and token types of a vocabulary: one bounds check for the whole array.
          need(4 * n);
          const get = FIXED_SIZE[item][1];
          for (let i = 0; i < n; i++) items.push(get.call(view, pos + 4 * i, true));
          pos += 4 * n;
        } else for (let i = 0; i < n; i++) items.push(value(itemType, key));
        return items;
      }
    }
    return badType(type, key);
  };
  function checkType(type: number, key: string): void {
    if (GGUF_VALUE_TYPES[type] === undefined) badType(type, key);
  }
  function badType(type: number, key: string): never {
    return fail(
      'header',
      `the value type of metadata key "${key}"`,
      `a GGUF value type id 0–${GGUF_VALUE_TYPES.length - 1} (${GGUF_VALUE_TYPES.join(', ')})`,
      String(type),
      'The header is damaged or written by a newer GGUF writer; convert the file again with llama.cpp.',
    );
  }
  let arrayTypeAt = 0; // where the item type of the array value being read is
  const typeText = (type: number) => {
    const name = GGUF_VALUE_TYPES[type];
    if (name !== 'array') return name;
    return `array<${GGUF_VALUE_TYPES[view.getUint32(arrayTypeAt, true)]}>`;
  };

  // Magic and version.
  need(4);
  if (String.fromCharCode(...bytes.subarray(0, 4)) !== 'GGUF') {
    const first = [...bytes.subarray(0, 8)];
    const text = first.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join('');
    const hex = first.map((b) => b.toString(16).padStart(2, '0')).join(' ');
    const hint =
      bytes[0] === 0x7b || bytes[0] === 0x3c
        ? 'It starts with text: an HTML error page or a JSON file saved under this name?'
        : bytes.byteLength > 8 && bytes[8] === 0x7b
          ? 'It looks like a .safetensors file: read it with loadSafetensors.'
          : /^(lmgg|fmgg|tjgg|algg)/.test(text)
            ? "It is a pre-GGUF llama.cpp file (GGML/GGMF/GGJT): convert it with llama.cpp's convert scripts."
            : 'It is not a GGUF file (or it is damaged): download it again, or convert the model with llama.cpp.';
    fail('header', 'the magic number (bytes 0–3)', '"GGUF"', `bytes ${hex} ("${text}")`, hint);
  }
  pos = 4;
  context = 'the version (bytes 4–7)';
  const version = u32();
  if (version !== 2 && version !== 3) {
    const bigEndian = (version & 0xffff) === 0 && version >>> 16 !== 0;
    fail(
      'header',
      'the GGUF version (bytes 4–7)',
      '2 or 3, little-endian',
      bigEndian ? `${version} (a big-endian file: version ${version >>> 24})` : String(version),
      bigEndian
        ? 'Big-endian GGUF files are not read; convert the model again without --bigendian.'
        : version === 1
          ? 'GGUF version 1 (2023) is not read; convert the model again with a current llama.cpp.'
          : 'This version is not read by this engine; convert the model with a llama.cpp that writes version 3.',
    );
  }
  context = 'the tensor and metadata counts (bytes 8–23)';
  const tensorCount = count('tensor_count (bytes 8–15)');
  const kvCount = count('kv_count (bytes 16–23)');

  // Metadata.
  const metadata = new Map<string, GgufValue>();
  const metadataTypes = new Map<string, string>();
  for (let i = 0; i < kvCount; i++) {
    context = `metadata entry #${i}`;
    const key = string();
    context = `metadata key "${key}"`;
    if (metadata.has(key)) fail('header', `metadata key "${key}"`, 'present once', 'twice', 'The header is damaged; convert the file again.');
    const type = u32();
    checkType(type, key);
    arrayTypeAt = pos;
    metadata.set(key, value(type, key));
    metadataTypes.set(key, typeText(type));
  }
  const alignmentValue = metadata.get('general.alignment');
  const alignment = alignmentValue === undefined ? 32 : Number(alignmentValue);
  if (!Number.isInteger(alignment) || alignment <= 0 || (alignment & (alignment - 1)) !== 0) {
    fail('header', 'metadata key "general.alignment"', 'a power of two', describeValue(alignmentValue), 'The header is damaged; convert the file again.');
  }

  // Tensor table.
  const tensors = new Map<string, GgufTensorInfo>();
  for (let i = 0; i < tensorCount; i++) {
    context = `tensor info #${i}`;
    const name = string();
    context = `the tensor info of "${name}"`;
    const arg = `tensor "${name}"`;
    const nDims = u32();
    if (nDims < 1 || nDims > 4) fail('header', `${arg}: n_dims`, '1 to 4 (GGML_MAX_DIMS)', String(nDims), 'The header is damaged; convert the file again.', name);
    const dims: number[] = [];
    for (let d = 0; d < nDims; d++) dims.push(count(`${arg}: ne[${d}]`));
    const type = u32();
    const offsetBig = u64();
    if (offsetBig > BigInt(Number.MAX_SAFE_INTEGER)) {
      fail('offsets', `${arg}: offset`, 'a byte offset within the file', String(offsetBig), 'The header is damaged; convert the file again.', name);
    }
    const offset = Number(offsetBig);
    if (tensors.has(name)) fail('header', arg, 'named once in the tensor table', 'twice', 'The header is damaged; convert the file again.', name);
    const t = GGML_TYPES[type];
    if (t && dims[0] % t.blockSize !== 0) {
      fail(
        'header',
        `${arg}: ne[0]`,
        `a multiple of ${t.blockSize} (the block size of ${t.name})`,
        String(dims[0]),
        'The header is damaged; convert the file again.',
        name,
      );
    }
    if (offset % alignment !== 0) {
      fail('offsets', `${arg}: offset`, `a multiple of the alignment ${alignment}`, String(offset), 'The header is damaged; convert the file again.', name);
    }
    const numel = dims.reduce((a, b) => a * b, 1);
    const byteLength = t ? (numel / t.blockSize) * t.typeSize : undefined;
    tensors.set(name, { name, dims, shape: [...dims].reverse(), type, typeName: ggmlTypeName(type), offset, byteLength });
  }
  const dataOffset = Math.ceil(pos / alignment) * alignment;

  // Every tensor's bytes must lie in the file. When the table lays the tensors out as ggml does (each
  // at the previous one's padded end), the table is consistent and the file is short; otherwise the
  // offsets are wrong.
  const dataLength = fileSize - dataOffset;
  let packed = 0;
  let consistent = true;
  for (const t of tensors.values()) {
    if (t.offset !== packed || t.byteLength === undefined) consistent = false;
    packed = Math.ceil((t.offset + (t.byteLength ?? 0)) / alignment) * alignment;
  }
  for (const t of tensors.values()) {
    const end = t.offset + (t.byteLength ?? 0);
    if (end > dataLength) {
      fail(
        consistent ? 'truncated' : 'offsets',
        `tensor "${t.name}" (${t.typeName}, ne [${t.dims.join(', ')}], offset ${t.offset})`,
        `within the ${Math.max(0, dataLength)} bytes of data after the ${dataOffset}-byte header`,
        `bytes ${t.offset}–${end}, which end ${end - dataLength} bytes past the end of the file`,
        consistent
          ? `The tensor table is consistent but the file is short: ${REDOWNLOAD}`
          : 'The tensor table points outside the file (its offsets are not laid out as a GGUF writer lays them): convert the file again.',
        t.name,
      );
    }
  }
  return { version, metadata, metadataTypes, tensors, alignment, dataOffset };
}

const codes: number[] = [];
/** UTF-8 bytes [from, to) as a string; undefined for anything but well-formed 1- to 3-byte sequences. */
function shortUtf8(b: Uint8Array, from: number, to: number): string | undefined {
  codes.length = 0;
  for (let i = from; i < to; ) {
    const c = b[i];
    if (c < 0x80) {
      codes.push(c);
      i += 1;
    } else if (c >= 0xc2 && c < 0xe0 && i + 1 < to && (b[i + 1] & 0xc0) === 0x80) {
      codes.push(((c & 0x1f) << 6) | (b[i + 1] & 0x3f));
      i += 2;
    } else if (c >= 0xe0 && c < 0xf0 && i + 2 < to && (b[i + 1] & 0xc0) === 0x80 && (b[i + 2] & 0xc0) === 0x80) {
      const code = ((c & 0x0f) << 12) | ((b[i + 1] & 0x3f) << 6) | (b[i + 2] & 0x3f);
      if (code < 0x800 || (code >= 0xd800 && code < 0xe000)) return undefined; // overlong or a surrogate: TextDecoder's rules
      codes.push(code);
      i += 3;
    } else return undefined;
  }
  return String.fromCharCode.apply(null, codes);
}

/** A metadata value in words, for messages. */
export function describeValue(v: GgufValue | undefined): string {
  if (v === undefined) return 'no such key';
  if (Array.isArray(v)) return `an array of ${v.length}`;
  if (typeof v === 'string') return JSON.stringify(v.length > 60 ? `${v.slice(0, 60)}…` : v);
  return String(v);
}
