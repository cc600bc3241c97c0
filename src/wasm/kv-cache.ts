// A KV cache on the 'wasm' backend: one block held in its layer's kernel memory (WasmKernels.hold:
// outside each call's arena, shared with the workers), per (sequence b, key/value head g), as the
// attention kernel (wasm/attention.ts) reads it in place:
//   'f32'   Kᵀ [⌈maxSeqLen/64⌉, Dh, 64] f32                              V [maxSeqLen, Dh] f32
//   'f16'   Kᵀ [⌈maxSeqLen/64⌉, Dh, 64] f16 bits                         V [maxSeqLen, Dh] f16 bits
//   'q8_0'  Kᵀ [⌈maxSeqLen/64⌉, Dh, 64] int8, with its scales            V [maxSeqLen] rows of ggml
//           [⌈maxSeqLen/64⌉, Dh/32, 64] f16 (key j's block of 32 along Dh)   q8_0 blocks (quant/kv.ts's rows)
//   'q4_0'  Kᵀ [⌈maxSeqLen/64⌉, Dh, 32 bytes]: key 32h + i (i < 16) in the low nibble of byte 16h + i,
//           key 32h + 16 + i in its high nibble; scales as q8_0's       V [maxSeqLen] rows of ggml q4_0 blocks
// all zero past the filled rows. A row is rounded once, as it is written (quant/kv.ts's encodeKvRow, the
// one rule: f16 round-to-nearest-even, ggml's quantize_row_q8_0_ref / q4_0_ref), then only moved:
// readEncoded/writeEncoded, moveRows (acceptPath) and discard (truncate) work on the stored bytes.
// A forward copies only its new rows in (each key into its column of Kᵀ), and the attention reads
// rows 0 … Skv − 1 where they are: a decode step copies O(new rows).
//
// The block is taken when no forward of the layer is running (its arena lies above the held blocks):
// at once when the cache is made between calls, else by the next forward (place()). Until then a
// past it was made from waits here, as encoded rows, and read() answers from it.

import type { KvCacheStorage } from '../kv-cache.ts';
import { decodeKvRow, encodeKvRow, kvRowBytes } from '../quant/kv.ts';
import type { KvCacheDtype } from '../types.ts';
import { type HeadView, headSplit, type StoredKv, type TransposedKeys } from './attention.ts';
import type { WasmKernels } from './kernels.ts';
import { BLOCK, getKey, keyColumn, putKey } from './kv-columns.ts';

/** Whether f16 bits (bytes, little-endian) hold a ±∞ or NaN: an exponent of all ones. */
function hasSpecialHalf(bytes: Uint8Array): boolean {
  for (let i = 1; i < bytes.length; i += 2) if ((bytes[i] & 0x7c) === 0x7c) return true;
  return false;
}

/** wasm/attention.ts's kind of each dtype. */
const KIND: Record<KvCacheDtype, number> = { f32: 0, f16: 1, q8_0: 2, q4_0: 3 };

export class WasmKvCache implements KvCacheStorage {
  /** Byte address of the block (Kᵀ of every (b, g), then K scales, then V); 0 until placed. */
  private ptr = 0;
  /** Rows written before the block was placed: K and V [B, G, length] rows of rowBytes each (quant/kv.ts's encoding). */
  private pending: { key: Uint8Array; value: Uint8Array; length: number } | null = null;
  private disposed = false;
  /**
   * 'f16': whether a ±∞ or NaN half was ever written (sticky until reset()); while none was, the
   * attention's f16 kernels skip their check for them (StoredKv.finite).
   */
  private special = false;
  /** Bytes of one (b, g)'s Kᵀ, K scales and V. */
  private readonly ktBytes: number;
  private readonly ksBytes: number;
  private readonly vBytes: number;
  /** Bytes of one encoded row (quant/kv.ts's kvRowBytes): a stored V row too. */
  private readonly rowBytes: number;
  /** A row's bytes, for moving keys. */
  private readonly row: Uint8Array;

