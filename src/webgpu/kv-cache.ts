// A KV cache's storage on the GPU: one buffer, K then V [B, G, maxSeqLen, Dp], at the engine's precision
// (Dp = Dh rounded up to a multiple of 4, padding.ts; read() and write() take and give Dh).
//
// Its allocation and write() are synchronous, so they have no call of their own to reject: each runs in
// error scopes whose verdict the cache keeps (scopes.ts), and every forward with the cache and every
// read() awaits it beside its own (submit.ts), rejecting with WebGPUCallError('KvCache.write', …) when
// WebGPU refused it. A refused write stands until the next write() or reset(); a refused allocation
// until a reset() that reallocates (after a device loss), so a cache WebGPU refused is never read.

import { DeviceLimitError, DeviceLostError } from '../errors.ts';
import { type KvCacheStorage, readEncodedFromFloats, writeEncodedAsFloats } from '../kv-cache.ts';
import { type BufferPool, Usage, writeTensor } from './buffers.ts';
import { fromF16, toF16 } from '../util/f16.ts';
import type { GpuKvCache } from './forward.ts';
import { cropColumns, padColumns, up4 } from './padding.ts';
import { ACCEPTED, ErrorScopes, type Verdict } from './scopes.ts';
import { submitAndRead } from './submit.ts';

/** What a cache needs of its backend: the current device generation and pool, and the limits it obeys. */
export interface CacheHost {
  current(): { pool: BufferPool; generation: number };
  limits(): { maxStorageBufferBindingSize: number; maxBufferSize: number };
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
  /** Lanes a row: Dh rounded up to a multiple of 4 (zeros past Dh). */
  private readonly lanes: number;

  constructor(
    private readonly host: CacheHost,
    private readonly B: number,
    private readonly G: number,
    /** Positions per (b, g) block: the cache's maxSeqLen. */
    private readonly capacity: number,
    private readonly Dh: number,
  ) {
    this.lanes = up4(Dh);
    this.bytesTotal = 2 * B * G * capacity * this.lanes * host.current().pool.elementBytes;
    const maxBinding = Math.min(host.limits().maxStorageBufferBindingSize, host.limits().maxBufferSize);
    if (this.bytesTotal > maxBinding) {
      throw new DeviceLimitError({
        where: 'MultiHeadAttention.createKvCache',
        argument: 'the cache, 2·batchSize·numKvHeads·maxSeqLen·headDim·4 bytes',
        expected: `at most maxStorageBufferBindingSize = ${maxBinding} bytes`,
        given: `${this.bytesTotal} bytes`,
        fix: 'Use a smaller maxSeqLen or batchSize.',
      });
    }
    this.allocate('MultiHeadAttention.createKvCache');
  }

  get bytes(): number {
    return this.buffer ? this.bytesTotal : 0;
  }

  readEncoded(length: number): Promise<{ key: Uint8Array; value: Uint8Array }> {
    return readEncodedFromFloats(this, this.host.current().pool.elementBytes === 2 ? 'f16' : 'f32', this.Dh, length);
  }

  writeEncoded(key: Uint8Array, value: Uint8Array, length: number): void {
    writeEncodedAsFloats(this, this.host.current().pool.elementBytes === 2 ? 'f16' : 'f32', this.Dh, key, value, length);
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
    return { buffer: this.buffer, capacity: this.capacity, vBase: this.B * this.G * this.capacity * this.lanes, after: [this.allocated, this.written] };
  }

