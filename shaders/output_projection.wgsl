// Output projection: Y = concat(heads) · W_Oᵀ + b_O, reading the heads in place.
//
//   O    [B, H, S, Dh]   the attention output; row m = (b, s) of concat(heads) is the H vectors
//                        O[b, h, s, :] side by side, so column k = h·Dh + d of the [B·S, E] matrix
//   W    [N, E]          out_proj.weight, row-major, read as vec4 along E
//   bias [N]             out_proj.bias (all zeros when the layer has no bias)
//   Y    [B, S, N]       the layer's output, row-major (N = E)
//
// No concatenation pass: the K loop runs over heads, then over lanes of a head, and addresses O
// directly. Columns k..k+3 (k % 4 == 0) never straddle two heads because Dh % 4 == 0.
//
// Tiling: as in qkv_projection.wgsl, a 4×4 register tile per invocation, vec4 loads, no workgroup
// memory. Storage is ST4 (f32, or f16 with precision f16); the four-term dot products run in that
// type and accumulate in f32. Host guarantees: Dh % 4 == 0, N % 4 == 0; dispatch = (ceil(N / (4·WG_X)), ceil(M / (4·WG_Y)), 1).

struct Params {
  M: u32,    // rows: B·S
  N: u32,    // output columns: E
  S: u32,    // sequence length
  H: u32,    // heads
  Dh4: u32,  // head size / 4
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> o: array<ST4>;          // [B, H, S, Dh/4]
@group(0) @binding(2) var<storage, read> w: array<ST4>;          // [N, E/4]
@group(0) @binding(3) var<storage, read> bias: array<ST4>;       // [N/4]
@group(0) @binding(4) var<storage, read_write> y: array<ST4>;    // [M, N/4]

override WG_X: u32 = 8u;
override WG_Y: u32 = 8u;

// Where row m of concat(heads) starts in O, in vec4s (head 0, lane 0).
fn rowBase4(m: u32) -> u32 {
  let b = m / params.S;
  let s = m % params.S;
  return (b * params.H * params.S + s) * params.Dh4;
}

@compute @workgroup_size(WG_X, WG_Y)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let row0 = (wid.y * WG_Y + lid.y) * 4u;
  let col0 = (wid.x * WG_X + lid.x) * 4u;
  if (row0 >= params.M || col0 >= params.N) {
    return;
  }
  let Dh4 = params.Dh4;
  let E4 = params.H * Dh4;
  let headStride = params.S * Dh4;  // from O[b, h, s, :] to O[b, h+1, s, :]
  // Rows past M re-read row M-1; their results are never stored.
  let last = params.M - 1u;
  let o0 = rowBase4(min(row0, last));
  let o1 = rowBase4(min(row0 + 1u, last));
  let o2 = rowBase4(min(row0 + 2u, last));
  let o3 = rowBase4(min(row0 + 3u, last));
  let w0 = col0 * E4;
  let w1 = w0 + E4;
  let w2 = w1 + E4;
  let w3 = w2 + E4;

  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  for (var h = 0u; h < params.H; h++) {
    let oh = h * headStride;
    let wh = h * Dh4;
    for (var d = 0u; d < Dh4; d++) {
      let a0 = o[o0 + oh + d];
      let a1 = o[o1 + oh + d];
      let a2 = o[o2 + oh + d];
      let a3 = o[o3 + oh + d];
      let b0 = w[w0 + wh + d];
      let b1 = w[w1 + wh + d];
      let b2 = w[w2 + wh + d];
      let b3 = w[w3 + wh + d];
      // Four-term dot products in the storage type (f16 arithmetic with precision f16), accumulated in f32.
      acc0 += vec4<f32>(f32(dot(a0, b0)), f32(dot(a0, b1)), f32(dot(a0, b2)), f32(dot(a0, b3)));
      acc1 += vec4<f32>(f32(dot(a1, b0)), f32(dot(a1, b1)), f32(dot(a1, b2)), f32(dot(a1, b3)));
      acc2 += vec4<f32>(f32(dot(a2, b0)), f32(dot(a2, b1)), f32(dot(a2, b2)), f32(dot(a2, b3)));
      acc3 += vec4<f32>(f32(dot(a3, b0)), f32(dot(a3, b1)), f32(dot(a3, b2)), f32(dot(a3, b3)));
    }
  }

  let N4 = params.N / 4u;
  let c4 = col0 / 4u;
  let b4 = vec4<f32>(bias[c4]);
  y[row0 * N4 + c4] = ST4(acc0 + b4);
  if (row0 + 1u < params.M) { y[(row0 + 1u) * N4 + c4] = ST4(acc1 + b4); }
  if (row0 + 2u < params.M) { y[(row0 + 2u) * N4 + c4] = ST4(acc2 + b4); }
  if (row0 + 3u < params.M) { y[(row0 + 3u) * N4 + c4] = ST4(acc3 + b4); }
}
