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
// The multiply is a GEMM core the host appends (gemm_register_4x4.wgsl, gemm_register_8x8.wgsl or gemm_workgroup.wgsl, as tuned);
// this file gives it A = concat(heads) as H segments of Dh (segment h of row m is O[b, h, s, :]),
// B = W_O, and a plain row-major store with the bias. Storage is ST4 (f32, or f16 with precision
// f16); the four-term dot products run in that type and accumulate in f32.
// Host guarantees: Dh % 4 == 0, N % 4 == 0; dispatch as the core says.

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

// What the GEMM core asks for. Row m of concat(heads) starts at O[b, 0, s, 0]; head h is S·Dh further.
fn kSegments() -> u32 { return params.H; }
fn segLen4() -> u32 { return params.Dh4; }
fn aRow(m: u32) -> u32 { return ((m / params.S) * params.H * params.S + m % params.S) * params.Dh4; }
fn aSegStride() -> u32 { return params.S * params.Dh4; }
fn bRow(n: u32) -> u32 { return n * params.H * params.Dh4; }
fn loadA(i: u32) -> ST4 { return o[i]; }
fn loadB(i: u32) -> ST4 { return w[i]; }
fn store4(m: u32, n: u32, acc: vec4<f32>) {
  y[m * (params.N / 4u) + n / 4u] = ST4(acc + vec4<f32>(bias[n / 4u]));
}
