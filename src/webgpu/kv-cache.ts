// A KV cache's storage on the GPU: one buffer, K then V [B, G, maxSeqLen, Dp], at the engine's precision
// (Dp = Dh rounded up to a multiple of 4, padding.ts; read() and write() take and give Dh).

import { DeviceLimitError, DeviceLostError, WebGPUCallError } from '../errors.ts';
import type { KvCacheStorage } from '../kv-cache.ts';
import { type BufferPool, MAP_MODE_READ, Usage, writeTensor } from './buffers.ts';
import { waitFor } from './completion.ts';
import { fromF16, toF16 } from './f16.ts';
import type { GpuKvCache } from './forward.ts';
import { cropColumns, padColumns, up4 } from './padding.ts';
import { inErrorScopes } from './scopes.ts';

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
  private readonly bytes: number;
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
    this.bytes = 2 * B * G * capacity * this.lanes * host.current().pool.elementBytes;
    const maxBinding = Math.min(host.limits().maxStorageBufferBindingSize, host.limits().maxBufferSize);
    if (this.bytes > maxBinding) {
      throw new DeviceLimitError({
        where: 'MultiHeadAttention.createKvCache',
        argument: 'the cache, 2·batchSize·numKvHeads·maxSeqLen·headDim·4 bytes',
        expected: `at most maxStorageBufferBindingSize = ${maxBinding} bytes`,
        given: `${this.bytes} bytes`,
        fix: 'Use a smaller maxSeqLen or batchSize.',
      });
    }
    this.allocate();
  }

  private allocate(): void {
    const { pool, generation } = this.host.current();
    this.buffer = pool.allocate(this.bytes, Usage.STORAGE | Usage.COPY_DST | Usage.COPY_SRC, 'KvCache');
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
    return { buffer: this.buffer, capacity: this.capacity, vBase: this.B * this.G * this.capacity * this.lanes };
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
    const staging = device.createBuffer({ label: 'KvCache.read', size: 2 * half, usage: Usage.MAP_READ | Usage.COPY_DST });
    try {
      // In error scopes (scopes.ts), as every call: what WebGPU refused is never read as the cache's contents.
      const run = inErrorScopes(device, () => {
        const encoder = device.createCommandEncoder({ label: 'KvCache.read' });
        for (let bg = 0; bg < blocks; bg++) {
          encoder.copyBufferToBuffer(live.buffer, bg * this.capacity * rowBytes, staging, bg * length * rowBytes, length * rowBytes);
          encoder.copyBufferToBuffer(live.buffer, (live.vBase + bg * this.capacity * this.lanes) * el, staging, half + bg * length * rowBytes, length * rowBytes);
        }
        device.queue.submit([encoder.finish()]);
      });
      const [caught, mapped] = await Promise.allSettled([run.caught, run.ok ? waitFor(device, staging.mapAsync(MAP_MODE_READ)) : Promise.resolve()]);
      if (!run.ok) throw run.thrown;
      if (caught.status === 'rejected') throw caught.reason;
      if (caught.value) throw new WebGPUCallError('KvCache.read', caught.value.scope, caught.value.message);
      if (mapped.status === 'rejected') throw mapped.reason;
      const bytes = staging.getMappedRange().slice(0);
      staging.unmap();
      const convert = (b: ArrayBuffer) => cropColumns(el === 2 ? fromF16(new Uint16Array(b)) : new Float32Array(b), blocks * length, this.lanes, this.Dh);
      return { key: convert(bytes.slice(0, half)), value: convert(bytes.slice(half)) };
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
    for (let bg = 0; bg < blocks; bg++) {
      const k = keys.subarray(bg * n, (bg + 1) * n);
      const v = values.subarray(bg * n, (bg + 1) * n);
      writeTensor(pool.device, live.buffer, bg * this.capacity * this.lanes * el, el === 2 ? toF16(k) : k);
      writeTensor(pool.device, live.buffer, (live.vBase + bg * this.capacity * this.lanes) * el, el === 2 ? toF16(v) : v);
    }
  }

  reset(): void {
    // Rows past the cache's length are never read (Skv bounds every read), so a live buffer is kept
    // as it is; one lost with its device is made anew on the current device.
    if (!this.buffer || this.generation !== this.host.current().generation) this.allocate();
  }

  dispose(): void {
    if (this.buffer && this.generation === this.host.current().generation) this.host.current().pool.destroy(this.buffer);
    this.buffer = null;
  }
}
