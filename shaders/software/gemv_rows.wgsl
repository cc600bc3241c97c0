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
// vec4 of each of the ROWS rows. No workgroup memory, no barrier, loops the compiler keeps as loops.
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
  let rowsHere = min(ROWS, params.M - row0);
  let b0 = bRow(col0);
  let b1 = bRow(col0 + 1u);
  let b2 = bRow(col0 + 2u);
  let b3 = bRow(col0 + 3u);
  var aRows: array<u32, 4>;
  for (var r = 0u; r < ROWS; r++) {
    aRows[r] = aRow(min(row0 + r, params.M - 1u));
  }
  var acc: array<vec4<f32>, 4>;
  for (var r = 0u; r < ROWS; r++) {
    acc[r] = vec4<f32>(0.0);
  }
  let len4 = segLen4();
  var kk = 0u;
  for (var seg = 0u; seg < kSegments(); seg++) {
    let aSeg = seg * aSegStride();
    for (var k = 0u; k < len4; k++) {
      let w0 = vec4<f32>(loadB(b0 + kk));
      let w1 = vec4<f32>(loadB(b1 + kk));
      let w2 = vec4<f32>(loadB(b2 + kk));
      let w3 = vec4<f32>(loadB(b3 + kk));
      for (var r = 0u; r < rowsHere; r++) {
        let a = vec4<f32>(loadA(aRows[r] + aSeg + k));
        acc[r] += vec4<f32>(dot(a, w0), dot(a, w1), dot(a, w2), dot(a, w3));
      }
      kk++;
    }
  }
  for (var r = 0u; r < rowsHere; r++) {
    store4(row0 + r, col0, acc[r]);
  }
}
