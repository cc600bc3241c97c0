// The output gate (config.outputGate; Qwen3-Next, Qwen3.5), in place on the attention output O
// [B, H, Sq, Dh] before the output projection: O[b, h, s, d] *= sigmoid(x[b, s]·W_g[h·Dh + d] + b_g[h·Dh + d]).
// The float64 twin is gateRow in src/cpu/reference.ts.
//
//   attention  O [B, H, Sq, Dh], scaled in place
//   query      x [B·Sq, E] as vec4s (E4 = E / 4)
//   gateWeight W_g [H·Dh, E] as vec4s
//   gateBias   b_g [H·Dh] (zeros without bias)
//
// One invocation per (token m, lane n < H·Dh): a dot product of E features (a GEMV per token, not
// tiled: the gate costs as much as a projection of H·Dh rows done plainly). Padded heads' lanes have
// zero weights, and their O is zero either way (padding.ts).
//
// Host guarantees: dispatch = flatGroups(tokens·H·Dh) (x up to 65535 workgroups of 64, the rest along y).

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) groups: vec3u) {
  let i = gid.x + gid.y * groups.x * 64u;
  if (i >= params.count) {
    return;
  }
  let m = i / params.lanes;
  let n = i % params.lanes;
  var g = f32(gateBias[n]);
  for (var e = 0u; e < params.E4; e++) {
    g += dot(vec4<f32>(query[m * params.E4 + e]), vec4<f32>(gateWeight[n * params.E4 + e]));
  }
  let b = m / params.S;
  let s = m % params.S;
  let h = n / params.Dh;
  let d = n % params.Dh;
  let at = ((b * params.heads + h) * params.S + s) * params.Dh + d;
  attention[at] = ST(f32(attention[at]) / (1.0 + exp(-g)));
}
