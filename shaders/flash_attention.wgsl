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
// One workgroup per (query tile of BR rows, head h, batch b); one invocation per query row. The row's
// q (pre-multiplied by log2(e)/√Dh, so exp becomes exp2) and its output accumulator stay in registers
// while K and V stream through workgroup memory in tiles of BC keys. For each tile, each row computes
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
// Host guarantees: prepends `const DH4: u32` (Dh / 4, 1…64) and `const BC: u32` (keys per tile) so
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

override BR: u32 = 32u;  // query rows per workgroup, one per invocation

// A score no real one goes below; finite, because WGSL lets implementations assume no infinities.
const NO_SCORE: f32 = -3.0e38;
// attnMask entries at or below this are "not allowed" (the host writes −3e38 for −Infinity and true).
const MASKED: f32 = -1.0e38;

var<workgroup> kTile: array<vec4<f32>, BC * DH4>;  // [BC, Dh/4]
var<workgroup> vTile: array<vec4<f32>, BC * DH4>;  // [BC, Dh/4]

@compute @workgroup_size(BR)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
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
  let i = firstRow + lid.x;        // this invocation's query row
  let iq = min(i, Sq - 1u);        // rows past Sq compute a copy of the last row, never stored
  let offset = i32(Skv) - i32(Sq); // i' = i + offset

  // Keys this row sees lie in [rowStart, rowEnd); the workgroup loads tiles covering
  // [tileStart, tileEnd), the same for every invocation, so the loop (and its barriers) is uniform.
  let banded = params.causal != 0u || params.window > 0u;
  var rowStart = 0u;
  var rowEnd = Skv;
  var tileStart = 0u;
  var tileEnd = Skv;
  if (banded) {
    let lastRow = min(firstRow + BR, Sq) - 1u;
    rowEnd = u32(clamp(i32(iq) + offset + 1, 0, i32(Skv)));
    tileEnd = u32(clamp(i32(lastRow) + offset + 1, 0, i32(Skv)));
    if (params.window > 0u) {
      rowStart = u32(clamp(i32(iq) + offset - i32(params.window) + 1, 0, i32(Skv)));
      tileStart = u32(clamp(i32(firstRow) + offset - i32(params.window) + 1, 0, i32(Skv))) / BC * BC;
    }
  }

  if (params.splitChunk > 0u) {
    tileStart = max(tileStart, split * params.splitChunk);
    tileEnd = min(tileEnd, (split + 1u) * params.splitChunk);
  }

  // q: this row of Q, scaled; acc: unnormalised output row.
  var q: array<vec4<f32>, DH4>;
  var acc: array<vec4<f32>, DH4>;
  let row = qHead + iq;
  for (var d = 0u; d < DH4; d++) {
    q[d] = vec4<f32>(qkv[row * DH4 + d]) * params.scaleLog2e;
    acc[d] = vec4<f32>(0.0);
  }
  var m = NO_SCORE;  // running max of the scores seen (log2 units)
  var l = 0.0;       // running sum of exp2(score - m)

  var maskRow = 0u;
  if (params.maskMode == 2u) {
    maskRow = ((b * params.H + h) * Sq + iq) * Skv;
  } else if (params.maskMode == 1u) {
    maskRow = iq * Skv;
  }
  let kvOffset = kvHeadRow * DH4;
  var s: array<f32, BC>;
  for (var j0 = tileStart; j0 < tileEnd; j0 += BC) {
    // Stage keys j0 .. j0+BC-1 of K and V (zeros past Skv), all invocations helping.
    for (var t = lid.x; t < BC * DH4; t += BR) {
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

    // Scores of the keys of this tile this row sees; NO_SCORE for the others.
    var tileMax = NO_SCORE;
    for (var c = 0u; c < BC; c++) {
      let j = j0 + c;
      var score = NO_SCORE;
      var visible = j >= rowStart && j < rowEnd;
      if (visible && params.hasPadding != 0u) {
        visible = padding[b * Skv + j] == 0u;
      }
      var bias = 0.0;
      if (visible && params.maskMode != 0u) {
        bias = attnMask[maskRow + j];
        visible = bias > MASKED;
      }
      if (visible) {
        var dotv = vec4<f32>(0.0);
        for (var d = 0u; d < DH4; d++) {
          dotv += q[d] * kTile[c * DH4 + d];
        }
        score = dotv.x + dotv.y + dotv.z + dotv.w + bias * 1.4426950408889634;
        tileMax = max(tileMax, score);
      }
      s[c] = score;
    }
    if (tileMax > NO_SCORE) {
      let mNew = max(m, tileMax);
      let alpha = exp2(m - mNew);  // 0 on the first visible tile, as m is NO_SCORE
      l *= alpha;
      for (var d = 0u; d < DH4; d++) {
        acc[d] *= alpha;
      }
      for (var c = 0u; c < BC; c++) {
        if (s[c] > NO_SCORE) {
          let p = exp2(s[c] - mNew);
          l += p;
          for (var d = 0u; d < DH4; d++) {
            acc[d] += p * vTile[c * DH4 + d];
          }
        }
      }
      m = mNew;
    }
    workgroupBarrier();
  }

  if (i < Sq && params.splitChunk > 0u) {
    // Split-KV: this split's partial result, unnormalised, for decode_merge.wgsl.
    let partRow = split * params.splitRows + qHead + i;
    rowStats[partRow] = vec2<f32>(m, l);
    for (var d = 0u; d < DH4; d++) {
      out[partRow * DH4 + d] = ST4(acc[d]);
    }
  } else if (i < Sq) {
    let outRow = qHead + i;
    rowStats[outRow] = vec2<f32>(m, l);
    var scale = select(0.0, 1.0 / l, l > 0.0);  // a row that saw no key gives 0
    if (params.hasHeadMask != 0u) {
      scale *= headMask[b * params.H + h];
    }
    for (var d = 0u; d < DH4; d++) {
      out[outRow * DH4 + d] = ST4(acc[d] * scale);
    }
  }
}
