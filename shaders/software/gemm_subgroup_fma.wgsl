// GEMM core for CPU drivers with subgroups: Y[m, n] = Σ_k A[m, k] · B[n, k] for one projection, A passed
// between lanes by subgroupShuffle (as in gemm_subgroup.wgsl), the products as fused multiply-adds.
//
// Appended by the host to gemm_subgroup_block.wgsl (the kernel: row blocks, A loaded by the lanes
// between them, the walk along K, the stores, as gemm_subgroup.wgsl's) and a projection's problem
// file (qkv_projection.wgsl, output_projection.wgsl); it says what a step adds, and which rows.
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
// Correct at any subgroup size (4…128): as gemm_subgroup_block.wgsl says; the only branch around the
// shuffles here depends on the block's rows (uniform control flow).
// Host guarantees: as gemm_subgroup_block.wgsl's.

// acc + Σ_j a[j] · bt[j]: one row's 4 columns after one step of 4 along K (bt: Bᵀ, columns along K).
fn fma4x4(acc: vec4<f32>, a: vec4<f32>, bt: mat4x4<f32>) -> vec4<f32> {
  return fma(vec4<f32>(a.w), bt[3], fma(vec4<f32>(a.z), bt[2], fma(vec4<f32>(a.y), bt[1], fma(vec4<f32>(a.x), bt[0], acc))));
}

// Whether group g of 4 rows has rows in Y (rowsHere: the block's): groups past them are skipped, loads
// and products (a branch uniform across the block).
fn groupInY(g: u32, rowsHere: u32) -> bool {
  return 4u * g < rowsHere;
}

// acc[4·g + t] += A[4·g + t] · B for one step of 4 along K, row 4·g + t's vec4 from lane s·4 + t's group g,
// for the groups of rows inside Y (b: column c = B[col0 + c, k … k + 3]).
fn addStep(acc: ptr<function, array<vec4<f32>, ROWS>>, mine: ptr<function, array<vec4<f32>, GROUPS>>, s: u32, b: mat4x4<f32>, rowsHere: u32) {
  // B's 4 rows transposed: column j holds component j of the 4.
  let bt = transpose(b);
  for (var g = 0u; g < GROUPS; g++) {
    for (var t = 0u; t < 4u; t++) {
      let a = subgroupShuffle((*mine)[g], s * 4u + t);  // every lane shuffles (uniform control flow)
      if (groupInY(g, rowsHere)) {
        (*acc)[4u * g + t] = fma4x4((*acc)[4u * g + t], a, bt);
      }
    }
  }
}