  constructor(
    private readonly kernels: WasmKernels,
    private readonly B: number,
    private readonly G: number,
    private readonly maxSeqLen: number,
    private readonly Dh: number,
    readonly dtype: KvCacheDtype = 'f32',
  ) {
    const blocks = Math.ceil(maxSeqLen / BLOCK);
    this.rowBytes = kvRowBytes(dtype, Dh);
    // Kᵀ: Dh·64 values a block, of 4, 2, 1 or ½ bytes; scales: Dh/32 · 64 f16s a block.
    this.ktBytes = blocks * Dh * BLOCK * { f32: 4, f16: 2, q8_0: 1, q4_0: 0.5 }[dtype];
    this.ksBytes = dtype === 'q8_0' || dtype === 'q4_0' ? blocks * (Dh / 32) * BLOCK * 2 : 0;
    this.vBytes = maxSeqLen * this.rowBytes;
    this.row = new Uint8Array(this.rowBytes);
  }

  /** What the block holds: K (and its scales) and V of every (b, g), all maxSeqLen positions. */
  get bytes(): number {
    return this.B * this.G * (this.ktBytes + this.ksBytes + this.vBytes);
  }

  /** Takes the block (zeroed) and writes any pending rows; only while no forward of the layer runs. */
  place(): void {
    if (this.ptr !== 0 || this.disposed) return;
    this.ptr = this.kernels.hold(Math.ceil(this.bytes / 4));
    this.zero();
    const pending = this.pending;
    this.pending = null;
    if (pending) this.writeEncoded(pending.key, pending.value, pending.length);
  }

  /** Kᵀ and V where the attention reads them (f32: V head-split with a row stride of maxSeqLen; else `stored`). */
  views(): { k: TransposedKeys; v: HeadView } {
    const { G, ksBytes } = this;
    const k: TransposedKeys = { kt: (b, g) => this.ktAt(b * G + g) };
    if (this.dtype !== 'f32') {
      const stored: StoredKv = {
        kind: KIND[this.dtype],
        ks: (b, g) => (ksBytes ? this.ksAt(b * G + g) : 0),
        v: (b, g) => this.vRow(b * G + g, 0),
        vRowBytes: this.rowBytes,
        finite: this.dtype === 'f16' && !this.special,
      };
      k.stored = stored;
    }
    // f32: V [B, G, maxSeqLen, Dh] after every Kᵀ (no scales); for other dtypes the view is unused.
    return { k, v: headSplit(this.vRow(0, 0), this.maxSeqLen, G, this.Dh) };
  }

  /** Copies new K, V, token-major [B, n, G·Dh] f32 at byte addresses k, v of the memory, into rows start … start + n − 1 (rounded to the dtype). */
  append(k: number, v: number, start: number, n: number): void {
    const { B, G, Dh, dtype } = this;
    if (dtype === 'f16') {
      this.appendHalves(k, v, start, n);
      return;
    }
    for (let b = 0; b < B; b++) {
      for (let s = 0; s < n; s++) {
        for (let g = 0; g < G; g++) {
          const from = ((b * n + s) * G + g) * Dh;
          const bg = b * G + g;
          const f32 = this.kernels.f32;
          if (dtype === 'f32') {
            this.setKeyF32(f32, bg, start + s, f32, (k >> 2) + from);
            const to = this.vRow(bg, start + s) >> 2;
            f32.copyWithin(to, (v >> 2) + from, (v >> 2) + from + Dh);
          } else {
            encodeKvRow(dtype, f32.subarray((k >> 2) + from, (k >> 2) + from + Dh), this.row, 0);
            this.putKey(bg, start + s, this.row, 0);
            encodeKvRow(dtype, f32.subarray((v >> 2) + from, (v >> 2) + from + Dh), this.kernels.u8, this.vRow(bg, start + s));
          }
        }
      }
    }
  }

