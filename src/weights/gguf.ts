// Reading GGUF files (llama.cpp's model format): the header and tensor table first (./gguf-header.ts),
// then only the tensors asked for. Block-quantized tensors of the types the engine runs (Q4_0, Q8_0,
// Q4_K, Q6_K) come back as their block bytes, unchanged (src/quant/types.ts GgufQuantizedTensor);
// F32, F16 and BF16 tensors as Float32Array (widened exactly). Every other ggml type is refused by name.
//
// Sources: bytes (parseGguf, or loadGguf), a Blob/File (its slices are read), a path or file: URL in
// Node (a file handle read at offsets), a Response or an http(s) URL (all bytes are read: a Response
// cannot be read at offsets, and range requests are not made).

import { InvalidArgumentError, MissingWeightError } from '../errors.ts';
import { halfToFloat } from '../util/f16.ts';
import type { GgufQuantType, GgufQuantizedTensor } from '../quant/types.ts';
import { describe } from '../validate.ts';
import { type GgufHeader, NeedMoreBytes, parseGgufHeader } from './gguf-header.ts';
import { nodeFileAt, type ReadAt } from './read-at.ts';
import { WeightFileError } from './safetensors.ts';

export type { GgufHeader, GgufTensorInfo, GgufValue, GgufValueType, GgmlType } from './gguf-header.ts';
export { GGML_TYPES } from './gguf-header.ts';

/** A tensor as read: float types widened to float32; quantized ones as their blocks (shape [rows, ne[0]]). */
export type GgufTensor = Float32Array | GgufQuantizedTensor;

/** A parsed GGUF file: what its header says, and its tensors on demand. */
export interface GgufFile extends GgufHeader {
  /** The file's size in bytes. */
  readonly byteLength: number;
  /**
   * Reads one tensor. F32, F16, BF16 → Float32Array (row-major, `info.shape`); Q4_0, Q8_0, Q4_K,
   * Q6_K → `{ dtype, shape: [N, K], data }` with data the file's block bytes (K = ne[0], N the product
   * of the other dims). Other ggml types: WeightFileError (problem 'dtype') naming the type.
   */
  tensor(name: string): Promise<GgufTensor>;
}

/** ggml type id → the engine's quantized dtype. */
const QUANT_TYPES: Readonly<Record<number, GgufQuantType>> = { 2: 'q4_0', 8: 'q8_0', 12: 'q4_k', 14: 'q6_k' };
const FLOAT_TYPES: Readonly<Record<number, string>> = { 0: 'F32', 1: 'F16', 30: 'BF16' };

/** A parsed file: its header's fields, its size, and `tensor(name)` reading through `readAt`. */
function ggufFile(header: GgufHeader, byteLength: number, readAt: ReadAt): GgufFile {
  return { ...header, byteLength, tensor: (name) => readTensor(header, readAt, name) };
}

/** GgufFile.tensor: one tensor's bytes, read at the data section's offset and converted (float types) or kept (quantized). */
async function readTensor({ tensors, dataOffset }: GgufHeader, readAt: ReadAt, name: string): Promise<GgufTensor> {
  const where = 'GgufFile.tensor';
  const info = tensors.get(name);
  if (!info) {
    const stem = name.replace(/\.(weight|bias)$/, '');
    const near = [...tensors.keys()].filter((n) => n.startsWith(stem.slice(0, stem.lastIndexOf('.') + 1) || stem)).slice(0, 8);
    throw new MissingWeightError({
      where,
      argument: `tensor "${name}"`,
      expected: 'a tensor of the file',
      given: 'no tensor of that name',
      fix: near.length ? `Tensors with that prefix: ${near.join(', ')}.` : `The file has ${tensors.size} tensors, e.g. ${[...tensors.keys()].slice(0, 5).join(', ')}.`,
    });
  }
  const quant = QUANT_TYPES[info.type];
  const float = FLOAT_TYPES[info.type];
  if (!quant && !float) {
    throw new WeightFileError({
      where,
      argument: `tensor "${name}" (ne [${info.dims.join(', ')}])`,
      expected: 'of a ggml type this engine reads: F32, F16, BF16 (read as float32) or Q4_0, Q8_0, Q4_K, Q6_K (kept as they are)',
      given: info.typeName,
      fix: 'Re-quantize the model with llama-quantize to Q4_K_M (Q4_K with some Q6_K), Q4_0 or Q8_0, or convert it with --outtype f16.',
      problem: 'dtype',
      tensor: name,
    });
  }
  const length = info.byteLength as number;
  const bytes = await readAt(dataOffset + info.offset, length);
  if (bytes.byteLength !== length) {
    throw new WeightFileError({
      where,
      argument: `tensor "${name}"`,
      expected: `${length} bytes at file offset ${dataOffset + info.offset}`,
      given: `${bytes.byteLength} bytes (the file is shorter than when its header was read: did it change?)`,
      fix: 'Load the file again.',
      problem: 'truncated',
      tensor: name,
    });
  }
  if (quant) {
    const rows = info.dims.slice(1).reduce((a, b) => a * b, 1);
    return { dtype: quant, shape: [rows, info.dims[0]], data: bytes };
  }
  return toFloat32(float, bytes);
}

function toFloat32(type: string, bytes: Uint8Array): Float32Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = bytes.byteLength / (type === 'F32' ? 4 : 2);
  const out = new Float32Array(n);
  if (type === 'F32') for (let i = 0; i < n; i++) out[i] = view.getFloat32(4 * i, true);
  else if (type === 'F16') for (let i = 0; i < n; i++) out[i] = halfToFloat(view.getUint16(2 * i, true));
  else {
    // bfloat16 is the top half of a float32's bits.
    const bits = new Uint32Array(out.buffer);
    for (let i = 0; i < n; i++) bits[i] = view.getUint16(2 * i, true) << 16;
  }
  return out;
}

