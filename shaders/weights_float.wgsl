// Float weights for the projection GEMM/GEMV cores: B = W [·, K] row-major in the binding `w`
// (array<ST4>), a vec4 along K per index. The problem file's bRow(n) asks wIndex for the vec4 index of
// W[row, 0] (len4: vec4s per row), and the core adds the vec4 offset along K. (weights_packed.wgsl is
// the same two functions over the packed layout.)

fn wIndex(row: u32, len4: u32) -> u32 { return row * len4; }
fn loadB(i: u32) -> ST4 { return w[i]; }
// The GEMV core's sixteen-weight steps (gemv_rows.wgsl; weights_packed.wgsl explains them): four
// vec4s of one row (i … i + 3), their own values (scale 1, offset 0).
fn scaleOffset16(i: u32) -> vec2<f32> { return vec2<f32>(1.0, 0.0); }
fn sharedBy32() -> bool { return true; }
fn loadQ16(i: u32) -> mat4x4<f32> {
  return mat4x4<f32>(vec4<f32>(w[i]), vec4<f32>(w[i + 1u]), vec4<f32>(w[i + 2u]), vec4<f32>(w[i + 3u]));
}
