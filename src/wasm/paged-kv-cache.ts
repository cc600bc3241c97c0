// A PagedKvCache's pool on the 'wasm' backend: one block held in its layer's kernel memory
// (WasmKernels.hold: outside each call's arena, shared with the workers) with
//   K [G, maxBlocks, blockSize] rows   then
//   V [G, maxBlocks, blockSize] rows   (V starts 16-byte aligned)
// of rowBytes = quant/kv.ts's kvRowBytes(dtype, Dh) bytes each, a row stored as the dtype stores it:
//   'f32'   Dh floats
//   'f16'   Dh f16 bits                       } quant/kv.ts's encoded row, as a plain 'wasm' cache
//   'q8_0'  Dh/32 ggml q8_0 blocks (34 bytes) } stores its V rows (src/wasm/kv-cache.ts): the same
//   'q4_0'  Dh/32 ggml q4_0 blocks (18 bytes) } rule (encodeKvRow), the same bytes
// Position p of key/value head g of a sequence is row p mod blockSize of (block blocks[⌊p/blockSize⌋], g):
// wasm/paged.ts's attendPaged reads the rows where they are through the block table (f32 as they are;
// f16 and q-dtypes decoded 64 keys at a time into its scratch by wasm/attention.ts's decoder). A row is
// rounded once, as a call copies its new rows in (append), then only moved as stored bytes: copyBlock
// (copy-on-write), moveRows (acceptPath).
// Head-major (each key/value head's blocks together, not each block's heads together): a sequence whose
// blocks follow each other, as a prefill reserves them, is one run of memory per head, as in a plain
// cache, and attendPaged reads it as one stream. Issue 40's step (8 sequences of 100 … 800 keys, blocks
// of 16 f32 rows of Dh 32: 2 KiB a head) took 196–202 µs in attendPaged with [maxBlocks, G, blockSize],
// 186–189 µs head-major (bench-wasm-decode.ts --paged 8 --embed 256 --heads 8 --kv-heads 2 --steady 1000
// --kernels 500, three alternations). copyBlock copies a block head by head.
//
// Like WasmKvCache, the block is taken when no forward of the layer is running (its arena lies above the
// held blocks): at once when the pool is made between calls, else by the next forward (place()). Until
// then nothing can have been written to it (only its own layer's forwards write), so copyBlock and
// moveRows have nothing to move and read() answers zeros.

import type { PagedKvStorage } from '../paged-kv-cache.ts';
import { decodeKvRow, encodeKvRow, type KvCacheDtype, kvRowBytes } from '../quant/kv.ts';
import type { WasmKernels } from './kernels.ts';

/** wasm/attention.ts's (and wasm/paged.ts's) kind of each dtype. */
const KIND: Record<KvCacheDtype, number> = { f32: 0, f16: 1, q8_0: 2, q4_0: 3 };

export class WasmPagedStorage implements PagedKvStorage {
  /** Byte address of K [G, maxBlocks, blockSize] rows, then (at + vOffset) V likewise; 0 until placed. */
  private ptr = 0;
  private disposed = false;
  /** Bytes of one stored row (K or V, one position of one key/value head). */
  readonly rowBytes: number;
  /** Bytes of one head's rows of a block: the step from a head's block b to its block b + 1. */
  readonly blockStride: number;
  /** Bytes of one head's rows of all blocks: where head g's rows start (g·headBytes). */
  readonly headBytes: number;
  /** Bytes from K's start to V's: K's bytes rounded up to 16. */
  private readonly vOffset: number;
  /** log2(blockSize). */
  readonly shift: number;
  /** wasm/paged.ts's kind of the dtype (0 f32, 1 f16, 2 q8_0, 3 q4_0). */
  readonly kind: number;

  constructor(
    private readonly kernels: WasmKernels,
    readonly blockSize: number,
    readonly maxBlocks: number,
    readonly G: number,
    readonly Dh: number,
    readonly dtype: KvCacheDtype = 'f32',
  ) {
    this.rowBytes = kvRowBytes(dtype, Dh);
    this.blockStride = blockSize * this.rowBytes;
    this.headBytes = maxBlocks * this.blockStride;
    this.vOffset = Math.ceil((G * this.headBytes) / 16) * 16;
    this.shift = Math.log2(blockSize);
    this.kind = KIND[dtype];
  }

  /** What the pool holds: K and V of maxBlocks blocks, each row its dtype's bytes (+ < 16 bytes aligning V). */
  get bytes(): number {
    return 2 * this.vOffset;
  }

