// K and V of a 'q4_0' cache (ggml's blocks of 32: value = d · (q − 8), q 4 bits, d an f16), kv:
// array<u32> in two planes (src/webgpu/kv-cache.ts):
//   quants  word i/2 holds the vec4s of values i and i + 1 (i even) of K ++ V [B, G, kvStride, Dh/4],
//           eight nibbles in the order of the values (the first in the low bits)
//   scales  from word params.kvScales: the f16 d of block i/8 (K's blocks, then V's), two a word
//           (the even block in the low half)
// (kv_float.wgsl says what a kv loader is.)

fn kvScale(i: u32) -> f32 {
  let block = i / 8u;
  return unpack2x16float(kv[params.kvScales + block / 2u])[block & 1u];
}

fn kvQ4(i: u32) -> vec4<f32> {
  let w = kv[i / 2u] >> ((i & 1u) * 16u);
  let q = (vec4<u32>(w) >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(15u);
  return (vec4<f32>(q) - 8.0) * kvScale(i);
}

fn loadKey(i: u32) -> vec4<f32> {
  return kvQ4(i);
}

fn loadValue(i: u32) -> vec4<f32> {
  return kvQ4(i);
}
