// The CPU backend's KV caches: a plain cache ('f32' float64 rows as the reference computes them, or
// rows encoded as quant/kv.ts writes them) and a paged cache's pool, each read by the reference's
// attention in place through KvRows (kv-rows.ts).

import { type KvCacheStorage, readEncodedFromFloats, writeEncodedAsFloats } from '../kv-cache.ts';
import type { PagedKvStorage } from '../paged-kv-cache.ts';
import { decodeKvRow, decodeKvRows, encodeKvRow, encodeKvRows, type KvCacheDtype, kvRowBytes } from '../quant/kv.ts';
import { halfToFloat } from '../util/f16.ts';
import { denseRows, type KvRows } from './kv-rows.ts';
/** A KV cache's storage on the CPU backend: new rows appended by the forward, K and V read by the attention where they lie. */
export interface CpuCacheStorage extends KvCacheStorage {
  /** Writes new K, V [B, G, n, Dh] (float64, as the reference computed them) at rows start … start + n − 1. */
  append(k: Float64Array, v: Float64Array, start: number, n: number): void;
  /** K or V as the attention reads them, in place: row r of block bg (= b·G + g) is cache position r. */
  reader(which: 'key' | 'value'): KvRows;
}

/** A 'f32' KV cache on the CPU backend: K and V [B, G, maxSeqLen, Dh] in float64, as the reference computes them. */
export class CpuKvCache implements CpuCacheStorage {
  k: Float64Array;
  v: Float64Array;
  readonly dtype = 'f32' as const;

  get bytes(): number {
    return this.k.byteLength + this.v.byteLength;
  }

  constructor(
    private readonly B: number,
    private readonly G: number,
    private readonly maxSeqLen: number,
    private readonly Dh: number,
  ) {
    this.k = new Float64Array(B * G * maxSeqLen * Dh);
    this.v = new Float64Array(B * G * maxSeqLen * Dh);
  }

  append(k: Float64Array, v: Float64Array, start: number, n: number): void {
    const { B, G, maxSeqLen, Dh } = this;
    for (let bg = 0; bg < B * G; bg++) {
      this.k.set(k.subarray(bg * n * Dh, (bg + 1) * n * Dh), (bg * maxSeqLen + start) * Dh);
      this.v.set(v.subarray(bg * n * Dh, (bg + 1) * n * Dh), (bg * maxSeqLen + start) * Dh);
    }
  }

  reader(which: 'key' | 'value'): KvRows {
    // The float64 rows themselves (the same numbers a packed copy would hold, so the same results).
    return denseRows(which === 'key' ? this.k : this.v, this.maxSeqLen, this.Dh);
  }

  /** Rows 0 … n − 1 of every (b, g) block, packed: [B, G, n, Dh]. */
  rows(store: Float64Array, n: number): Float64Array {
    const { B, G, maxSeqLen, Dh } = this;
    const out = new Float64Array(B * G * n * Dh);
    for (let bg = 0; bg < B * G; bg++) out.set(store.subarray(bg * maxSeqLen * Dh, (bg * maxSeqLen + n) * Dh), bg * n * Dh);
    return out;
  }

  async read(length: number): Promise<{ key: Float32Array; value: Float32Array }> {
    return { key: Float32Array.from(this.rows(this.k, length)), value: Float32Array.from(this.rows(this.v, length)) };
  }

  write(key: Float32Array, value: Float32Array, length: number): void {
    this.append(Float64Array.from(key), Float64Array.from(value), 0, length);
  }

  readEncoded(length: number): Promise<{ key: Uint8Array; value: Uint8Array }> {
    return readEncodedFromFloats(this, this.dtype, this.Dh, length);
  }

  writeEncoded(key: Uint8Array, value: Uint8Array, length: number): void {
    writeEncodedAsFloats(this, this.dtype, this.Dh, key, value, length);
  }

  reset(): void {
    this.k.fill(0);
    this.v.fill(0);
  }