  /**
   * append() for 'f16': each value rounded as encodeKvRow rounds it (wasm/halves.ts toHalves:
   * halfBitsOfFloat32Bits's bits, four at a time) straight into its place, the key into its column of
   * Kᵀ: no row between (a decode step of E 2048 G 4 spent 0.06 ms a layer in encodeKvRow and putKey,
   * then ~0.03 ms in this loop in JavaScript). Notes a ±∞ or NaN half written (`special`).
   */
  private appendHalves(k: number, v: number, start: number, n: number): void {
    const { B, G, Dh } = this;
    const scratch = this.kernels.alloc(4);
    for (let b = 0; b < B; b++) {
      for (let s = 0; s < n; s++) {
        const r = start + s;
        const column = 2 * keyColumn(r, Dh); // Kᵀ's element (r, d = 0), in bytes from ktAt
        for (let g = 0; g < G; g++) {
          const from = 4 * ((b * n + s) * G + g) * Dh;
          const bg = b * G + g;
          if (this.kernels.k.toHalves(k + from, this.ktAt(bg) + column, 2 * BLOCK, v + from, this.vRow(bg, r), Dh, scratch)) this.special = true;
        }
      }
    }
  }

  /**
   * The keys of rows 0 … Skv − 1 as f32 in a new arena buffer, head-split [B, G, Skv, Dh] (for the
   * float64 reference's attention, which reads rows: scoreMod and linear layers).
   */
  keyRows(Skv: number): HeadView {
    const { B, G, Dh } = this;
    const ptr = this.kernels.alloc(B * G * Skv * Dh);
    const f32 = this.kernels.f32;
    for (let bg = 0; bg < B * G; bg++) {
      for (let r = 0; r < Skv; r++) {
        const at = (ptr >> 2) + (bg * Skv + r) * Dh;
        if (this.dtype === 'f32') this.getKeyF32(f32, bg, r, f32, at);
        else {
          this.getKey(bg, r, this.row, 0);
          decodeKvRow(this.dtype, this.row, 0, Dh, f32, at);
        }
      }
    }
    return headSplit(ptr, Skv, G, Dh);
  }

  /** The values of rows 0 … Skv − 1 as f32 in a new arena buffer, head-split [B, G, Skv, Dh] (keyRows' twin; f32 caches need none). */
  valueRows(Skv: number): HeadView {
    const { B, G, Dh, dtype } = this;
    const ptr = this.kernels.alloc(B * G * Skv * Dh);
    const f32 = this.kernels.f32;
    const u8 = this.kernels.u8;
    for (let bg = 0; bg < B * G; bg++) for (let r = 0; r < Skv; r++) decodeKvRow(dtype, u8, this.vRow(bg, r), Dh, f32, (ptr >> 2) + (bg * Skv + r) * Dh);
    return headSplit(ptr, Skv, G, Dh);
  }

  async read(length: number): Promise<{ key: Float32Array; value: Float32Array }> {
    const { B, G, Dh, dtype } = this;
    const key = new Float32Array(B * G * length * Dh);
    const value = new Float32Array(B * G * length * Dh);
    if (this.ptr === 0) {
      const p = this.pending;
      if (p) {
        for (let bg = 0; bg < B * G; bg++) {
          for (let r = 0; r < length; r++) {
            const from = (bg * p.length + r) * this.rowBytes;
            decodeKvRow(dtype, p.key, from, Dh, key, (bg * length + r) * Dh);
            decodeKvRow(dtype, p.value, from, Dh, value, (bg * length + r) * Dh);
          }
        }
      }
      return { key, value };
    }
    const f32 = this.kernels.f32;
    const u8 = this.kernels.u8;
    for (let bg = 0; bg < B * G; bg++) {
      for (let r = 0; r < length; r++) {
        const at = (bg * length + r) * Dh;
        if (dtype === 'f32') this.getKeyF32(f32, bg, r, key, at);
        else {
          this.getKey(bg, r, this.row, 0);
          decodeKvRow(dtype, this.row, 0, Dh, key, at);
        }
        decodeKvRow(dtype, u8, this.vRow(bg, r), Dh, value, at);
      }
    }
    return { key, value };
  }

