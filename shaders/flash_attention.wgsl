// FlashAttention-style attention: O = softmax(Q·Kᵀ / √Dh + mask) · V, without ever storing the scores.
//
//   Q    [B, H, Sq, Dh]     read from qkv at offset 0
//   K, V [B, G, ·, Dh]      read from kv at kBase4 and vBase4 (vec4s), kvStride rows per (b, g) block
//                           (Skv, or a KV cache's maxSeqLen; kv is the qkv buffer itself without a
//                           cache); query head h uses key/value head h / (H / G), read in place
//   O    [B, H, Sq, Dh]
// Packed sequences (cuSeqlens) are laid out as one batch of T tokens, [1, H, T, Dh], and workgroup
// z = b is sequence b: rows cu[b] … cu[b+1] − 1, attending only within themselves.
//
// One workgroup per (query tile of BR rows, head h, batch b) of WG invocations, each owning RPI query
// rows (BR = WG·RPI). A row's q (pre-multiplied by log2(e)/√Dh, so exp becomes exp2) and its output
// accumulator stay in registers while K and V stream through workgroup memory in tiles of BC keys;
// every K and V element read from a tile serves the invocation's RPI rows (more rows per invocation:
// fewer loads per multiply-add, more registers). For each tile, each row computes
// its BC scores, then the online softmax: a running max m and sum l per row; when the max grows, the
// accumulator and l are rescaled by exp2(m_old − m_new). At the end O = acc / l. The Sq×Skv score
// matrix never exists in memory; memory use is linear in S.
//
// Masking. Row i sees key j when all hold (i' = i + Skv − Sq aligns the queries to the end of the keys):
//   causal:         j ≤ i'
//   window w > 0:   i' − w < j ≤ i'
//   key padding:    padding[b, j] == 0
//   attnMask:       mask[(b·H + h or 0), i, j] is not MASKED (it is added to the score otherwise)
// Tiles wholly outside the workgroup's causal/window band are never loaded, so causal costs about half,
// and a window costs O(S·w). A row that sees no key at all gets O = 0 (l stays 0), never NaN.
// A head mask multiplies the row's output (and, in attention_probs.wgsl, its probabilities).
//
// Each row's softmax statistics (m, l) go to `rowStats` [B, H, Sq]: 8 bytes per row, from which
// attention_probs.wgsl recomputes the probabilities when the caller asks. (m and l are kept apart
// rather than folded into one log-sum-exp m + log2(l): with logits in the thousands, that sum would
// round away l's contribution at float32's spacing there, ~1e-4.)
//
// Split-KV ("flash-decoding"): with few query rows (Sq ≤ BR) and many keys, one workgroup per query
// tile would leave most of a device idle. The host then sets splitChunk > 0: workgroup x is a split of
// the keys, [x·splitChunk, (x+1)·splitChunk), and each writes its unnormalised accumulator and (m, l)
// to split x's slice of `out` and `rowStats` [splits, B, H, Sq]; decode_merge.wgsl combines them with
// their log-sum-exp into O and the row statistics.
//
// Storage of Q, K, V and O is ST4 (f32, or f16 with precision f16); tiles, scores, the softmax
// statistics and the accumulator are f32.
//
// Host guarantees: prepends `const DH4: u32` (Dh / 4, 1…64), `const BC: u32` (keys per tile) and
// `const RPI: u32` (rows per invocation; RPI·DH4 ≤ 64 where RPI > 1) so
// the register arrays have fixed sizes; 2·BC·Dh·4 bytes fit maxComputeWorkgroupStorageSize; unused
// optional buffers are bound to a small dummy; masked attnMask entries hold MASKED (host converts
// −Infinity); dispatch = (ceil(max Sq / BR), H, B).

