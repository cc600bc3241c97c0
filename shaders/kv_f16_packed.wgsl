// K and V of an 'f16' cache on an f32 engine (no shader-f16 needed): kv is array<vec2<u32>>, each
// element four halves, two to a word (little-endian, the first value in the low bits), the vec4 of
// values at index i in K ++ V [B, G, kvStride, Dh/4]. (kv_float.wgsl says what a kv loader is.)

fn kvHalves(i: u32) -> vec4<f32> {
  let w = kv[i];
  return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}

fn loadKey(i: u32) -> vec4<f32> {
  return kvHalves(i);
}

fn loadValue(i: u32) -> vec4<f32> {
  return kvHalves(i);
}
