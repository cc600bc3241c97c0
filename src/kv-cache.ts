// KvCache: the keys and values of the positions a layer has seen, for decoding one token (or a few)
// at a time. Made by MultiHeadAttention.createKvCache; the storage is the backend's (GPU buffers on
// WebGPU, arrays on the CPU), the bookkeeping is here and the same for both.

import { DisposedError, InvalidArgumentError, UnsupportedError } from './errors.ts';
import { decodeKvRows, encodeKvRows, type KvCacheDtype } from './quant/kv.ts';
import { describe } from './validate.ts';

/** What a backend keeps for a cache: K and V [B, G, maxSeqLen, Dh], stored as the cache's dtype. */
export interface KvCacheStorage {
  /** Bytes the storage holds (K and V of maxSeqLen positions, as stored). */
  readonly bytes: number;
  /** Rows 0 … length − 1 of K and V, as float32 [B, G, length, Dh]. */
  read(length: number): Promise<{ key: Float32Array; value: Float32Array }>;
  /** Sets rows 0 … length − 1 of K and V from float32 [B, G, length, Dh] (checked by the caller), rounded to the dtype as a forward's rows are. */
  write(key: Float32Array, value: Float32Array, length: number): void;
  /**
   * Rows 0 … length − 1 of K and V as stored: [B, G, length] rows of kvRowBytes(dtype, Dh) bytes each,
   * in quant/kv.ts's encoding (ggml's blocks for q-dtypes). Moving a cache between backends, and the tests of the rounding.
   */
  readEncoded(length: number): Promise<{ key: Uint8Array; value: Uint8Array }>;
  /** Sets rows 0 … length − 1 from readEncoded's form, bit for bit. */
  writeEncoded(key: Uint8Array, value: Uint8Array, length: number): void;
  /** Empties the storage for reuse (a backend may reallocate, e.g. after a device loss). */
  reset(): void;
  /**
   * For every (b, g): row rows[i] → row to + i, in order (rows ascending, rows[i] ≥ to + i, so a row is
   * read before anything overwrites it). acceptPath's move of a tree's kept rows.
   */
  moveRows(rows: readonly number[], to: number): void;
  /** Rows length … end − 1 are no longer in use (truncate, acceptPath): a backend that keeps them zero clears them. */
  discard(length: number, end: number): void;
  dispose(): void;
}

/** The keys and values of the positions a layer has seen, for decoding; made by mha.createKvCache(). */
export class KvCache {
  /** B */
  readonly batchSize: number;
  /** The most positions it can hold. */
  readonly maxSeqLen: number;
  /** How K and V are stored: 'f32', 'f16', or ggml's blocks 'q8_0', 'q4_0' (read in place by the attention). */
  readonly dtype: KvCacheDtype;
  private filled = 0;
  /** The last call's tree (treeParents) and the length before it, until acceptPath, truncate, reset or the next call. */
  private tree: { parents: Int32Array; start: number } | null = null;
  private storageImpl: KvCacheStorage | null;
  /** @internal A forward is appending to it. */
  busy = false;

  /** @internal Use MultiHeadAttention.createKvCache. */
  constructor(
    batchSize: number,
    maxSeqLen: number,
    dtype: KvCacheDtype,
    storage: KvCacheStorage,
    /** @internal The layer that made it (a cache serves that layer only). */
    readonly owner: object,
  ) {
    this.batchSize = batchSize;
    this.maxSeqLen = maxSeqLen;
    this.dtype = dtype;
    this.storageImpl = storage;
  }

  /** Bytes its keys and values hold on the backend (all maxSeqLen positions, as stored; 0 once disposed). */
  get bytes(): number {
    return this.storageImpl?.bytes ?? 0;
  }

  /** How many positions are filled. */
  get length(): number {
    return this.filled;
  }

  /**
   * The keys and values it holds, as float32 [B, G, length, Dh] each (keys as stored: after the
   * projection and bias, as the layer computed them; a 'f16' or q-dtype cache's values dequantized): for saving a conversation, handing the past to
   * another runtime (ONNX Runtime's present_key/present_value, Hugging Face's past_key_values), or a
   * new cache via mha.createKvCache({ key, value }).
   */
  async read(): Promise<{ key: Float32Array; value: Float32Array }> {
    const storage = this.storage;
    if (this.busy) {
      throw new InvalidArgumentError({
        where: 'KvCache.read',
        argument: 'this cache',
        expected: 'not in use by a forward',
        given: 'a cache a forward is still appending to',
        fix: 'Await the forward first: its positions are in the cache once it resolves.',
      });
    }
    return storage.read(this.filled);
  }

  /** Empties the cache (length 0); its memory stays for reuse. */
  reset(): void {
    this.storage.reset();
    this.filled = 0;
    this.tree = null;
  }

  /**
   * Keeps positions 0 … length − 1 of every batch row and drops the rest (rejected draft tokens, an
   * edited prompt): the next call appends at `length` and equals a cache that never saw the dropped
   * positions. `length` is an integer in [0, cache.length]; a pending tree (treeParents) is forgotten.
   */
  truncate(length: number): void {
    const where = 'KvCache.truncate';
    const storage = this.storage;
    this.refuseBusy(where);
    if (typeof length !== 'number' || !Number.isInteger(length) || length < 0 || length > this.filled) {
      throw new InvalidArgumentError({
        where,
        argument: 'length',
        expected: `an integer in [0, cache.length = ${this.filled}]`,
        given: describe(length),
        fix: 'A cache only shrinks: pass the number of positions to keep.',
      });
    }
    storage.discard(length, this.filled);
    this.filled = length;
    this.tree = null;
  }

