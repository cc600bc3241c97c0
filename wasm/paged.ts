// AssemblyScript, compiled with the other kernels by scripts/build-wasm.mjs. The attention of a call on a
// PagedKvCache ('wasm' backend), for one (sequence, head), or one sequence's decode step of the query
// heads of one key/value head, reading the keys and values IN PLACE through the sequence's block table:
//
//   setPagedRule   the score rule of the sequence's plan (src/cpu/score-rule.ts, the float64 twin): scale,
//                  softcap, ALiBi slope, sink, window, attnMask (a tree's); always causal; and how the
//                  pool stores a row (kind, rowBytes)
//   attendPaged    O [Sq, Dh] = softmax(rule(Q·Kᵀ)) · V over keys 0 … Skv − 1, online softmax (running
//                  max m and sum l per row), 4 query rows (32 for a decoded pool) × 64 keys at a time,
//                  never an Sq × Skv buffer
//
// The pool (src/wasm/paged-kv-cache.ts): K, then V, each [G, maxBlocks, blockSize] rows of rowBytes bytes,
// a row stored as the pool's dtype stores it (kind 0 f32: Dh floats; 1 f16, 2 q8_0, 3 q4_0: quant/kv.ts's
// encoded row, as a plain cache's V rows); key j of key/value head g lives in block table[j >> shift],
// row j & (blockSize − 1): byte pool + headOffset + table[j >> shift]·blockStride + (j & (blockSize − 1))·rowBytes
// (headOffset = g·maxBlocks·blockStride, blockStride = blockSize·rowBytes).
// A chunk of 64 keys may span several blocks (blockSize < 64) or part of one; the kernel takes each key's
// address from the table once per chunk (kAddr, vAddr) and reads the rows where they are: no copy of a
// sequence's past. Kinds 1 … 3: the chunk's 64 stored K rows are decoded into a tile of the scratch
// (wasm/attention.ts's KvDecode.row, the plain cache's decoder: values exactly quant/kv.ts's decodeKvRow's)
// just before its scores, then its V rows into the same tile just before P·V; nothing else is copied.
// Q [Sq, Dh] row stride ldq; O likewise ldo. onePosition: every row is the last position (Skv − 1) and
// attnMask row 0 (the rows are the query heads of a decode step); else row i is at Skv − Sq + i.
// scratch (16-byte aligned): ≥ 512 + 4·(Dh + 3) floats for kind 0 (4 query rows a pass); for kinds 1 … 3
// (32 rows a pass, a chunk decoded once for them) ≥ 2400 + 32·(Dh + 3) + 64·Dh. The fast exp has a
// relative error of about 2e-7.

import { KvDecode, Softmax } from './attention';
import { F } from './gemm';

const CH: i32 = 64; // keys per chunk
const RG_DECODED: i32 = 32; // query rows per pass over a decoded chunk (kinds 1 … 3)

let pScale: f32 = 1;
let pSoftcap: f32 = 0;
let pSlope: f32 = 0;
let pSink: f32 = 0;
let pHasSink: bool = false;
let pWindow: i32 = 0;
let pMask: usize = 0;
let pKind: i32 = 0; // how the pool stores a row: 0 f32, 1 f16, 2 q8_0, 3 q4_0 (wasm/attention.ts's kinds)
let pRowBytes: usize = 0; // bytes of one stored K or V row

export function setPagedRule(scale: f32, softcap: f32, slope: f32, sink: f32, hasSink: i32, window: i32, mask: usize, kind: i32, rowBytes: i32): void {
  pKind = kind;
  pRowBytes = <usize>rowBytes;
  pScale = scale;
  pSoftcap = softcap;
  pSlope = slope;
  pSink = sink;
  pHasSink = hasSink !== 0;
  pWindow = window;
  pMask = mask;
}

function hsum(a: v128): f32 {
  return f32x4.extract_lane(a, 0) + f32x4.extract_lane(a, 1) + (f32x4.extract_lane(a, 2) + f32x4.extract_lane(a, 3));
}

