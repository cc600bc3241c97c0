// The new tokens' K and V rows, computed in float by the projection (and the head transform) into the
// call's scratch, stored into a KV cache that keeps another type than the engine's (an 'f32' cache of
// an f16 engine, an 'f16' cache of an f32 engine: kv_f16_packed.wgsl's words): one invocation per vec4.
//
//   src  K [B, G, n, Dh/4] at srcK4, V at srcV4 (ST4): rows s = 0 … n − 1 of each (b, g)
//   dst  K ++ V [B, G, stride, Dh/4] of the cache, V's vec4s from dstV4: rows row0 + s
// `storeValue(i, v)` (the host prepends it for the cache's format) writes the vec4 at index i of dst,
// rounded as src/quant/kv.ts encodeKvRow does (f16: round to nearest even, kv_rounding.wgsl halfBits).
// Host guarantees: dispatch = (min(groups, 65535), ceil(groups / 65535)), groups = ceil(2·B·G·n·Dh/4 / 64).

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u, @builtin(num_workgroups) groups: vec3u) {
  let i = (wid.y * groups.x + wid.x) * 64u + lid.x;
  let perHalf = params.blocks * params.n * params.Dh4;
  if (i >= 2u * perHalf) {
    return;
  }
  let half = i / perHalf;  // 0: K, 1: V
  let rest = i % perHalf;
  let rows = rest / params.Dh4;  // b·G·n + g·n + s
  let d = rest % params.Dh4;
  let bg = rows / params.n;
  let s = rows % params.n;
  let source = select(params.srcK4, params.srcV4, half == 1u) + rows * params.Dh4 + d;
  storeValue(half * params.dstV4 + (bg * params.stride + params.row0 + s) * params.Dh4 + d, vec4<f32>(src[source]));
}
