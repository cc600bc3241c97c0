// config.activations 'q8' (src/quant/activations.ts): a projection's input x̂ = d·q, each row of x
// quantized in blocks of 32 along its K features as ggml's quantize_row_q8_0_ref (d = max|x| / 127,
// q = roundf(x·(1/d)), d kept as an f16), every quotient and rounding exact (kv_rounding.wgsl). The
// projection that follows multiplies x̂ by the packed weights in float: within float32 of the integer
// dot products llama.cpp does, the same numbers.
//
//   src  x, read in one of two layouts (heads = 0: rows [rows, ld], feature e of row r at r·ld + e;
//        heads > 0: the attention output O [B, heads, S, Dh], row r = b·S + s, feature e = h·uDh + d at
//        ((b·heads + h)·S + s)·Dh + d: the concatenated heads, uDh ≤ Dh the caller's head size)
//   dst  x̂ in the same layout; lanes past the K features (padding: ld > K, or Dh > uDh) written 0
//
// One invocation per (row, block) plus, where the layout has padding, one more per row that zeroes it.
// Host guarantees: count = rows · perRow, perRow = ⌈K/32⌉ (+ 1 with padding); dispatch of 64s, x then y.

fn at(r: u32, e: u32) -> u32 {
  if (params.heads == 0u) {
    return r * params.ld + e;
  }
  let b = r / params.S;
  let s = r % params.S;
  return ((b * params.heads + e / params.uDh) * params.S + s) * params.Dh + e % params.uDh;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) groups: vec3u) {
  let i = gid.x + gid.y * groups.x * 64u;
  if (i >= params.count) {
    return;
  }
  let r = i / params.perRow;
  let block = i % params.perRow;
  let e0 = block * 32u;
  if (e0 >= params.K) {
    // the row's padding
    if (params.heads == 0u) {
      for (var e = params.K; e < params.ld; e++) {
        dst[r * params.ld + e] = ST(0.0);
      }
    } else {
      let b = r / params.S;
      let s = r % params.S;
      for (var h = 0u; h < params.heads; h++) {
        for (var d = params.uDh; d < params.Dh; d++) {
          dst[((b * params.heads + h) * params.S + s) * params.Dh + d] = ST(0.0);
        }
      }
    }
    return;
  }
  let e1 = min(e0 + 32u, params.K);
  var amax = 0.0;
  for (var e = e0; e < e1; e++) {
    amax = max(amax, abs(f32(src[at(r, e)])));
  }
  let d = divRN(amax, 127.0);
  let id = select(0.0, divRN(1.0, d), d != 0.0);
  let dh = halfToFloat(halfBits(d));
  for (var e = e0; e < e1; e++) {
    let y = productRN(f32(src[at(r, e)]), id);
    let whole = trunc(abs(y));
    let magnitude = whole + select(0.0, 1.0, abs(y) - whole >= 0.5);  // roundf: half away from zero
    dst[at(r, e)] = ST(dh * magnitude * sign(y));
  }
}

// f16 bits → f32, exactly (subnormal halves included), by bits: WGSL's exp2 and `/` promise less.
fn halfToFloat(h: u32) -> f32 {
  let sign = (h & 0x8000u) << 16u;
  let exponent = (h >> 10u) & 0x1fu;
  let mant = h & 0x3ffu;
  if (exponent == 0u) {
    return bitcast<f32>(sign | bitcast<u32>(f32(mant) * 5.9604644775390625e-8));  // mant · 2⁻²⁴, exact
  }
  if (exponent == 31u) {
    return bitcast<f32>(sign | 0x7f800000u | (mant << 13u));  // ±Infinity (a block with one: its x̂ are NaN, as the host's)
  }
  return bitcast<f32>(sign | ((exponent + 112u) << 23u) | (mant << 13u));
}