  moveRows(rows: readonly number[], to: number): void {
    const { B, G, maxSeqLen, Dh } = this;
    for (let bg = 0; bg < B * G; bg++) {
      const base = bg * maxSeqLen;
      rows.forEach((r, i) => {
        this.k.copyWithin((base + to + i) * Dh, (base + r) * Dh, (base + r + 1) * Dh);
        this.v.copyWithin((base + to + i) * Dh, (base + r) * Dh, (base + r + 1) * Dh);
      });
    }
  }

  discard(length: number, end: number): void {
    const { B, G, maxSeqLen, Dh } = this;
    for (let bg = 0; bg < B * G; bg++) {
      this.k.fill(0, (bg * maxSeqLen + length) * Dh, (bg * maxSeqLen + end) * Dh);
      this.v.fill(0, (bg * maxSeqLen + length) * Dh, (bg * maxSeqLen + end) * Dh);
    }
  }

  dispose(): void {
    this.k = new Float64Array(0);
    this.v = new Float64Array(0);
  }
}

/** float16 bits → value, all 65536 (made on the first 'f16' cache's first read). */
let halfTable: Float64Array | null = null;

function halfValues(): Float64Array {
  if (!halfTable) {
    halfTable = new Float64Array(65536);
    for (let h = 0; h < 65536; h++) halfTable[h] = halfToFloat(h);
  }
  return halfTable;
}

/**
 * A 'f16', 'q8_0' or 'q4_0' KV cache on the CPU backend: K and V [B, G, maxSeqLen] rows of
 * kvRowBytes(dtype, Dh) bytes, in quant/kv.ts's encoding (readEncoded's form, ggml's blocks for the
 * q-dtypes). A new row is the reference's float64 row rounded to float32, then encoded (encodeKvRow,
 * as every backend writes it); the attention decodes one row at a time into a Dh scratch.
 */
export class CpuEncodedKvCache implements CpuCacheStorage {
  k: Uint8Array;
  v: Uint8Array;
  private readonly rowBytes: number;
  /** One float32 row on its way in (encodeKvRow takes float32 values). */
  private readonly row32: Float32Array;

  get bytes(): number {
    return this.k.byteLength + this.v.byteLength;
  }

  constructor(
    readonly dtype: 'f16' | 'q8_0' | 'q4_0',
    private readonly B: number,
    private readonly G: number,
    private readonly maxSeqLen: number,
    private readonly Dh: number,
  ) {
    this.rowBytes = kvRowBytes(dtype, Dh);
    this.k = new Uint8Array(B * G * maxSeqLen * this.rowBytes);
    this.v = new Uint8Array(B * G * maxSeqLen * this.rowBytes);
    this.row32 = new Float32Array(Dh);
  }

  append(k: Float64Array, v: Float64Array, start: number, n: number): void {
    const { B, G, maxSeqLen, Dh, rowBytes, row32, dtype } = this;
    for (let bg = 0; bg < B * G; bg++) {
      for (let r = 0; r < n; r++) {
        const at = (bg * maxSeqLen + start + r) * rowBytes;
        const from = (bg * n + r) * Dh;
        row32.set(k.subarray(from, from + Dh)); // float64 → float32: round to nearest, as the other backends hold it
        encodeKvRow(dtype, row32, this.k, at);
        row32.set(v.subarray(from, from + Dh));
        encodeKvRow(dtype, row32, this.v, at);
      }
    }
  }

  reader(which: 'key' | 'value'): KvRows {
    const { dtype, Dh, maxSeqLen, rowBytes } = this;
    const bytes = which === 'key' ? this.k : this.v;
    const data = new Float64Array(Dh); // the one row decoded
    if (dtype === 'f16') {
      const half = halfValues();
      return {
        data,
        row: (bg, r) => {
          const at = (bg * maxSeqLen + r) * rowBytes;
          for (let d = 0; d < Dh; d++) data[d] = half[bytes[at + 2 * d] | (bytes[at + 2 * d + 1] << 8)];
          return 0;
        },
      };
    }
    return {
      data,
      row: (bg, r) => {
        decodeKvRow(dtype, bytes, (bg * maxSeqLen + r) * rowBytes, Dh, data, 0);
        return 0;
      },
    };
  }

