// Reading .safetensors files (Hugging Face's weight format) into float32 tensors.
//
// The format (https://github.com/huggingface/safetensors):
//
//   bytes 0–7        N, the header's length, an unsigned 64-bit little-endian integer
//   bytes 8 … 8+N    a UTF-8 JSON object: { "<name>": { "dtype": "F32", "shape": [3, 4],
//                    "data_offsets": [begin, end] }, …, "__metadata__"?: { "<key>": "<string>" } }
//                    (writers pad it with spaces to a multiple of 8 bytes)
//   bytes 8+N …      the tensors' raw little-endian, row-major data; each tensor's data_offsets are
//                    relative to the end of the header, and end − begin = numel(shape) × itemsize(dtype)
//
// What this reader does:
//   - The whole header is checked when the file is parsed: its length against the file, the JSON,
//     every entry's fields, every dtype name, end − begin against dtype × shape, and every tensor's
//     bytes lying inside the file. Tensors may overlap or come in any order (the format's own
//     writer never does so, but nothing here depends on it); a byte range outside the file may not.
//   - Tensor data is converted to float32 on the first read of `.data` (and kept; the conversion is
//     in ./safetensors-dtypes.ts): F32 is copied, F16 and BF16 are widened exactly (every half and
//     bfloat16 value is a float32 value, signed zeros, subnormals, ±Infinity and NaN included), F64
//     is rounded to the nearest float32 (a finite value beyond float32's range is refused rather
//     than turned into Infinity).
//   - Every other dtype of the format (BOOL, U8, I8, I16, U16, I32, U32, I64, U64, the F8/F6/F4
//     formats, C64) is accepted in the header, since real checkpoints carry such tensors (BERT's I64
//     `position_ids`), but reading its `.data` throws an UnsupportedError. A dtype name the format does
//     not have ("float32") fails the parse.
//   - Until a tensor's `.data` is first read, its bytes are read from the buffer given to
//     parseSafetensors, which is not copied: do not modify that buffer before reading the tensors.

import { type ArgumentProblem, ArgumentError } from '../errors.ts';
import { describe } from '../validate.ts';
import { DTYPE_ALIASES, DTYPE_BITS, FLOAT_DTYPES, LazyTensor, type SafetensorsTensor } from './safetensors-dtypes.ts';

export type { SafetensorsTensor } from './safetensors-dtypes.ts';

/** Which part of a weight file is wrong. */
export type WeightFileProblem =
  /** The file ends before its header or before a tensor's bytes (an incomplete download or copy). */
  | 'truncated'
  /** The header is not valid UTF-8 JSON, not an object, or an entry lacks or misstates a field. */
  | 'header'
  /** A tensor's data_offsets do not match its dtype and shape, or lie outside the file. */
  | 'offsets'
  /** A dtype name the safetensors format does not have. */
  | 'dtype'
  /** The file could not be read or fetched. */
  | 'read';

/**
 * A weight file that cannot be read: truncated, with a malformed header, offsets outside the data or
 * not matching the tensor's dtype × shape, an unknown dtype name, or a failed read/fetch. `problem`
 * says which; `tensor` names the tensor when one is at fault.
 */
export class WeightFileError extends ArgumentError {
  override name = 'WeightFileError';
  readonly problem: WeightFileProblem;
  readonly tensor: string | undefined;
  constructor(problem: ArgumentProblem & { problem: WeightFileProblem; tensor?: string }) {
    super(problem);
    this.problem = problem.problem;
    this.tensor = problem.tensor;
  }
}

/** A parsed safetensors file: tensor name → tensor, in the header's order (no `__metadata__`). */
export type SafetensorsFile = Map<string, SafetensorsTensor>;

const WHERE = 'parseSafetensors';

function fail(problem: WeightFileProblem, argument: string, expected: string, given: string, fix: string, tensor?: string): never {
  throw new WeightFileError({ where: WHERE, argument, expected, given, fix, problem, tensor });
}

