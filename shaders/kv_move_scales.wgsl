// KvCache.acceptPath on a 'q8_0' or 'q4_0' cache: the block scales of rows rows[i] → row to + i, for
// every (half, b, g) (the quants move by buffer copies; a row's scales are halves of words, which no
// copy moves). `old` is a copy of the scale plane taken before, so rows may move in any order.
//
//   old  the scales as they were: block k's f16 in half k % 2 of word k / 2 (K's blocks, then V's)
//   dst  the cache: the same plane from word `scales`
// Invocation x of workgroup row y = half·B·G + b·G + g: word first/2 + x of the plane, first = the
// block of row `to` of that (half, b, g); a half of the word outside rows to … to + n − 1 stays.
// Host guarantees: dispatch = (ceil((n·nb/2 + 1) / 64), 2·B·G).

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let half = wid.y / params.blocks;
  let bg = wid.y % params.blocks;
  let count = params.n * params.nb;
  let first = half * params.perHalf + (bg * params.stride + params.to) * params.nb;
  let word = first / 2u + wid.x * 64u + lid.x;
  if (2u * word >= first + count) {
    return;
  }
  let was = old[word];
  var halves = vec2<u32>(was & 0xffffu, was >> 16u);
  for (var k = 0u; k < 2u; k++) {
    let block = 2u * word + k;
    if (block >= first && block < first + count) {
      let local = block - first;
      let source = half * params.perHalf + (bg * params.stride + rows[local / params.nb]) * params.nb + local % params.nb;
      halves[k] = (old[source / 2u] >> ((source & 1u) * 16u)) & 0xffffu;
    }
  }
  dst[params.scales + word] = halves.x | (halves.y << 16u);
}