/** [Σ a, Σ b, Σ c, Σ d]: the lanes of four vectors summed, each into its lane. */
function sum4(a: v128, b: v128, c: v128, d: v128): v128 {
  const ab = f32x4.add(v128.shuffle<f32>(a, b, 0, 4, 1, 5), v128.shuffle<f32>(a, b, 2, 6, 3, 7)); // [a0+a2, b0+b2, a1+a3, b1+b3]
  const cd = f32x4.add(v128.shuffle<f32>(c, d, 0, 4, 1, 5), v128.shuffle<f32>(c, d, 2, 6, 3, 7));
  return f32x4.add(v128.shuffle<f32>(ab, cd, 0, 1, 4, 5), v128.shuffle<f32>(ab, cd, 2, 3, 6, 7));
}

/** q·k of keys jj … jj + 3 for one row, over whole 4s of Dh (the rest: the caller's scalar tail). */
function dots1x4(q0: usize, k0: usize, k1: usize, k2: usize, k3: usize, D4: i32): v128 {
  let a0 = f32x4.splat(0);
  let a1 = a0;
  let a2 = a0;
  let a3 = a0;
  for (let d4 = 0; d4 < D4; d4++) {
    const off = (<usize>d4) << 4;
    const q = v128.load(q0 + off);
    a0 = F.madd(q, v128.load(k0 + off), a0);
    a1 = F.madd(q, v128.load(k1 + off), a1);
    a2 = F.madd(q, v128.load(k2 + off), a2);
    a3 = F.madd(q, v128.load(k3 + off), a3);
  }
  return sum4(a0, a1, a2, a3);
}

/**
 * Scores of `rows` query rows (1, 2 or 4; row r at q0 + r·qStride) × jn keys (addresses at kAddr) into
 * sc rows [rows, CH]: 4 keys at a time, two rows together (8 sums that do not wait on each other), the
 * four keys' sums of a row reduced into one vector.
 */
function scores(q0: usize, qStride: usize, rows: i32, kAddr: usize, jn: i32, Dh: i32, sc: usize): void {
  const D4 = Dh >> 2;
  const rs = (<usize>CH) << 2;
  let jj = 0;
  for (; jj + 4 <= jn; jj += 4) {
    const ka = kAddr + ((<usize>jj) << 2);
    const k0 = <usize>load<u32>(ka);
    const k1 = <usize>load<u32>(ka, 4);
    const k2 = <usize>load<u32>(ka, 8);
    const k3 = <usize>load<u32>(ka, 12);
    for (let r = 0; r + 2 <= rows; r += 2) {
      const qa = q0 + <usize>r * qStride;
      const qb = qa + qStride;
      let a0 = f32x4.splat(0);
      let a1 = a0;
      let a2 = a0;
      let a3 = a0;
      let b0 = a0;
      let b1 = a0;
      let b2 = a0;
      let b3 = a0;
      for (let d4 = 0; d4 < D4; d4++) {
        const off = (<usize>d4) << 4;
        const x = v128.load(qa + off);
        const y = v128.load(qb + off);
        let k = v128.load(k0 + off);
        a0 = F.madd(x, k, a0);
        b0 = F.madd(y, k, b0);
        k = v128.load(k1 + off);
        a1 = F.madd(x, k, a1);
        b1 = F.madd(y, k, b1);
        k = v128.load(k2 + off);
        a2 = F.madd(x, k, a2);
        b2 = F.madd(y, k, b2);
        k = v128.load(k3 + off);
        a3 = F.madd(x, k, a3);
        b3 = F.madd(y, k, b3);
      }
      v128.store(sc + <usize>r * rs + ((<usize>jj) << 2), sum4(a0, a1, a2, a3));
      v128.store(sc + <usize>(r + 1) * rs + ((<usize>jj) << 2), sum4(b0, b1, b2, b3));
    }
    if (rows & 1) v128.store(sc + ((<usize>jj) << 2), dots1x4(q0, k0, k1, k2, k3, D4));
  }
  // The last keys (fewer than 4), one at a time.
  for (; jj < jn; jj++) {
    const kp = <usize>load<u32>(kAddr + ((<usize>jj) << 2));
    for (let r = 0; r < rows; r++) {
      const qr = q0 + <usize>r * qStride;
      let a = f32x4.splat(0);
      for (let d4 = 0; d4 < D4; d4++) a = F.madd(v128.load(qr + ((<usize>d4) << 4)), v128.load(kp + ((<usize>d4) << 4)), a);
      store<f32>(sc + <usize>r * rs + ((<usize>jj) << 2), f32x4.extract_lane(a, 0) + f32x4.extract_lane(a, 1) + (f32x4.extract_lane(a, 2) + f32x4.extract_lane(a, 3)));
    }
  }
  // Dh past the last whole 4: scalar.
  if (Dh & 3) {
    for (let j = 0; j < jn; j++) {
      const kp = <usize>load<u32>(kAddr + ((<usize>j) << 2));
      for (let r = 0; r < rows; r++) {
        const qr = q0 + <usize>r * qStride;
        const at = sc + <usize>r * rs + ((<usize>j) << 2);
        let s = load<f32>(at);
        for (let d = D4 << 2; d < Dh; d++) s += load<f32>(qr + ((<usize>d) << 2)) * load<f32>(kp + ((<usize>d) << 2));
        store<f32>(at, s);
      }
    }
  }
}

