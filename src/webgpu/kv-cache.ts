// A KV cache's storage on the GPU: one buffer, K then V [B, G, maxSeqLen, ·], stored as the cache's
// dtype (src/quant/kv.ts says what each holds; attention-fields.ts KvFormat how the kernels read it):
//   the engine's precision  rows of Dp values as every tensor (ST4; Dp = Dh rounded up to a multiple
//                           of 4, padding.ts; read() and write() take and give Dh)
//   'f32' on an f16 engine  rows of Dp f32 values (vec4<f32>)
//   'f16' on an f32 engine  rows of Dp halves, two a word (kv_f16_packed.wgsl: no shader-f16 needed)
//   'q8_0', 'q4_0'          ggml's blocks of 32 with quants and scales apart, as u32 words:
//                             quants  K then V [B, G, maxSeqLen, Dh/4] words (q8_0: four int8 each)
//                                     or Dh/8 (q4_0: eight nibbles each, in the order of the values)
//                             scales  the f16 d of every block, K's then V's, two a word (the even
//                                     block in the low half), from word `scales`
//                           q8_0 holds 34 bytes per 32 values (0.53 of f16's), q4_0 18 (0.28): ggml's
//                           own block sizes, nothing padded. readEncoded/writeEncoded convert to and
//                           from ggml's blocks on the host.
// A forward's new rows are stored by the projection itself (the engine's precision), or by
// kernels/kv-store.ts from the call's scratch (every other dtype: converted, or quantized exactly as
// encodeKvRow); attention reads them in place through the dtype's loader (shaders/kv_*.wgsl).
//
// Its allocation and write() are synchronous, so they have no call of their own to reject: each runs in
// error scopes whose verdict the cache keeps (scopes.ts), and every forward with the cache and every
// read() awaits it beside its own (submit.ts), rejecting with WebGPUCallError('KvCache.write', …) when
// WebGPU refused it. A refused write stands until the next write() or reset(); a refused allocation
// until a reset() that reallocates (after a device loss), so a cache WebGPU refused is never read.

import { DeviceLimitError, DeviceLostError } from '../errors.ts';
import { type KvCacheStorage, readEncodedFromFloats, writeEncodedAsFloats } from '../kv-cache.ts';
import { decodeKvRows, encodeKvRows, KV_BLOCK_BYTES, kvRowBytes } from '../quant/kv.ts';
import type { KvCacheDtype } from '../types.ts';
import { fromF16, toF16 } from '../util/f16.ts';
import { type BufferPool, Usage, writeTensor } from './buffers.ts';
import type { GpuKvCache } from './forward.ts';
import { type KvFormat, kvFormatOf } from './kernels/attention-fields.ts';
import { encodeMoveScales } from './kernels/kv-store.ts';
import { cropColumns, padColumns, up4 } from './padding.ts';
import { CallScratch } from './scratch.ts';
import { ACCEPTED, ErrorScopes, type Verdict } from './scopes.ts';
import { submitAndRead } from './submit.ts';

/** What a cache needs of its backend: the current device generation and pool, and the limits it obeys. */
export interface CacheHost {
  current(): { pool: BufferPool; generation: number };
  limits(): { maxStorageBufferBindingSize: number; maxBufferSize: number };
}

/** Where things are in a q-dtype cache's buffer, in u32 words. */
interface BlockLayout {
  dtype: 'q8_0' | 'q4_0';
  /** Quant words a row (Dh/4 or Dh/8). */
  rowWords: number;
  /** Blocks a row (Dh/32). */
  nb: number;
  /** Quant words of K (V's start there). */
  halfWords: number;
  /** The word where the scales start (2·halfWords). */
  scales: number;
  /** Words of the scale plane (K's and V's blocks, two a word). */
  scaleWords: number;
}

/**
 * A KV cache's GPU buffer. It belongs to one device generation: after a device loss its contents are
 * gone, and a forward with it says so until reset() reallocates it.
 */
