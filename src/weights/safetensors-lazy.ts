// A .safetensors file read lazily: the header first (8 bytes, then its JSON), and a tensor's bytes only
// when it is asked for. For sharded checkpoints: loading one layer reads that layer's tensors and the
// headers, nothing else. Sources: bytes, a Blob/File (read by slices), a path or file: URL in Node (read
// at offsets through a file handle, as loadGguf does). `bytesRead` counts every byte read so far.

import { InvalidArgumentError, MissingWeightError } from '../errors.ts';
import { describe } from '../validate.ts';
import { DTYPE_BITS, LazyTensor, type SafetensorsTensor } from './safetensors-dtypes.ts';
import { nodeFileAt, type ReadAt } from './read-at.ts';
import { WeightFileError } from './safetensors.ts';

export interface LazyTensorInfo {
  dtype: string;
  shape: number[];
  /** Byte range in the file (absolute: after the header). */
  begin: number;
  end: number;
}

/** A .safetensors file whose tensors are read on demand (openSafetensors). */
export interface LazySafetensorsFile {
  readonly kind: 'lazy-safetensors';
  /** The header's tensors, in its order (no __metadata__). */
  readonly tensors: Map<string, LazyTensorInfo>;
  readonly byteLength: number;
  /** Bytes read from the source so far (header included). */
  readonly bytesRead: number;
  /** Reads one tensor's bytes (each call reads them again); `.data` converts to float32 as parseSafetensors does. */
  tensor(name: string): Promise<SafetensorsTensor>;
}

export const isLazySafetensors = (v: unknown): v is LazySafetensorsFile => typeof v === 'object' && v !== null && (v as { kind?: unknown }).kind === 'lazy-safetensors';

const WHERE = 'openSafetensors';

function fail(problem: 'truncated' | 'header' | 'offsets' | 'dtype' | 'read', argument: string, expected: string, given: string): never {
  throw new WeightFileError({ where: WHERE, argument, expected, given, fix: 'The file is damaged or not a .safetensors file; download it again.', problem });
}

async function open(readAt: ReadAt, size: number): Promise<LazySafetensorsFile> {
  let bytesRead = 0;
  const counted: ReadAt = async (at, n) => {
    const b = await readAt(at, n);
    bytesRead += b.byteLength;
    if (b.byteLength !== n) fail('truncated', `bytes ${at}–${at + n - 1}`, `${n} bytes`, `${b.byteLength}`);
    return b;
  };
  if (size < 8) fail('truncated', 'the file', 'at least 8 bytes', `${size} bytes`);
  const head = await counted(0, 8);
  const N = Number(new DataView(head.buffer, head.byteOffset, 8).getBigUint64(0, true));
  if (N < 2 || 8 + N > size) fail('truncated', 'the header length (bytes 0–7)', `2 … ${size - 8}`, String(N));
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(await counted(8, N)));
  } catch (e) {
    if (e instanceof WeightFileError) throw e;
    fail('header', 'the header', 'UTF-8 JSON', (e as Error).message);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) fail('header', 'the header', 'a JSON object', describe(header));
  const dataStart = 8 + N;
  const tensors = new Map<string, LazyTensorInfo>();
  for (const [name, entry] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') continue;
    const { dtype, shape, data_offsets: off } = (entry ?? {}) as Record<string, unknown>;
    if (typeof dtype !== 'string' || !Object.hasOwn(DTYPE_BITS, dtype)) fail('dtype', `tensor "${name}".dtype`, 'a safetensors dtype code', describe(dtype));
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0))
      fail('header', `tensor "${name}".shape`, 'non-negative integers', describe(shape));
    if (!Array.isArray(off) || off.length !== 2 || !off.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      fail('header', `tensor "${name}".data_offsets`, '[begin, end]', describe(off));
    }
    const [b, e] = off as [number, number];
    const bytes = ((shape as number[]).reduce((a, x) => a * x, 1) * DTYPE_BITS[dtype]) / 8;
    if (e - b !== bytes) fail('offsets', `tensor "${name}".data_offsets`, `end − begin = ${bytes}`, `[${b}, ${e}]`);
    if (dataStart + e > size) fail('truncated', `tensor "${name}".data_offsets`, `within the file's ${size} bytes`, `[${b}, ${e}] after a ${N}-byte header`);
    tensors.set(name, { dtype, shape: shape as number[], begin: dataStart + b, end: dataStart + e });
  }
  return {
    kind: 'lazy-safetensors',
    tensors,
    byteLength: size,
    get bytesRead() {
      return bytesRead;
    },
    async tensor(name: string) {
      const info = tensors.get(name);
      if (!info) {
        throw new MissingWeightError({
          where: 'LazySafetensorsFile.tensor',
          argument: `tensor "${name}"`,
          expected: 'a tensor of the file',
          given: 'no tensor of that name',
        });
      }
      return new LazyTensor(name, info.dtype, info.shape, await counted(info.begin, info.end - info.begin));
    },
  };
}

/**
 * Opens a .safetensors file for reading tensor by tensor: bytes (ArrayBuffer, Uint8Array), a Blob or
 * File (read by slices), or in Node a path or file: URL (read at offsets). Reads the header now and each
 * tensor when `file.tensor(name)` is called; attentionLayerFromHf takes the result (or an array of them).
 * Throws WeightFileError for a damaged header or an unreadable source.
 */
export async function openSafetensors(source: ArrayBuffer | Uint8Array | Blob | URL | string): Promise<LazySafetensorsFile> {
  if (source instanceof ArrayBuffer || source instanceof Uint8Array) {
    const bytes = source instanceof Uint8Array ? source : new Uint8Array(source);
    return open(async (at, n) => bytes.subarray(at, Math.min(at + n, bytes.byteLength)), bytes.byteLength);
  }
  if (typeof Blob !== 'undefined' && source instanceof Blob) {
    return open(async (at, n) => new Uint8Array(await source.slice(at, at + n).arrayBuffer()), source.size);
  }
  if ((typeof source === 'string' || source instanceof URL) && typeof process !== 'undefined' && process.versions?.node) {
    const path = typeof source === 'string' && /^file:/i.test(source) ? new URL(source) : source;
    const { readAt, size } = await nodeFileAt(path, WHERE);
    return open(readAt, size);
  }
  throw new InvalidArgumentError({
    where: WHERE,
    argument: 'source',
    expected: 'an ArrayBuffer, Uint8Array, Blob/File, or (in Node) a path or file: URL',
    given: describe(source),
    fix: 'For a URL or a Response, use loadSafetensors (it reads the whole file).',
  });
}
