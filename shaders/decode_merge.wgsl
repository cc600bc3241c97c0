// Split-KV merge ("flash-decoding"): combines the partial results of the key splits of
// flash_attention.wgsl into the attention output and each row's softmax statistics.
//
//   partial   [splits, B, H, Sq, Dh]   unnormalised accumulators, acc_s = Σ_j exp2(s_j − m_s)·v_j
//   parts     [splits, B, H, Sq]       (m_s, l_s) of each split (l_s = 0: the split saw no key)
//   out       [B, H, Sq, Dh]           O = Σ_s exp2(m_s − M)·acc_s / L (× head mask), 0 when L = 0
//   rowStats  [B, H, Sq]               (M, L): M = max_s m_s, L = Σ_s exp2(m_s − M)·l_s, for attention_probs.wgsl
//
// One invocation per row (b, h, i). Host guarantees: dispatch = (ceil(rows / 64), 1, 1), rows = B·H·Sq.

struct Params {
  rows: u32,        // B·H·Sq
  splits: u32,
  Dh4: u32,
  H: u32,
  Sq: u32,
  hasHeadMask: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> partial: array<ST4>;
@group(0) @binding(2) var<storage, read> parts: array<vec2<f32>>;
@group(0) @binding(3) var<storage, read_write> out: array<ST4>;
@group(0) @binding(4) var<storage, read_write> rowStats: array<vec2<f32>>;
@group(0) @binding(5) var<storage, read> headMask: array<f32>;          // [B·H]

const NO_SCORE: f32 = -3.0e38;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let row = gid.x;
  if (row >= params.rows) {
    return;
  }
  var M = NO_SCORE;
  for (var s = 0u; s < params.splits; s++) {
    let p = parts[s * params.rows + row];
    if (p.y > 0.0) {
      M = max(M, p.x);
    }
  }
  var L = 0.0;
  for (var s = 0u; s < params.splits; s++) {
    let p = parts[s * params.rows + row];
    if (p.y > 0.0) {
      L += exp2(p.x - M) * p.y;
    }
  }
  rowStats[row] = vec2<f32>(M, L);
  var scale = select(0.0, 1.0 / L, L > 0.0);  // a row no split saw a key for gives 0
  if (params.hasHeadMask != 0u) {
    scale *= headMask[row / params.Sq];  // row / Sq = b·H + h
  }
  for (var d = 0u; d < params.Dh4; d++) {
    var o = vec4<f32>(0.0);
    for (var s = 0u; s < params.splits; s++) {
      let p = parts[s * params.rows + row];
      if (p.y > 0.0) {
        o += exp2(p.x - M) * vec4<f32>(partial[(s * params.rows + row) * params.Dh4 + d]);
      }
    }
    out[row * params.Dh4 + d] = ST4(o * scale);
  }
}