  /** Rows 0 … n − 1 of every (b, g) block as stored, packed: [B, G, n] rows. */
  private packed(store: Uint8Array, n: number): Uint8Array {
    const { B, G, maxSeqLen, rowBytes } = this;
    const out = new Uint8Array(B * G * n * rowBytes);
    for (let bg = 0; bg < B * G; bg++) out.set(store.subarray(bg * maxSeqLen * rowBytes, (bg * maxSeqLen + n) * rowBytes), bg * n * rowBytes);
    return out;
  }

  async read(length: number): Promise<{ key: Float32Array; value: Float32Array }> {
    const { dtype, Dh } = this;
    return { key: decodeKvRows(dtype, this.packed(this.k, length), Dh), value: decodeKvRows(dtype, this.packed(this.v, length), Dh) };
  }

  write(key: Float32Array, value: Float32Array, length: number): void {
    const { dtype, Dh } = this;
    this.writeEncoded(encodeKvRows(dtype, key, Dh), encodeKvRows(dtype, value, Dh), length);
  }

  async readEncoded(length: number): Promise<{ key: Uint8Array; value: Uint8Array }> {
    return { key: this.packed(this.k, length), value: this.packed(this.v, length) };
  }

  writeEncoded(key: Uint8Array, value: Uint8Array, length: number): void {
    const { B, G, maxSeqLen, rowBytes } = this;
    const n = length * rowBytes;
    for (let bg = 0; bg < B * G; bg++) {
      this.k.set(key.subarray(bg * n, (bg + 1) * n), bg * maxSeqLen * rowBytes);
      this.v.set(value.subarray(bg * n, (bg + 1) * n), bg * maxSeqLen * rowBytes);
    }
  }

  reset(): void {
    this.k.fill(0);
    this.v.fill(0);
  }

  moveRows(rows: readonly number[], to: number): void {
    const { B, G, maxSeqLen, rowBytes } = this;
    for (let bg = 0; bg < B * G; bg++) {
      const base = bg * maxSeqLen;
      rows.forEach((r, i) => {
        this.k.copyWithin((base + to + i) * rowBytes, (base + r) * rowBytes, (base + r + 1) * rowBytes);
        this.v.copyWithin((base + to + i) * rowBytes, (base + r) * rowBytes, (base + r + 1) * rowBytes);
      });
    }
  }

  discard(length: number, end: number): void {
    const { B, G, maxSeqLen, rowBytes } = this;
    for (let bg = 0; bg < B * G; bg++) {
      this.k.fill(0, (bg * maxSeqLen + length) * rowBytes, (bg * maxSeqLen + end) * rowBytes);
      this.v.fill(0, (bg * maxSeqLen + length) * rowBytes, (bg * maxSeqLen + end) * rowBytes);
    }
  }

  dispose(): void {
    this.k = new Uint8Array(0);
    this.v = new Uint8Array(0);
  }
}

/**
 * A paged cache's pool on the CPU backend: K and V [maxBlocks, G, blockSize] rows, as its plain caches
 * hold them: 'f32' float64 rows (the reference's numbers), other dtypes encoded rows (quant/kv.ts),
 * the float64 row rounded to float32 then encoded. The attention reads a sequence's rows in place through
 * its block table (reader()).
 */
export class CpuPagedStorage implements PagedKvStorage {
  /** 'f32': float64 [maxBlocks, G, blockSize, Dh]; else null. */
  private k64: Float64Array | null = null;
  private v64: Float64Array | null = null;
  /** Other dtypes: bytes [maxBlocks, G, blockSize] rows of rowBytes; else null. */
  private k8: Uint8Array | null = null;
  private v8: Uint8Array | null = null;
  private readonly rowBytes: number;
  private readonly row32: Float32Array;

  constructor(
    private readonly dtype: KvCacheDtype,
    private readonly blockSize: number,
    maxBlocks: number,
    private readonly G: number,
    private readonly Dh: number,
  ) {
    const rows = maxBlocks * G * blockSize;
    this.rowBytes = kvRowBytes(dtype, Dh);
    this.row32 = new Float32Array(Dh);
    if (dtype === 'f32') {
      this.k64 = new Float64Array(rows * Dh);
      this.v64 = new Float64Array(rows * Dh);
    } else {
      this.k8 = new Uint8Array(rows * this.rowBytes);
      this.v8 = new Uint8Array(rows * this.rowBytes);
    }
  }

