// The keys of a 'wasm' KV cache (kv-cache.ts) as the attention kernel reads them: Kᵀ in blocks of 64
// keys [⌈maxSeqLen/64⌉, Dh, 64] per (sequence, key/value head), a key a column, with the q-dtypes' scales
// [⌈maxSeqLen/64⌉, Dh/32, 64] f16 beside (wasm/attention.ts's layouts, kinds 0 … 3). Here: where key r's
// column is, and a key moved between its column and its encoded row (quant/kv.ts's row: what
// readEncoded, writeEncoded, moveRows and discard move), byte for byte.

import type { KvCacheDtype } from '../types.ts';

/** Keys per Kᵀ block (wasm/attention.ts's BC). */
export const BLOCK = 64;

/** The element index of Kᵀ[d = 0, key r] from its (sequence, head)'s Kᵀ (elements of the dtype; + d·BLOCK for d). */
export function keyColumn(r: number, Dh: number): number {
  return Math.floor(r / BLOCK) * Dh * BLOCK + (r % BLOCK);
}

/** Key row r from its encoded row at from[at …] (kvRowBytes bytes) into Kᵀ's column r at byte kt (and its scales at byte ks) of u8. */
export function putKey(u8: Uint8Array, dtype: KvCacheDtype, Dh: number, kt: number, ks: number, r: number, from: Uint8Array, at: number): void {
  const blk = Math.floor(r / BLOCK);
  const c = r % BLOCK;
  if (dtype === 'f32' || dtype === 'f16') {
    const size = dtype === 'f32' ? 4 : 2;
    for (let d = 0; d < Dh; d++) {
      const to = kt + ((blk * Dh + d) * BLOCK + c) * size;
      for (let i = 0; i < size; i++) u8[to + i] = from[at + size * d + i];
    }
    return;
  }
  const scales = ks + (blk * (Dh / 32) * BLOCK + c) * 2;
  const bytes = dtype === 'q8_0' ? 34 : 18;
  for (let b = 0; b < Dh / 32; b++) {
    const p = at + b * bytes;
    u8[scales + b * BLOCK * 2] = from[p];
    u8[scales + b * BLOCK * 2 + 1] = from[p + 1];
    for (let j = 0; j < 32; j++) {
      const d = 32 * b + j;
      if (dtype === 'q8_0') u8[kt + (blk * Dh + d) * BLOCK + c] = from[p + 2 + j];
      else {
        const nibble = (from[p + 2 + (j & 15)] >> (j < 16 ? 0 : 4)) & 15;
        const byte = kt + (blk * Dh + d) * 32 + 16 * (c >> 5) + (c & 15);
        u8[byte] = c & 16 ? (u8[byte] & 0x0f) | (nibble << 4) : (u8[byte] & 0xf0) | nibble;
      }
    }
  }
}

/** to[at …] ← key row r, encoded (putKey's inverse). */
export function getKey(u8: Uint8Array, dtype: KvCacheDtype, Dh: number, kt: number, ks: number, r: number, to: Uint8Array, at: number): void {
  const blk = Math.floor(r / BLOCK);
  const c = r % BLOCK;
  if (dtype === 'f32' || dtype === 'f16') {
    const size = dtype === 'f32' ? 4 : 2;
    for (let d = 0; d < Dh; d++) {
      const from = kt + ((blk * Dh + d) * BLOCK + c) * size;
      for (let i = 0; i < size; i++) to[at + size * d + i] = u8[from + i];
    }
    return;
  }
  const scales = ks + (blk * (Dh / 32) * BLOCK + c) * 2;
  const bytes = dtype === 'q8_0' ? 34 : 18;
  for (let b = 0; b < Dh / 32; b++) {
    const p = at + b * bytes;
    to[p] = u8[scales + b * BLOCK * 2];
    to[p + 1] = u8[scales + b * BLOCK * 2 + 1];
    if (dtype === 'q8_0') {
      for (let j = 0; j < 32; j++) to[p + 2 + j] = u8[kt + (blk * Dh + 32 * b + j) * BLOCK + c];
    } else {
      const nibble = (d: number) => (u8[kt + (blk * Dh + d) * 32 + 16 * (c >> 5) + (c & 15)] >> (c & 16 ? 4 : 0)) & 15;
      for (let j = 0; j < 16; j++) to[p + 2 + j] = nibble(32 * b + j) | (nibble(32 * b + 16 + j) << 4);
    }
  }
}
