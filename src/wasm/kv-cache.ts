// A KV cache on the 'wasm' backend: one block held in its layer's kernel memory (WasmKernels.hold:
// outside each call's arena, shared with the workers) with
//   Kᵀ [B, G, ⌈maxSeqLen/64⌉, Dh, 64]  the keys as the attention kernel reads them (wasm/attention.ts)
//   V  [B, G, maxSeqLen, Dh]
// both zero past the filled rows. A forward copies only its new rows in (each key into its column of
// Kᵀ), and the attention reads rows 0 … Skv − 1 where they are: a decode step copies O(new rows).
//
// The block is taken when no forward of the layer is running (its arena lies above the held blocks):
// at once when the cache is made between calls, else by the next forward (place()). Until then a
// past it was made from waits here, and read() answers from it.

import { type KvCacheStorage, readEncodedFromFloats, writeEncodedAsFloats } from '../kv-cache.ts';
import { type HeadView, headSplit, type TransposedKeys } from './attention.ts';
import type { WasmKernels } from './kernels.ts';

const BLOCK = 64; // keys per Kᵀ block (wasm/attention.ts's BC)

export class WasmKvCache implements KvCacheStorage {
  /** Byte address of K [B, G, maxSeqLen, Dh], then V likewise; 0 until placed. */
  private ptr = 0;
  /** Rows written before the block was placed: [B, G, length, Dh] each. */
  private pending: { key: Float32Array; value: Float32Array; length: number } | null = null;
  private disposed = false;
  /** Floats of Kᵀ (then V's start) and of V. */
  private readonly kSize: number;
  private readonly vSize: number;
  /** Floats of one (b, g)'s Kᵀ: ⌈maxSeqLen/64⌉ blocks of Dh × 64. */
  private readonly ktStride: number;

  constructor(
    private readonly kernels: WasmKernels,
    private readonly B: number,
    private readonly G: number,
    private readonly maxSeqLen: number,
    private readonly Dh: number,
  ) {
    this.ktStride = Math.ceil(maxSeqLen / BLOCK) * BLOCK * Dh;
    this.kSize = B * G * this.ktStride;
    this.vSize = B * G * maxSeqLen * Dh;
  }

  get bytes(): number {
    return 4 * (this.kSize + this.vSize);
  }

  readEncoded(length: number): Promise<{ key: Uint8Array; value: Uint8Array }> {
    return readEncodedFromFloats(this, 'f32', this.Dh, length);
  }

  writeEncoded(key: Uint8Array, value: Uint8Array, length: number): void {
    writeEncodedAsFloats(this, 'f32', this.Dh, key, value, length);
  }

  /** Takes the block (zeroed) and writes any pending rows; only while no forward of the layer runs. */
  place(): void {
    if (this.ptr !== 0 || this.disposed) return;
    this.ptr = this.kernels.hold(this.kSize + this.vSize);
    this.zero();
    const pending = this.pending;
    this.pending = null;
    if (pending) this.write(pending.key, pending.value, pending.length);
  }

  /** Kᵀ and V where the attention reads them (V head-split with a row stride of maxSeqLen). */
  views(): { k: TransposedKeys; v: HeadView } {
    const { G, ktStride } = this;
    return {
      k: { kt: (b, g) => this.ptr + 4 * (b * G + g) * ktStride },
      v: headSplit(this.ptr + 4 * this.kSize, this.maxSeqLen, G, this.Dh),
    };
  }

  /** Copies new K, V, token-major [B, n, G·Dh] at byte addresses k, v of the memory, into rows start … start + n − 1. */
  append(k: number, v: number, start: number, n: number): void {
    const { B, G, Dh } = this;
    const f32 = this.kernels.f32;
    for (let b = 0; b < B; b++) {
      for (let s = 0; s < n; s++) {
        for (let g = 0; g < G; g++) {
          const from = ((b * n + s) * G + g) * Dh;
          this.setKey(f32, b * G + g, start + s, f32, (k >> 2) + from);
          const to = this.vRow(b * G + g, start + s);
          f32.copyWithin(to, (v >> 2) + from, (v >> 2) + from + Dh);
        }
      }
    }
  }

  /**
   * The keys of rows 0 … Skv − 1 in a new arena buffer, head-split [B, G, Skv, Dh] (for the float64
   * reference's attention, which reads rows: scoreMod and linear layers).
   */
  keyRows(Skv: number): HeadView {
    const { B, G, Dh } = this;
    const ptr = this.kernels.alloc(B * G * Skv * Dh);
    const f32 = this.kernels.f32;
    for (let bg = 0; bg < B * G; bg++) for (let r = 0; r < Skv; r++) this.getKey(f32, bg, r, f32, (ptr >> 2) + (bg * Skv + r) * Dh);
    return headSplit(ptr, Skv, G, Dh);
  }

