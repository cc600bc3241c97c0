// GEMM core, register-tiled: Y[m, n] = Σ_k A[m, k] · B[n, k] for one projection, no workgroup memory.
//
// Appended by the host to a projection's problem file (qkv_projection.wgsl, output_projection.wgsl),
// which supplies the tensors and where they live:
//   params.M, params.N          rows of A (tokens), rows of B (output columns)
//   kSegments(), segLen4()      K = kSegments · segLen4 · 4, walked segment by segment
//   aRow(m), aSegStride()       vec4 index of A[m, 0], and the step from one segment of a row to the next
//   bRow(n)                     vec4 index of B[n, 0]; a row of B is contiguous along all of K
//   loadA(i), loadB(i)          one vec4 (ST4) of A or B
//   store4(m, n, y)             adds the bias to columns n..n+3 of row m and writes them where they go
// and the host prepends TM (rows per invocation) and TN4 (vec4 column groups per invocation).
//
// Each invocation owns a TM × 4·TN4 tile of Y in registers and walks K a vec4 at a time: TM vec4 loads
// of A and 4·TN4 of B feed TM·TN4 4×4 products `a · mat4x4(b…)` (four 4-term dot products each, in
// the storage type, accumulated in f32). Bigger tiles mean fewer loads per multiply-add: on CPU
// drivers (lavapipe, SwiftShader), where every load is a gather across SIMD lanes and barriers are
// costly, TM = 8, TN4 = 2 runs ~1.3× faster than 4 × 4 (scripts/tune.ts measures it). The loops have
// constant trip counts, so drivers unroll them and the arrays stay in registers.
//
// Host guarantees: N % 4 == 0; dispatch = (ceil(N / (4·TN4·WG_X)), ceil(M / (TM·WG_Y)), 1).

override WG_X: u32 = 8u;
override WG_Y: u32 = 8u;

@compute @workgroup_size(WG_X, WG_Y)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let row0 = (wid.y * WG_Y + lid.y) * TM;
  let col0 = (wid.x * WG_X + lid.x) * TN4 * 4u;
  if (row0 >= params.M || col0 >= params.N) {
    return;
  }
  // Rows and columns past the edge re-read the last one; their results are never stored.
  var aAt: array<u32, TM>;
  var bAt: array<u32, TN4 * 4u>;
  for (var i = 0u; i < TM; i++) {
    aAt[i] = aRow(min(row0 + i, params.M - 1u));
  }
  for (var j = 0u; j < TN4 * 4u; j++) {
    bAt[j] = bRow(min(col0 + j, params.N - 1u));
  }
  let len4 = segLen4();
  var acc: array<vec4<f32>, TM * TN4>;  // acc[i·TN4 + j]: row row0 + i, columns col0 + 4j … + 3
  for (var seg = 0u; seg < kSegments(); seg++) {
    let aSeg = seg * aSegStride();
    let bSeg = seg * len4;
    for (var k = 0u; k < len4; k++) {
      var b: array<SM4, TN4>;  // columns of b[j]: rows col0 + 4j … + 3 of B at this k
      for (var j = 0u; j < TN4; j++) {
        let kb = bSeg + k;
        b[j] = SM4(loadB(bAt[4u * j] + kb), loadB(bAt[4u * j + 1u] + kb), loadB(bAt[4u * j + 2u] + kb), loadB(bAt[4u * j + 3u] + kb));
      }
      for (var i = 0u; i < TM; i++) {
        let a = loadA(aAt[i] + aSeg + k);
        for (var j = 0u; j < TN4; j++) {
          acc[i * TN4 + j] += vec4<f32>(a * b[j]);
        }
      }
    }
  }
  for (var i = 0u; i < TM; i++) {
    if (row0 + i < params.M) {
      for (var j = 0u; j < TN4; j++) {
        if (col0 + 4u * j < params.N) {
          store4(row0 + i, col0 + 4u * j, acc[i * TN4 + j]);
        }
      }
    }
  }
}
