// Naive baseline, attention scores of one head: Sc[b, i, j] = (Q_h[b, i, :] · K_h[b, j, :]) / √Dh,
// materialised in full, with the causal mask written into it (j > i → MASKED).
//
//   Q_h, K_h [B, S, Dh]   one head's queries and keys (the output of linear.wgsl, rows b·S + s)
//   Sc       [B, S, S]    scores of this head; softmax.wgsl turns them into probabilities in place
//
// One invocation per score, a plain loop over Dh. Host guarantees: dispatch = (ceil(S / 8), ceil(S / 8), B).

struct Params {
  S: u32,
  Dh: u32,
  causal: u32,  // 1: query i sees keys j ≤ i
  scale: f32,   // 1/√Dh
}

// The lowest finite f32: exp(MASKED − rowMax) is exactly 0, and no ∞ − ∞ can appear.
const MASKED: f32 = -3.4028234663852886e38;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;         // [B, S, Dh]
@group(0) @binding(2) var<storage, read> k: array<f32>;         // [B, S, Dh]
@group(0) @binding(3) var<storage, read_write> sc: array<f32>;  // [B, S, S]

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let j = gid.x;  // key
  let i = gid.y;  // query
  let b = gid.z;
  let S = params.S;
  if (i >= S || j >= S) {
    return;
  }
  let out = (b * S + i) * S + j;
  if (params.causal == 1u && j > i) {
    sc[out] = MASKED;
    return;
  }
  let qRow = (b * S + i) * params.Dh;
  let kRow = (b * S + j) * params.Dh;
  var dot = 0.0;
  for (var d = 0u; d < params.Dh; d++) {
    dot += q[qRow + d] * k[kRow + d];
  }
  sc[out] = dot * params.scale;
}
