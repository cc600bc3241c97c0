// KvCache: the keys and values of the positions a layer has seen, for decoding one token (or a few)
// at a time. Made by MultiHeadAttention.createKvCache; the storage is the backend's (GPU buffers on
// WebGPU, arrays on the CPU), the bookkeeping is here and the same for both.

import { DisposedError, InvalidArgumentError } from './errors.ts';

/** What a backend keeps for a cache: K and V [B, G, maxSeqLen, Dh]. */
export interface KvCacheStorage {
  /** Rows 0 … length − 1 of K and V, as float32 [B, G, length, Dh]. */
  read(length: number): Promise<{ key: Float32Array; value: Float32Array }>;
  /** Sets rows 0 … length − 1 of K and V from float32 [B, G, length, Dh] (checked by the caller). */
  write(key: Float32Array, value: Float32Array, length: number): void;
  /** Empties the storage for reuse (a backend may reallocate, e.g. after a device loss). */
  reset(): void;
  dispose(): void;
}

/** The keys and values of the positions a layer has seen, for decoding; made by mha.createKvCache(). */
export class KvCache {
  /** B */
  readonly batchSize: number;
  /** The most positions it can hold. */
  readonly maxSeqLen: number;
  private filled = 0;
  private storageImpl: KvCacheStorage | null;
  /** @internal A forward is appending to it. */
  busy = false;

  /** @internal Use MultiHeadAttention.createKvCache. */
  constructor(
    batchSize: number,
    maxSeqLen: number,
    storage: KvCacheStorage,
    /** @internal The layer that made it (a cache serves that layer only). */
    readonly owner: object,
  ) {
    this.batchSize = batchSize;
    this.maxSeqLen = maxSeqLen;
    this.storageImpl = storage;
  }

  /** How many positions are filled. */
  get length(): number {
    return this.filled;
  }

  /**
   * The keys and values it holds, as float32 [B, G, length, Dh] each (keys as stored: after the
   * projection and bias, as the layer computed them): for saving a conversation, handing the past to
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

  /** @internal After a forward appended `n` positions, or a past of `n` positions was written in. */
  advance(n: number): void {
    this.filled += n;
  }
}
