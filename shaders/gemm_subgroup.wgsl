// GEMM core, register tiles whose A operands travel through the subgroup: Y[m, n] = Σ_k A[m, k] · B[n, k]
// for one projection (needs the `subgroups` feature; the host prepends `enable subgroups;`).
//
// Appended by the host to gemm_subgroup_block.wgsl (the kernel: row blocks, A loaded by the lanes
// between them, the walk along K, the stores) and a projection's problem file (qkv_projection.wgsl,
// output_projection.wgsl). It says what a step adds: each invocation owns ROWS rows (the host's
// `const ROWS`: 4 or 8) × its own 4 columns, and takes each row's vec4 of A from the lane that loaded
// it (subgroupShuffle) for 4 four-term dot products with the step's 4 columns of B. Every group of
// rows is loaded and added (groupInY: true, a constant, so the block's row test folds away).

// Every group of the block's rows is loaded and added, inside Y or not (those past M are never stored).
fn groupInY(g: u32, rowsHere: u32) -> bool {
  return true;
}

// acc[r] += A[r] · B for one step of 4 along K: row r's vec4 from lane s·4 + r % 4's group r / 4 (b: column c = B[col0 + c, k … k + 3]).
fn addStep(acc: ptr<function, array<vec4<f32>, ROWS>>, mine: ptr<function, array<vec4<f32>, GROUPS>>, s: u32, b: mat4x4<f32>, rowsHere: u32) {
  for (var r = 0u; r < ROWS; r++) {
    let a = subgroupShuffle((*mine)[r / 4u], s * 4u + r % 4u);
    (*acc)[r] += vec4<f32>(dot(a, b[0]), dot(a, b[1]), dot(a, b[2]), dot(a, b[3]));
  }
}
