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
// The multiply itself is a GEMM core the host appends: gemm_register_4x4.wgsl, gemm_register_8x8.wgsl or gemm_workgroup.wgsl,
// whichever the tuner chose for this adapter and shape (src/webgpu/tuning.ts). This file supplies
// what the core asks for: A = X, B = W from row wRow0, and store4, which adds the bias and scatters.
//
// Storage is ST4 (vec4<f32>, or vec4<f16> with precision f16: the host prepends the alias and SM4,
// the matching mat4x4); the four-term dot products run in that type and accumulate in f32.
//
// Host guarantees: K % 4 == 0 and Dh % 4 == 0 (so N % 4 == 0, and four consecutive columns starting
// at a multiple of 4 never straddle two heads); S is Sq for Q columns and Skv for K and V columns
// (one dispatch never mixes them unless Sq = Skv); dispatch as the core says.

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

// What the GEMM core asks for.
fn kSegments() -> u32 { return 1u; }
fn segLen4() -> u32 { return params.K4; }
fn aRow(m: u32) -> u32 { return m * params.K4; }
fn aSegStride() -> u32 { return 0u; }
fn bRow(n: u32) -> u32 { return (params.wRow0 + n) * params.K4; }
fn loadA(i: u32) -> ST4 { return x[i]; }
fn loadB(i: u32) -> ST4 { return w[i]; }
fn store4(m: u32, n: u32, y: vec4<f32>) {
  let packed = params.slot0 * params.Dh4 * 4u + n;  // column in the packed projection
  qkv[destination4(m, packed)] = ST4(y + vec4<f32>(bias[packed / 4u]));
}
