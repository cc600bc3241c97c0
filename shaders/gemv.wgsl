// GEMV core for decode steps: Y[m, n] = Σ_k A[m, k] · B[n, k] for a few rows of A (a decode step's one
// token per sequence: M ≤ 8), each weight read once for all of them.
//
// Appended by the host to a projection's problem file (qkv_projection.wgsl, output_projection.wgsl),
// like the GEMM cores (gemm_register_4x4.wgsl lists what the problem file supplies), after the
// weights' file (weights_float.wgsl, or weights_packed.wgsl: B dequantized as it is loaded).
//
// A decode step's projections are memory-bound: the weights are read once and the activations are a
// few vectors. So, as ggml-webgpu's mul_mat_vec and ONNX Runtime's MatMulNBits decode kernels do, a
// workgroup owns a block of output columns (GV_COLS = 8: two vec4s of Y per row) and its WG
// invocations split K between them: invocation t takes the vec4 steps t, t + WG, … of K (adjacent
// invocations read adjacent words of a weight row), loads the 8 columns' B vec4s once, and multiplies
// them with the A vec4 of each of the block's ROWS rows (rows past M are skipped: a uniform branch).
// The partial sums meet in workgroup memory (one write each, one barrier, then 2·ROWS invocations add
// up WG values each) and go out through the problem file's store4. A K walk that crosses segments
// (output_projection: heads) keeps (segment, offset) by additions, no division in the loop.
// Products and sums in f32 (loads widened from ST4).
// Host guarantees: N % 4 == 0; dispatch = (ceil(N / GV_COLS), ceil(M / ROWS), 1); correct at any M
// (rows past the first ROWS go to further workgroups along y), fast at M ≤ ROWS.

const WG = 32u;
const ROWS = 8u;
const GV_COLS = 8u;

var<workgroup> partial: array<vec4<f32>, 512>;  // [2·ROWS, WG]: (row, column vec4) of each invocation

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) t: u32) {
  let row0 = wid.y * ROWS;
  let col0 = wid.x * GV_COLS;
  let lastRow = params.M - 1u;
  let lastCol = params.N - 1u;
  var bRows: array<u32, 8>;
  for (var c = 0u; c < GV_COLS; c++) {
    bRows[c] = bRow(min(col0 + c, lastCol));  // columns past N re-read the last one; never stored
  }
  let rowsHere = min(ROWS, params.M - min(row0, params.M));
  var aRows: array<u32, 8>;
  for (var r = 0u; r < ROWS; r++) {
    aRows[r] = aRow(min(row0 + r, lastRow));
  }
  var acc: array<vec4<f32>, 16>;  // [ROWS, 2]: columns col0 … col0 + 3, col0 + 4 … + 7 of each row
  for (var i = 0u; i < 2u * ROWS; i++) {
    acc[i] = vec4<f32>(0.0);
  }
  let len4 = segLen4();
  let K4 = kSegments() * len4;
  var seg = t / len4;
  var k = t % len4;
  let segStep = WG / len4;
  let kStep = WG % len4;
  for (var kk = t; kk < K4; kk += WG) {
    var b: array<vec4<f32>, 8>;
    for (var c = 0u; c < GV_COLS; c++) {
      b[c] = vec4<f32>(loadB(bRows[c] + kk));
    }
    let aAt = seg * aSegStride() + k;
    for (var r = 0u; r < ROWS; r++) {
      if (r < rowsHere) {
        let a = vec4<f32>(loadA(aRows[r] + aAt));
        acc[2u * r] += vec4<f32>(dot(a, b[0]), dot(a, b[1]), dot(a, b[2]), dot(a, b[3]));
        acc[2u * r + 1u] += vec4<f32>(dot(a, b[4]), dot(a, b[5]), dot(a, b[6]), dot(a, b[7]));
      }
    }
    seg += segStep;
    k += kStep;
    if (k >= len4) {
      k -= len4;
      seg += 1u;
    }
  }
  for (var i = 0u; i < 2u * ROWS; i++) {
    partial[i * WG + t] = acc[i];
  }
  workgroupBarrier();
  if (t < 2u * ROWS) {
    let r = t / 2u;
    let n = col0 + 4u * (t % 2u);
    var sum = vec4<f32>(0.0);
    for (var j = 0u; j < WG; j++) {
      sum += partial[t * WG + j];
    }
    if (r < rowsHere && n < params.N) {
      store4(row0 + r, n, sum);
    }
  }
}