struct Params {
  H: u32,
  G: u32,
  Sq: u32,           // query rows per sequence (packed: unused, from cuSeqlens)
  Skv: u32,          // keys per sequence (packed: unused)
  kBase4: u32,       // where K starts in qkv, in vec4s
  vBase4: u32,       // where V starts in qkv, in vec4s
  causal: u32,       // 1: row i sees keys j <= i'
  window: u32,       // > 0: row i sees keys i' - window < j <= i'
  scaleLog2e: f32,   // log2(e) / sqrt(Dh)
  maskMode: u32,     // 0: no attnMask; 1: one [Sq, Skv] for all; 2: [B·H, Sq, Skv]
  hasPadding: u32,   // 1: padding [B, Skv] applies
  hasHeadMask: u32,  // 1: headMask [B·H] applies
  packed: u32,       // 1: cuSeqlens gives each sequence's rows
  totalRows: u32,    // packed: T
  kvStride: u32,     // rows per (b, g) block of K and V
  splitChunk: u32,   // > 0: split-KV, workgroup x covers keys [x·splitChunk, (x+1)·splitChunk); a multiple of BC
  splitRows: u32,    // split-KV: B·H·Sq, the rows of one split's slice of out and rowStats
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> qkv: array<ST4>;
@group(0) @binding(2) var<storage, read_write> out: array<ST4>;       // [B, H, Sq, Dh/4]
@group(0) @binding(3) var<storage, read_write> rowStats: array<vec2<f32>>;  // (m, l) per row [B, H, Sq]
@group(0) @binding(4) var<storage, read> attnMask: array<f32>;              // [1 or B·H, Sq, Skv]
@group(0) @binding(5) var<storage, read> padding: array<u32>;               // [B, Skv], 1 = ignore
@group(0) @binding(6) var<storage, read> headMask: array<f32>;              // [B·H]
@group(0) @binding(7) var<storage, read> cuSeqlens: array<u32>;             // [B + 1]
@group(0) @binding(8) var<storage, read> kv: array<ST4>;              // K ++ V (the qkv buffer, or a KV cache)

override WG: u32 = 32u;  // invocations per workgroup; each owns RPI query rows, so BR = WG·RPI rows per workgroup

// A score no real one goes below; finite, because WGSL lets implementations assume no infinities.
const NO_SCORE: f32 = -3.0e38;
// attnMask entries at or below this are "not allowed" (the host writes −3e38 for −Infinity and true).
const MASKED: f32 = -1.0e38;

var<workgroup> kTile: array<vec4<f32>, BC * DH4>;  // [BC, Dh/4]
var<workgroup> vTile: array<vec4<f32>, BC * DH4>;  // [BC, Dh/4]

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let BR = WG * RPI;
  let h = wid.y;
  let b = wid.z;
  let kvHead = h / (params.H / params.G);

  // This sequence's rows: where they start in the head-split layout, how many queries and keys.
  var Sq = params.Sq;
  var Skv = params.Skv;
  var qHead = (b * params.H + h) * Sq;     // first Q row of (b, h), in rows
  var kvHeadRow = (b * params.G + kvHead) * params.kvStride;
  if (params.packed != 0u) {
    let start = cuSeqlens[b];
    Sq = cuSeqlens[b + 1u] - start;
    Skv = Sq;
    qHead = h * params.totalRows + start;
    kvHeadRow = kvHead * params.kvStride + start;
  }
  let split = wid.x;
  let firstRow = select(wid.x * BR, 0u, params.splitChunk > 0u);
  if (firstRow >= Sq) {
    return;  // a tile past a short packed sequence: the whole workgroup leaves, uniformly
  }
  let offset = i32(Skv) - i32(Sq); // i' = i + offset

  // Keys the workgroup's rows see lie in [tileStart, tileEnd), the same for every invocation, so
  // the loop (and its barriers) is uniform; each row's own range is [rowStart, rowEnd).
  let banded = params.causal != 0u || params.window > 0u;
  var tileStart = 0u;
  var tileEnd = Skv;
  if (banded) {
    let lastRow = min(firstRow + BR, Sq) - 1u;
    tileEnd = u32(clamp(i32(lastRow) + offset + 1, 0, i32(Skv)));
    if (params.window > 0u) {
      tileStart = u32(clamp(i32(firstRow) + offset - i32(params.window) + 1, 0, i32(Skv))) / BC * BC;
    }
  }
  if (params.splitChunk > 0u) {
    tileStart = max(tileStart, split * params.splitChunk);
    tileEnd = min(tileEnd, (split + 1u) * params.splitChunk);
  }

  // This invocation's rows firstRow + lid.x + r·WG (rows past Sq compute a copy of the last row,
  // never stored): q scaled, acc the unnormalised output, m the running max of the scores seen (log2
  // units), l the running sum of exp2(score − m), and the keys the row sees, [rowStart, rowEnd).
  var q: array<vec4<f32>, RPI * DH4>;
  var acc: array<vec4<f32>, RPI * DH4>;
  var m: array<f32, RPI>;
  var l: array<f32, RPI>;
  var rowStart: array<u32, RPI>;
  var rowEnd: array<u32, RPI>;
  var maskRow: array<u32, RPI>;
  for (var r = 0u; r < RPI; r++) {
    let iq = min(firstRow + lid.x + r * WG, Sq - 1u);
    let row = qHead + iq;
    for (var d = 0u; d < DH4; d++) {
      q[r * DH4 + d] = vec4<f32>(qkv[row * DH4 + d]) * params.scaleLog2e;
      acc[r * DH4 + d] = vec4<f32>(0.0);
    }
    m[r] = NO_SCORE;
    l[r] = 0.0;
    rowStart[r] = 0u;
    rowEnd[r] = Skv;
    if (banded) {
      rowEnd[r] = u32(clamp(i32(iq) + offset + 1, 0, i32(Skv)));
      if (params.window > 0u) {
        rowStart[r] = u32(clamp(i32(iq) + offset - i32(params.window) + 1, 0, i32(Skv)));
      }
    }
    maskRow[r] = 0u;
    if (params.maskMode == 2u) {
      maskRow[r] = ((b * params.H + h) * Sq + iq) * Skv;
    } else if (params.maskMode == 1u) {
      maskRow[r] = iq * Skv;
    }
  }

