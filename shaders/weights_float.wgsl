// Float weights for the projection GEMM/GEMV cores: B = W [·, K] row-major in the binding `w`
// (array<ST4>), a vec4 along K per index. The problem file's bRow(n) asks wIndex for the vec4 index of
// W[row, 0] (len4: vec4s per row), and the core adds the vec4 offset along K. (weights_packed.wgsl is
// the same two functions over the packed layout.)

fn wIndex(row: u32, len4: u32) -> u32 { return row * len4; }
fn loadB(i: u32) -> ST4 { return w[i]; }