  /** Rows 0 … length − 1 from float32 [B, G, length, Dh], each rounded to the dtype (encodeKvRow) as a forward's rows are. */
  write(key: Float32Array, value: Float32Array, length: number): void {
    const { B, G, Dh, dtype, rowBytes } = this;
    const ek = new Uint8Array(B * G * length * rowBytes);
    const ev = new Uint8Array(B * G * length * rowBytes);
    for (let i = 0; i < B * G * length; i++) {
      encodeKvRow(dtype, key.subarray(i * Dh, (i + 1) * Dh), ek, i * rowBytes);
      encodeKvRow(dtype, value.subarray(i * Dh, (i + 1) * Dh), ev, i * rowBytes);
    }
    this.writeEncoded(ek, ev, length);
  }

  async readEncoded(length: number): Promise<{ key: Uint8Array; value: Uint8Array }> {
    const { B, G, rowBytes } = this;
    const key = new Uint8Array(B * G * length * rowBytes);
    const value = new Uint8Array(B * G * length * rowBytes);
    if (this.ptr === 0) {
      const p = this.pending;
      if (p) {
        for (let bg = 0; bg < B * G; bg++) {
          key.set(p.key.subarray(bg * p.length * rowBytes, (bg * p.length + length) * rowBytes), bg * length * rowBytes);
          value.set(p.value.subarray(bg * p.length * rowBytes, (bg * p.length + length) * rowBytes), bg * length * rowBytes);
        }
      }
      return { key, value };
    }
    const u8 = this.kernels.u8;
    for (let bg = 0; bg < B * G; bg++) {
      for (let r = 0; r < length; r++) this.getKey(bg, r, key, (bg * length + r) * rowBytes);
      value.set(u8.subarray(this.vRow(bg, 0), this.vRow(bg, length)), bg * length * rowBytes);
    }
    return { key, value };
  }

  writeEncoded(key: Uint8Array, value: Uint8Array, length: number): void {
    const { B, G, rowBytes } = this;
    if (this.dtype === 'f16' && !this.special) this.special = hasSpecialHalf(key) || hasSpecialHalf(value);
    if (this.ptr === 0) {
      this.pending = { key: Uint8Array.from(key), value: Uint8Array.from(value), length };
      return;
    }
    const u8 = this.kernels.u8;
    for (let bg = 0; bg < B * G; bg++) {
      for (let r = 0; r < length; r++) this.putKey(bg, r, key, (bg * length + r) * rowBytes);
      u8.set(value.subarray(bg * length * rowBytes, (bg + 1) * length * rowBytes), this.vRow(bg, 0));
    }
  }

  reset(): void {
    this.pending = null;
    this.special = false;
    if (this.ptr !== 0) this.zero();
  }

  /** Rows `rows` (ascending, each ≥ its target) to to, to + 1, …: the stored bytes, unchanged. */
  moveRows(rows: readonly number[], to: number): void {
    const { B, G, rowBytes } = this;
    if (this.ptr === 0) {
      const p = this.pending;
      if (!p) return;
      for (let bg = 0; bg < B * G; bg++) {
        const base = bg * p.length;
        rows.forEach((r, i) => {
          p.key.copyWithin((base + to + i) * rowBytes, (base + r) * rowBytes, (base + r + 1) * rowBytes);
          p.value.copyWithin((base + to + i) * rowBytes, (base + r) * rowBytes, (base + r + 1) * rowBytes);
        });
      }
      return;
    }
    const u8 = this.kernels.u8;
    for (let bg = 0; bg < B * G; bg++) {
      rows.forEach((r, i) => {
        this.getKey(bg, r, this.row, 0);
        this.putKey(bg, to + i, this.row, 0);
        u8.copyWithin(this.vRow(bg, to + i), this.vRow(bg, r), this.vRow(bg, r) + rowBytes);
      });
    }
  }

