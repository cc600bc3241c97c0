// The CPU backend: the float64 reference, run pass by pass. Used when there is no WebGPU adapter.

import type { Backend, BackendLayer } from '../backend.ts';
import { UnsupportedError } from '../errors.ts';
import { copyWeights, floatLayerWeights, type ForwardPlan, isFloat, geometryOf, type LayerSpec, type LayerWeights } from '../plan/index.ts';
import type { ForwardResult } from '../types.ts';
import { type KvCacheStorage, readEncodedFromFloats, writeEncodedAsFloats } from '../kv-cache.ts';
import type { PagedKvStorage } from '../paged-kv-cache.ts';
import { decodeKvRow, decodeKvRows, encodeKvRow, encodeKvRows, type KvCacheDtype, kvRowBytes } from '../quant/kv.ts';
import { halfToFloat } from '../util/f16.ts';
import { denseRows, type KvRows } from './kv-rows.ts';
import { transformHeads } from './head-transform.ts';
import { attention, outputProjection, qkvProjection, referenceForward } from './reference.ts';

/** A KV cache's storage on the CPU backend: new rows appended by the forward, K and V read by the attention where they lie. */
interface CpuCacheStorage extends KvCacheStorage {
  /** Writes new K, V [B, G, n, Dh] (float64, as the reference computed them) at rows start … start + n − 1. */
  append(k: Float64Array, v: Float64Array, start: number, n: number): void;
  /** K or V as the attention reads them, in place: row r of block bg (= b·G + g) is cache position r. */
  reader(which: 'key' | 'value'): KvRows;
}

/** A 'f32' KV cache on the CPU backend: K and V [B, G, maxSeqLen, Dh] in float64, as the reference computes them. */
class CpuKvCache implements CpuCacheStorage {
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
class CpuEncodedKvCache implements CpuCacheStorage {
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
class CpuPagedStorage implements PagedKvStorage {
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

export class CpuBackend implements Backend {
  readonly kind = 'cpu' as const;
  /** The CPU computes in float64 and returns float32. */
  readonly precision = 'f32' as const;
  readonly precisionNote: string | null;

  constructor(options: { precision?: 'f32' | 'f16' } = {}) {
    this.precisionNote = options.precision === 'f16' ? "precision 'f16' applies to WebGPU; the CPU backend computes in float64" : null;
  }

  createLayer(spec: LayerSpec, weights: LayerWeights): BackendLayer {
    // Copy, as the WebGPU backend's upload does: later changes to the caller's arrays do not leak in.
    // Quantized weights are dequantized once, exactly (a new array: no copy needed).
    const own = isFloat(weights) ? copyWeights(weights) : floatLayerWeights(weights);
    const { numKvHeads: G, headDim: Dh, numHeads: H } = spec;
    return {
      defaultCacheDtype: 'f32',
      // Every dtype (the option checked by plan/kv-cache.ts: known, and Dh % 32 = 0 for the blocks).
      createCacheStorage: (B, maxSeqLen, dtype) => (dtype === 'f32' ? new CpuKvCache(B, G, maxSeqLen, Dh) : new CpuEncodedKvCache(dtype, B, G, maxSeqLen, Dh)),
      createPagedStorage: (blockSize, maxBlocks, dtype) => new CpuPagedStorage(dtype, blockSize, maxBlocks, G, Dh),
      forwardPaged: async (paged) => {
        // Each sequence as a plain cached call of it alone: project its tokens, write their K and V into its blocks, attend over its positions.
        const store = paged.cache.storage as CpuPagedStorage;
        const E = spec.embedDim;
        const output = new Float32Array(paged.tokens * E);
        for (const s of paged.sequences) {
          const plan = s.plan;
          const { q, k, v } = qkvProjection({ ...plan, kvSeqLen: s.length, geometry: geometryOf('self', 1, s.length, s.length) }, own);
          store.append(s.blocks, k, v, s.start, s.length);
          const o = attention(plan, q, store.reader('key', s.blocks), store.reader('value', s.blocks));
          output.set(outputProjection(plan, own, o), s.row * E);
        }
        return { output };
      },
      forward: async (plan) => {
        refuseGpuBuffers('MultiHeadAttention.forward', plan);
        if (plan.cache) {
          // Project the new tokens, append their K and V, attend over every cached position.
          const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
          const store = plan.cache.cache.storage as CpuCacheStorage;
          // The new tokens alone: Sq queries, Sq keys and values.
          const { q, k, v } = qkvProjection({ ...plan, kvSeqLen: Sq, geometry: geometryOf('self', B, Sq, Sq), cache: null }, own);
          store.append(k, v, plan.cache.start, Sq);
          const keep = plan.needWeights ? { scores: new Float64Array(B * H * Sq * Skv), probs: new Float64Array(B * H * Sq * Skv) } : undefined;
          // K and V read in place (no copy of the cache): the new tokens see their own stored, rounded rows.
          const o = attention(plan, q, store.reader('key'), store.reader('value'), keep);
          const output = Float32Array.from(outputProjection(plan, own, o));
          return keep ? { output, attentionWeights: Float32Array.from(keep.probs) } : { output };
        }
        const r = referenceForward(plan, own, { keepScores: plan.needWeights });
        const output = Float32Array.from(r.output);
        return r.probs ? { output, attentionWeights: Float32Array.from(r.probs) } : { output };
      },
      dispose: () => {},
    };
  }

  async attend(plan: ForwardPlan): Promise<ForwardResult> {
    refuseGpuBuffers('scaledDotProductAttention', plan);
    const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
    const keep = plan.needWeights
      ? { scores: new Float64Array(B * plan.layer.numHeads * Sq * Skv), probs: new Float64Array(B * plan.layer.numHeads * Sq * Skv) }
      : undefined;
    const q = Float64Array.from(plan.query);
    const k = Float64Array.from(plan.key);
    // With rotary: the queries and the last Sq keys turn by their positions (earlier keys are taken as turned).
    transformHeads(plan, q, 'query', plan.layer.numHeads, Sq);
    transformHeads(plan, k, 'key', plan.layer.numKvHeads, Sq, Skv, Skv - Sq);
    const o = attention(plan, q, k, Float64Array.from(plan.value), keep);
    const output = Float32Array.from(o);
    return keep ? { output, attentionWeights: Float32Array.from(keep.probs) } : { output };
  }

  dispose(): void {}
}

/** GPU buffers in or out are WebGPU's: the CPU (and 'wasm') backend refuses them, saying so. */
export function refuseGpuBuffers(where: string, plan: ForwardPlan, given = 'an engine on the CPU backend'): void {
  if (!plan.gpu && !plan.returnBuffer) return;
  throw new UnsupportedError({
    where,
    argument: plan.gpu ? 'a GPUBuffer input' : 'options.returnBuffer',
    expected: 'used on the WebGPU backend only',
    given,
    fix: 'Pass Float32Arrays and read output, or run on WebGPU.',
  });
}
