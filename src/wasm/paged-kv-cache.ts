// A PagedKvCache's pool on the 'wasm' backend: one block held in its layer's kernel memory
// (WasmKernels.hold: outside each call's arena, shared with the workers) with
//   K [maxBlocks, G, blockSize, Dh]   then
//   V [maxBlocks, G, blockSize, Dh]   (f32)
// Position p of key/value head g of a sequence is row p mod blockSize of (block blocks[⌊p/blockSize⌋], g):
// a key and a value are each Dh contiguous floats, which wasm/paged.ts's attendPaged reads where they
// are through the block table (4 query rows · one key row of f32x4 per step). A call copies only its new
// rows in (append); copy-on-write copies one block (copyBlock).
//
// Like WasmKvCache, the block is taken when no forward of the layer is running (its arena lies above the
// held blocks): at once when the pool is made between calls, else by the next forward (place()). Until
// then nothing can have been written to it (only its own layer's forwards write), so copyBlock and
// moveRows have nothing to move and read() answers zeros.

import type { PagedKvStorage } from '../paged-kv-cache.ts';
import type { WasmKernels } from './kernels.ts';

export class WasmPagedStorage implements PagedKvStorage {
  /** Byte address of K [maxBlocks, G, blockSize, Dh], then V likewise; 0 until placed. */
  private ptr = 0;
  private disposed = false;
  /** Floats of K (and of V). */
  private readonly size: number;
  /** Floats of one block (all G heads). */
  readonly blockFloats: number;
  /** log2(blockSize). */
  readonly shift: number;

  constructor(
    private readonly kernels: WasmKernels,
    readonly blockSize: number,
    readonly maxBlocks: number,
    readonly G: number,
    readonly Dh: number,
  ) {
    this.blockFloats = G * blockSize * Dh;
    this.size = maxBlocks * this.blockFloats;
    this.shift = Math.log2(blockSize);
  }

  get bytes(): number {
    return 8 * this.size;
  }

  /** Takes the block (zeroed); only while no forward of the layer runs. */
  place(): void {
    if (this.ptr !== 0 || this.disposed) return;
    this.ptr = this.kernels.hold(2 * this.size);
    this.kernels.f32.fill(0, this.ptr >> 2, (this.ptr >> 2) + 2 * this.size);
  }

  /** Byte addresses of K's and V's first block (after place()). */
  get keys(): number {
    return this.ptr;
  }

  get values(): number {
    return this.ptr + 4 * this.size;
  }

  /** The float index (in K; + size in V) of position p of head g of a sequence with these blocks. */
  private at(blocks: Int32Array, g: number, p: number): number {
    return (this.ptr >> 2) + blocks[p >> this.shift] * this.blockFloats + (g * this.blockSize + (p & (this.blockSize - 1))) * this.Dh;
  }

  /**
   * Copies a sequence's new K, V, token-major [n, G·Dh] at byte addresses k, v of the memory, into its
   * positions start … start + n − 1 (its blocks reserved for them).
   */
  append(blocks: Int32Array, k: number, v: number, start: number, n: number): void {
    const { G, Dh, size } = this;
    const f32 = this.kernels.f32;
    for (let s = 0; s < n; s++) {
      for (let g = 0; g < G; g++) {
        const from = (s * G + g) * Dh;
        const to = this.at(blocks, g, start + s);
        f32.copyWithin(to, (k >> 2) + from, (k >> 2) + from + Dh);
        f32.copyWithin(to + size, (v >> 2) + from, (v >> 2) + from + Dh);
      }
    }
  }

  copyBlock(from: number, to: number): void {
    if (this.ptr === 0) return;
    const { blockFloats: n, size } = this;
    const f32 = this.kernels.f32;
    const base = this.ptr >> 2;
    f32.copyWithin(base + to * n, base + from * n, base + (from + 1) * n);
    f32.copyWithin(base + size + to * n, base + size + from * n, base + size + (from + 1) * n);
  }

  async read(blocks: Int32Array, length: number): Promise<{ key: Float32Array; value: Float32Array }> {
    const { G, Dh, size } = this;
    const key = new Float32Array(G * length * Dh);
    const value = new Float32Array(G * length * Dh);
    if (this.ptr === 0) return { key, value };
    const f32 = this.kernels.f32;
    for (let g = 0; g < G; g++) {
      for (let p = 0; p < length; p++) {
        const from = this.at(blocks, g, p);
        key.set(f32.subarray(from, from + Dh), (g * length + p) * Dh);
        value.set(f32.subarray(from + size, from + size + Dh), (g * length + p) * Dh);
      }
    }
    return { key, value };
  }

  moveRows(blocks: Int32Array, rows: readonly number[], to: number): void {
    if (this.ptr === 0) return;
    const { G, Dh, size } = this;
    const f32 = this.kernels.f32;
    for (let g = 0; g < G; g++) {
      rows.forEach((r, i) => {
        const from = this.at(blocks, g, r);
        const into = this.at(blocks, g, to + i);
        f32.copyWithin(into, from, from + Dh);
        f32.copyWithin(into + size, from + size, from + size + Dh);
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
