// A PagedKvCache's pool on the GPU (one layer's): ONE buffer, K then V, each [maxBlocks, G, blockSize, ·],
// kept as the pool's dtype in the plain cache's layout (kv-cache.ts), so the same loaders read it:
//   float dtypes  rows of Dp values (Dp = Dh rounded up to a multiple of 4, padding.ts; read() gives Dh):
//                 the engine's ST4, 'f32' vec4<f32> on an f16 engine, 'f16' packed pairs on an f32 engine
//   q8_0, q4_0    the quants plane (the vec4 of values i of K ++ V in word i, or half of word i/2), then
//                 from word `scales` every block's f16 d, K's then V's, two a word
// Block b of key/value head g holds its positions' rows at row (b·G + g)·blockSize + offset, so a block's
// K of every head is one contiguous range of quants (copyBlock copies two ranges: K and V); a q-dtype's
// scales are halves of words, which a row may share with the next one's (Dh/32 odd): they move by a
// kernel (paged_move_scales.wgsl) that writes each touched word whole.
//
// As kv-cache.ts: the allocation and every write (copyBlock, moveRows) run in error scopes whose verdict
// the pool keeps; a forward and a read() await them (submit.ts) and reject with WebGPUCallError when
// WebGPU refused one. A pool belongs to one device generation: after a device loss its contents are gone,
// and a forward or read() says so (DeviceLostError); copyBlock and moveRows then do nothing (what they would
// move is gone, and the next forward reports it). WebGPU copies no buffer onto itself, so copies within
// the pool go through a scratch buffer, in one submission each (ordered after every call submitted before).

import { DeviceLimitError, DeviceLostError } from '../errors.ts';
import type { PagedKvStorage } from '../paged-kv-cache.ts';
import { decodeKvRows, KV_BLOCK_BYTES, kvRowBytes } from '../quant/kv.ts';
import type { KvCacheDtype } from '../types.ts';
import { fromF16 } from '../util/f16.ts';
import { Usage } from './buffers.ts';
import { type KvFormat, kvFormatOf } from './kernels/attention-fields.ts';
import { encodePagedMoveScales } from './kernels/paged-write.ts';
import type { CacheHost } from './kv-cache.ts';
import { cropColumns, up4 } from './padding.ts';
import { CallScratch } from './scratch.ts';
import { ACCEPTED, ErrorScopes, type Verdict } from './scopes.ts';
import { submitAndRead } from './submit.ts';

/** A q-dtype pool's planes, in u32 words. */
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
  /** Words of the scale plane. */
  scaleWords: number;
}

const KEEP = 0xffffffff;

/** A pool on the GPU as a forward reads it. */
export interface GpuPagedPool {
  buffer: GPUBuffer;
  /** Values (as the kernels index them: vec4s × 4) from the start of K to V. */
  vBase: number;
  /** How the kernels read it (undefined: the engine's ST4). */
  format?: KvFormat;
  /** q8_0/q4_0: the word where the scales start. */
  scales?: number;
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
  /** How the kernels read it (undefined: as the engine's tensors). */
  readonly format: KvFormat | undefined;
  /** A float pool's bytes per value (2 or 4); 0 for q-dtypes. */
  private readonly el: number;
  /** A q-dtype pool's planes; null for float pools. */
  private readonly layout: BlockLayout | null;
  /** Bytes of one row's quants (or values) in the buffer. */
  private readonly rowBytes: number;