/** acc ← alpha·acc + Σ_j p[j]·V[j] for one row (V rows at vAddr). */
function pvOne(sc: usize, acc: usize, alpha: f32, vAddr: usize, jn: i32, Dh: i32): void {
  const al = f32x4.splat(alpha);
  const D4 = Dh >> 2;
  let d4 = 0;
  for (; d4 + 2 <= D4; d4 += 2) {
    const off = (<usize>d4) << 4;
    let a0 = f32x4.mul(v128.load(acc + off), al);
    let a1 = f32x4.mul(v128.load(acc + off, 16), al);
    for (let jj = 0; jj < jn; jj++) {
      const vp = <usize>load<u32>(vAddr + ((<usize>jj) << 2)) + off;
      const p = v128.load32_splat(sc + ((<usize>jj) << 2));
      a0 = F.madd(p, v128.load(vp), a0);
      a1 = F.madd(p, v128.load(vp, 16), a1);
    }
    v128.store(acc + off, a0);
    v128.store(acc + off, a1, 16);
  }
  for (; d4 < D4; d4++) {
    const off = (<usize>d4) << 4;
    let a = f32x4.mul(v128.load(acc + off), al);
    for (let jj = 0; jj < jn; jj++) {
      const vp = <usize>load<u32>(vAddr + ((<usize>jj) << 2)) + off;
      a = F.madd(v128.load32_splat(sc + ((<usize>jj) << 2)), v128.load(vp), a);
    }
    v128.store(acc + off, a);
  }
  for (let d = D4 << 2; d < Dh; d++) {
    const dd = (<usize>d) << 2;
    let a = load<f32>(acc + dd) * alpha;
    for (let jj = 0; jj < jn; jj++) a += load<f32>(sc + ((<usize>jj) << 2)) * load<f32>(<usize>load<u32>(vAddr + ((<usize>jj) << 2)) + dd);
    store<f32>(acc + dd, a);
  }
}

