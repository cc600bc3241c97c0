// Packed weights for the projection GEMM/GEMV cores, dequantized as they are loaded: the layout of
// src/quant/types.ts PackedWeight, uploaded as it is (src/webgpu/weights.ts):
//
//   quants       [N, wordsPerRow] u32   row n's weight k: for 4 bits nibble k % 8 of word k / 8 (low
//                                       nibble first), for 8 bits byte k % 4 of word k / 4; a row is
//                                       padded with zeros to whole words (wordsPerRow = ceil(K·BITS/32))
//   scaleOffset  [N, groups] vec2<f32>  (scale, offset) of each group of GROUP weights along K
//                                       (groups = ceil(K / GROUP)); w = scale·q − offset
//
// The host prepends `const WBITS` (4 or 8): a pipeline per (variant, precision, bits); the group size
// is a uniform, params.wGroupShift = log2(GROUP / 4) (GROUP a power of two ≥ 16), so that the formats
// of one bit width (q4_0, q4_k, MatMulNBits 4-bit at any block size) share their pipelines: each costs
// seconds of LLVM on lavapipe. The cores index B by vec4: the index of W[row, 4·k4 … 4·k4 + 3]
// is row·2¹⁶ + k4 here (wIndex), so loadB finds the row and the vec4 with a shift and a mask, not a
// division. A vec4 never straddles a group (GROUP % 4 == 0) nor a word (4 bits: half a word; 8 bits:
// one word). The dequantized vec4 is computed in f32 and stored as ST4 (f16 with precision f16).
// Host guarantees: K % 4 == 0, K / 4 < 2¹⁶, rows < 2¹⁶, GROUP a power of two (weights.ts falls back to float otherwise);
// bRowLen4() (the problem file) is K / 4 of this W.

fn wIndex(row: u32, len4: u32) -> u32 { return row << 16u; }

fn loadB(i: u32) -> ST4 {
  let row = i >> 16u;
  let k4 = i & 0xffffu;
  let len4 = bRowLen4();
  let shift = params.wGroupShift;
  let so = scaleOffset[row * ((len4 + (1u << shift) - 1u) >> shift) + (k4 >> shift)];
  var q: vec4<u32>;
  if (WBITS == 4u) {
    let word = quants[row * ((len4 + 1u) / 2u) + k4 / 2u] >> ((k4 & 1u) * 16u);
    q = (vec4<u32>(word) >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(15u);
  } else {
    let word = quants[row * len4 + k4];
    q = (vec4<u32>(word) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u);
  }
  return ST4(fma(vec4<f32>(q), vec4<f32>(so.x), vec4<f32>(-so.y)));
}

// Sixteen weights of one row, W[row, 4·k4 … 4·k4 + 15], k4 a multiple of 4, for the GEMV core's
// unrolled loop (gemv_rows.wgsl): their quants as four f32 vec4s (loadQ16) and the (scale, offset) they
// share (scaleOffset16), w = scale·q − offset, so that the core multiplies by the scale and subtracts
// offset·Σx once per sixteen weights rather than per weight. One pair and two words (4 bits) or four
// (8 bits) per sixteen, where loadB reads a pair and a word per four. Sixteen never straddle a group
// (GROUP a power of two ≥ 16) nor a word.
// Whether 32 weights from a multiple of 32 share one (scale, offset): GROUP ≥ 32 (gemv_rows_subgroup.wgsl's
// 32-element steps read it once for both halves).
fn sharedBy32() -> bool { return params.wGroupShift >= 3u; }

fn scaleOffset16(i: u32) -> vec2<f32> {
  let row = i >> 16u;
  let k4 = i & 0xffffu;
  let shift = params.wGroupShift;
  return scaleOffset[row * ((bRowLen4() + (1u << shift) - 1u) >> shift) + (k4 >> shift)];
}

fn loadQ16(i: u32) -> mat4x4<f32> {
  let row = i >> 16u;
  let k4 = i & 0xffffu;
  let len4 = bRowLen4();
  if (WBITS == 4u) {
    let base = row * ((len4 + 1u) / 2u) + k4 / 2u;
    let w0 = vec4<u32>(quants[base]);
    let w1 = vec4<u32>(quants[base + 1u]);
    let lo = vec4<u32>(0u, 4u, 8u, 12u);
    let hi = vec4<u32>(16u, 20u, 24u, 28u);
    let m = vec4<u32>(15u);
    return mat4x4<f32>(vec4<f32>((w0 >> lo) & m), vec4<f32>((w0 >> hi) & m), vec4<f32>((w1 >> lo) & m), vec4<f32>((w1 >> hi) & m));
  }
  let base = row * len4 + k4;
  let bytes = vec4<u32>(0u, 8u, 16u, 24u);
  let m = vec4<u32>(255u);
  return mat4x4<f32>(vec4<f32>((vec4<u32>(quants[base]) >> bytes) & m), vec4<f32>((vec4<u32>(quants[base + 1u]) >> bytes) & m),
                     vec4<f32>((vec4<u32>(quants[base + 2u]) >> bytes) & m), vec4<f32>((vec4<u32>(quants[base + 3u]) >> bytes) & m));
}