export class WebGPUKvCache implements KvCacheStorage {
  private buffer: GPUBuffer | null = null;
  private generation = -1;
  /** Whether WebGPU accepted the buffer's allocation, and the last write (ACCEPTED after a reset: nothing to read). */
  private allocated: Verdict = ACCEPTED;
  private written: Verdict = ACCEPTED;
  private readonly bytesTotal: number;
  /** Lanes a row of a float cache: Dh rounded up to a multiple of 4 (zeros past Dh). */
  private readonly lanes: number;
  /** How the kernels read it (undefined: as the engine's tensors). */
  readonly format: KvFormat | undefined;
  /** A float cache's bytes per value (2 or 4); 0 for q-dtypes. */
  private readonly el: number;
  /** A q-dtype cache's planes; null for float caches. */
  private readonly blocks: BlockLayout | null;

  constructor(
    private readonly host: CacheHost,
    private readonly B: number,
    private readonly G: number,
    /** Positions per (b, g) block: the cache's maxSeqLen. */
    private readonly capacity: number,
    private readonly Dh: number,
    readonly dtype: KvCacheDtype,
  ) {
    this.lanes = up4(Dh);
    const pool = host.current().pool;
    this.format = kvFormatOf(dtype, pool.precision);
    const rows = B * G * capacity;
    if (dtype === 'q8_0' || dtype === 'q4_0') {
      const rowWords = dtype === 'q8_0' ? Dh / 4 : Dh / 8;
      const nb = Dh / 32;
      const halfWords = rows * rowWords;
      this.blocks = { dtype, rowWords, nb, halfWords, scales: 2 * halfWords, scaleWords: rows * nb };
      this.el = 0;
      this.bytesTotal = 4 * (2 * halfWords + rows * nb);
    } else {
      this.blocks = null;
      this.el = dtype === 'f32' ? 4 : 2;
      this.bytesTotal = 2 * rows * this.lanes * this.el;
    }
    const maxBinding = Math.min(host.limits().maxStorageBufferBindingSize, host.limits().maxBufferSize);
    if (this.bytesTotal > maxBinding) {
      throw new DeviceLimitError({
        where: 'MultiHeadAttention.createKvCache',
        argument: `the cache, 2·batchSize·numKvHeads·maxSeqLen rows of headDim values as '${dtype}'`,
        expected: `at most maxStorageBufferBindingSize = ${maxBinding} bytes`,
        given: `${this.bytesTotal} bytes`,
        fix: "Use a smaller maxSeqLen or batchSize, or a smaller dtype ('q8_0', 'q4_0').",
      });
    }
    this.allocate('MultiHeadAttention.createKvCache');
  }

  get bytes(): number {
    return this.buffer ? this.bytesTotal : 0;
  }

  async readEncoded(length: number): Promise<{ key: Uint8Array; value: Uint8Array }> {
    if (!this.blocks) return readEncodedFromFloats(this, this.dtype, this.Dh, length);
    return this.readBlocks(length, this.blocks);
  }

  writeEncoded(key: Uint8Array, value: Uint8Array, length: number): void {
    if (!this.blocks) writeEncodedAsFloats(this, this.dtype, this.Dh, key, value, length);
    else this.writeBlocks(key, value, length, this.blocks);
  }

  /** A buffer on the current device, in error scopes (`where`: the entry point that made it). */
  private allocate(where: string): void {
    const { pool, generation } = this.host.current();
    const scopes = new ErrorScopes(pool.device);
    try {
      this.buffer = pool.allocate(this.bytesTotal, Usage.STORAGE | Usage.COPY_DST | Usage.COPY_SRC, 'KvCache');
    } finally {
      this.allocated = scopes.verdict(where);
    }
    this.written = ACCEPTED;
    this.generation = generation;
  }

  /** The buffer, if it lives on the current device; else the loss is reported. */
  live(generation: number): GpuKvCache {
    if (!this.buffer || this.generation !== generation) {
      throw new DeviceLostError(
        "MultiHeadAttention.forward: the KV cache's keys and values were lost with the GPU device (they cannot be rebuilt from anything the engine keeps). " +
          'Call cache.reset() and prefill it again.',
        'destroyed',
      );
    }
    const rows = this.B * this.G * this.capacity;
    const common = { buffer: this.buffer, capacity: this.capacity, after: [this.allocated, this.written] };
    // q-dtypes: V's values start after K's as the kernels index them (vec4s of values), whatever the words.
    if (this.blocks) return { ...common, vBase: rows * this.Dh, format: this.format, scales: this.blocks.scales };
    return { ...common, vBase: rows * this.lanes, ...(this.format ? { format: this.format } : {}) };
  }

