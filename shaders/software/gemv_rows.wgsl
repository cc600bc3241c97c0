// GEMV core for decode steps on CPU rasterizers (lavapipe, SwiftShader): Y[m, n] = Σ_k A[m, k] · B[n, k]
// for a few rows of A (M ≤ 4 per workgroup row), each invocation owning 4 whole columns of Y.
//
// Appended by the host to a projection's problem file (qkv_projection.wgsl, output_projection.wgsl;
// gemm_register_4x4.wgsl lists what it supplies), after the weights' file (weights_float.wgsl, or
// weights_packed.wgsl: B dequantized as it is loaded).
//
// The GPU GEMV (gemv.wgsl) splits K across a workgroup and meets in workgroup memory behind a barrier:
// on a CPU rasterizer a barrier makes the shader a coroutine per subgroup, and the reduction and the
// 8-row accumulators cost more than the weights' reads (measured on lavapipe: slower than the float
// GEMM at E = 2048). Here no invocation shares anything: invocation i walks all of K for columns
// 4i … 4i + 3 (adjacent lanes read adjacent rows of B, which a CPU's caches take as well as a GPU's
// coalescing would not), loads those 4 columns' B vec4s once per step and multiplies them with the A
// vec4 of each of the ROWS rows. No workgroup memory, no barrier, no arrays.
// Products and sums in f32 (loads widened from ST4).
// Host guarantees: N % 4 == 0; dispatch = (ceil(N / (4·WG)), ceil(M / ROWS), 1).

const WG = 64u;
const ROWS = 4u;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) t: u32) {
  let col0 = (wid.x * WG + t) * 4u;
  let row0 = wid.y * ROWS;
  if (col0 >= params.N || row0 >= params.M) {
    return;
  }
  // Rows written out, not an array indexed by a loop counter: a CPU compiler keeps named values in
  // registers, and an array indexed per lane in memory. Rows past M re-read the last one (uniform
  // branches skip their products); they are never stored.
  let rowsHere = min(ROWS, params.M - row0);
  let lastRow = params.M - 1u;
  let a0Row = aRow(row0);
  let a1Row = aRow(min(row0 + 1u, lastRow));
  let a2Row = aRow(min(row0 + 2u, lastRow));
  let a3Row = aRow(min(row0 + 3u, lastRow));
  let b0 = bRow(col0);
  let b1 = bRow(col0 + 1u);
  let b2 = bRow(col0 + 2u);
  let b3 = bRow(col0 + 3u);
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  let len4 = segLen4();
  var kk = 0u;
  for (var seg = 0u; seg < kSegments(); seg++) {
    let aSeg = seg * aSegStride();
    for (var k = 0u; k < len4; k++) {
      let w0 = vec4<f32>(loadB(b0 + kk));
      let w1 = vec4<f32>(loadB(b1 + kk));
      let w2 = vec4<f32>(loadB(b2 + kk));
      let w3 = vec4<f32>(loadB(b3 + kk));
      let at = aSeg + k;
      let x0 = vec4<f32>(loadA(a0Row + at));
      acc0 += vec4<f32>(dot(x0, w0), dot(x0, w1), dot(x0, w2), dot(x0, w3));
      if (rowsHere > 1u) {
        let x1 = vec4<f32>(loadA(a1Row + at));
        acc1 += vec4<f32>(dot(x1, w0), dot(x1, w1), dot(x1, w2), dot(x1, w3));
        if (rowsHere > 2u) {
          let x2 = vec4<f32>(loadA(a2Row + at));
          acc2 += vec4<f32>(dot(x2, w0), dot(x2, w1), dot(x2, w2), dot(x2, w3));
          if (rowsHere > 3u) {
            let x3 = vec4<f32>(loadA(a3Row + at));
            acc3 += vec4<f32>(dot(x3, w0), dot(x3, w1), dot(x3, w2), dot(x3, w3));
          }
        }
      }
      kk++;
    }
  }
  store4(row0, col0, acc0);
  if (rowsHere > 1u) {
    store4(row0 + 1u, col0, acc1);
  }
  if (rowsHere > 2u) {
    store4(row0 + 2u, col0, acc2);
  }
  if (rowsHere > 3u) {
    store4(row0 + 3u, col0, acc3);
  }
}
