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
// coalescing would not), loads those 4 columns' B once per step and multiplies them with the A vec4s of
// each of the ROWS rows. A step is 16 elements of K (the weights files' loadQ16 and scaleOffset16: a
// packed weight's scale and words read once for 16 weights, and scaled once; 1.5–2.2× faster on lavapipe
// than four loadB), or a single vec4 where a segment's start or end is off the 4-vec4 grid. No workgroup
// memory, no barrier.
// Products and sums in f32 (loads widened from ST4).
// Host guarantees: N % 4 == 0; dispatch = (ceil(N / (4·WG)), ceil(M / ROWS), 1).

const WG = 64u;
const ROWS = 4u;

// The 4 columns' products with 16 elements of one row of A: row a's vec4s a … a + 3 against the
// columns' sixteen quants (q_c[j] those of vec4 j of column c) and their (scale, offset) so_c:
// Σ (scale·q − offset)·x = scale·Σ q·x − offset·Σ x.
fn dots16(a: u32, q0: mat4x4<f32>, q1: mat4x4<f32>, q2: mat4x4<f32>, q3: mat4x4<f32>, s: vec4<f32>, o: vec4<f32>) -> vec4<f32> {
  var y = vec4<f32>(0.0);
  var xs = vec4<f32>(0.0);
  for (var j = 0u; j < 4u; j++) {
    let x = vec4<f32>(loadA(a + j));
    y += vec4<f32>(dot(x, q0[j]), dot(x, q1[j]), dot(x, q2[j]), dot(x, q3[j]));
    xs += x;
  }
  return s * y - o * (xs.x + xs.y + xs.z + xs.w);
}

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
    var k = 0u;
    while (k < len4) {
      // Sixteen weights per column at a time (loadQ16, scaleOffset16: a packed weight's scale and words
      // read once for sixteen) where K's vec4 index kk is a multiple of 4 and 4 vec4s are left in the
      // segment; else a single vec4 (loadB). k and kk are the same in every lane: a uniform branch.
      if ((kk & 3u) == 0u && k + 4u <= len4) {
        let w0 = loadQ16(b0 + kk);
        let w1 = loadQ16(b1 + kk);
        let w2 = loadQ16(b2 + kk);
        let w3 = loadQ16(b3 + kk);
        let so0 = scaleOffset16(b0 + kk);
        let so1 = scaleOffset16(b1 + kk);
        let so2 = scaleOffset16(b2 + kk);
        let so3 = scaleOffset16(b3 + kk);
        let s = vec4<f32>(so0.x, so1.x, so2.x, so3.x);
        let o = vec4<f32>(so0.y, so1.y, so2.y, so3.y);
        let at = aSeg + k;
        acc0 += dots16(a0Row + at, w0, w1, w2, w3, s, o);
        if (rowsHere > 1u) {
          acc1 += dots16(a1Row + at, w0, w1, w2, w3, s, o);
          if (rowsHere > 2u) {
            acc2 += dots16(a2Row + at, w0, w1, w2, w3, s, o);
            if (rowsHere > 3u) {
              acc3 += dots16(a3Row + at, w0, w1, w2, w3, s, o);
            }
          }
        }
        k += 4u;
        kk += 4u;
      } else {
        let w = mat4x4<f32>(vec4<f32>(loadB(b0 + kk)), vec4<f32>(loadB(b1 + kk)), vec4<f32>(loadB(b2 + kk)), vec4<f32>(loadB(b3 + kk)));
        let at = aSeg + k;
        acc0 += vec4<f32>(loadA(a0Row + at)) * w;
        if (rowsHere > 1u) {
          acc1 += vec4<f32>(loadA(a1Row + at)) * w;
          if (rowsHere > 2u) {
            acc2 += vec4<f32>(loadA(a2Row + at)) * w;
            if (rowsHere > 3u) {
              acc3 += vec4<f32>(loadA(a3Row + at)) * w;
            }
          }
        }
        k++;
        kk++;
      }
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
