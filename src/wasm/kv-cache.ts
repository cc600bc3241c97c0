// A KV cache on the 'wasm' backend: K and V [B, G, maxSeqLen, Dh] float32 arrays in JavaScript
// (a cache outlives every forward's arena). A forward appends its new rows from kernel memory and
// copies rows 0 … Skv − 1 back in for the attention.

import type { KvCacheStorage } from '../kv-cache.ts';

export class WasmKvCache implements KvCacheStorage {
  k: Float32Array;
  v: Float32Array;

  constructor(
    private readonly B: number,
    private readonly G: number,
    private readonly maxSeqLen: number,
    private readonly Dh: number,
  ) {
    this.k = new Float32Array(B * G * maxSeqLen * Dh);
    this.v = new Float32Array(B * G * maxSeqLen * Dh);
  }

  /** Writes new K, V, token-major [B, n, G·Dh] at float offsets k, v of `memory`, into rows start … start + n − 1. */
  append(memory: Float32Array, k: number, v: number, start: number, n: number): void {
    const { B, G, maxSeqLen, Dh } = this;
    for (let b = 0; b < B; b++) {
      for (let s = 0; s < n; s++) {
        for (let g = 0; g < G; g++) {
          const from = ((b * n + s) * G + g) * Dh;
          const to = ((b * G + g) * maxSeqLen + start + s) * Dh;
          this.k.set(memory.subarray(k + from, k + from + Dh), to);
          this.v.set(memory.subarray(v + from, v + from + Dh), to);
        }
      }
    }
  }

  /** Rows 0 … n − 1 of every (b, g) block, packed: [B, G, n, Dh], into `out` from float offset `at` (a new array by default). */
  rows(store: Float32Array, n: number, out: Float32Array<ArrayBufferLike> = new Float32Array(this.B * this.G * n * this.Dh), at = 0): Float32Array<ArrayBufferLike> {
    const { B, G, maxSeqLen, Dh } = this;
    for (let bg = 0; bg < B * G; bg++) out.set(store.subarray(bg * maxSeqLen * Dh, (bg * maxSeqLen + n) * Dh), at + bg * n * Dh);
    return out;
  }

  async read(length: number): Promise<{ key: Float32Array; value: Float32Array }> {
    return { key: this.rows(this.k, length), value: this.rows(this.v, length) };
  }

  write(key: Float32Array, value: Float32Array, length: number): void {
    const { B, G, maxSeqLen, Dh } = this;
    for (let bg = 0; bg < B * G; bg++) {
      this.k.set(key.subarray(bg * length * Dh, (bg + 1) * length * Dh), bg * maxSeqLen * Dh);
      this.v.set(value.subarray(bg * length * Dh, (bg + 1) * length * Dh), bg * maxSeqLen * Dh);
    }
  }

  reset(): void {
    this.k.fill(0);
    this.v.fill(0);
  }

  dispose(): void {
    this.k = new Float32Array(0);
    this.v = new Float32Array(0);
  }
}