  /**
   * After a call with `treeParents`: keeps the listed new tokens, a root-to-node path of that tree in
   * order (indices[0] a root, each next one a child of the one before), and drops the other nodes.
   * cache.length becomes the length before the call plus indices.length, the kept rows at consecutive
   * positions: the next call equals a run that only ever saw the path. An empty path keeps none.
   */
  acceptPath(indices: ArrayLike<number>): void {
    const where = 'KvCache.acceptPath';
    const storage = this.storage;
    this.refuseBusy(where);
    const tree = this.tree;
    if (!tree) {
      throw new InvalidArgumentError({
        where,
        argument: 'this cache',
        expected: 'a tree pending: the last call on it had options.treeParents',
        given: 'a cache whose last call was not a tree (or whose tree was accepted, truncated or reset)',
        fix: 'Call mha.forward(x, { batchSize: 1, seqLen: k, kvCache, treeParents }) first; accept one path per tree.',
      });
    }
    const { parents, start } = tree;
    const path = checkPath(where, parents, indices);
    const rows: number[] = [];
    let moved = false;
    for (let j = 0; j < path.length; j++) {
      rows.push(start + path[j]);
      if (path[j] !== j) moved = true;
    }
    if (moved) storage.moveRows(rows, start);
    const length = start + path.length;
    storage.discard(length, this.filled);
    this.filled = length;
    this.tree = null;
  }

  /** Releases its memory at once; using it afterwards throws. */
  dispose(): void {
    this.storageImpl?.dispose();
    this.storageImpl = null;
  }

  /** True after dispose(). */
  get disposed(): boolean {
    return this.storageImpl === null;
  }

  /** @internal */
  get storage(): KvCacheStorage {
    if (!this.storageImpl) throw new DisposedError('KvCache', 'Create a new one with mha.createKvCache().');
    return this.storageImpl;
  }

  /**
   * @internal After a forward appended `n` positions, or a past of `n` positions was written in; with
   * `tree`, the call's treeParents (its nodes are those n positions), pending until acceptPath.
   */
  advance(n: number, tree: Int32Array | null = null): void {
    this.tree = tree ? { parents: tree, start: this.filled } : null;
    this.filled += n;
  }

  private refuseBusy(where: string): void {
    if (this.busy) {
      throw new InvalidArgumentError({
        where,
        argument: 'this cache',
        expected: 'not in use by a forward',
        given: 'a cache a forward is still appending to',
        fix: 'Await the forward first.',
      });
    }
  }
}

/**
 * readEncoded/writeEncoded for a storage that keeps float values (its read() exact): the rows encoded
 * from read(), and writeEncoded through write() (exact where the dtype's values are what it keeps).
 */
export async function readEncodedFromFloats(storage: KvCacheStorage, dtype: KvCacheDtype, Dh: number, length: number): Promise<{ key: Uint8Array; value: Uint8Array }> {
  const { key, value } = await storage.read(length);
  return { key: encodeKvRows(dtype, key, Dh), value: encodeKvRows(dtype, value, Dh) };
}

/** A storage's writeEncoded through its write() of float values. */
export function writeEncodedAsFloats(storage: KvCacheStorage, dtype: KvCacheDtype, Dh: number, key: Uint8Array, value: Uint8Array, length: number): void {
  storage.write(decodeKvRows(dtype, key, Dh), decodeKvRows(dtype, value, Dh), length);
}

/** A backend's refusal of a cache dtype its kernels do not read (createCacheStorage). */
export function unsupportedCacheDtype(
  backend: string,
  dtype: KvCacheDtype,
  supported: readonly KvCacheDtype[],
  where = 'MultiHeadAttention.createKvCache',
): UnsupportedError {
  return new UnsupportedError({
    where,
    argument: 'options.dtype',
    expected: `on the ${backend} backend: ${supported.map((d) => `'${d}'`).join(', ')}`,
    given: `'${dtype}'`,
    fix: `Use one of ${supported.map((d) => `'${d}'`).join(', ')}.`,
  });
}

/** `indices` checked as a root-to-node path of the tree `parents` (in order, root first); returns them as numbers. */
export function checkPath(where: string, parents: Int32Array, indices: ArrayLike<number>): number[] {
  const k = parents.length;
  if (!(Array.isArray(indices) || (ArrayBuffer.isView(indices) && !(indices instanceof DataView)))) {
    throw new InvalidArgumentError({ where, argument: 'indices', expected: 'an array of node indices (a root-to-node path of the last tree)', given: describe(indices) });
  }
  if (indices.length > k) {
    throw new InvalidArgumentError({ where, argument: 'indices', expected: `a path of the last tree: at most its ${k} node(s)`, given: `length ${indices.length}` });
  }
  const out: number[] = [];
  for (let j = 0; j < indices.length; j++) {
    const i = indices[j];
    if (typeof i !== 'number' || !Number.isInteger(i) || i < 0 || i >= k) {
      throw new InvalidArgumentError({ where, argument: `indices[${j}]`, expected: `a node of the last tree: an integer in [0, ${k})`, given: describe(i) });
    }
    const want = j === 0 ? -1 : indices[j - 1];
    if (parents[i] !== want) {
      throw new InvalidArgumentError({
        where,
        argument: `indices[${j}]`,
        expected: j === 0 ? 'a root of the last tree (treeParents[i] = −1)' : `a child of indices[${j - 1}] = ${want} (treeParents[i] = ${want})`,
        given: `${i}, whose parent is ${parents[i] === -1 ? 'the cached context (a root)' : parents[i]}`,
        fix: 'List a root-to-node path of the tree in order, root first.',
      });
    }
    out.push(i);
  }
  return out;
}