  /** Zeroes rows length … end − 1 (the block is zero past the filled rows). */
  discard(length: number, end: number): void {
    const { B, G, rowBytes } = this;
    const p = this.pending;
    if (this.ptr === 0 && p && length < p.length) {
      const crop = (a: Uint8Array) => {
        const out = new Uint8Array(B * G * length * rowBytes);
        for (let bg = 0; bg < B * G; bg++) out.set(a.subarray(bg * p.length * rowBytes, (bg * p.length + length) * rowBytes), bg * length * rowBytes);
        return out;
      };
      this.pending = { key: crop(p.key), value: crop(p.value), length };
    }
    if (this.ptr === 0 || end <= length) return;
    const zero = new Uint8Array(rowBytes);
    for (let bg = 0; bg < B * G; bg++) {
      for (let r = length; r < end; r++) this.putKey(bg, r, zero, 0);
      this.kernels.u8.fill(0, this.vRow(bg, length), this.vRow(bg, end));
    }
  }

  /** Key row r of (b, g) = bg from its encoded row at from[at …] into Kᵀ's column r (kv-columns.ts). */
  private putKey(bg: number, r: number, from: Uint8Array, at: number): void {
    putKey(this.kernels.u8, this.dtype, this.Dh, this.ktAt(bg), this.ksAt(bg), r, from, at);
  }

  /** to[at …] ← key row r of (b, g) = bg, encoded. */
  private getKey(bg: number, r: number, to: Uint8Array, at: number): void {
    getKey(this.kernels.u8, this.dtype, this.Dh, this.ktAt(bg), this.ksAt(bg), r, to, at);
  }

  /** Key row r of (b, g) [Dh] ← from[at …] (an f32 cache's Kᵀ column r). */
  private setKeyF32(f32: Float32Array, bg: number, r: number, from: Float32Array, at: number): void {
    const col = this.ktColumnF32(bg, r);
    for (let d = 0; d < this.Dh; d++) f32[col + d * BLOCK] = from[at + d];
  }

  /** to[at …] ← key row r of (b, g) [Dh] (an f32 cache's). */
  private getKeyF32(f32: Float32Array, bg: number, r: number, to: Float32Array, at: number): void {
    const col = this.ktColumnF32(bg, r);
    for (let d = 0; d < this.Dh; d++) to[at + d] = f32[col + d * BLOCK];
  }

  /** The float index of Kᵀ[d = 0, key r] of (b, g) = bg (f32 caches). */
  private ktColumnF32(bg: number, r: number): number {
    return (this.ktAt(bg) >> 2) + keyColumn(r, this.Dh);
  }

  /** Byte address of (b, g) = bg's Kᵀ. */
  private ktAt(bg: number): number {
    return this.ptr + bg * this.ktBytes;
  }

  /** Byte address of (b, g) = bg's K scales (q-dtypes). */
  private ksAt(bg: number): number {
    return this.ptr + this.B * this.G * this.ktBytes + bg * this.ksBytes;
  }

  /** Byte address of V row r of (b, g) = bg. */
  private vRow(bg: number, r: number): number {
    return this.ptr + this.B * this.G * (this.ktBytes + this.ksBytes) + bg * this.vBytes + r * this.rowBytes;
  }

  private zero(): void {
    this.kernels.u8.fill(0, this.ptr, this.ptr + this.bytes);
  }

  /** Gives the block back to the layer's memory, for its next cache. */
  dispose(): void {
    this.disposed = true;
    this.pending = null;
    if (this.ptr !== 0) this.kernels.free(this.ptr);
    this.ptr = 0;
  }
}
