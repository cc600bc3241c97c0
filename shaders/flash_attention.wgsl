// FlashAttention-style attention: O = softmax(Q·Kᵀ / √Dh + mask) · V, without ever storing the scores.
//
//   Q    [B, H, Sq, Dh]     read from qkv at offset 0
//   K, V [B, G, ·, Dh]      read from kv at kBase4 and vBase4 (vec4s), kvStride rows per (b, g) block
//                           (Skv, or a KV cache's maxSeqLen; kv is the qkv buffer itself without a
//                           cache); query head h uses key/value head h / (H / G), read in place
//   O    [B, H, Sq, Dh]
// Varlen batches (cuSeqlens) are laid out as one batch of T tokens, [1, H, T, Dh], and workgroup
// z = b is sequence b: rows cu[b] … cu[b+1] − 1, attending only within themselves.
//
// This file holds what every body shares (the tiles and their staging, the sequence of a workgroup,
// the row set-up from the score rule, the split-KV key range, the write-out of a row); the host
// appends one body, the variant's (records: src/webgpu/variants/flash-attention.ts, software/):
//   flash_attention_row.wgsl       one invocation per query row (BR rows per workgroup), K/V tiles in
//                                  workgroup memory; scalar row state, for drivers that keep little in
//                                  registers. With LOOP = 1 its head-size loops stay loops: the variant
//                                  that compiles fastest at any Dh (tier 0).
//   flash_attention_rows.wgsl      RPI rows per invocation (BR = WG·RPI): every K and V element read
//                                  from a tile serves RPI rows; fewer loads per multiply-add, more registers
//   flash_attention_subgroup.wgsl  the lanes of a subgroup share one row, each taking some of its keys
//                                  straight from storage, merged by subgroup reductions: few query rows
//                                  (a decode step) on GPUs
//   software/flash_attention_unrolled.wgsl  for SwiftShader's JIT (no unrolling, both sides of every
//                                  branch run): RPI rows per invocation, K and V from storage, no
//                                  barriers, its loops written out by the host
//   software/flash_attention_shuffle.wgsl   for lavapipe with subgroups (a load costs ~24 FMAs, a shuffle
//                                  almost nothing): each K/V row loaded once per subgroup and passed
//                                  to the lanes by subgroupShuffle, its loops written out by the host
// The software bodies are candidates on CPU adapters only: a GPU never compiles them.
//
// One workgroup per (query tile of BR rows, head h, batch b). A row's q (pre-multiplied by
// log2(e)/√Dh, so exp becomes exp2) and its output accumulator stay in registers while K and V
// stream through workgroup memory in tiles of BC keys. For each tile, each row computes
// its BC scores, then the online softmax: a running max m and sum l per row; when the max grows, the
// accumulator and l are rescaled by exp2(m_old − m_new). At the end O = acc / l. The Sq×Skv score
// matrix never exists in memory; memory use is linear in S.
//
// Masking follows score_rule.wgsl (causal, window, key padding, attnMask), which the host prepends.
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
// Storage of Q and O is ST4 (f32, or f16 with precision f16); K and V are read only through
// loadKey/loadValue (the kv loader the host prepends, shaders/kv_*.wgsl: ST4, or a KV cache's own
// type: f32, packed halves, ggml's q8_0/q4_0 blocks dequantized as loaded), by the index of a vec4 of
// values; tiles, scores, the softmax statistics and the accumulator are f32.
//
// Host guarantees: prepends `const DH4: u32` (Dh / 4, 1…64), `const BC: u32` (keys per tile) and,
// for the row body, `const LOOP: u32` (1: loops over Dh stay loops), for the bodies of several rows
// `const RPI: u32` (rows per invocation; RPI·DH4 ≤ 64) so the register arrays have fixed sizes;
// 2·BC·Dh·4 bytes fit maxComputeWorkgroupStorageSize; unused optional buffers are bound to a small
// dummy; masked attnMask entries hold MASKED (host converts −Infinity); dispatch = (ceil(max Sq / BR), H, B).

// Params and the bindings (qkv, out, rowStats, cuSeqlens, kv, and the score rule's attnMask, padding and
// headData) are generated by the host from FLASH_PARAMS and FLASH_BINDINGS in
// src/webgpu/kernels/flash-attention.ts; NO_SCORE, MASKED, MASKED_BELOW and LOG2E come from the shared
// constants (src/webgpu/shader.ts).

