// GEMV core for decode steps on CPU rasterizers with subgroups (lavapipe): Y[m, n] = Σ_k A[m, k] · B[n, k]
// for a few rows of A (M ≤ 4 per workgroup row), each invocation owning 4 whole columns of Y, as
// gemv_rows.wgsl, with A passed between the lanes of a subgroup instead of loaded by each.
//
// Appended by the host to a projection's problem file (qkv_projection.wgsl, output_projection.wgsl;
// gemm_register_4x4.wgsl lists what it supplies), after the weights' file (weights_float.wgsl, or
// weights_packed.wgsl: B dequantized as it is loaded).
//
// On lavapipe every storage load costs per lane and per component, uniform or not (bounds-checked, one
// element at a time; gemm_subgroup_fma.wgsl). In gemv_rows.wgsl every invocation loads the same A
// vec4s, one load per 4 columns' 16 weights; with packed weights (a word per 8 weights) those loads
// are most of the kernel. Here the lanes load A between them, one vec4 each (lane t: vec4 k0 + t of
// the segment, for each row), and each step takes the vec4s it needs from their lanes by
// subgroupShuffle: one load per lane per `lanes` vec4s instead of one per vec4. The steps are those of
// gemv_rows.wgsl: 16 elements of K (loadQ16, scaleOffset16) where 4 vec4s are left in the block and
// K's vec4 index is a multiple of 4, else a single vec4 (loadB). No workgroup memory, no barrier.
//
// Correct at any subgroup size (4…128): every invocation runs every shuffle (the branches around them
// depend on the workgroup's row block and on loop counters: uniform control flow), columns past N
// re-read the last one and are never stored, and lanes past a block's end load a clamped vec4 no step
// reads. SUBGROUP_LANES > 0 makes the core use only that many lanes of each subgroup, as if the
// subgroup were that small (tests).
// Products and sums in f32 (loads widened from ST4).
// Host guarantees: N % 4 == 0; SUBGROUP_LANES is 0 or a multiple of 4; colLanes (params) as variants.ts
// gemmLayout chose it; dispatch = (ceil(N / (4·colLanes)), ceil(M / (ROWS·WG / colLanes)), 1).

const WG = 64u;
const ROWS = 4u;
override SUBGROUP_LANES: u32 = 0u;  // 0: the whole subgroup; else at most this many lanes (tests)

// The 4 columns' products with 16 elements of one row of A (its vec4s x0 … x3) against the columns'
// sixteen quants (q_c[j] those of vec4 j of column c) and their (scale, offset) s, o:
// Σ (scale·q − offset)·x = scale·Σ q·x − offset·Σ x.
fn dots16(x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>, q0: mat4x4<f32>, q1: mat4x4<f32>, q2: mat4x4<f32>, q3: mat4x4<f32>, s: vec4<f32>, o: vec4<f32>) -> vec4<f32> {
  var y = vec4<f32>(dot(x0, q0[0]), dot(x0, q1[0]), dot(x0, q2[0]), dot(x0, q3[0]));
  y += vec4<f32>(dot(x1, q0[1]), dot(x1, q1[1]), dot(x1, q2[1]), dot(x1, q3[1]));
  y += vec4<f32>(dot(x2, q0[2]), dot(x2, q1[2]), dot(x2, q2[2]), dot(x2, q3[2]));
  y += vec4<f32>(dot(x3, q0[3]), dot(x3, q1[3]), dot(x3, q2[3]), dot(x3, q3[3]));
  let xs = x0 + x1 + x2 + x3;
  return s * y - o * (xs.x + xs.y + xs.z + xs.w);
}