/** acc[r] ← alpha[r]·acc[r] + Σ_j p[r, j]·V[j] for 4 rows: one V load serves the 4. */
function pvFour(sc: usize, acc: usize, rowBytes: usize, alpha: usize, vAddr: usize, jn: i32, Dh: i32): void {
  const rs = (<usize>CH) << 2;
  const al0 = v128.load32_splat(alpha);
  const al1 = v128.load32_splat(alpha, 4);
  const al2 = v128.load32_splat(alpha, 8);
  const al3 = v128.load32_splat(alpha, 12);
  const D4 = Dh >> 2;
  let d4 = 0;
  for (; d4 + 2 <= D4; d4 += 2) {
    const off = (<usize>d4) << 4;
    const ad = acc + off;
    let a0 = f32x4.mul(v128.load(ad), al0);
    let a1 = f32x4.mul(v128.load(ad + rowBytes), al1);
    let a2 = f32x4.mul(v128.load(ad + 2 * rowBytes), al2);
    let a3 = f32x4.mul(v128.load(ad + 3 * rowBytes), al3);
    let b0 = f32x4.mul(v128.load(ad, 16), al0);
    let b1 = f32x4.mul(v128.load(ad + rowBytes, 16), al1);
    let b2 = f32x4.mul(v128.load(ad + 2 * rowBytes, 16), al2);
    let b3 = f32x4.mul(v128.load(ad + 3 * rowBytes, 16), al3);
    for (let jj = 0; jj < jn; jj++) {
      const vp = <usize>load<u32>(vAddr + ((<usize>jj) << 2)) + off;
      const va = v128.load(vp);
      const vb = v128.load(vp, 16);
      const pp = sc + ((<usize>jj) << 2);
      let p = v128.load32_splat(pp);
      a0 = F.madd(p, va, a0);
      b0 = F.madd(p, vb, b0);
      p = v128.load32_splat(pp + rs);
      a1 = F.madd(p, va, a1);
      b1 = F.madd(p, vb, b1);
      p = v128.load32_splat(pp + 2 * rs);
      a2 = F.madd(p, va, a2);
      b2 = F.madd(p, vb, b2);
      p = v128.load32_splat(pp + 3 * rs);
      a3 = F.madd(p, va, a3);
      b3 = F.madd(p, vb, b3);
    }
    v128.store(ad, a0);
    v128.store(ad + rowBytes, a1);
    v128.store(ad + 2 * rowBytes, a2);
    v128.store(ad + 3 * rowBytes, a3);
    v128.store(ad, b0, 16);
    v128.store(ad + rowBytes, b1, 16);
    v128.store(ad + 2 * rowBytes, b2, 16);
    v128.store(ad + 3 * rowBytes, b3, 16);
  }
  for (; d4 < D4; d4++) {
    const off = (<usize>d4) << 4;
    const ad = acc + off;
    let a0 = f32x4.mul(v128.load(ad), al0);
    let a1 = f32x4.mul(v128.load(ad + rowBytes), al1);
    let a2 = f32x4.mul(v128.load(ad + 2 * rowBytes), al2);
    let a3 = f32x4.mul(v128.load(ad + 3 * rowBytes), al3);
    for (let jj = 0; jj < jn; jj++) {
      const vv = v128.load(<usize>load<u32>(vAddr + ((<usize>jj) << 2)) + off);
      const pp = sc + ((<usize>jj) << 2);
      a0 = F.madd(v128.load32_splat(pp), vv, a0);
      a1 = F.madd(v128.load32_splat(pp + rs), vv, a1);
      a2 = F.madd(v128.load32_splat(pp + 2 * rs), vv, a2);
      a3 = F.madd(v128.load32_splat(pp + 3 * rs), vv, a3);
    }
    v128.store(ad, a0);
    v128.store(ad + rowBytes, a1);
    v128.store(ad + 2 * rowBytes, a2);
    v128.store(ad + 3 * rowBytes, a3);
  }
  for (let d = D4 << 2; d < Dh; d++) {
    const dd = (<usize>d) << 2;
    for (let r = 0; r < 4; r++) {
      const ad = acc + <usize>r * rowBytes + dd;
      let a = load<f32>(ad) * load<f32>(alpha + ((<usize>r) << 2));
      for (let jj = 0; jj < jn; jj++) {
        a += load<f32>(sc + <usize>r * rs + ((<usize>jj) << 2)) * load<f32>(<usize>load<u32>(vAddr + ((<usize>jj) << 2)) + dd);
      }
      store<f32>(ad, a);
    }
  }
}

/**
 * The rule and the online softmax of one row's chunk of jn scores (keys j0 …): p replaces the score in
 * `row`; m, l (at mp, lp) are updated and the factor the row's accumulator must be scaled by is stored at ap.
 */
