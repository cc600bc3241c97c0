// QKV projection: one GEMM, Y = X · Wᵀ + b, whose store writes Q, K and V already split into heads.
//
//   X    [M, K]              M = B·S token rows, K = E (or kdim, vdim); row-major, read as vec4 along K
//   W    [·, K]              PyTorch's packed in_proj_weight [(H + 2·G)·Dh, E]: H query heads' rows,
//                            then G key heads', then G value heads'; or one of q/k/v_proj_weight.
//                            This dispatch uses rows wRow0 … wRow0 + N − 1; read as vec4 along K
//   bias [(H + 2·G)·Dh]      in_proj_bias (all zeros when the layer has no bias)
//   qkv  Q [B, H, Sq, Dh] ++ K [B, G, Skv, Dh] ++ V [B, G, Skv, Dh], back to back in one buffer; or,
//        with a KV cache, Q alone (one dispatch) and the cache's K ++ V [B, G, maxSeqLen, Dh], the new
//        tokens' rows written from row kvRow0 on (another dispatch)
//
// Column c of this dispatch is column n = slot0·Dh + c of the packed projection: head slot n / Dh
// of the H + 2·G slots, lane n % Dh; row m is token s = m % S of sequence b = m / S. The store sends
// Y[m, c] straight to its place in Q, K or V, so there is no separate reshape or transpose pass and
// no loop over heads. Self-attention is one dispatch over all N = (H + 2·G)·Dh columns; cross-
// attention dispatches the query's columns and the key's and value's separately (their X differ).
//
// Tiling: each invocation owns a 4×4 register tile (4 rows × 4 consecutive columns) and walks K four
// at a time: 8 vec4 loads feed 16 dot products. A workgroup of WG_X × WG_Y invocations covers
// (4·WG_Y) rows × (4·WG_X) columns. No workgroup memory and no barriers: on CPU drivers (lavapipe,
// SwiftShader) barriers cost more than the re-reads, and on GPUs the caches catch the reuse.
//
// Storage is ST4 (vec4<f32>, or vec4<f16> with precision f16: the host prepends the alias); the
// four-term dot products run in that type and accumulate in f32.
//
// Host guarantees: K % 4 == 0 and Dh % 4 == 0 (so N % 4 == 0, and four consecutive columns starting
// at a multiple of 4 never straddle two heads); S is Sq for Q columns and Skv for K and V columns
// (one dispatch never mixes them unless Sq = Skv); dispatch = (ceil(N / (4·WG_X)), ceil(M / (4·WG_Y)), 1).

struct Params {
  M: u32,      // rows of X: B·S
  N: u32,      // columns of this dispatch (rows of W used)
  K4: u32,     // K / 4
  S: u32,      // sequence length of X (and of the Q, K or V it writes)
  H: u32,      // query heads
  G: u32,      // key/value heads
  Dh4: u32,    // head size / 4
  kBase4: u32, // where K starts in qkv, in vec4s: B·H·S·Dh / 4
  vBase4: u32, // where V starts in qkv, in vec4s: (B·H·Sq·Dh + B·G·Skv·Dh) / 4
  slot0: u32,  // head slot of this dispatch's first column (0: Q, H: K, H + G: V)
  wRow0: u32,  // row of W holding this dispatch's first column
  kvStride: u32, // rows per (b, g) block of K and V: S, or a KV cache's maxSeqLen
  kvRow0: u32,   // row of the block the first token goes to: 0, or the cache's length
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<ST4>;          // [M, K/4]
@group(0) @binding(2) var<storage, read> w: array<ST4>;          // [·, K/4]
@group(0) @binding(3) var<storage, read> bias: array<ST4>;       // [(H + 2·G)·Dh / 4]
@group(0) @binding(4) var<storage, read_write> qkv: array<ST4>;  // Q ++ K ++ V, see above

override WG_X: u32 = 8u;
override WG_Y: u32 = 8u;

// Where row m, columns n..n+3 (n % 4 == 0) go in qkv, in vec4s.
fn destination4(m: u32, n: u32) -> u32 {
  let b = m / params.S;
  let s = m % params.S;
  let Dh = params.Dh4 * 4u;
  let slot = n / Dh;            // head slot among the H + 2·G
  let d4 = (n % Dh) / 4u;
  if (slot < params.H) {
    return ((b * params.H + slot) * params.S + s) * params.Dh4 + d4;
  }
  if (slot < params.H + params.G) {
    return params.kBase4 + ((b * params.G + (slot - params.H)) * params.kvStride + params.kvRow0 + s) * params.Dh4 + d4;
  }
  return params.vBase4 + ((b * params.G + (slot - params.H - params.G)) * params.kvStride + params.kvRow0 + s) * params.Dh4 + d4;
}

@compute @workgroup_size(WG_X, WG_Y)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let row0 = (wid.y * WG_Y + lid.y) * 4u;
  let col0 = (wid.x * WG_X + lid.x) * 4u;
  if (row0 >= params.M || col0 >= params.N) {
    return;
  }
  let K4 = params.K4;
  // Rows past M (the last tile of a ragged edge) re-read row M-1; their results are never stored.
  let last = params.M - 1u;
  let x0 = min(row0, last) * K4;
  let x1 = min(row0 + 1u, last) * K4;
  let x2 = min(row0 + 2u, last) * K4;
  let x3 = min(row0 + 3u, last) * K4;
  let n0 = params.slot0 * params.Dh4 * 4u + col0;  // column in the packed projection
  let w0 = (params.wRow0 + col0) * K4;
  let w1 = w0 + K4;
  let w2 = w1 + K4;
  let w3 = w2 + K4;

  // acc_i holds row row0+i, columns col0..col0+3.
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  for (var k = 0u; k < K4; k++) {
    let a0 = x[x0 + k];
    let a1 = x[x1 + k];
    let a2 = x[x2 + k];
    let a3 = x[x3 + k];
    let b0 = w[w0 + k];
    let b1 = w[w1 + k];
    let b2 = w[w2 + k];
    let b3 = w[w3 + k];
    // Four-term dot products in the storage type (f16 arithmetic with precision f16), accumulated in f32.
    acc0 += vec4<f32>(f32(dot(a0, b0)), f32(dot(a0, b1)), f32(dot(a0, b2)), f32(dot(a0, b3)));
    acc1 += vec4<f32>(f32(dot(a1, b0)), f32(dot(a1, b1)), f32(dot(a1, b2)), f32(dot(a1, b3)));
    acc2 += vec4<f32>(f32(dot(a2, b0)), f32(dot(a2, b1)), f32(dot(a2, b2)), f32(dot(a2, b3)));
    acc3 += vec4<f32>(f32(dot(a3, b0)), f32(dot(a3, b1)), f32(dot(a3, b2)), f32(dot(a3, b3)));
  }

  let b4 = vec4<f32>(bias[n0 / 4u]);
  qkv[destination4(row0, n0)] = ST4(acc0 + b4);
  if (row0 + 1u < params.M) { qkv[destination4(row0 + 1u, n0)] = ST4(acc1 + b4); }
  if (row0 + 2u < params.M) { qkv[destination4(row0 + 2u, n0)] = ST4(acc2 + b4); }
  if (row0 + 3u < params.M) { qkv[destination4(row0 + 3u, n0)] = ST4(acc3 + b4); }
}
