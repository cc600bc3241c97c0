// A PagedKvCache's pool on the GPU (one layer's): ONE buffer, K then V, each [maxBlocks, G, blockSize, Dp]
// at the engine's precision (Dp = Dh rounded up to a multiple of 4, padding.ts; read() gives Dh). Block b
// of key/value head g holds its positions' rows at ((b·G + g)·blockSize + offset)·Dp, so a block's K of
// every head is one contiguous range (copyBlock copies two ranges: K and V).
//
// As kv-cache.ts: the allocation and every write (copyBlock, moveRows) run in error scopes whose verdict
// the pool keeps; a forward and a read() await them (submit.ts) and reject with WebGPUCallError when
// WebGPU refused one. A pool belongs to one device generation: after a device loss its contents are gone,
// and a forward or read() says so (DeviceLostError); copyBlock and moveRows then do nothing (what they would
// move is gone, and the next forward reports it). WebGPU copies no buffer onto itself, so copies within
// the pool go through a scratch buffer, in one submission each (ordered after every call submitted before).

import { DeviceLimitError, DeviceLostError } from '../errors.ts';
import type { PagedKvStorage } from '../paged-kv-cache.ts';
import { fromF16 } from '../util/f16.ts';
import { Usage } from './buffers.ts';
import type { CacheHost } from './kv-cache.ts';
import { cropColumns, up4 } from './padding.ts';
import { ACCEPTED, ErrorScopes, type Verdict } from './scopes.ts';
import { submitAndRead } from './submit.ts';

/** A pool on the GPU as a forward reads it. */
export interface GpuPagedPool {
  buffer: GPUBuffer;
  /** Elements from the start of the buffer to V. */
  vBase: number;
  /** Whether WebGPU accepted the allocation and the copies so far. */
  after: readonly Verdict[];
}

export class WebGPUPagedStorage implements PagedKvStorage {
  private buffer: GPUBuffer | null = null;
  private readonly generation: number;
  private readonly allocated: Verdict;
  private written: Verdict = ACCEPTED;
  private readonly bytesTotal: number;
  /** Lanes a row: Dh rounded up to a multiple of 4 (zeros past Dh). */
  readonly lanes: number;

  constructor(
    private readonly host: CacheHost,
    readonly blockSize: number,
    readonly maxBlocks: number,
    readonly G: number,
    private readonly Dh: number,
  ) {
    this.lanes = up4(Dh);
    const { pool, generation } = host.current();
    this.bytesTotal = 2 * maxBlocks * G * blockSize * this.lanes * pool.elementBytes;
    const maxBinding = Math.min(host.limits().maxStorageBufferBindingSize, host.limits().maxBufferSize);
    if (this.bytesTotal > maxBinding) {
      throw new DeviceLimitError({
        where: 'MultiHeadAttention.createPagedKvCache',
        argument: 'the pool, 2·maxBlocks·numKvHeads·blockSize·headDim elements',
        expected: `at most maxStorageBufferBindingSize = ${maxBinding} bytes`,
        given: `${this.bytesTotal} bytes`,
        fix: 'Use fewer maxBlocks or a smaller blockSize.',
      });
    }
    const scopes = new ErrorScopes(pool.device);
    try {
      this.buffer = pool.allocate(this.bytesTotal, Usage.STORAGE | Usage.COPY_DST | Usage.COPY_SRC, 'PagedKvCache');
    } finally {
      this.allocated = scopes.verdict('MultiHeadAttention.createPagedKvCache');
    }
    this.generation = generation;
  }

  get bytes(): number {
    return this.buffer ? this.bytesTotal : 0;
  }

  /** Elements of one row, one (block, head) and one half (K or V). */
  private get rowElements(): number {
    return this.lanes;
  }

  private get vBase(): number {
    return this.maxBlocks * this.G * this.blockSize * this.lanes;
  }

  /** The pool, if it lives on the current device (`generation`); else the loss is reported. */
  live(generation: number): GpuPagedPool {
    if (!this.buffer || this.generation !== generation) {
      throw new DeviceLostError(
        "MultiHeadAttention.forward: the paged KV cache's keys and values were lost with the GPU device (they cannot be rebuilt from anything the engine keeps). " +
          'Create a new paged cache with mha.createPagedKvCache() and prefill its sequences again.',
        'destroyed',
      );
    }
    return { buffer: this.buffer, vBase: this.vBase, after: [this.allocated, this.written] };
  }

  /** The buffer when it lives on the current device, else null (copies into a lost pool are moot). */
  private current(): GPUBuffer | null {
    return this.buffer && this.generation === this.host.current().generation ? this.buffer : null;
  }

