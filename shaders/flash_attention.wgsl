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
// This file holds what both bodies share (the parameters, bindings, constants and K/V tiles); the host
// appends one of them:
//   flash_attention_row.wgsl   one invocation per query row (BR rows per workgroup)
//   flash_attention_rows.wgsl  RPI rows per invocation (BR = WG·RPI): every K and V element read
//                              from a tile serves RPI rows; fewer loads per multiply-add, more registers
// One workgroup per (query tile of BR rows, head h, batch b). A row's q (pre-multiplied by
// log2(e)/√Dh, so exp becomes exp2) and its output accumulator stay in registers while K and V
// stream through workgroup memory in tiles of BC keys. For each tile, each row computes
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
// Host guarantees: prepends `const DH4: u32` (Dh / 4, 1…64), `const BC: u32` (keys per tile) and,
// for the rows body, `const RPI: u32` (rows per invocation; RPI·DH4 ≤ 64) so
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

// A score no real one goes below; finite, because WGSL lets implementations assume no infinities.
const NO_SCORE: f32 = -3.0e38;
// attnMask entries at or below this are "not allowed" (the host writes −3e38 for −Infinity and true).
const MASKED: f32 = -1.0e38;

// Sequence b, head h: how many queries and keys, where its Q rows and its K/V head's rows start.
struct Sequence {
  Sq: u32,
  Skv: u32,
  qHead: u32,      // first Q row of (b, h), in rows of the head-split layout
  kvHeadRow: u32,  // first K/V row of (b, h / (H / G))
}

fn sequenceOf(b: u32, h: u32) -> Sequence {
  let kvHead = h / (params.H / params.G);
  if (params.packed != 0u) {
    let start = cuSeqlens[b];
    let n = cuSeqlens[b + 1u] - start;
    return Sequence(n, n, h * params.totalRows + start, kvHead * params.kvStride + start);
  }
  return Sequence(params.Sq, params.Skv, (b * params.H + h) * params.Sq, (b * params.G + kvHead) * params.kvStride);
}

var<workgroup> kTile: array<vec4<f32>, BC * DH4>;  // [BC, Dh/4]
var<workgroup> vTile: array<vec4<f32>, BC * DH4>;  // [BC, Dh/4]

// Stages keys j0 … j0 + BC − 1 of K and V (zeros past Skv) into the tiles, the workgroup's `count`
// invocations sharing the work; the caller then waits at a barrier.
fn stageTile(j0: u32, Skv: u32, kvOffset: u32, invocation: u32, count: u32) {
  for (var t = invocation; t < BC * DH4; t += count) {
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
}

