// Naive baseline, probabilities times values of one head, stored into that head's columns of the
// concatenated heads: O[b, i, col0 + d] = Σ_j P[b, i, j] · V_h[b, j, d],  col0 = h·Dh.
//
//   P    [B, S, S]    one head's probabilities (softmax.wgsl)
//   V_h  [B, S, Dh]   one head's values (linear.wgsl)
//   O    [B, S, E]    concat(heads), the input of the output projection
//
// One invocation per output element, a plain loop over every key (masked ones included: their
// probability is 0). Host guarantees: dispatch = (ceil(Dh / 8), ceil(S / 8), B).

struct Params {
  S: u32,
  Dh: u32,
  E: u32,
  col0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> p: array<f32>;         // [B, S, S]
@group(0) @binding(2) var<storage, read> v: array<f32>;         // [B, S, Dh]
@group(0) @binding(3) var<storage, read_write> o: array<f32>;   // [B, S, E]

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let d = gid.x;
  let i = gid.y;
  let b = gid.z;
  let S = params.S;
  if (d >= params.Dh || i >= S) {
    return;
  }
  let pRow = (b * S + i) * S;
  var sum = 0.0;
  for (var j = 0u; j < S; j++) {
    sum += p[pRow + j] * v[(b * S + j) * params.Dh + d];
  }
  o[(b * S + i) * params.E + params.col0 + d] = sum;
}