  get bytes(): number {
    return (this.k64?.byteLength ?? 0) + (this.v64?.byteLength ?? 0) + (this.k8?.byteLength ?? 0) + (this.v8?.byteLength ?? 0);
  }

  /** The row index of position p of key/value head g of a sequence with these blocks. */
  private at(blocks: Int32Array, g: number, p: number): number {
    const { blockSize, G } = this;
    return (blocks[Math.floor(p / blockSize)] * G + g) * blockSize + (p % blockSize);
  }

  /** Writes a sequence's new K, V [G, n, Dh] at positions start … start + n − 1. */
  append(blocks: Int32Array, k: Float64Array, v: Float64Array, start: number, n: number): void {
    const { G, Dh, rowBytes, row32, dtype } = this;
    for (let g = 0; g < G; g++) {
      for (let i = 0; i < n; i++) {
        const row = this.at(blocks, g, start + i);
        const from = (g * n + i) * Dh;
        if (this.k64 && this.v64) {
          this.k64.set(k.subarray(from, from + Dh), row * Dh);
          this.v64.set(v.subarray(from, from + Dh), row * Dh);
        } else {
          row32.set(k.subarray(from, from + Dh)); // float64 → float32, as every backend holds it
          encodeKvRow(dtype, row32, this.k8!, row * rowBytes);
          row32.set(v.subarray(from, from + Dh));
          encodeKvRow(dtype, row32, this.v8!, row * rowBytes);
        }
      }
    }
  }

  /** A sequence's keys or values as KvRows [1, G, positions] (bg = g), read in place through its blocks. */
  reader(which: 'key' | 'value', blocks: Int32Array): KvRows {
    const { Dh, rowBytes, dtype } = this;
    const dense = which === 'key' ? this.k64 : this.v64;
    if (dense) return { data: dense, row: (g, p) => this.at(blocks, g, p) * Dh };
    const bytes = (which === 'key' ? this.k8 : this.v8)!;
    const data = new Float64Array(Dh);
    return {
      data,
      row: (g, p) => {
        decodeKvRow(dtype, bytes, this.at(blocks, g, p) * rowBytes, Dh, data, 0);
        return 0;
      },
    };
  }

  copyBlock(from: number, to: number): void {
    const rows = this.G * this.blockSize;
    for (const [store, size] of [
      [this.k64, this.Dh],
      [this.v64, this.Dh],
      [this.k8, this.rowBytes],
      [this.v8, this.rowBytes],
    ] as const) {
      store?.copyWithin(to * rows * size, from * rows * size, (from + 1) * rows * size);
    }
  }

  async read(blocks: Int32Array, length: number): Promise<{ key: Float32Array; value: Float32Array }> {
    const { G, Dh } = this;
    const out = (which: 'key' | 'value') => {
      const rows = this.reader(which, blocks);
      const values = new Float32Array(G * length * Dh);
      for (let g = 0; g < G; g++) {
        for (let p = 0; p < length; p++) {
          const at = rows.row(g, p);
          for (let d = 0; d < Dh; d++) values[(g * length + p) * Dh + d] = rows.data[at + d];
        }
      }
      return values;
    };
    return { key: out('key'), value: out('value') };
  }

  moveRows(blocks: Int32Array, rows: readonly number[], to: number): void {
    for (let g = 0; g < this.G; g++) {
      rows.forEach((r, i) => {
        const from = this.at(blocks, g, r);
        const into = this.at(blocks, g, to + i);
        for (const [store, size] of [
          [this.k64, this.Dh],
          [this.v64, this.Dh],
          [this.k8, this.rowBytes],
          [this.v8, this.rowBytes],
        ] as const) {
          store?.copyWithin(into * size, from * size, (from + 1) * size);
        }
      });
    }
  }

  dispose(): void {
    this.k64 = this.v64 = null;
    this.k8 = this.v8 = null;
  }
}
