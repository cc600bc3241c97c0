// The score rule, shared by the attention kernels (flash_attention.wgsl with either body, and
// attention_probs.wgsl): which keys query row i sees, and what is added to the score of a key it sees.
// Its float64 twin is src/cpu/score-rule.ts. A new mask or score modification changes these two
// places, the plan's checks (src/plan/) and a test; the kernels call the functions below.
//
// Row i of a sequence of Sq queries and Skv keys is aligned to the end of the keys, i' = i + Skv − Sq
// (so a KV cache's new tokens come last), and sees key j when all of these hold:
//   causal:         j ≤ i'
//   window w > 0:   i' − w < j ≤ i'
//   key padding:    padding[b, j] == 0
//   attnMask:       mask[(b·H + h, or 0), i, j] is not MASKED; its value is added to the score
// A row that sees no key at all gets O = 0 (and probabilities 0), never NaN: the kernels' business.
//
// Reads the mask fields every attention kernel's Params declares (src/webgpu/kernels/masks.ts,
// MASK_FIELDS: causal, window, maskMode, hasPadding, hasHeadMask) and params.H, and the bindings below.

@group(0) @binding(4) var<storage, read> attnMask: array<f32>;  // [1 or B·H, Sq, Skv], MASKED where masked
@group(0) @binding(5) var<storage, read> padding: array<u32>;   // [B, Skv], 1 = ignore this key
@group(0) @binding(6) var<storage, read> headMask: array<f32>;  // [B·H], multiplies a head's probabilities

// The keys row i may see by position alone (causal, window): [band.x, band.y), within [0, Skv].
// Both ends grow with i, so rows i0 … i1 together need keys [keyBand(i0).x, keyBand(i1).y).
fn keyBand(i: u32, Sq: u32, Skv: u32) -> vec2<u32> {
  if (params.causal == 0u && params.window == 0u) {
    return vec2<u32>(0u, Skv);
  }
  let ip = i32(i) + i32(Skv) - i32(Sq);
  var first = 0u;
  if (params.window > 0u) {
    first = u32(clamp(ip - i32(params.window) + 1, 0, i32(Skv)));
  }
  return vec2<u32>(first, u32(clamp(ip + 1, 0, i32(Skv))));
}

// Where row i's entries of attnMask start (0 when there is no attnMask).
fn maskRowOf(b: u32, h: u32, i: u32, Sq: u32, Skv: u32) -> u32 {
  if (params.maskMode == 2u) {
    return ((b * params.H + h) * Sq + i) * Skv;
  }
  if (params.maskMode == 1u) {
    return i * Skv;
  }
  return 0u;
}

// What the rule adds to the score q·k/√Dh of key j (natural-log units), for sequence b and a row whose
// band is `band` and whose attnMask entries start at `maskRow`: 0 or the attnMask value when the row
// sees j; MASKED (≤ MASKED_BELOW) when it does not. Callers test `bias > MASKED_BELOW`.
fn keyBias(b: u32, j: u32, band: vec2<u32>, maskRow: u32, Skv: u32) -> f32 {
  if (j < band.x || j >= band.y) {
    return MASKED;
  }
  if (params.hasPadding != 0u && padding[b * Skv + j] != 0u) {
    return MASKED;
  }
  if (params.maskMode != 0u) {
    let value = attnMask[maskRow + j];
    return select(MASKED, value, value > MASKED_BELOW);
  }
  return 0.0;
}

// What the head mask multiplies head h's probabilities (and so its output) by: 1 without one.
fn headScale(b: u32, h: u32) -> f32 {
  if (params.hasHeadMask != 0u) {
    return headMask[b * params.H + h];
  }
  return 1.0;
}
