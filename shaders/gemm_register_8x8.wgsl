// GEMM core, 8 × 8 register tiles: Y[m, n] = Σ_k A[m, k] · B[n, k] for one projection, no workgroup memory.
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
// Each invocation owns 8 rows × 8 columns of Y and walks K a vec4 at a time: 8 vec4 loads of A and 8
// of B feed 16 products `a · mat4x4(b…)` (four 4-term dot products each, in the storage type,
// accumulated in f32): half the loads per multiply-add of the 4 × 4 core. On CPU drivers, where every
// load is a gather across SIMD lanes, that pays off; it needs more registers.
// Written out, with no arrays (see gemm_register_4x4.wgsl).
// Host guarantees: N % 4 == 0; dispatch = (ceil(N / (8·WG_X)), ceil(M / (8·WG_Y)), 1).

override WG_X: u32 = 8u;
override WG_Y: u32 = 8u;

@compute @workgroup_size(WG_X, WG_Y)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let row0 = (wid.y * WG_Y + lid.y) * 8u;
  let col0 = (wid.x * WG_X + lid.x) * 8u;
  if (row0 >= params.M || col0 >= params.N) {
    return;
  }
  // Rows and columns past the edge re-read the last one; their results are never stored (gemm_common.wgsl).
  let aRows0 = aRows4(row0);       // rows row0 … row0 + 3
  let aRows1 = aRows4(row0 + 4u);  // rows row0 + 4 … row0 + 7
  let bRows0 = bRows4(col0);
  let bRows1 = bRows4(col0 + 4u);

  var acc00 = vec4<f32>(0.0); var acc01 = vec4<f32>(0.0);
  var acc10 = vec4<f32>(0.0); var acc11 = vec4<f32>(0.0);
  var acc20 = vec4<f32>(0.0); var acc21 = vec4<f32>(0.0);
  var acc30 = vec4<f32>(0.0); var acc31 = vec4<f32>(0.0);
  var acc40 = vec4<f32>(0.0); var acc41 = vec4<f32>(0.0);
  var acc50 = vec4<f32>(0.0); var acc51 = vec4<f32>(0.0);
  var acc60 = vec4<f32>(0.0); var acc61 = vec4<f32>(0.0);
  var acc70 = vec4<f32>(0.0); var acc71 = vec4<f32>(0.0);
  let len4 = segLen4();
  for (var seg = 0u; seg < kSegments(); seg++) {
    let aSeg = seg * aSegStride();
    let bSeg = seg * len4;
    for (var k = 0u; k < len4; k++) {
      let b0 = loadB(bRows0.x + bSeg + k);
      let b1 = loadB(bRows0.y + bSeg + k);
      let b2 = loadB(bRows0.z + bSeg + k);
      let b3 = loadB(bRows0.w + bSeg + k);
      let b4 = loadB(bRows1.x + bSeg + k);
      let b5 = loadB(bRows1.y + bSeg + k);
      let b6 = loadB(bRows1.z + bSeg + k);
      let b7 = loadB(bRows1.w + bSeg + k);
      let bm0 = SM4(b0, b1, b2, b3);  // columns: B rows col0 + 0 … + 3
      let bm1 = SM4(b4, b5, b6, b7);  // columns: B rows col0 + 4 … + 7
      let a0 = loadA(aRows0.x + aSeg + k);
      acc00 += vec4<f32>(a0 * bm0);
      acc01 += vec4<f32>(a0 * bm1);
      let a1 = loadA(aRows0.y + aSeg + k);
      acc10 += vec4<f32>(a1 * bm0);
      acc11 += vec4<f32>(a1 * bm1);
      let a2 = loadA(aRows0.z + aSeg + k);
      acc20 += vec4<f32>(a2 * bm0);
      acc21 += vec4<f32>(a2 * bm1);
      let a3 = loadA(aRows0.w + aSeg + k);
      acc30 += vec4<f32>(a3 * bm0);
      acc31 += vec4<f32>(a3 * bm1);
      let a4 = loadA(aRows1.x + aSeg + k);
      acc40 += vec4<f32>(a4 * bm0);
      acc41 += vec4<f32>(a4 * bm1);
      let a5 = loadA(aRows1.y + aSeg + k);
      acc50 += vec4<f32>(a5 * bm0);
      acc51 += vec4<f32>(a5 * bm1);
      let a6 = loadA(aRows1.z + aSeg + k);
      acc60 += vec4<f32>(a6 * bm0);
      acc61 += vec4<f32>(a6 * bm1);
      let a7 = loadA(aRows1.w + aSeg + k);
      acc70 += vec4<f32>(a7 * bm0);
      acc71 += vec4<f32>(a7 * bm1);
    }
  }

  store4(row0 + 0u, col0, acc00); if (col0 + 4u < params.N) { store4(row0 + 0u, col0 + 4u, acc01); }
  if (row0 + 1u < params.M) { store4(row0 + 1u, col0, acc10); if (col0 + 4u < params.N) { store4(row0 + 1u, col0 + 4u, acc11); } }
  if (row0 + 2u < params.M) { store4(row0 + 2u, col0, acc20); if (col0 + 4u < params.N) { store4(row0 + 2u, col0 + 4u, acc21); } }
  if (row0 + 3u < params.M) { store4(row0 + 3u, col0, acc30); if (col0 + 4u < params.N) { store4(row0 + 3u, col0 + 4u, acc31); } }
  if (row0 + 4u < params.M) { store4(row0 + 4u, col0, acc40); if (col0 + 4u < params.N) { store4(row0 + 4u, col0 + 4u, acc41); } }
  if (row0 + 5u < params.M) { store4(row0 + 5u, col0, acc50); if (col0 + 4u < params.N) { store4(row0 + 5u, col0 + 4u, acc51); } }
  if (row0 + 6u < params.M) { store4(row0 + 6u, col0, acc60); if (col0 + 4u < params.N) { store4(row0 + 6u, col0 + 4u, acc61); } }
  if (row0 + 7u < params.M) { store4(row0 + 7u, col0, acc70); if (col0 + 4u < params.N) { store4(row0 + 7u, col0 + 4u, acc71); } }
}