  constructor(
    private readonly host: CacheHost,
    readonly blockSize: number,
    readonly maxBlocks: number,
    readonly G: number,
    private readonly Dh: number,
    readonly dtype: KvCacheDtype,
  ) {
    this.lanes = up4(Dh);
    const { pool, generation } = host.current();
    this.format = kvFormatOf(dtype, pool.precision);
    const rows = maxBlocks * G * blockSize;
    if (dtype === 'q8_0' || dtype === 'q4_0') {
      const rowWords = dtype === 'q8_0' ? Dh / 4 : Dh / 8;
      const nb = Dh / 32;
      const halfWords = rows * rowWords;
      const scaleWords = rows * nb; // 2·rows·nb halves
      this.layout = { dtype, rowWords, nb, halfWords, scales: 2 * halfWords, scaleWords };
      this.el = 0;
      this.rowBytes = 4 * rowWords;
      this.bytesTotal = 4 * (2 * halfWords + scaleWords);
    } else {
      this.layout = null;
      this.el = dtype === 'f32' ? 4 : 2;
      this.rowBytes = this.lanes * this.el;
      this.bytesTotal = 2 * rows * this.rowBytes;
    }
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

  /** Rows of K (V's first row). */
  private get halfRows(): number {
    return this.maxBlocks * this.G * this.blockSize;
  }

  /** V's first value as the kernels index them. */
  private get vBase(): number {
    return this.halfRows * (this.layout ? this.Dh : this.lanes);
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
    const format = this.format ? { format: this.format } : {};
    const scales = this.layout ? { scales: this.layout.scales } : {};
    return { buffer: this.buffer, vBase: this.vBase, ...format, ...scales, after: [this.allocated, this.written] };
  }

  /** The buffer when it lives on the current device, else null (copies into a lost pool are moot). */
  private current(): GPUBuffer | null {
    return this.buffer && this.generation === this.host.current().generation ? this.buffer : null;
  }

  /** The pool row (K's and V's counted together) of position `p` of head g of a sequence with these blocks, in half `half` (0: K, 1: V). */
  private rowIndex(blocks: Int32Array, g: number, p: number, half: number): number {
    const { blockSize, G } = this;
    return half * this.halfRows + (blocks[Math.floor(p / blockSize)] * G + g) * blockSize + (p % blockSize);
  }

  /** Byte offset of that row's values (or quants). */
  private rowAt(blocks: Int32Array, g: number, p: number, half: number): number {
    return this.rowIndex(blocks, g, p, half) * this.rowBytes;
  }

  /** A q-dtype pool's scale moves (block `to` ← block `from`, both in the whole plane) as paged_move_scales.wgsl's triples, by word written. */
  private static scaleMoves(pairs: readonly (readonly [to: number, from: number])[]): Uint32Array<ArrayBuffer> {
    const words = new Map<number, [number, number]>();
    for (const [to, from] of pairs) {
      const w = to >> 1;
      let entry = words.get(w);
      if (!entry) {
        entry = [KEEP, KEEP];
        words.set(w, entry);
      }
      entry[to & 1] = from;
    }
    const out = new Uint32Array(3 * words.size);
    let i = 0;
    for (const [w, [lo, hi]] of words) out.set([w, lo, hi], 3 * i++);
    return out;
  }

  /**
   * Copies `ranges` ([from, to, bytes] within the pool) through one scratch buffer, in one submission,
   * in error scopes whose verdict joins the pool's write verdict.
   */
  private copyWithin(
    label: string,
    ranges: readonly (readonly [from: number, to: number, bytes: number])[],
    scalePairs: readonly (readonly [to: number, from: number])[] = [],
  ): void {
    const buffer = this.current();
    if (!buffer || ranges.length === 0) return;
    const pool = this.host.current().pool;
    const device = pool.device;
    const total = ranges.reduce((sum, [, , n]) => sum + n, 0);
    const scopes = new ErrorScopes(device);
    let scratch: GPUBuffer | null = null;
    const layout = this.layout;
    const callScratch = layout && scalePairs.length > 0 ? new CallScratch(pool) : null;
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
      if (layout && callScratch) {
        // the scales: from a copy of the plane, each word written whole by one invocation
        const moves = WebGPUPagedStorage.scaleMoves(scalePairs);
        const old = callScratch.storage(4 * layout.scaleWords, `${label}.scales`);
        encoder.copyBufferToBuffer(buffer, 4 * layout.scales, old, 0, 4 * layout.scaleWords);
        const table = callScratch.storage(moves.byteLength, `${label}.moves`);
        device.queue.writeBuffer(table, 0, moves);
        const pass = encoder.beginComputePass({ label });
        encodePagedMoveScales(pass, callScratch, { moves: table, old, dst: buffer, n: moves.length / 3, scales: layout.scales });
        pass.end();
      }
      device.queue.submit([encoder.finish()]);
    } finally {
      scratch?.destroy(); // after the submission: WebGPU frees it once the copies ran
      callScratch?.releaseAll(); // the pool's later users are ordered after this submission
      const moved = scopes.verdict(label);
      const before = this.written;
      this.written = Promise.all([before, moved]).then(([a, b]) => a ?? b);
    }
  }

  copyBlock(from: number, to: number): void {
    const blockRows = this.G * this.blockSize; // one block's K (or V) of every head
    const block = blockRows * this.rowBytes;
    const v = this.halfRows * this.rowBytes;
    const pairs: [number, number][] = [];
    const nb = this.layout?.nb ?? 0;
    for (let half = 0; half < 2; half++) {
      const base = half * this.halfRows;
      for (let k = 0; k < blockRows * nb; k++) pairs.push([(base + to * blockRows) * nb + k, (base + from * blockRows) * nb + k]);
    }
    this.copyWithin(
      'PagedKvCache.copyBlock',
      [
        [from * block, to * block, block],
        [v + from * block, v + to * block, block],
      ],
      pairs,
    );
  }

  moveRows(blocks: Int32Array, rows: readonly number[], to: number): void {
    const rowBytes = this.rowBytes;
    const nb = this.layout?.nb ?? 0;
    const ranges: [number, number, number][] = [];
    const pairs: [number, number][] = [];
    for (let half = 0; half < 2; half++) {
      for (let g = 0; g < this.G; g++) {
        rows.forEach((r, i) => {
          if (r === to + i) return;
          const src = this.rowIndex(blocks, g, r, half);
          const dst = this.rowIndex(blocks, g, to + i, half);
          ranges.push([src * rowBytes, dst * rowBytes, rowBytes]);
          for (let k = 0; k < nb; k++) pairs.push([dst * nb + k, src * nb + k]);
        });
      }
    }
    this.copyWithin('PagedKvCache.acceptPath', ranges, pairs);
  }

