// Attention probabilities, only when the caller asks for them (needWeights):
//   P [B, H, Sq, Skv],  P[b, h, i, j] = softmax_j(q_i·k_j / √Dh + mask) over the keys row i sees,
//   times the head mask; 0 for the keys it does not see.
//
// The flash kernel never stores scores; it leaves each row's softmax statistics in `rowStats`: the
// max m of the scores (log2 units: scores pre-multiplied by log2(e)/√Dh) and the sum l of
// exp2(score − m). This kernel recomputes each score and normalises it, P = exp2(s − m) / l, as
// FlashAttention's backward pass does with its log-sum-exp. So the probabilities come from the same
// softmax the output used, and no second reduction over the keys is needed. A row with l = 0 (no
// visible key) gets 0. The visibility rules are flash_attention.wgsl's.
//
// One invocation per (i, j) element: a Dh-long dot product read with vec4 loads. Workgroup 16×16
// covers 16 query rows × 16 keys of one (b, h). Host guarantees: Dh % 4 == 0; not used for packed
// sequences; dispatch = (ceil(Skv / 16), ceil(Sq / 16), B·H).

struct Params {
  H: u32,
  G: u32,
  Sq: u32,
  Skv: u32,
  Dh4: u32,
  kBase4: u32,       // where K starts in qkv, in vec4s
  causal: u32,
  window: u32,
  scaleLog2e: f32,   // log2(e) / sqrt(Dh), as in flash_attention.wgsl
  maskMode: u32,     // 0: none; 1: [Sq, Skv]; 2: [B·H, Sq, Skv]
  hasPadding: u32,
  hasHeadMask: u32,
  kvStride: u32,     // rows per (b, g) block of K (Skv, or a KV cache's maxSeqLen)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> qkv: array<ST4>;        // Q ++ K ++ V
@group(0) @binding(2) var<storage, read> rowStats: array<vec2<f32>>;   // (m, l) per row [B, H, Sq]
@group(0) @binding(3) var<storage, read_write> probs: array<f32>;      // [B, H, Sq, Skv]
@group(0) @binding(4) var<storage, read> attnMask: array<f32>;         // [1 or B·H, Sq, Skv]
@group(0) @binding(5) var<storage, read> padding: array<u32>;          // [B, Skv]
@group(0) @binding(6) var<storage, read> headMask: array<f32>;         // [B·H]
@group(0) @binding(7) var<storage, read> kv: array<ST4>;         // K ++ V (the qkv buffer, or a KV cache)

const MASKED: f32 = -1.0e38;

@compute @workgroup_size(16, 16)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let j = gid.x;
  let i = gid.y;
  let bh = gid.z;  // b·H + h
  if (i >= params.Sq || j >= params.Skv) {
    return;
  }
  let b = bh / params.H;
  let h = bh % params.H;
  let kvHead = h / (params.H / params.G);
  let ip = i32(i) + i32(params.Skv) - i32(params.Sq);  // i', aligned to the end of the keys
  var visible = true;
  if (params.causal != 0u || params.window > 0u) {
    visible = i32(j) <= ip;
  }
  if (params.window > 0u) {
    visible = visible && i32(j) > ip - i32(params.window);
  }
  if (visible && params.hasPadding != 0u) {
    visible = padding[b * params.Skv + j] == 0u;
  }
  var bias = 0.0;
  if (visible && params.maskMode != 0u) {
    let maskBatch = select(0u, bh, params.maskMode == 2u);
    bias = attnMask[(maskBatch * params.Sq + i) * params.Skv + j];
    visible = bias > MASKED;
  }
  let stats = rowStats[bh * params.Sq + i];
  var p = 0.0;
  if (visible && stats.y > 0.0) {
    let qOffset = (bh * params.Sq + i) * params.Dh4;
    let kOffset = params.kBase4 + ((b * params.G + kvHead) * params.kvStride + j) * params.Dh4;
    var dotv = vec4<f32>(0.0);
    for (var d = 0u; d < params.Dh4; d++) {
      dotv += (vec4<f32>(qkv[qOffset + d]) * params.scaleLog2e) * vec4<f32>(kv[kOffset + d]);
    }
    let score = dotv.x + dotv.y + dotv.z + dotv.w + bias * 1.4426950408889634;
    p = exp2(score - stats.x) / stats.y;
    if (params.hasHeadMask != 0u) {
      p *= headMask[bh];
    }
  }
  probs[(bh * params.Sq + i) * params.Skv + j] = p;
}
