// K and V of a 'q8_0' cache (ggml's blocks of 32: value = d · q, q an int8, d an f16), kv: array<u32>
// in two planes (src/webgpu/kv-cache.ts):
//   quants  word i = the vec4 of values i of K ++ V [B, G, kvStride, Dh/4], four int8 (the first in the low byte)
//   scales  from word params.kvScales: the f16 d of block i/8 (K's blocks, then V's), two a word
//           (the even block in the low half)
// (kv_float.wgsl says what a kv loader is.)

fn kvScale(i: u32) -> f32 {
  let block = i / 8u;
  return unpack2x16float(kv[params.kvScales + block / 2u])[block & 1u];
}

fn kvQ8(i: u32) -> vec4<f32> {
  let q = vec4<i32>(bitcast<i32>(kv[i])) << vec4<u32>(24u, 16u, 8u, 0u);
  return vec4<f32>(q >> vec4<u32>(24u)) * kvScale(i);
}

fn loadKey(i: u32) -> vec4<f32> {
  return kvQ8(i);
}

fn loadValue(i: u32) -> vec4<f32> {
  return kvQ8(i);
}
