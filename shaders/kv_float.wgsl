// K and V of floats (kv: array<ST4>, the engine's precision; or array<vec4<f32>>, an 'f32' cache of an
// f16 engine), read as vec4<f32>. One of the kv loaders (kv_float, kv_f16_packed, kv_q8_0, kv_q4_0):
// the host prepends the one of the cache's storage to every attention kernel that reads K and V, which
// then reads them only through loadKey and loadValue, by the index of the vec4 of values in K ++ V
// [B, G, kvStride, Dh/4] (kBase4, vBase4: attention-fields.ts).

fn loadKey(i: u32) -> vec4<f32> {
  return vec4<f32>(kv[i]);
}

fn loadValue(i: u32) -> vec4<f32> {
  return vec4<f32>(kv[i]);
}
