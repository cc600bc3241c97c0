// GEMM core for CPU drivers with subgroups: Y[m, n] = Σ_k A[m, k] · B[n, k] for one projection, A passed
// between lanes by subgroupShuffle (as in gemm_subgroup.wgsl), the products as fused multiply-adds.
//
// Appended by the host to a projection's problem file (qkv_projection.wgsl, output_projection.wgsl),
// which supplies aRow, bRow, aSegStride, kSegments, segLen4, loadA, loadB, store4 and params.M, params.N
// (gemm_register_4x4.wgsl describes them).
//
// Written for lavapipe (llvmpipe), where a subgroup of 8 invocations is one AVX2 register per value:
// there every storage load, uniform or not, costs several multiply-adds (bounds-checked, one element
// per lane at a time), a shuffle costs little, and spilled accumulators cost less than loads. So each
// invocation owns ROWS rows (the host's `const ROWS`: 16) × 4 columns, and each B load serves ROWS rows
// (gemm_subgroup.wgsl's 8 rows: half as many). A is loaded by the lanes between them, one vec4 per
// group of 4 rows each (lane t: row 4·g + t % 4, step t / 4 of the next subgroup_size / 4 steps along
// K), and shuffled to every lane. The 4 × 4 product of one step is written as acc += a.x · Bᵀ[0] + …
// + a.w · Bᵀ[3], with Bᵀ the transpose of the 4 B vec4s (free where lanes are SIMD lanes): 16 fused
// multiply-adds on the accumulators, where `a · mat4x4(b…)` is 4 dot products and 4 more adds.
// Groups of 4 rows past M are skipped, loads and products (a branch uniform across the row block, so
// across each subgroup), so a block of a few rows (decode steps) costs what its rows need.
//
// Correct at any subgroup size (4…128): as in gemm_subgroup.wgsl, everything is derived from the
// `subgroup_size` builtin, every invocation runs every shuffle (the only branches around them depend on
// the workgroup's row block: uniform control flow), columns and rows past the edge re-read the last one
// and are never stored, and steps past K load zeros. WG = 128 invocations, a multiple of every subgroup
// size. SUBGROUP_LANES > 0 makes the core use only that many lanes of each subgroup, as if the
// subgroup were that small (tests).
// Host guarantees: N % 4 == 0; ROWS % 4 == 0; SUBGROUP_LANES is 0 or a multiple of 4;
// colLanes (params) as variants.ts gemmLayout chose it; dispatch = (ceil(N / (4·colLanes)), ceil(M / (ROWS·WG / colLanes)), 1).

override WG: u32 = 128u;
override SUBGROUP_LANES: u32 = 0u;  // 0: the whole subgroup; else at most this many lanes (tests)
const GROUPS = ROWS / 4u;           // groups of 4 rows, one shuffled vec4 of A per lane each

// acc + Σ_j a[j] · bt[j]: one row's 4 columns after one step of 4 along K (bt: Bᵀ, columns along K).
fn fma4x4(acc: vec4<f32>, a: vec4<f32>, bt: mat4x4<f32>) -> vec4<f32> {
  return fma(vec4<f32>(a.w), bt[3], fma(vec4<f32>(a.z), bt[2], fma(vec4<f32>(a.y), bt[1], fma(vec4<f32>(a.x), bt[0], acc))));
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(local_invocation_index) lix: u32,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) subgroupSize: u32,
) {
  let lanes = select(subgroupSize, min(subgroupSize, SUBGROUP_LANES), SUBGROUP_LANES > 0u);
  // Row blocks of params.colLanes invocations (a multiple of the largest subgroup size dividing WG,
  // so a subgroup never straddles two), each 4·colLanes columns of ROWS rows: a narrow layer fills
  // the workgroup with more rows instead of columns past N (variants.ts gemmLayout).
  let blocks = WG / params.colLanes;
  let row0 = (wid.y * blocks + lix / params.colLanes) * ROWS;
  let col0 = (wid.x * params.colLanes + lix % params.colLanes) * 4u;
  let lastRow = params.M - 1u;
  let lastCol = params.N - 1u;
  let b0Row = bRow(min(col0 + 0u, lastCol));
  let b1Row = bRow(min(col0 + 1u, lastCol));
  let b2Row = bRow(min(col0 + 2u, lastCol));
  let b3Row = bRow(min(col0 + 3u, lastCol));
  // The vec4s of A this lane loads for the subgroup: rows 4·g + lane % 4, step lane / 4 of each group of steps.
  var aMine: array<u32, GROUPS>;
  for (var g = 0u; g < GROUPS; g++) {
    aMine[g] = aRow(min(row0 + 4u * g + lane % 4u, lastRow));
  }
  let aStep = lane / 4u;
  let rowsHere = select(0u, params.M - row0, row0 < params.M);  // rows of this block in Y: groups of 4 past them are skipped
  let steps = lanes / 4u;  // K steps (vec4s) one shuffled load of A covers

  var acc: array<vec4<f32>, ROWS>;
  for (var r = 0u; r < ROWS; r++) {
    acc[r] = vec4<f32>(0.0);
  }
  let len4 = segLen4();
  for (var seg = 0u; seg < kSegments(); seg++) {
    let aSeg = seg * aSegStride();
    let bSeg = seg * len4;
    for (var k0 = 0u; k0 < len4; k0 += steps) {
      // A[row0 + 4·g + lane % 4, k0 + lane / 4], zero past the segment's end.
      let kA = k0 + aStep;
      var mine: array<vec4<f32>, GROUPS>;
      for (var g = 0u; g < GROUPS; g++) {
        if (4u * g < rowsHere) {
          mine[g] = select(vec4<f32>(0.0), vec4<f32>(loadA(aMine[g] + aSeg + min(kA, len4 - 1u))), kA < len4);
        }
      }
      let n = min(steps, len4 - k0);
      for (var s = 0u; s < n; s++) {
        let k = bSeg + k0 + s;
        // B[col0 + c, k … k + 3] as the columns of a matrix, transposed: column j holds component j of the 4.
        let bt = transpose(mat4x4<f32>(vec4<f32>(loadB(b0Row + k)), vec4<f32>(loadB(b1Row + k)), vec4<f32>(loadB(b2Row + k)), vec4<f32>(loadB(b3Row + k))));
        for (var g = 0u; g < GROUPS; g++) {
          for (var t = 0u; t < 4u; t++) {
            let a = subgroupShuffle(mine[g], s * 4u + t);  // every lane shuffles (uniform control flow)
            if (4u * g < rowsHere) {
              acc[4u * g + t] = fma4x4(acc[4u * g + t], a, bt);
            }
          }
        }
      }
    }
  }

  if (col0 < params.N) {
    for (var r = 0u; r < ROWS; r++) {
      if (row0 + r < params.M) {
        store4(row0 + r, col0, acc[r]);
      }
    }
  }
}
