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
// A score is made as: s = scale·q·k (the kernels fold scale·log2(e) into q: scores are in log2 units);
// softcap: s ← c·tanh(s / c); ALiBi: s ← s − slope[h]·|i' − j| (modifyScore); then keyBias (× log2(e)).
// A head's sink (sinkLog2) joins the softmax's max and sum when a row is normalised.
//
// Reads the mask fields every attention kernel's Params declares (src/webgpu/kernels/masks.ts,
// SCORE_FIELDS: causal, window, maskMode, hasPadding, hasHeadMask, softcapLog2, hasAlibi, hasSinks) and
// params.H, and the bindings attnMask, padding and headData, which every attention kernel's bindings
// declare (src/webgpu/kernels/masks.ts, SCORE_BINDINGS: the host writes their declarations).

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
    return headData[2u * params.H + b * params.H + h];
  }
  return 1.0;
}

// The score of key j for the row at aligned position ip = i + Skv − Sq of head h (batch element b), from s = scale·q·k
// in log2 units: soft-capped (softcapLog2 = softcap·log2(e), so c·tanh(s/c) keeps its units), then
// with the ALiBi term −slope·|ip − j| (in log2 units).
// Then the custom scoreMod (config.scoreMod), which the host prepends (an identity one without it,
// HAS_SCORE_MOD = 0), in natural-log units on the row's batch element b.
fn modifyScore(s: f32, b: u32, h: u32, ip: i32, j: u32) -> f32 {
  var score = s;
  if (params.softcapLog2 > 0.0) {
    score = params.softcapLog2 * tanh(score / params.softcapLog2);
  }
  if (params.hasAlibi != 0u) {
    score -= headData[h] * LOG2E * f32(abs(ip - i32(j)));
  }
  if (HAS_SCORE_MOD == 1u) {
    score = scoreMod(score / LOG2E, b, h, u32(max(ip, 0)), j) * LOG2E;
  }
  return score;
}

// Whether every key a row sees by position takes its score as q·k gives it, with nothing added or
// hidden: no key padding, attnMask, softcap, ALiBi or scoreMod. The bodies with a fast path that skips
// the rule for such keys (software/) ask this; a new option that changes a score or hides a key must
// make it false here, or those bodies would skip it.
fn plainScores() -> bool {
  return params.hasPadding == 0u && params.maskMode == 0u && params.softcapLog2 <= 0.0 && params.hasAlibi == 0u && HAS_SCORE_MOD == 0u;
}

// Head h's sink logit in log2 units, or NO_SCORE (nothing) without sinks.
fn sinkLog2(h: u32) -> f32 {
  if (params.hasSinks != 0u) {
    return headData[params.H + h] * LOG2E;
  }
  return NO_SCORE;
}

// A row's softmax statistics (m, l) and the factor its unnormalised accumulator is multiplied by,
// with head h's sink (if any) joined in: m' = max(m, sink), l' = l·2^(m − m') + 2^(sink − m').
// Returns (m', l', 2^(m − m')). A row that saw no key keeps l' = its sink's share and gets O = 0.
fn withSink(m: f32, l: f32, h: u32) -> vec3<f32> {
  let sink = sinkLog2(h);
  if (sink <= NO_SCORE) {
    return vec3<f32>(m, l, 1.0);
  }
  let mNew = max(m, sink);
  let alpha = select(exp2(m - mNew), 0.0, m <= NO_SCORE);
  return vec3<f32>(mNew, l * alpha + exp2(sink - mNew), alpha);
}