// dots16 for one row of A held across the lanes (m: this lane's vec4; the step's 4 from lanes s … s + 3).
fn shuffled16(m: vec4<f32>, s: u32, q0: mat4x4<f32>, q1: mat4x4<f32>, q2: mat4x4<f32>, q3: mat4x4<f32>, sc: vec4<f32>, off: vec4<f32>) -> vec4<f32> {
  return dots16(subgroupShuffle(m, s), subgroupShuffle(m, s + 1u), subgroupShuffle(m, s + 2u), subgroupShuffle(m, s + 3u), q0, q1, q2, q3, sc, off);
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(local_invocation_index) t: u32,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) subgroupSize: u32,
) {
  let lanes = select(subgroupSize, min(subgroupSize, SUBGROUP_LANES), SUBGROUP_LANES > 0u);
  // Row blocks of params.colLanes invocations (a multiple of the largest subgroup size dividing WG, so a
  // subgroup never straddles two: its lanes share their rows), each 4·colLanes columns of ROWS rows: a
  // narrow layer fills the workgroup with more rows instead of columns past N (variants.ts gemmLayout).
  let blocks = WG / params.colLanes;
  let row0 = (wid.y * blocks + t / params.colLanes) * ROWS;
  let col0 = (wid.x * params.colLanes + t % params.colLanes) * 4u;
  // Rows and columns past the edge re-read the last one; they are never stored. No early return:
  // every lane takes part in the shuffles. The loads, shuffles and products of a row are skipped where
  // the workgroup's first block has no such row (`rows`: uniform across the workgroup, as the shuffles
  // need; later blocks have at most as many): a decode step's one row costs one row's work.
  let firstRow = wid.y * blocks * ROWS;
  let rows = select(0u, min(ROWS, params.M - firstRow), firstRow < params.M);
  let rowsHere = select(0u, min(ROWS, params.M - row0), row0 < params.M);  // this block's rows in Y
  let lastRow = params.M - 1u;
  let lastCol = params.N - 1u;
  let a0Row = aRow(min(row0, lastRow));
  let a1Row = aRow(min(row0 + 1u, lastRow));
  let a2Row = aRow(min(row0 + 2u, lastRow));
  let a3Row = aRow(min(row0 + 3u, lastRow));
  let b0 = bRow(min(col0, lastCol));
  let b1 = bRow(min(col0 + 1u, lastCol));
  let b2 = bRow(min(col0 + 2u, lastCol));
  let b3 = bRow(min(col0 + 3u, lastCol));
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  let len4 = segLen4();
  var kk = 0u;  // B's vec4 index along K (segments back to back)
  for (var seg = 0u; seg < kSegments(); seg++) {
    let aSeg = seg * aSegStride();
    for (var k0 = 0u; k0 < len4; k0 += lanes) {
      // This lane's vec4 of the block, for each row: A[row, k0 + lane] (clamped to the segment).
      let at = aSeg + min(k0 + lane, len4 - 1u);
      let m0 = vec4<f32>(loadA(a0Row + at));
      var m1 = m0;
      var m2 = m0;
      var m3 = m0;
      if (rows > 1u) {
        m1 = vec4<f32>(loadA(a1Row + at));
        if (rows > 2u) {
          m2 = vec4<f32>(loadA(a2Row + at));
          if (rows > 3u) {
            m3 = vec4<f32>(loadA(a3Row + at));
          }
        }
      }
      let n = min(lanes, len4 - k0);
      var s = 0u;
      while (s < n) {
        // Sixteen weights per column where K's vec4 index kk is a multiple of 4 and 4 vec4s are left
        // in the block; else a single vec4. s and kk are the same in every lane: a uniform branch.
        if ((kk & 7u) == 0u && s + 8u <= n && sharedBy32()) {
          // Thirty-two weights per column sharing one (scale, offset) (GROUP ≥ 32): its loads once for two 16s.
          let so0 = scaleOffset16(b0 + kk);
          let so1 = scaleOffset16(b1 + kk);
          let so2 = scaleOffset16(b2 + kk);
          let so3 = scaleOffset16(b3 + kk);
          let sc = vec4<f32>(so0.x, so1.x, so2.x, so3.x);
          let off = vec4<f32>(so0.y, so1.y, so2.y, so3.y);
          for (var h = 0u; h < 8u; h += 4u) {
            let w0 = loadQ16(b0 + kk + h);
            let w1 = loadQ16(b1 + kk + h);
            let w2 = loadQ16(b2 + kk + h);
            let w3 = loadQ16(b3 + kk + h);
            let sh = s + h;
            acc0 += shuffled16(m0, sh, w0, w1, w2, w3, sc, off);
            if (rows > 1u) {
              acc1 += shuffled16(m1, sh, w0, w1, w2, w3, sc, off);
              if (rows > 2u) {
                acc2 += shuffled16(m2, sh, w0, w1, w2, w3, sc, off);
                if (rows > 3u) {
                  acc3 += shuffled16(m3, sh, w0, w1, w2, w3, sc, off);
                }
              }
            }
          }
          s += 8u;
          kk += 8u;
        } else if ((kk & 3u) == 0u && s + 4u <= n) {
          let w0 = loadQ16(b0 + kk);
          let w1 = loadQ16(b1 + kk);
          let w2 = loadQ16(b2 + kk);
          let w3 = loadQ16(b3 + kk);
          let so0 = scaleOffset16(b0 + kk);
          let so1 = scaleOffset16(b1 + kk);
          let so2 = scaleOffset16(b2 + kk);
          let so3 = scaleOffset16(b3 + kk);
          let sc = vec4<f32>(so0.x, so1.x, so2.x, so3.x);
          let off = vec4<f32>(so0.y, so1.y, so2.y, so3.y);
          acc0 += shuffled16(m0, s, w0, w1, w2, w3, sc, off);
          if (rows > 1u) {
            acc1 += shuffled16(m1, s, w0, w1, w2, w3, sc, off);
            if (rows > 2u) {
              acc2 += shuffled16(m2, s, w0, w1, w2, w3, sc, off);
              if (rows > 3u) {
                acc3 += shuffled16(m3, s, w0, w1, w2, w3, sc, off);
              }
            }
          }
          s += 4u;
          kk += 4u;
        } else {
          let w = mat4x4<f32>(vec4<f32>(loadB(b0 + kk)), vec4<f32>(loadB(b1 + kk)), vec4<f32>(loadB(b2 + kk)), vec4<f32>(loadB(b3 + kk)));
          acc0 += subgroupShuffle(m0, s) * w;
          if (rows > 1u) {
            acc1 += subgroupShuffle(m1, s) * w;
            if (rows > 2u) {
              acc2 += subgroupShuffle(m2, s) * w;
              if (rows > 3u) {
                acc3 += subgroupShuffle(m3, s) * w;
              }
            }
          }
          s++;
          kk++;
        }
      }
    }
  }
  if (col0 < params.N) {
    if (rowsHere > 0u) {
      store4(row0, col0, acc0);
    }
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
}