  /** Positions 0 … length − 1 of the sequence with these blocks, K and V of every head, copied to one staging buffer and read back. */
  async read(blocks: Int32Array, length: number): Promise<{ key: Float32Array; value: Float32Array }> {
    if (this.layout) return this.readBlocks(blocks, length, this.layout);
    const { pool, generation } = this.host.current();
    const live = this.live(generation);
    const el = this.el;
    const rowBytes = this.rowBytes;
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

  /** A q-dtype pool's positions 0 … length − 1: each row's quants and scale words read back, converted to ggml's blocks and dequantized (quant/kv.ts decodeKvRows). */
  private async readBlocks(blocks: Int32Array, length: number, layout: BlockLayout): Promise<{ key: Float32Array; value: Float32Array }> {
    const { G, Dh } = this;
    if (G * length === 0) return { key: new Float32Array(0), value: new Float32Array(0) };
    const { pool, generation } = this.host.current();
    const live = this.live(generation);
    const { nb } = layout;
    const rowBytes = this.rowBytes;
    const scaleBytes = 4 * Math.ceil((nb + 1) / 2); // the words a row's nb scales lie in, at most
    const rows = 2 * G * length;
    const device = pool.device;
    const scopes = new ErrorScopes(device);
    let staging: GPUBuffer | null = null;
    let commands: GPUCommandBuffer;
    const rowOf = (h: number, g: number, p: number) => this.rowIndex(blocks, g, p, h);
    const scaleWordsAt = (row: number) => Math.min((row * nb) >> 1, layout.scaleWords - scaleBytes / 4);
    try {
      staging = device.createBuffer({ label: 'PagedKvCache.read', size: rows * (rowBytes + scaleBytes), usage: Usage.MAP_READ | Usage.COPY_DST });
      const encoder = device.createCommandEncoder({ label: 'PagedKvCache.read' });
      let i = 0;
      for (let h = 0; h < 2; h++) {
        for (let g = 0; g < G; g++) {
          for (let p = 0; p < length; p++, i++) {
            const row = rowOf(h, g, p);
            encoder.copyBufferToBuffer(live.buffer, row * rowBytes, staging, i * rowBytes, rowBytes);
            encoder.copyBufferToBuffer(live.buffer, 4 * (layout.scales + scaleWordsAt(row)), staging, rows * rowBytes + i * scaleBytes, scaleBytes);
          }
        }
      }
      commands = encoder.finish();
    } catch (e) {
      scopes.discard();
      staging?.destroy();
      throw e;
    }
    let data: Uint8Array;
    try {
      const total = rows * (rowBytes + scaleBytes);
      const { parts } = await submitAndRead(device, scopes, commands, { staging, parts: [total] }, { where: 'PagedKvCache.read', after: live.after });
      data = new Uint8Array(parts[0]);
    } finally {
      staging.destroy();
    }
    const bytes = KV_BLOCK_BYTES[layout.dtype];
    const encodedRow = kvRowBytes(layout.dtype, Dh);
    const out = [new Uint8Array(G * length * encodedRow), new Uint8Array(G * length * encodedRow)];
    let i = 0;
    for (let h = 0; h < 2; h++) {
      for (let g = 0; g < G; g++) {
        for (let p = 0; p < length; p++, i++) {
          const row = rowOf(h, g, p);
          const quants = i * rowBytes;
          const scaleAt = rows * rowBytes + i * scaleBytes - 4 * scaleWordsAt(row); // + 2·block: block's f16
          for (let c = 0; c < nb; c++) {
            const o = ((g * length + p) * nb + c) * bytes;
            const s = scaleAt + 2 * (row * nb + c);
            out[h][o] = data[s];
            out[h][o + 1] = data[s + 1];
            const q = quants + c * (bytes - 2);
            if (layout.dtype === 'q8_0') out[h].set(data.subarray(q, q + 32), o + 2);
            else {
              // ours: value v in nibble v % 8 of word v / 8; ggml's: byte t holds values t (low) and t + 16 (high)
              const nibble = (v: number) => (data[q + (v >> 1)] >> (4 * (v & 1))) & 15;
              for (let t = 0; t < 16; t++) out[h][o + 2 + t] = nibble(t) | (nibble(t + 16) << 4);
            }
          }
        }
      }
    }
    return { key: decodeKvRows(layout.dtype, out[0], Dh), value: decodeKvRows(layout.dtype, out[1], Dh) };
  }

  dispose(): void {
    const buffer = this.current();
    if (buffer) this.host.current().pool.destroy(buffer);
    this.buffer = null;
  }
}