function softmaxRow(row: usize, maskRow: i32, ip: i32, j0: i32, jn: i32, first: i32, last: i32, Skv: i32, mp: usize, lp: usize, ap: usize): void {
  let mx: f32 = -Infinity;
  let jj = 0;
  // Where the rule is a scale alone (every key of the chunk in the row's band, no mask, softcap or ALiBi): four scores a step.
  if (pMask === 0 && pSoftcap <= 0 && pSlope === 0 && j0 >= first && j0 + jn - 1 <= last) {
    jj = jn & ~3;
    mx = Softmax.scaleRowMax(row, jj, pScale);
  }
  for (; jj < jn; jj++) {
    const j = j0 + jj;
    let s: f32 = -Infinity;
    if (j >= first && j <= last) {
      s = load<f32>(row + ((<usize>jj) << 2)) * pScale;
      if (pSoftcap > 0) s = pSoftcap * Mathf.tanh(s / pSoftcap);
      if (pSlope !== 0) s -= pSlope * <f32>abs(ip - j);
      if (pMask !== 0) s += load<f32>(pMask + ((<usize>maskRow * <usize>Skv + <usize>j) << 2));
    }
    store<f32>(row + ((<usize>jj) << 2), s);
    mx = max(mx, s);
  }
  for (let jj = jn; jj < ((jn + 3) & ~3); jj++) store<f32>(row + ((<usize>jj) << 2), -Infinity);
  const mOld = load<f32>(mp);
  const mNew = max(mOld, mx);
  if (mNew === -Infinity) {
    store<f32>(ap, 1);
    memory.fill(row, 0, (<usize>CH) << 2);
    return;
  }
  const a = Mathf.exp(mOld - mNew);
  store<f32>(ap, a);
  store<f32>(mp, mNew);
  const mv = f32x4.splat(mNew);
  let sum = f32x4.splat(0);
  for (let jj = 0; jj < jn; jj += 4) {
    const p = Softmax.exp4(f32x4.sub(v128.load(row + ((<usize>jj) << 2)), mv));
    v128.store(row + ((<usize>jj) << 2), p);
    sum = f32x4.add(sum, p);
  }
  store<f32>(lp, load<f32>(lp) * a + hsum(sum));
}

/**
 * The jn stored rows at the addresses in addr (kinds 1 … 3) decoded by wasm/attention.ts's KvDecode.row
 * into tile [jn, Dh] f32; addr then holds the decoded rows' addresses.
 */
function decodeChunk(addr: usize, jn: i32, Dh: i32, tile: usize, tileRow: usize): void {
  for (let jj = 0; jj < jn; jj++) {
    const at = addr + ((<usize>jj) << 2);
    const dst = tile + <usize>jj * tileRow;
    KvDecode.row(<usize>load<u32>(at), pKind, Dh, dst);
    store<u32>(at, <u32>dst);
  }
}