  /** Copies byte ranges of the cache to one staging buffer and reads them back (in error scopes, after the cache's verdicts). */
  private async readRanges(where: string, ranges: readonly [offset: number, bytes: number][]): Promise<ArrayBuffer> {
    const { pool, generation } = this.host.current();
    const live = this.live(generation);
    const device = pool.device;
    const total = ranges.reduce((sum, [, bytes]) => sum + bytes, 0);
    const scopes = new ErrorScopes(device);
    let staging: GPUBuffer | null = null;
    let commands: GPUCommandBuffer;
    try {
      staging = device.createBuffer({ label: where, size: total, usage: Usage.MAP_READ | Usage.COPY_DST });
      const encoder = device.createCommandEncoder({ label: where });
      let at = 0;
      for (const [offset, bytes] of ranges) {
        encoder.copyBufferToBuffer(live.buffer, offset, staging, at, bytes);
        at += bytes;
      }
      commands = encoder.finish();
    } catch (e) {
      scopes.discard();
      staging?.destroy();
      throw e;
    }
    try {
      const { parts } = await submitAndRead(device, scopes, commands, { staging, parts: [total] }, { where, after: live.after });
      return parts[0];
    } finally {
      staging.destroy();
    }
  }

  /** Rows 0 … length − 1 of every (b, g) block of K and of V, as float32 [B, G, length, Dh] (q-dtypes dequantized). */
  async read(length: number): Promise<{ key: Float32Array; value: Float32Array }> {
    const blocks = this.B * this.G;
    const empty = () => new Float32Array(0);
    if (blocks * length === 0) return { key: empty(), value: empty() };
    if (this.blocks) {
      const { key, value } = await this.readBlocks(length, this.blocks);
      return { key: decodeKvRows(this.dtype, key, this.Dh), value: decodeKvRows(this.dtype, value, this.Dh) };
    }
    const el = this.el;
    const rowBytes = this.lanes * el;
    const half = blocks * length * rowBytes; // K, then V
    const vBase = blocks * this.capacity * rowBytes;
    const ranges: [number, number][] = [];
    for (let h = 0; h < 2; h++) for (let bg = 0; bg < blocks; bg++) ranges.push([h * vBase + bg * this.capacity * rowBytes, length * rowBytes]);
    const data = await this.readRanges('KvCache.read', ranges);
    const convert = (at: number) => {
      const bytes = data.slice(at, at + half);
      return cropColumns(el === 2 ? fromF16(new Uint16Array(bytes)) : new Float32Array(bytes), blocks * length, this.lanes, this.Dh);
    };
    return { key: convert(0), value: convert(half) };
  }

  /** A q-dtype cache's rows 0 … length − 1 read back and converted to ggml's blocks (quant/kv.ts). */
  private async readBlocks(length: number, layout: BlockLayout): Promise<{ key: Uint8Array; value: Uint8Array }> {
    const blocks = this.B * this.G;
    const { rowWords, nb, halfWords, scales } = layout;
    const rowBytes = kvRowBytes(this.dtype, this.Dh);
    if (blocks * length === 0) return { key: new Uint8Array(0), value: new Uint8Array(0) };
    // Per (half, b, g): its rows' quants, then the scale words its blocks lie in.
    const ranges: [number, number][] = [];
    const scaleFirst: number[] = []; // per (half, bg): the first block, and where its words start in the readback
    for (let h = 0; h < 2; h++) {
      for (let bg = 0; bg < blocks; bg++) {
        ranges.push([4 * (h * halfWords + bg * this.capacity * rowWords), 4 * length * rowWords]);
        const first = (h * blocks * this.capacity + bg * this.capacity) * nb;
        const w0 = first >> 1;
        const w1 = (first + length * nb + 1) >> 1;
        scaleFirst.push(first);
        ranges.push([4 * (scales + w0), 4 * (w1 - w0)]);
      }
    }
    const data = new Uint8Array(await this.readRanges('KvCache.read', ranges));
    const out = [new Uint8Array(blocks * length * rowBytes), new Uint8Array(blocks * length * rowBytes)];
    const bytes = KV_BLOCK_BYTES[layout.dtype];
    let at = 0;
    for (let h = 0; h < 2; h++) {
      for (let bg = 0; bg < blocks; bg++) {
        const quants = at;
        at += 4 * length * rowWords;
        const first = scaleFirst[h * blocks + bg];
        const scaleAt = at - 4 * (first >> 1); // data[scaleAt + 2·block …] is block `block`'s f16 (little-endian)
        at += 4 * (((first + length * nb + 1) >> 1) - (first >> 1));
        const dst = out[h];
        for (let j = 0; j < length; j++) {
          for (let c = 0; c < nb; c++) {
            const o = ((bg * length + j) * nb + c) * bytes;
            const s = scaleAt + 2 * (first + j * nb + c);
            dst[o] = data[s];
            dst[o + 1] = data[s + 1];
            const q = quants + 4 * (j * rowWords) + c * (bytes - 2); // the block's 32 (q8_0) or 16 (q4_0) bytes
            if (layout.dtype === 'q8_0') dst.set(data.subarray(q, q + 32), o + 2);
            else {
              // ours: value v in nibble v % 8 of word v / 8; ggml's: byte t holds values t (low) and t + 16 (high)
              const nibble = (v: number) => (data[q + (v >> 1)] >> (4 * (v & 1))) & 15;
              for (let t = 0; t < 16; t++) dst[o + 2 + t] = nibble(t) | (nibble(t + 16) << 4);
            }
          }
        }
      }
    }
    return { key: out[0], value: out[1] };
  }