  async read(length: number): Promise<{ key: Float32Array; value: Float32Array }> {
    const { B, G, Dh } = this;
    const key = new Float32Array(B * G * length * Dh);
    const value = new Float32Array(B * G * length * Dh);
    if (this.ptr === 0) {
      if (this.pending) {
        key.set(this.pending.key.subarray(0, key.length));
        value.set(this.pending.value.subarray(0, value.length));
      }
      return { key, value };
    }
    const f32 = this.kernels.f32;
    for (let bg = 0; bg < B * G; bg++) {
      for (let r = 0; r < length; r++) this.getKey(f32, bg, r, key, (bg * length + r) * Dh);
      value.set(f32.subarray(this.vRow(bg, 0), this.vRow(bg, length)), bg * length * Dh);
    }
    return { key, value };
  }

  write(key: Float32Array, value: Float32Array, length: number): void {
    if (this.ptr === 0) {
      this.pending = { key: Float32Array.from(key), value: Float32Array.from(value), length };
      return;
    }
    const { B, G, Dh } = this;
    const f32 = this.kernels.f32;
    for (let bg = 0; bg < B * G; bg++) {
      for (let r = 0; r < length; r++) this.setKey(f32, bg, r, key, (bg * length + r) * Dh);
      f32.set(value.subarray(bg * length * Dh, (bg + 1) * length * Dh), this.vRow(bg, 0));
    }
  }

  reset(): void {
    this.pending = null;
    if (this.ptr !== 0) this.zero();
  }

  moveRows(rows: readonly number[], to: number): void {
    const { B, G, Dh } = this;
    if (this.ptr === 0) {
      const p = this.pending;
      if (!p) return;
      for (let bg = 0; bg < B * G; bg++) {
        const base = bg * p.length;
        rows.forEach((r, i) => {
          p.key.copyWithin((base + to + i) * Dh, (base + r) * Dh, (base + r + 1) * Dh);
          p.value.copyWithin((base + to + i) * Dh, (base + r) * Dh, (base + r + 1) * Dh);
        });
      }
      return;
    }
    const f32 = this.kernels.f32;
    for (let bg = 0; bg < B * G; bg++) {
      rows.forEach((r, i) => {
        const from = this.ktColumn(bg, r);
        const into = this.ktColumn(bg, to + i);
        for (let d = 0; d < Dh; d++) f32[into + d * BLOCK] = f32[from + d * BLOCK];
        f32.copyWithin(this.vRow(bg, to + i), this.vRow(bg, r), this.vRow(bg, r) + Dh);
      });
    }
  }

  /** Zeroes rows length … end − 1 (the block is zero past the filled rows). */
  discard(length: number, end: number): void {
    const p = this.pending;
    if (this.ptr === 0 && p && length < p.length) {
      const { B, G, Dh } = this;
      const crop = (a: Float32Array) => {
        const out = new Float32Array(B * G * length * Dh);
        for (let bg = 0; bg < B * G; bg++) out.set(a.subarray(bg * p.length * Dh, (bg * p.length + length) * Dh), bg * length * Dh);
        return out;
      };
      this.pending = { key: crop(p.key), value: crop(p.value), length };
    }
    if (this.ptr === 0 || end <= length) return;
    const { B, G, Dh } = this;
    const f32 = this.kernels.f32;
    for (let bg = 0; bg < B * G; bg++) {
      for (let r = length; r < end; r++) {
        const col = this.ktColumn(bg, r);
        for (let d = 0; d < Dh; d++) f32[col + d * BLOCK] = 0;
      }
      f32.fill(0, this.vRow(bg, length), this.vRow(bg, end));
    }
  }

  /** Key row r of (b, g) [Dh] ← from[at …] (Kᵀ's column r). */
  private setKey(f32: Float32Array, bg: number, r: number, from: Float32Array, at: number): void {
    const col = this.ktColumn(bg, r);
    for (let d = 0; d < this.Dh; d++) f32[col + d * BLOCK] = from[at + d];
  }

  /** to[at …] ← key row r of (b, g) [Dh]. */
  private getKey(f32: Float32Array, bg: number, r: number, to: Float32Array, at: number): void {
    const col = this.ktColumn(bg, r);
    for (let d = 0; d < this.Dh; d++) to[at + d] = f32[col + d * BLOCK];
  }

  /** The float index of Kᵀ[d = 0, key r] of (b, g) = bg. */
  private ktColumn(bg: number, r: number): number {
    return (this.ptr >> 2) + bg * this.ktStride + Math.floor(r / BLOCK) * this.Dh * BLOCK + (r % BLOCK);
  }

  /** The float index of V row r of (b, g) = bg. */
  private vRow(bg: number, r: number): number {
    return (this.ptr >> 2) + this.kSize + (bg * this.maxSeqLen + r) * this.Dh;
  }

  private zero(): void {
    this.kernels.f32.fill(0, this.ptr >> 2, (this.ptr >> 2) + this.kSize + this.vSize);
  }

  /** Gives the block back to the layer's memory, for its next cache. */
  dispose(): void {
    this.disposed = true;
    this.pending = null;
    if (this.ptr !== 0) this.kernels.free(this.ptr);
    this.ptr = 0;
  }
}
