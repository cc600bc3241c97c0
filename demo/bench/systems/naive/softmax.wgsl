// Naive baseline, row softmax in place: P[r, :] = exp(Sc[r, :] − max) / Σ exp(Sc[r, :] − max).
//
//   Sc → P  [rows, S]   rows = B·S query rows of one head; masked scores (the lowest f32) become 0
//
// One invocation per row, three plain passes over the row (max, sum, normalise). Every causal row
// has at least one visible key (j = 0), so the max is finite and the sum ≥ 1.
// Host guarantees: dispatch = (ceil(rows / 64), 1, 1).

struct Params {
  rows: u32,
  S: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> p: array<f32>;  // [rows, S]

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let r = gid.x;
  if (r >= params.rows) {
    return;
  }
  let base = r * params.S;
  var rowMax = p[base];
  for (var j = 1u; j < params.S; j++) {
    rowMax = max(rowMax, p[base + j]);
  }
  var sum = 0.0;
  for (var j = 0u; j < params.S; j++) {
    let e = exp(p[base + j] - rowMax);
    p[base + j] = e;
    sum += e;
  }
  let inv = 1.0 / sum;
  for (var j = 0u; j < params.S; j++) {
    p[base + j] *= inv;
  }
}
