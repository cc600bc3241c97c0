// GEMM core, 4 × 4 register tiles: Y[m, n] = Σ_k A[m, k] · B[n, k] for one projection, no workgroup memory.
//
// Appended by the host to a projection's problem file (qkv_projection.wgsl, output_projection.wgsl),
// which supplies the tensors and where they live:
//   params.M, params.N          rows of A (tokens), rows of B (output columns)
//   kSegments(), segLen4()      K = kSegments · segLen4 · 4, walked segment by segment
//   aRow(m), aSegStride()       vec4 index of A[m, 0], and the step from one segment of a row to the next
//   bRow(n)                     vec4 index of B[n, 0]; a row of B is contiguous along all of K
//   loadA(i), loadB(i)          one vec4 (ST4) of A or B
//   store4(m, n, y)             adds the bias to columns n..n+3 of row m and writes them where they go
//
// Each invocation owns 4 rows × 4 columns of Y and walks K a vec4 at a time: 4 vec4 loads of A and
// 4 of B feed 16 four-term dot products (in the storage type, accumulated in f32). Written out, with no
// arrays, so that drivers that do not unroll loops (SwiftShader's JIT) still keep it all in registers.
// Host guarantees: N % 4 == 0; dispatch = (ceil(N / (4·WG_X)), ceil(M / (4·WG_Y)), 1).

override WG_X: u32 = 8u;
override WG_Y: u32 = 8u;

@compute @workgroup_size(WG_X, WG_Y)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let row0 = (wid.y * WG_Y + lid.y) * 4u;
  let col0 = (wid.x * WG_X + lid.x) * 4u;
  if (row0 >= params.M || col0 >= params.N) {
    return;
  }
  // Rows and columns past the edge re-read the last one; their results are never stored (gemm_common.wgsl).
  let aRows = aRows4(row0);
  let bRows = bRows4(col0);

  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  let len4 = segLen4();
  for (var seg = 0u; seg < kSegments(); seg++) {
    let aSeg = seg * aSegStride();
    let bSeg = seg * len4;
    for (var k = 0u; k < len4; k++) {
      let b0 = loadB(bRows.x + bSeg + k);
      let b1 = loadB(bRows.y + bSeg + k);
      let b2 = loadB(bRows.z + bSeg + k);
      let b3 = loadB(bRows.w + bSeg + k);
      let a0 = loadA(aRows.x + aSeg + k);
      acc0 += vec4<f32>(f32(dot(a0, b0)), f32(dot(a0, b1)), f32(dot(a0, b2)), f32(dot(a0, b3)));
      let a1 = loadA(aRows.y + aSeg + k);
      acc1 += vec4<f32>(f32(dot(a1, b0)), f32(dot(a1, b1)), f32(dot(a1, b2)), f32(dot(a1, b3)));
      let a2 = loadA(aRows.z + aSeg + k);
      acc2 += vec4<f32>(f32(dot(a2, b0)), f32(dot(a2, b1)), f32(dot(a2, b2)), f32(dot(a2, b3)));
      let a3 = loadA(aRows.w + aSeg + k);
      acc3 += vec4<f32>(f32(dot(a3, b0)), f32(dot(a3, b1)), f32(dot(a3, b2)), f32(dot(a3, b3)));
    }
  }

  store4(row0, col0, acc0);
  if (row0 + 1u < params.M) { store4(row0 + 1u, col0, acc1); }
  if (row0 + 2u < params.M) { store4(row0 + 2u, col0, acc2); }
  if (row0 + 3u < params.M) { store4(row0 + 3u, col0, acc3); }
}