  /** Sets a q-dtype cache's rows 0 … length − 1 from ggml's blocks (quant/kv.ts), bit for bit. */
  private writeBlocks(key: Uint8Array, value: Uint8Array, length: number, layout: BlockLayout): void {
    const { pool, generation } = this.host.current();
    const live = this.live(generation);
    const blocks = this.B * this.G;
    const { rowWords, nb, halfWords, scales, scaleWords } = layout;
    const bytes = KV_BLOCK_BYTES[layout.dtype];
    // The scale plane whole (rows past length: zeros, never read), the quants per (half, b, g).
    const plane = new Uint16Array(2 * scaleWords);
    const quants = new Uint8Array(4 * length * rowWords);
    const scopes = new ErrorScopes(pool.device);
    try {
      [key, value].forEach((src, h) => {
        for (let bg = 0; bg < blocks; bg++) {
          quants.fill(0);
          for (let j = 0; j < length; j++) {
            for (let c = 0; c < nb; c++) {
              const o = ((bg * length + j) * nb + c) * bytes;
              plane[(h * blocks * this.capacity + bg * this.capacity + j) * nb + c] = src[o] | (src[o + 1] << 8);
              const q = 4 * (j * rowWords) + c * (bytes - 2);
              if (layout.dtype === 'q8_0') quants.set(src.subarray(o + 2, o + 34), q);
              else
                for (let t = 0; t < 16; t++) {
                  const byte = src[o + 2 + t];
                  // value t → nibble t % 2 of byte t/2 of ours; value t + 16 likewise
                  quants[q + (t >> 1)] |= (byte & 15) << (4 * (t & 1));
                  quants[q + ((t + 16) >> 1)] |= (byte >> 4) << (4 * (t & 1));
                }
            }
          }
          pool.device.queue.writeBuffer(live.buffer, 4 * (h * halfWords + bg * this.capacity * rowWords), quants.buffer, 0, quants.byteLength);
        }
      });
      writeTensor(pool.device, live.buffer, 4 * scales, plane);
    } finally {
      this.written = scopes.verdict('KvCache.write');
    }
  }

  /** Writes rows 0 … length − 1 of every (b, g) block of K and V, rounded to the cache's dtype (quant/kv.ts encodeKvRow). */
  write(key: Float32Array, value: Float32Array, length: number): void {
    if (this.blocks) {
      this.writeBlocks(encodeKvRows(this.dtype, key, this.Dh), encodeKvRows(this.dtype, value, this.Dh), length, this.blocks);
      return;
    }
    const { pool, generation } = this.host.current();
    const live = this.live(generation);
    const el = this.el;
    const n = length * this.lanes; // elements of one block's rows
    const blocks = this.B * this.G;
    const vBase = blocks * this.capacity * this.lanes;
    const keys = padColumns(key, blocks * length, this.Dh, this.lanes);
    const values = padColumns(value, blocks * length, this.Dh, this.lanes);
    const scopes = new ErrorScopes(pool.device);
    try {
      for (let bg = 0; bg < blocks; bg++) {
        const k = keys.subarray(bg * n, (bg + 1) * n);
        const v = values.subarray(bg * n, (bg + 1) * n);
        writeTensor(pool.device, live.buffer, bg * this.capacity * this.lanes * el, el === 2 ? toF16(k) : k);
        writeTensor(pool.device, live.buffer, (vBase + bg * this.capacity * this.lanes) * el, el === 2 ? toF16(v) : v);
      }
    } finally {
      this.written = scopes.verdict('KvCache.write');
    }
  }