/** O [Sq, Dh] for one (sequence, head) or a decode step's heads of one key/value head; see the top of this file. */
export function attendPaged(
  q: usize,
  ldq: i32,
  Sq: i32,
  onePosition: i32,
  kPool: usize,
  vPool: usize,
  table: usize,
  shift: i32,
  blockStride: i32,
  headOffset: i32,
  o: usize,
  ldo: i32,
  Skv: i32,
  Dh: i32,
  scratch: usize,
): void {
  const Dp = (Dh + 3) & ~3;
  const rowBytes = (<usize>Dp) << 2;
  const rs = (<usize>CH) << 2;
  // Query rows per pass over the keys: 4 for f32 rows (read where they are), 32 where each chunk is
  // decoded first (kinds 1 … 3), so that a prefill decodes its keys and values once per 32 rows.
  const RG = pKind !== 0 ? RG_DECODED : 4;
  const sc = scratch; // p [RG, CH]
  const acc = sc + <usize>RG * rs; // [RG, Dp]
  const m = acc + <usize>RG * rowBytes; // [RG] running max
  const l = m + ((<usize>RG) << 2); // [RG] running sum
  const alpha = l + ((<usize>RG) << 2); // [RG] this chunk's rescale factor
  const bands = alpha + ((<usize>RG) << 2); // [RG, 2] i32: first, last key
  const kAddr = bands + ((<usize>RG) << 3); // [CH] u32: each key's address
  const vAddr = kAddr + rs; // [CH] u32: each value's address
  const tile = vAddr + rs; // kinds 1 … 3: the chunk's keys, then its values, decoded [CH, Dh] f32
  const qStride = (<usize>ldq) << 2;
  const within = (1 << shift) - 1;
  const keyBytes = pRowBytes;
  const tileRow = (<usize>Dh) << 2;
  for (let i0 = 0; i0 < Sq; i0 += RG) {
    const R = min(RG, Sq - i0);
    const R4 = (R + 3) & ~3; // rows in whole quads; the ones past R see no key
    let lo = Skv;
    let hi = -1;
    for (let r = 0; r < R4; r++) {
      let first = Skv;
      let last = -1;
      if (r < R) {
        const ip = onePosition !== 0 ? Skv - 1 : i0 + r + Skv - Sq;
        first = pWindow > 0 ? max(ip - pWindow + 1, 0) : 0;
        last = ip;
      }
      store<i32>(bands + ((<usize>r) << 3), first);
      store<i32>(bands + ((<usize>r) << 3), last, 4);
      lo = min(lo, first);
      hi = max(hi, last);
      store<f32>(m + ((<usize>r) << 2), pHasSink ? pSink : -Infinity);
      store<f32>(l + ((<usize>r) << 2), pHasSink ? 1 : 0);
      store<f32>(alpha + ((<usize>r) << 2), 0);
    }
    memory.fill(acc, 0, <usize>R4 * rowBytes);
    for (let j0 = lo; j0 <= hi; j0 += CH) {
      const jn = min(CH, hi + 1 - j0);
      // The keys' addresses, a run of rows per block.
      for (let jj = 0; jj < jn; ) {
        const j = j0 + jj;
        const block = <usize>load<i32>(table + ((<usize>(j >> shift)) << 2));
        const off = block * <usize>blockStride + <usize>headOffset + <usize>(j & within) * keyBytes;
        let ka = kPool + off;
        let va = vPool + off;
        const end = min(jn, jj + within + 1 - (j & within));
        for (; jj < end; jj++) {
          store<u32>(kAddr + ((<usize>jj) << 2), <u32>ka);
          store<u32>(vAddr + ((<usize>jj) << 2), <u32>va);
          ka += keyBytes;
          va += keyBytes;
        }
      }
      if (pKind !== 0) decodeChunk(kAddr, jn, Dh, tile, tileRow);
      // Each quad of rows: two rows together, a third alone.
      for (let r0 = 0; r0 < R; r0 += 4) {
        const Rq = min(4, R - r0);
        const q0 = q + <usize>(i0 + r0) * qStride;
        scores(q0, qStride, Rq === 3 ? 2 : Rq, kAddr, jn, Dh, sc + <usize>r0 * rs);
        if (Rq === 3) scores(q0 + 2 * qStride, qStride, 1, kAddr, jn, Dh, sc + <usize>(r0 + 2) * rs);
      }
      for (let r = 0; r < R; r++) {
        const ro = (<usize>r) << 2;
        const ip = onePosition !== 0 ? Skv - 1 : i0 + r + Skv - Sq;
        const maskRow = onePosition !== 0 ? 0 : i0 + r;
        const first = load<i32>(bands + ((<usize>r) << 3));
        const last = load<i32>(bands + ((<usize>r) << 3), 4);
        softmaxRow(sc + <usize>r * rs, maskRow, ip, j0, jn, first, last, Skv, m + ro, l + ro, alpha + ro);
      }
      if (pKind !== 0) decodeChunk(vAddr, jn, Dh, tile, tileRow); // the keys' tile is spent
      for (let r0 = 0; r0 < R; r0 += 4) {
        const Rq = min(4, R - r0);
        const p0 = sc + <usize>r0 * rs;
        const a0 = acc + <usize>r0 * rowBytes;
        if (Rq === 1) {
          pvOne(p0, a0, load<f32>(alpha + ((<usize>r0) << 2)), vAddr, jn, Dh);
        } else {
          for (let r = Rq; r < 4; r++) memory.fill(p0 + <usize>r * rs, 0, rs); // dropped rows: p = 0
          pvFour(p0, a0, rowBytes, alpha + ((<usize>r0) << 2), vAddr, jn, Dh);
        }
      }
    }
    // O = acc / l (0 for a row that saw nothing).
    for (let r = 0; r < R; r++) {
      const lr = load<f32>(l + ((<usize>r) << 2));
      const inv: f32 = lr > 0 ? 1 / lr : 0;
      const src = acc + <usize>r * rowBytes;
      const dst = o + ((<usize>(i0 + r) * <usize>ldo) << 2);
      for (let d = 0; d < Dh; d++) store<f32>(dst + ((<usize>d) << 2), load<f32>(src + ((<usize>d) << 2)) * inv);
    }
  }
}