// Sequence b, head h: how many queries and keys, where its Q rows and its K/V head's rows start.
struct Sequence {
  Sq: u32,
  Skv: u32,
  qHead: u32,      // first Q row of (b, h), in rows of the head-split layout
  kvHeadRow: u32,  // first K/V row of (b, h / (H / G))
}

fn sequenceOf(b: u32, h: u32) -> Sequence {
  let kvHead = h / (params.H / params.G);
  if (params.varlen != 0u) {
    let start = cuSeqlens[b];
    let n = cuSeqlens[b + 1u] - start;
    return Sequence(n, n, h * params.totalRows + start, kvHead * params.kvStride + start);
  }
  return Sequence(params.Sq, params.Skv, (b * params.H + h) * params.Sq, (b * params.G + kvHead) * params.kvStride);
}

// Where a workgroup works: sequence b = wid.z, head h = wid.y (their Sequence), split wid.x under
// split-KV (its workgroups all start at row 0), and its first query row (wid.x · BR otherwise). A
// workgroup with firstRow ≥ Sq lies past a short sequence: the body returns (uniformly).
struct Workgroup {
  b: u32,
  h: u32,
  Sq: u32,
  Skv: u32,
  qHead: u32,     // first Q row of (b, h)
  kvOffset: u32,  // first element (vec4) of the K/V head's rows past kBase4 and vBase4
  split: u32,
  firstRow: u32,
}

fn workgroupOf(wid: vec3u, BR: u32) -> Workgroup {
  let sequence = sequenceOf(wid.z, wid.y);
  let firstRow = select(wid.x * BR, 0u, params.splitChunk > 0u);
  return Workgroup(wid.z, wid.y, sequence.Sq, sequence.Skv, sequence.qHead, sequence.kvHeadRow * DH4, wid.x, firstRow);
}

// Element d (a vec4) of Q row `row`, scaled by scale·log2(e): scores come out in log2 units.
fn scaledQuery(row: u32, d: u32) -> vec4<f32> {
  return vec4<f32>(qkv[row * DH4 + d]) * params.scaleLog2e;
}

// What the score rule says of query row iq of sequence b, head h: the keys it sees by position
// (keyBand), where its attnMask entries start (maskRowOf), and its position among the keys, ip = iq + Skv − Sq.
struct RowRule {
  band: vec2<u32>,
  maskRow: u32,
  ip: i32,
}

fn rowRule(b: u32, h: u32, iq: u32, Sq: u32, Skv: u32) -> RowRule {
  return RowRule(keyBand(iq, Sq, Skv), maskRowOf(b, h, iq, Sq, Skv), i32(iq) + i32(Skv) - i32(Sq));
}

// Of the keys [keys.x, keys.y), those split `split` covers under split-KV ([x·splitChunk, (x+1)·splitChunk));
// all of them otherwise.
fn splitKeys(keys: vec2<u32>, split: u32) -> vec2<u32> {
  if (params.splitChunk == 0u) {
    return keys;
  }
  return vec2<u32>(max(keys.x, split * params.splitChunk), min(keys.y, (split + 1u) * params.splitChunk));
}

// Where row i's output goes and what its unnormalised accumulator is multiplied by there; writes the
// row's statistics. Split-KV: split `split`'s slice, the accumulator as it is and (m, l), for
// decode_merge.wgsl. Otherwise the row's own place, (m, l) with the head's sink, and the accumulator
// scaled by l's inverse and the head mask (0 for a row that saw no key: O = 0, never NaN).
struct RowOut {
  row: u32,
  scale: f32,
}

fn finishRow(i: u32, qHead: u32, split: u32, m: f32, l: f32, b: u32, h: u32) -> RowOut {
  if (params.splitChunk > 0u) {
    let partRow = split * params.splitRows + qHead + i;
    rowStats[partRow] = vec2<f32>(m, l);
    return RowOut(partRow, 1.0);
  }
  let outRow = qHead + i;
  let stats = withSink(m, l, h);  // (m, l) with the head's sink, and the factor for acc
  rowStats[outRow] = stats.xy;
  return RowOut(outRow, select(0.0, stats.z / stats.y, stats.y > 0.0) * headScale(b, h));
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
      kk = loadKey(params.kBase4 + kvOffset + j0 * DH4 + t);
      vv = loadValue(params.vBase4 + kvOffset + j0 * DH4 + t);
    }
    kTile[t] = kk;
    vTile[t] = vv;
  }
}