function asBytes(bytes: unknown): Uint8Array {
  // A plain view even for a Node Buffer (whose slice() does not copy) or a subclass.
  if (bytes instanceof Uint8Array) return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes instanceof ArrayBuffer) return new Uint8Array(bytes);
  if (typeof SharedArrayBuffer !== 'undefined' && bytes instanceof SharedArrayBuffer) return new Uint8Array(bytes);
  if (ArrayBuffer.isView(bytes)) return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  throw new WeightFileError({
    where: WHERE,
    argument: 'bytes',
    expected: 'an ArrayBuffer or a Uint8Array holding a .safetensors file',
    given: describe(bytes),
    fix: 'Read the file first (await (await fetch(url)).arrayBuffer(), or fs.readFile in Node), or use loadSafetensors(source).',
    problem: 'read',
  });
}

const isNonNegativeInteger = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/**
 * Parses a .safetensors file. Checks the whole header at once (see the top of this module); tensor
 * data is converted to float32 when first read. Throws WeightFileError (problem: 'truncated',
 * 'header', 'offsets' or 'dtype') naming the tensor at fault, what was expected and what was found.
 */
export function parseSafetensors(bytes: ArrayBuffer | Uint8Array): SafetensorsFile {
  const file = asBytes(bytes);
  const size = file.byteLength;
  const REDOWNLOAD = 'The file is incomplete (an interrupted download or copy?): download or copy it again.';
  if (size < 8) {
    fail('truncated', 'the file', 'at least 8 bytes (the header length, a little-endian u64, comes first)', `${size} bytes`, REDOWNLOAD);
  }
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const headerLength = view.getBigUint64(0, true);
  if (headerLength > BigInt(size - 8)) {
    const looksLikeText = file[0] === 0x7b /* { */ || file[0] === 0x3c /* < */;
    fail(
      'truncated',
      'the header length (bytes 0–7, little-endian u64)',
      `at most the ${size - 8} bytes that follow it`,
      `${headerLength}`,
      looksLikeText
        ? 'The file starts with text, not a length: it is not a .safetensors file (an HTML error page or a JSON file saved under that name?).'
        : `Either the file is cut short (download or copy it again) or it is not a .safetensors file (a PyTorch .bin/.pt pickle needs converting with safetensors' save_file first).`,
    );
  }
  const N = Number(headerLength);
  if (N < 2) {
    fail(
      'header',
      'the header length (bytes 0–7)',
      'at least 2 (a JSON object)',
      String(N),
      'The file was not written by a safetensors writer; re-save it with safetensors.torch.save_file.',
    );
  }
  const dataStart = 8 + N;
  const dataLength = size - dataStart;

  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(file.subarray(8, dataStart));
  } catch {
    fail(
      'header',
      `the header (bytes 8–${dataStart - 1})`,
      'UTF-8 text',
      'bytes that are not valid UTF-8',
      'The header length or the header is damaged, or this is not a .safetensors file.',
    );
  }
  let header: unknown;
  try {
    header = JSON.parse(text);
  } catch (e) {
    const excerpt = text.length > 60 ? `${text.slice(0, 60)}…` : text;
    fail(
      'header',
      `the header (bytes 8–${dataStart - 1})`,
      'a JSON object',
      `text that is not JSON (${(e as Error).message}): ${JSON.stringify(excerpt)}`,
      "The header is damaged or the file was written by hand; re-save it with safetensors.torch.save_file (or scripts/make_weight_fixtures.py's writer).",
    );
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) {
    fail(
      'header',
      'the header',
      'a JSON object { "<tensor name>": { dtype, shape, data_offsets }, … }',
      `JSON ${Array.isArray(header) ? 'array' : header === null ? 'null' : typeof header}`,
      'Re-save the file with safetensors.torch.save_file.',
    );
  }

  const entries: { name: string; dtype: string; shape: number[]; begin: number; end: number }[] = [];
  for (const [name, entry] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) {
        fail('header', 'header["__metadata__"]', 'an object of string values', describe(entry), 'Remove the __metadata__ entry or make it an object.');
      }
      continue;
    }
    const arg = `tensor "${name}"`;
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) {
      fail('header', arg, 'an object { dtype, shape, data_offsets }', describe(entry), 'The header is malformed; re-save the file.', name);
    }
    const { dtype, shape, data_offsets: offsets } = entry as Record<string, unknown>;
    const missing = ['dtype', 'shape', 'data_offsets'].filter((k) => (entry as Record<string, unknown>)[k] === undefined);
    if (missing.length) {
      fail(
        'header',
        arg,
        'an object with dtype, shape and data_offsets',
        `no ${missing.join(', ')} (it has: ${Object.keys(entry).join(', ') || 'nothing'})`,
        'The header is malformed; re-save the file with safetensors.torch.save_file.',
        name,
      );
    }
    if (typeof dtype !== 'string' || !Object.hasOwn(DTYPE_BITS, dtype)) {
      const alias = typeof dtype === 'string' && Object.hasOwn(DTYPE_ALIASES, dtype.toLowerCase()) ? DTYPE_ALIASES[dtype.toLowerCase()] : undefined;
      fail(
        'dtype',
        `${arg}.dtype`,
        `one of the safetensors dtype codes: ${FLOAT_DTYPES.join(', ')} (read as float32) or ${Object.keys(DTYPE_BITS)
          .filter((d) => !FLOAT_DTYPES.includes(d))
          .join(', ')}`,
        describe(dtype),
        alias
          ? `safetensors calls this dtype "${alias}": the writer used a non-standard name; fix the header or re-save with safetensors.torch.save_file.`
          : 'This is not a dtype of the safetensors format; re-save the file with safetensors.torch.save_file.',
        name,
      );
    }
    if (!Array.isArray(shape) || !shape.every(isNonNegativeInteger)) {
      fail('header', `${arg}.shape`, 'an array of non-negative integers', describe(shape), 'The header is malformed; re-save the file.', name);
    }
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(isNonNegativeInteger)) {
      fail(
        'header',
        `${arg}.data_offsets`,
        'an array [begin, end] of two non-negative integers',
        Array.isArray(offsets) ? JSON.stringify(offsets) : describe(offsets),
        'The header is malformed; re-save the file.',
        name,
      );
    }
    const [begin, end] = offsets as [number, number];
    const numel = (shape as number[]).reduce((a, b) => a * b, 1);
    const bits = numel * DTYPE_BITS[dtype];
    const shapeText = `[${(shape as number[]).join(', ')}]`;
    if (end < begin || bits % 8 !== 0 || end - begin !== bits / 8) {
      fail(
        'offsets',
        `${arg}.data_offsets`,
        `[begin, end] with end − begin = numel(${shapeText}) × sizeof(${dtype}) = ${numel} × ${DTYPE_BITS[dtype] / 8} = ${bits / 8} bytes`,
        `[${begin}, ${end}] (${end - begin} bytes)`,
        'The header does not describe this tensor correctly (wrong shape, dtype or offsets): re-save the file.',
        name,
      );
    }
    entries.push({ name, dtype, shape: shape as number[], begin, end });
  }

  // Every tensor's bytes must lie in the file. When the header's ranges tile [0, maxEnd) without a
  // gap, the header is consistent and the file is short; otherwise the header's offsets are wrong.
  const maxEnd = entries.reduce((m, e) => Math.max(m, e.end), 0);
  if (maxEnd > dataLength) {
    const sorted = [...entries].sort((a, b) => a.begin - b.begin);
    let covered = 0;
    for (const e of sorted) if (e.begin <= covered) covered = Math.max(covered, e.end);
    const truncated = covered === maxEnd;
    const bad = entries.find((e) => e.end > dataLength)!;
    fail(
      truncated ? 'truncated' : 'offsets',
      `tensor "${bad.name}".data_offsets`,
      `within the ${dataLength} bytes of data after the ${N}-byte header`,
      `[${bad.begin}, ${bad.end}], which ends ${bad.end - dataLength} bytes past the end of the file`,
      truncated
        ? `The header is consistent but the file is ${maxEnd - dataLength} bytes short of its last tensor: it is cut short (an interrupted download or copy?); download or copy it again.`
        : "The header points outside the file (the tensors' ranges leave gaps, so the header is wrong rather than the file short): re-save the file with safetensors.torch.save_file.",
      bad.name,
    );
  }
  const tensors: SafetensorsFile = new Map();
  for (const e of entries) {
    tensors.set(e.name, new LazyTensor(e.name, e.dtype, e.shape, file.subarray(dataStart + e.begin, dataStart + e.end)));
  }
  return tensors;
}