  /** Byte offset of position `p` of head g of a sequence with these blocks, in half `half` (0: K, 1: V). */
  private rowAt(blocks: Int32Array, g: number, p: number, half: number): number {
    const el = this.host.current().pool.elementBytes;
    const { blockSize, G } = this;
    return (half * this.vBase + ((blocks[Math.floor(p / blockSize)] * G + g) * blockSize + (p % blockSize)) * this.rowElements) * el;
  }

  /**
   * Copies `ranges` ([from, to, bytes] within the pool) through one scratch buffer, in one submission,
   * in error scopes whose verdict joins the pool's write verdict.
   */
  private copyWithin(label: string, ranges: readonly (readonly [from: number, to: number, bytes: number])[]): void {
    const buffer = this.current();
    if (!buffer || ranges.length === 0) return;
    const device = this.host.current().pool.device;
    const total = ranges.reduce((sum, [, , n]) => sum + n, 0);
    const scopes = new ErrorScopes(device);
    let scratch: GPUBuffer | null = null;
    try {
      scratch = device.createBuffer({ label, size: total, usage: Usage.COPY_SRC | Usage.COPY_DST });
      const encoder = device.createCommandEncoder({ label });
      let at = 0;
      for (const [from, , n] of ranges) {
        encoder.copyBufferToBuffer(buffer, from, scratch, at, n);
        at += n;
      }
      at = 0;
      for (const [, to, n] of ranges) {
        encoder.copyBufferToBuffer(scratch, at, buffer, to, n);
        at += n;
      }
      device.queue.submit([encoder.finish()]);
    } finally {
      scratch?.destroy(); // after the submission: WebGPU frees it once the copies ran
      const moved = scopes.verdict(label);
      const before = this.written;
      this.written = Promise.all([before, moved]).then(([a, b]) => a ?? b);
    }
  }

  copyBlock(from: number, to: number): void {
    const el = this.host.current().pool.elementBytes;
    const block = this.G * this.blockSize * this.rowElements * el; // one block's K (or V) of every head
    const v = this.vBase * el;
    this.copyWithin('PagedKvCache.copyBlock', [
      [from * block, to * block, block],
      [v + from * block, v + to * block, block],
    ]);
  }

  moveRows(blocks: Int32Array, rows: readonly number[], to: number): void {
    const el = this.host.current().pool.elementBytes;
    const rowBytes = this.rowElements * el;
    const ranges: [number, number, number][] = [];
    for (let half = 0; half < 2; half++) {
      for (let g = 0; g < this.G; g++) {
        rows.forEach((r, i) => {
          if (r !== to + i) ranges.push([this.rowAt(blocks, g, r, half), this.rowAt(blocks, g, to + i, half), rowBytes]);
        });
      }
    }
    this.copyWithin('PagedKvCache.acceptPath', ranges);
  }

  /** Positions 0 … length − 1 of the sequence with these blocks, K and V of every head, copied to one staging buffer and read back. */
  async read(blocks: Int32Array, length: number): Promise<{ key: Float32Array; value: Float32Array }> {
    const { pool, generation } = this.host.current();
    const live = this.live(generation);
    const el = pool.elementBytes;
    const rowBytes = this.lanes * el;
    const { G, blockSize } = this;
    const half = G * length * rowBytes; // K, then V: [G, length, Dp] each
    if (half === 0) return { key: new Float32Array(0), value: new Float32Array(0) };
    const device = pool.device;
    const scopes = new ErrorScopes(device);
    let staging: GPUBuffer | null = null;
    let commands: GPUCommandBuffer;
    try {
      staging = device.createBuffer({ label: 'PagedKvCache.read', size: 2 * half, usage: Usage.MAP_READ | Usage.COPY_DST });
      const encoder = device.createCommandEncoder({ label: 'PagedKvCache.read' });
      for (let h = 0; h < 2; h++) {
        for (let g = 0; g < G; g++) {
          for (let p = 0; p < length; p += blockSize) {
            const n = Math.min(blockSize, length - p);
            encoder.copyBufferToBuffer(live.buffer, this.rowAt(blocks, g, p, h), staging, h * half + (g * length + p) * rowBytes, n * rowBytes);
          }
        }
      }
      commands = encoder.finish();
    } catch (e) {
      scopes.discard();
      staging?.destroy();
      throw e;
    }
    try {
      const { parts } = await submitAndRead(device, scopes, commands, { staging, parts: [half, half] }, { where: 'PagedKvCache.read', after: live.after });
      const convert = (b: ArrayBuffer) => cropColumns(el === 2 ? fromF16(new Uint16Array(b)) : new Float32Array(b), G * length, this.lanes, this.Dh);
      return { key: convert(parts[0]), value: convert(parts[1]) };
    } finally {
      staging.destroy();
    }
  }

  dispose(): void {
    const buffer = this.current();
    if (buffer) this.host.current().pool.destroy(buffer);
    this.buffer = null;
  }
}