  reset(): void {
    // Rows past the cache's length are never read (Skv bounds every read), so a live buffer is kept
    // as it is (and what was written before is no longer read); one lost with its device is made anew
    // on the current device.
    if (!this.buffer || this.generation !== this.host.current().generation) this.allocate('KvCache.reset');
    else this.written = ACCEPTED;
  }

  /**
   * For every (b, g) block of K and of V: row rows[i] → row to + i, bit for bit. WebGPU copies no
   * buffer onto itself, so the rows go to a scratch buffer and back, in one submission (ordered after
   * every call submitted before it); a q-dtype cache's block scales (halves of words) move by a
   * kernel (kv_move_scales.wgsl) from a copy of the scale plane. WebGPU's verdict joins the cache's
   * write verdict.
   */
  moveRows(rows: readonly number[], to: number): void {
    if (rows.length === 0) return;
    const { pool, generation } = this.host.current();
    const live = this.live(generation);
    const layout = this.blocks;
    const rowBytes = layout ? 4 * layout.rowWords : this.lanes * this.el;
    const vBaseBytes = layout ? 4 * layout.halfWords : this.B * this.G * this.capacity * rowBytes;
    const blocks = this.B * this.G;
    const n = rows.length;
    const device = pool.device;
    const scopes = new ErrorScopes(device);
    let scratch: GPUBuffer | null = null;
    const callScratch = layout ? new CallScratch(pool) : null;
    try {
      scratch = device.createBuffer({ label: 'KvCache.acceptPath', size: 2 * blocks * n * rowBytes, usage: Usage.COPY_SRC | Usage.COPY_DST });
      const encoder = device.createCommandEncoder({ label: 'KvCache.acceptPath' });
      for (let half = 0; half < 2; half++) {
        const base = half === 0 ? 0 : vBaseBytes; // K, then V
        for (let bg = 0; bg < blocks; bg++) {
          const block = base + bg * this.capacity * rowBytes;
          const at = (half * blocks + bg) * n * rowBytes;
          for (let i = 0; i < n; i++) encoder.copyBufferToBuffer(live.buffer, block + rows[i] * rowBytes, scratch, at + i * rowBytes, rowBytes);
          encoder.copyBufferToBuffer(scratch, at, live.buffer, block + to * rowBytes, n * rowBytes);
        }
      }
      if (layout && callScratch) {
        const old = callScratch.storage(4 * layout.scaleWords, 'KvCache.acceptPath.scales');
        encoder.copyBufferToBuffer(live.buffer, 4 * layout.scales, old, 0, 4 * layout.scaleWords);
        const rowTable = callScratch.storage(4 * n, 'KvCache.acceptPath.rows');
        device.queue.writeBuffer(rowTable, 0, new Uint32Array(rows));
        const pass = encoder.beginComputePass({ label: 'KvCache.acceptPath' });
        encodeMoveScales(pass, callScratch, { rows: rowTable, old, dst: live.buffer, n, nb: layout.nb, blocks, stride: this.capacity, to, scales: layout.scales });
        pass.end();
      }
      device.queue.submit([encoder.finish()]);
    } finally {
      scratch?.destroy(); // after the submission: WebGPU frees it once the copies ran
      callScratch?.releaseAll(); // the pool's later users are ordered after this submission
      const moved = scopes.verdict('KvCache.acceptPath');
      const before = this.written;
      this.written = Promise.all([before, moved]).then(([a, b]) => a ?? b);
    }
  }

  discard(): void {
    // Rows past the cache's length are never read (Skv bounds every read).
  }

  dispose(): void {
    if (this.buffer && this.generation === this.host.current().generation) this.host.current().pool.destroy(this.buffer);
    this.buffer = null;
  }
}
