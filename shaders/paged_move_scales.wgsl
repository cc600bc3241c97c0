// A q8_0/q4_0 paged pool's block scales moved (PagedKvCache copyBlock, acceptPath: src/webgpu/
// paged-kv-cache.ts): the quants move by buffer copies, but a scale is half a u32 word, and a word's two
// halves may belong to different rows (Dh/32 odd), so the host lists, per scale word written, where
// each of its halves comes from, and one invocation writes the word whole.
//
//   moves  [n] triples (word of the plane, the block whose scale goes to the low half, to the high
//          half), a block KEEP where that half stays
//   old    a copy of the scale plane taken before (block k's f16 in half k % 2 of word k / 2)
//   dst    the pool: the scale plane from word `scales`
// Host guarantees: dispatch = (ceil(n / 64), 1, 1).

const KEEP: u32 = 0xffffffffu;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let i = gid.x;
  if (i >= params.n) {
    return;
  }
  let word = moves[3u * i];
  let was = old[word];
  var halves = vec2<u32>(was & 0xffffu, was >> 16u);
  for (var k = 0u; k < 2u; k++) {
    let source = moves[3u * i + 1u + k];
    if (source != KEEP) {
      halves[k] = (old[source / 2u] >> ((source & 1u) * 16u)) & 0xffffu;
    }
  }
  dst[params.scales + word] = halves.x | (halves.y << 16u);
}
