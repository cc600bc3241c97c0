// ggml's rule for one block of 32 values (kv_quantize.wgsl says it whole), shared by the stores into
// a plain cache (kv_quantize.wgsl) and into a paged pool (paged_quantize.wgsl): reads `src` (ST4),
// writes `dst` (u32 words: the quants plane of kv_q8_0.wgsl / kv_q4_0.wgsl), needs kv_rounding.wgsl and Q4.

// Quantizes the 32 values at src[source … source + 7] into block `block`'s quants; returns its d's f16 bits.
fn quantizeBlock(source: u32, block: u32) -> u32 {
  var x: array<vec4<f32>, 8>;
  var amax = 0.0;
  var peak = 0.0;  // q4_0: the value of largest magnitude, the first of them
  for (var t = 0u; t < 8u; t++) {
    x[t] = vec4<f32>(src[source + t]);
    for (var c = 0u; c < 4u; c++) {
      let a = abs(x[t][c]);
      if (amax < a) {
        amax = a;
        peak = x[t][c];
      }
    }
  }
  if (Q4 == 0u) {
    let d = divRN(amax, 127.0);
    let id = select(0.0, divRN(1.0, d), d != 0.0);
    for (var t = 0u; t < 8u; t++) {
      var word = 0u;
      for (var c = 0u; c < 4u; c++) {
        let y = productRN(x[t][c], id);
        let whole = trunc(abs(y));
        let magnitude = whole + select(0.0, 1.0, abs(y) - whole >= 0.5);  // roundf: half away from zero
        let q = i32(magnitude) * select(1, -1, y < 0.0);
        word |= (bitcast<u32>(q) & 0xffu) << (8u * c);
      }
      dst[8u * block + t] = word;
    }
    return halfBits(d);
  }
  let d = peak * -0.125;  // max / −8, exact
  let id = select(0.0, divRN(1.0, abs(d)) * sign(d), d != 0.0);
  for (var w = 0u; w < 4u; w++) {
    var word = 0u;
    for (var t = 0u; t < 2u; t++) {
      for (var c = 0u; c < 4u; c++) {
        let q = min(15u, u32(trunc(productRN(x[2u * w + t][c], id) + 8.5)));  // ≥ 0.5: trunc is floor
        word |= q << (4u * (4u * t + c));
      }
    }
    dst[4u * block + w] = word;
  }
  return halfBits(d);
}