  /** Takes the block (zeroed); only while no forward of the layer runs. */
  place(): void {
    if (this.ptr !== 0 || this.disposed) return;
    this.ptr = this.kernels.hold(this.bytes / 4);
    this.kernels.u8.fill(0, this.ptr, this.ptr + this.bytes);
  }

  /** Byte addresses of K's and V's first block (after place()). */
  get keys(): number {
    return this.ptr;
  }

  get values(): number {
    return this.ptr + this.vOffset;
  }

  /** The byte address (in K; + vOffset in V) of position p of head g of a sequence with these blocks. */
  private at(blocks: Int32Array, g: number, p: number): number {
    return this.ptr + g * this.headBytes + blocks[p >> this.shift] * this.blockStride + (p & (this.blockSize - 1)) * this.rowBytes;
  }

  /**
   * Copies a sequence's new K, V, token-major [n, G·Dh] f32 at byte addresses k, v of the memory, into its
   * positions start … start + n − 1 (its blocks reserved for them), each row rounded to the dtype
   * (quant/kv.ts's encodeKvRow, as a plain cache's rows).
   */
  append(blocks: Int32Array, k: number, v: number, start: number, n: number): void {
    const { G, Dh, vOffset, dtype, rowBytes } = this;
    const f32 = this.kernels.f32;
    const u8 = this.kernels.u8;
    for (let s = 0; s < n; s++) {
      for (let g = 0; g < G; g++) {
        const from = (s * G + g) * Dh;
        const to = this.at(blocks, g, start + s);
        if (dtype === 'f32') {
          u8.copyWithin(to, k + 4 * from, k + 4 * from + rowBytes);
          u8.copyWithin(to + vOffset, v + 4 * from, v + 4 * from + rowBytes);
        } else {
          encodeKvRow(dtype, f32.subarray((k >> 2) + from, (k >> 2) + from + Dh), u8, to);
          encodeKvRow(dtype, f32.subarray((v >> 2) + from, (v >> 2) + from + Dh), u8, to + vOffset);
        }
      }
    }
  }

  copyBlock(from: number, to: number): void {
    if (this.ptr === 0) return;
    const { blockStride: n, headBytes, vOffset, G, ptr } = this;
    const u8 = this.kernels.u8;
    for (let g = 0; g < G; g++) {
      const k = ptr + g * headBytes; // head g's rows of K; + vOffset: of V
      u8.copyWithin(k + to * n, k + from * n, k + (from + 1) * n);
      u8.copyWithin(k + vOffset + to * n, k + vOffset + from * n, k + vOffset + (from + 1) * n);
    }
  }

  async read(blocks: Int32Array, length: number): Promise<{ key: Float32Array; value: Float32Array }> {
    const { G, Dh, vOffset, dtype } = this;
    const key = new Float32Array(G * length * Dh);
    const value = new Float32Array(G * length * Dh);
    if (this.ptr === 0) return { key, value };
    const u8 = this.kernels.u8;
    const f32 = this.kernels.f32;
    for (let g = 0; g < G; g++) {
      for (let p = 0; p < length; p++) {
        const from = this.at(blocks, g, p);
        if (dtype === 'f32') {
          key.set(f32.subarray(from >> 2, (from >> 2) + Dh), (g * length + p) * Dh);
          value.set(f32.subarray((from + vOffset) >> 2, ((from + vOffset) >> 2) + Dh), (g * length + p) * Dh);
          continue;
        }
        decodeKvRow(dtype, u8, from, Dh, key, (g * length + p) * Dh);
        decodeKvRow(dtype, u8, from + vOffset, Dh, value, (g * length + p) * Dh);
      }
    }
    return { key, value };
  }

  moveRows(blocks: Int32Array, rows: readonly number[], to: number): void {
    if (this.ptr === 0) return;
    const { G, vOffset, rowBytes } = this;
    const u8 = this.kernels.u8;
    for (let g = 0; g < G; g++) {
      rows.forEach((r, i) => {
        const from = this.at(blocks, g, r);
        const into = this.at(blocks, g, to + i);
        u8.copyWithin(into, from, from + rowBytes);
        u8.copyWithin(into + vOffset, from + vOffset, from + vOffset + rowBytes);
      });
    }
  }

  /** Gives the block back to the layer's memory. */
  dispose(): void {
    this.disposed = true;
    if (this.ptr !== 0) this.kernels.free(this.ptr);
    this.ptr = 0;
  }
}