  let kvOffset = kvHeadRow * DH4;
  var s: array<f32, RPI * BC>;  // this tile's scores, s[r·BC + c]
  for (var j0 = tileStart; j0 < tileEnd; j0 += BC) {
    // Stage keys j0 .. j0+BC-1 of K and V (zeros past Skv), all invocations helping.
    for (var t = lid.x; t < BC * DH4; t += WG) {
      let j = j0 + t / DH4;
      var kk = vec4<f32>(0.0);
      var vv = vec4<f32>(0.0);
      if (j < Skv) {
        kk = vec4<f32>(kv[params.kBase4 + kvOffset + j0 * DH4 + t]);
        vv = vec4<f32>(kv[params.vBase4 + kvOffset + j0 * DH4 + t]);
      }
      kTile[t] = kk;
      vTile[t] = vv;
    }
    workgroupBarrier();

    // Scores of the keys of this tile each row sees; NO_SCORE for the others. Each K element read
    // from the tile serves all RPI rows.
    var tileMax: array<f32, RPI>;
    for (var r = 0u; r < RPI; r++) {
      tileMax[r] = NO_SCORE;
    }
    for (var c = 0u; c < BC; c++) {
      let j = j0 + c;
      var keyVisible = j < Skv;
      if (keyVisible && params.hasPadding != 0u) {
        keyVisible = padding[b * Skv + j] == 0u;
      }
      // Zeroed explicitly: lavapipe kept the previous iteration's values in a loop-local array
      // declared without an initializer (WGSL says each declaration zero-initialises it).
      var dotv: array<vec4<f32>, RPI>;
      for (var r = 0u; r < RPI; r++) {
        dotv[r] = vec4<f32>(0.0);
      }
      for (var d = 0u; d < DH4; d++) {
        let kk = kTile[c * DH4 + d];
        for (var r = 0u; r < RPI; r++) {
          dotv[r] += q[r * DH4 + d] * kk;
        }
      }
      for (var r = 0u; r < RPI; r++) {
        var visible = keyVisible && j >= rowStart[r] && j < rowEnd[r];
        var bias = 0.0;
        if (visible && params.maskMode != 0u) {
          bias = attnMask[maskRow[r] + j];
          visible = bias > MASKED;
        }
        var score = NO_SCORE;
        if (visible) {
          score = dotv[r].x + dotv[r].y + dotv[r].z + dotv[r].w + bias * 1.4426950408889634;
          tileMax[r] = max(tileMax[r], score);
        }
        s[r * BC + c] = score;
      }
    }
    // Online softmax: rescale by exp2(m_old − m_new) where the max grew, then add this tile's keys.
    var mNew: array<f32, RPI>;
    for (var r = 0u; r < RPI; r++) {
      mNew[r] = max(m[r], tileMax[r]);
      let alpha = select(1.0, exp2(m[r] - mNew[r]), tileMax[r] > NO_SCORE);  // 0 on a row's first visible tile
      l[r] *= alpha;
      for (var d = 0u; d < DH4; d++) {
        acc[r * DH4 + d] *= alpha;
      }
    }
    for (var c = 0u; c < BC; c++) {
      var p: array<f32, RPI>;  // every element is assigned below before it is read
      var seen = false;
      for (var r = 0u; r < RPI; r++) {
        let score = s[r * BC + c];
        p[r] = select(0.0, exp2(score - mNew[r]), score > NO_SCORE);
        l[r] += p[r];
        seen = seen || score > NO_SCORE;
      }
      if (seen) {
        for (var d = 0u; d < DH4; d++) {
          let vv = vTile[c * DH4 + d];
          for (var r = 0u; r < RPI; r++) {
            acc[r * DH4 + d] += p[r] * vv;
          }
        }
      }
    }
    for (var r = 0u; r < RPI; r++) {
      m[r] = mNew[r];
    }
    workgroupBarrier();
  }

  for (var r = 0u; r < RPI; r++) {
    let i = firstRow + lid.x + r * WG;
    if (i < Sq && params.splitChunk > 0u) {
      // Split-KV: this split's partial result, unnormalised, for decode_merge.wgsl.
      let partRow = split * params.splitRows + qHead + i;
      rowStats[partRow] = vec2<f32>(m[r], l[r]);
      for (var d = 0u; d < DH4; d++) {
        out[partRow * DH4 + d] = ST4(acc[r * DH4 + d]);
      }
    } else if (i < Sq) {
      let outRow = qHead + i;
      rowStats[outRow] = vec2<f32>(m[r], l[r]);
      var scale = select(0.0, 1.0 / l[r], l[r] > 0.0);  // a row that saw no key gives 0
      if (params.hasHeadMask != 0u) {
        scale *= headMask[b * params.H + h];
      }
      for (var d = 0u; d < DH4; d++) {
        out[outRow * DH4 + d] = ST4(acc[r * DH4 + d] * scale);
      }
    }
  }
}
