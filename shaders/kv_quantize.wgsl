// The new tokens' K and V rows, computed in float by the projection (and the head transform) into the
// call's scratch, quantized into a 'q8_0' or 'q4_0' KV cache (Q4 = 0 or 1) exactly as ggml's reference
// quantizers (src/quant/quantize.ts quantizeBlockQ8_0 / Q4_0, from quantize_row_q8_0_ref / q4_0_ref):
//   q8_0  amax = max |x|, d = amax / 127, id = 1/d (0 where d = 0), q = roundf(x·id) (half away from zero)
//   q4_0  max = the x of largest |x| (the first such), d = max / −8, id = 1/d, q = min(15, trunc(x·id + 8.5))
// d stored as an f16 (round to nearest even); every quotient and rounding exact (kv_rounding.wgsl).
//
//   src  K [B, G, n, Dh/4] at srcK4, V at srcV4 (ST4): rows s = 0 … n − 1 of each (b, g)
//   dst  the cache (kv_q8_0.wgsl, kv_q4_0.wgsl): quants, the vec4 of values at index i of K ++ V
//        [B, G, stride, Dh/4] in word i (q8_0) or half of word i/2 (q4_0), so block k's quants are
//        words 8k … 8k + 7 (q8_0) or 4k … 4k + 3 (q4_0); then, from word `scales`, block k's f16 d in
//        half k % 2 of word scales + k/2 (K's blocks, then V's: block k = vec4 index / 8)
// A scale word holds two blocks' scales, possibly of a row this call does not write: one invocation per
// scale word the call's blocks touch, each quantizing the one or two of its blocks that are new and
// keeping the other half as it was. Invocation x of workgroup row y = half·B·G + b·G + g: word
// first/2 + x, first = that (half, b, g)'s first new block.
// Host guarantees: Dh % 32 == 0; dispatch = (ceil((n·Dh/32/2 + 1) / 64), 2·B·G).

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let nb = params.Dh4 / 8u;  // blocks a row
  let half = wid.y / params.blocks;  // 0: K, 1: V
  let bg = wid.y % params.blocks;
  let count = params.n * nb;  // new blocks of this (half, b, g)
  let first = half * (params.dstV4 / 8u) + (bg * params.stride + params.row0) * nb;
  let word = first / 2u + wid.x * 64u + lid.x;
  if (2u * word >= first + count) {
    return;
  }
  let old = dst[params.scales + word];
  var scales = vec2<u32>(old & 0xffffu, old >> 16u);
  for (var k = 0u; k < 2u; k++) {
    let block = 2u * word + k;
    if (block >= first && block < first + count) {
      let local = block - first;
      let source = select(params.srcK4, params.srcV4, half == 1u) + (bg * params.n + local / nb) * params.Dh4 + (local % nb) * 8u;
      scales[k] = quantizeBlock(source, block);
    }
  }
  dst[params.scales + word] = scales.x | (scales.y << 16u);
}
