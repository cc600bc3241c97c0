// Naive baseline, linear layer: Y = X · W[row0 .. row0 + N)ᵀ + bias[row0 .. row0 + N).
//
//   X    [M, K]          row-major (M = B·S rows; K = E)
//   W    [rows, K]       a PyTorch weight (y = x·Wᵀ + b), read from row `row0` on: in_proj_weight with
//                        row0 = h·Dh (Q of head h), E + h·Dh (K), 2E + h·Dh (V); out_proj.weight with row0 = 0
//   bias [rows]          read from `row0` on, like W
//   Y    [M, N]          row-major
//
// One invocation per output element, a plain loop over K, no tiling, no workgroup memory: the
// kernel a tutorial writes first. Host guarantees: dispatch = (ceil(N / 8), ceil(M / 8), 1).

struct Params {
  M: u32,
  N: u32,
  K: u32,
  row0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;        // [M, K]
@group(0) @binding(2) var<storage, read> w: array<f32>;        // [rows, K]
@group(0) @binding(3) var<storage, read> bias: array<f32>;     // [rows]
@group(0) @binding(4) var<storage, read_write> y: array<f32>;  // [M, N]

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let n = gid.x;
  let m = gid.y;
  if (n >= params.N || m >= params.M) {
    return;
  }
  let wRow = (params.row0 + n) * params.K;
  let xRow = m * params.K;
  var sum = 0.0;
  for (var k = 0u; k < params.K; k++) {
    sum += x[xRow + k] * w[wRow + k];
  }
  y[m * params.N + n] = sum + bias[params.row0 + n];
}