function asBytes(bytes: ArrayBuffer | Uint8Array, where: string): Uint8Array {
  if (bytes instanceof Uint8Array) return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes instanceof ArrayBuffer) return new Uint8Array(bytes);
  throw new WeightFileError({
    where,
    argument: 'bytes',
    expected: 'an ArrayBuffer or a Uint8Array holding a .gguf file',
    given: describe(bytes),
    fix: 'Read the file first, or use loadGguf(source) with a Blob, a Response, a URL or a path.',
    problem: 'read',
  });
}

/**
 * Parses a GGUF file held in memory (versions 2 and 3, little-endian). The whole header and tensor
 * table are checked at once; tensors are read by `file.tensor(name)` (copies: the bytes given are not
 * kept alive by the tensors, but are by the file). Throws WeightFileError (problem 'truncated',
 * 'header' or 'offsets') naming what is wrong.
 */
export function parseGguf(bytes: ArrayBuffer | Uint8Array): GgufFile {
  const where = 'parseGguf';
  const file = asBytes(bytes, where);
  const header = parseGgufHeader(file, file.byteLength, where);
  return ggufFile(header, file.byteLength, async (at, n) => file.slice(at, at + n));
}

/** Parses the header of a file read at offsets: a prefix first, more until the header fits. */
async function parseAt(readAt: ReadAt, size: number, where: string): Promise<GgufFile> {
  let length = Math.min(size, 8 << 20); // most headers (a tokenizer of 150k tokens and merges) fit in 8 MiB
  for (;;) {
    const prefix = await readAt(0, length);
    try {
      return ggufFile(parseGgufHeader(prefix, size, where), size, readAt);
    } catch (e) {
      if (!(e instanceof NeedMoreBytes)) throw e;
      length = Math.min(size, Math.max(2 * length, e.needed + (1 << 20)));
    }
  }
}

const isNode = () => typeof process !== 'undefined' && !!process.versions?.node;
/** 'https://…', 'file:…', 'blob:…', 'data:…': a URL rather than a path (not a Windows drive path). */
const looksLikeUrl = (s: string) => /^[a-z][a-z0-9+.-]*:/i.test(s) && !/^[a-z]:[\\/]/i.test(s);

function readError(where: string, expected: string, given: string, fix: string): WeightFileError {
  return new WeightFileError({ where, argument: 'source', expected, given, fix, problem: 'read' });
}

async function responseBytes(response: Response, what: string, where: string): Promise<Uint8Array> {
  if (!response.ok) {
    throw readError(
      where,
      'a successful HTTP response (2xx)',
      `HTTP ${response.status} ${response.statusText} for ${what}`,
      'Check the URL (a Hugging Face file is at https://huggingface.co/<repo>/resolve/main/<file>.gguf).',
    );
  }
  return new Uint8Array(await response.arrayBuffer());
}

async function fetchBytes(url: string, where: string): Promise<Uint8Array> {
  let response: Response;
  try {
    response = await fetch(url);
  } catch (e) {
    const cause = (e as { cause?: Error }).cause;
    throw readError(
      where,
      'a URL that can be fetched',
      JSON.stringify(url),
      `fetch failed (${(e as Error).message}${cause ? `: ${cause.message}` : ''}); check the URL, the network and CORS.`,
    );
  }
  return responseBytes(response, url, where);
}

/** A file in Node, read at offsets through a file handle opened for each read. */
async function openPath(path: string | URL, where: string): Promise<GgufFile> {
  const { readAt, size } = await nodeFileAt(path, where);
  return parseAt(readAt, size, where);
}

/**
 * Reads a GGUF file's header and tensor table, and then only the tensors asked for
 * (`file.tensor(name)`). Sources: bytes (ArrayBuffer, Uint8Array); a Blob or File (an
 * <input type=file>; read by slices); in Node a path or a file: URL (read at offsets through a file
 * handle); a fetch Response or another URL (fetched, and all of its bytes read, as a Response cannot
 * be read at offsets). Throws WeightFileError when it cannot be read or is not a GGUF file it reads.
 */
export async function loadGguf(source: ArrayBuffer | Uint8Array | Blob | Response | URL | string): Promise<GgufFile> {
  const where = 'loadGguf';
  if (source instanceof ArrayBuffer || source instanceof Uint8Array) return parseGguf(source);
  if (typeof Response !== 'undefined' && source instanceof Response) return parseGguf(await responseBytes(source, source.url || 'the response', where));
  if (typeof Blob !== 'undefined' && source instanceof Blob) {
    const blob = source;
    const readAt: ReadAt = async (at, n) => {
      try {
        return new Uint8Array(await blob.slice(at, at + n).arrayBuffer());
      } catch (e) {
        throw readError(where, 'a readable Blob or File', describe(blob), `Reading it failed: ${(e as Error).message}.`);
      }
    };
    return parseAt(readAt, blob.size, where);
  }
  if (source instanceof URL || typeof source === 'string') {
    const text = String(source);
    if (isNode() && (source instanceof URL ? source.protocol === 'file:' : /^file:/i.test(text))) return openPath(new URL(text), where);
    if (looksLikeUrl(text) || !isNode()) return parseGguf(await fetchBytes(text, where)); // a browser resolves a relative path against the page
    return openPath(text, where);
  }
  throw new InvalidArgumentError({
    where,
    argument: 'source',
    expected: 'an ArrayBuffer, Uint8Array, Blob, Response, URL, or a path/URL string',
    given: describe(source),
  });
}