  /** Copies rows 0 … length − 1 of every (b, g) block of K and of V to one staging buffer and reads it back. */
  async read(length: number): Promise<{ key: Float32Array; value: Float32Array }> {
    const { pool, generation } = this.host.current();
    const live = this.live(generation);
    const el = pool.elementBytes;
    const blocks = this.B * this.G;
    const rowBytes = this.lanes * el;
    const half = blocks * length * rowBytes; // K, then V
    const empty = () => new Float32Array(0);
    if (half === 0) return { key: empty(), value: empty() };
    const device = pool.device;
    // In error scopes (scopes.ts), as every call: what WebGPU refused is never read as the cache's contents.
    const scopes = new ErrorScopes(device);
    let staging: GPUBuffer | null = null;
    let commands: GPUCommandBuffer;
    try {
      staging = device.createBuffer({ label: 'KvCache.read', size: 2 * half, usage: Usage.MAP_READ | Usage.COPY_DST });
      const encoder = device.createCommandEncoder({ label: 'KvCache.read' });
      for (let bg = 0; bg < blocks; bg++) {
        encoder.copyBufferToBuffer(live.buffer, bg * this.capacity * rowBytes, staging, bg * length * rowBytes, length * rowBytes);
        encoder.copyBufferToBuffer(live.buffer, (live.vBase + bg * this.capacity * this.lanes) * el, staging, half + bg * length * rowBytes, length * rowBytes);
      }
      commands = encoder.finish();
    } catch (e) {
      scopes.discard();
      staging?.destroy();
      throw e;
    }
    try {
      const { parts } = await submitAndRead(device, scopes, commands, { staging, parts: [half, half] }, { where: 'KvCache.read', after: live.after });
      const convert = (b: ArrayBuffer) => cropColumns(el === 2 ? fromF16(new Uint16Array(b)) : new Float32Array(b), blocks * length, this.lanes, this.Dh);
      return { key: convert(parts[0]), value: convert(parts[1]) };
    } finally {
      staging.destroy();
    }
  }

  /** Writes rows 0 … length − 1 of every (b, g) block of K and V (at the engine's precision). */
  write(key: Float32Array, value: Float32Array, length: number): void {
    const { pool, generation } = this.host.current();
    const live = this.live(generation);
    const el = pool.elementBytes;
    const n = length * this.lanes; // elements of one block's rows
    const blocks = this.B * this.G;
    const keys = padColumns(key, blocks * length, this.Dh, this.lanes);
    const values = padColumns(value, blocks * length, this.Dh, this.lanes);
    const scopes = new ErrorScopes(pool.device);
    try {
      for (let bg = 0; bg < blocks; bg++) {
        const k = keys.subarray(bg * n, (bg + 1) * n);
        const v = values.subarray(bg * n, (bg + 1) * n);
        writeTensor(pool.device, live.buffer, bg * this.capacity * this.lanes * el, el === 2 ? toF16(k) : k);
        writeTensor(pool.device, live.buffer, (live.vBase + bg * this.capacity * this.lanes) * el, el === 2 ? toF16(v) : v);
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
   * For every (b, g) block of K and of V: row rows[i] → row to + i. WebGPU copies no buffer onto
   * itself, so the rows go to a scratch buffer and back, in one submission (ordered after every call
   * submitted before it); WebGPU's verdict joins the cache's write verdict.
   */
  moveRows(rows: readonly number[], to: number): void {
    if (rows.length === 0) return;
    const { pool, generation } = this.host.current();
    const live = this.live(generation);
    const el = pool.elementBytes;
    const rowBytes = this.lanes * el;
    const blocks = this.B * this.G;
    const n = rows.length;
    const device = pool.device;
    const scopes = new ErrorScopes(device);
    let scratch: GPUBuffer | null = null;
    try {
      scratch = device.createBuffer({ label: 'KvCache.acceptPath', size: 2 * blocks * n * rowBytes, usage: Usage.COPY_SRC | Usage.COPY_DST });
      const encoder = device.createCommandEncoder({ label: 'KvCache.acceptPath' });
      for (let half = 0; half < 2; half++) {
        const base = half === 0 ? 0 : live.vBase * el; // K, then V
        for (let bg = 0; bg < blocks; bg++) {
          const block = base + bg * this.capacity * rowBytes;
          const at = (half * blocks + bg) * n * rowBytes;
          for (let i = 0; i < n; i++) encoder.copyBufferToBuffer(live.buffer, block + rows[i] * rowBytes, scratch, at + i * rowBytes, rowBytes);
          encoder.copyBufferToBuffer(scratch, at, live.buffer, block + to * rowBytes, n * rowBytes);
        }
      }
      device.queue.submit([encoder.finish()]);
    } finally {
      scratch?.destroy(); // after the submission: WebGPU frees it once the copies ran
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
