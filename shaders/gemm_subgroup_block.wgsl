// The kernel of the subgroup GEMM cores (gemm_subgroup.wgsl, software/gemm_subgroup_fma.wgsl): their
// row blocks, the loads of A the lanes share, the walk along K and the stores, written once. Appended
// by the host with a core and gemm_common.wgsl to a projection's problem file, which supplies aRow,
// bRow, aSegStride, kSegments, segLen4, loadA, loadB, store4 and params.M, params.N, params.colLanes
// (gemm_register_4x4.wgsl describes them). The core supplies `const ROWS`, what a step of 4 along K
// adds to the accumulators (addStep) and which groups of 4 rows it loads and adds (groupInY).
//
// One workgroup covers ROWS rows of Y per row block and 4·colLanes columns; each invocation owns
// ROWS rows × its own 4 columns and loads its 4 rows of B a vec4 at a time, so each B load serves ROWS
// rows. A is what every invocation of the block shares: instead of each loading the same ROWS vec4s
// of A per step, the lanes of a subgroup load A between them, one vec4 per group of 4 rows each (lane
// t: row 4·g + t % 4, step t / 4 of the next subgroup_size / 4 steps along K), and the core passes them
// to each other with subgroupShuffle.
//
// Correct at any subgroup size the adapter may use (4…128; sizes are powers of two, so a multiple of
// 4): everything is derived from the `subgroup_size` builtin, and nothing assumes which invocations
// form a subgroup (all of a block's invocations share its rows, so any subgroup of them does). Every
// invocation runs every shuffle (columns and rows past the edge re-read the last one and are never
// stored; steps past K load zeros; the only branches around them depend on the block: uniform
// control flow). WG = 128 invocations, a multiple of every subgroup size, so the subgroups are whole
// and lanes 0 … subgroup_size − 1 all take part. SUBGROUP_LANES > 0 makes the core use only that many
// lanes of each subgroup as if the subgroup were that small (the other lanes still compute their
// columns, with A from those lanes): the tests run the size-dependent arithmetic at sizes the adapter lacks.
// Host guarantees: N % 4 == 0; ROWS % 4 == 0; SUBGROUP_LANES is 0 or a multiple of 4;
// colLanes (params) as variants.ts gemmLayout chose it; dispatch = (ceil(N / (4·colLanes)), ceil(M / (ROWS·WG / colLanes)), 1).

override WG: u32 = 128u;
override SUBGROUP_LANES: u32 = 0u;  // 0: the whole subgroup; else at most this many lanes (tests)
const GROUPS = ROWS / 4u;           // groups of 4 rows, one shuffled vec4 of A per lane each

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
  let bRows = bRows4(col0);
  // The vec4s of A this lane loads for the subgroup: rows 4·g + lane % 4, step lane / 4 of each group of steps.
  var aMine: array<u32, GROUPS>;
  for (var g = 0u; g < GROUPS; g++) {
    aMine[g] = aRow(min(row0 + 4u * g + lane % 4u, params.M - 1u));
  }
  let aStep = lane / 4u;
  let rowsHere = select(0u, params.M - row0, row0 < params.M);  // rows of this block in Y (groupInY)
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
        if (groupInY(g, rowsHere)) {
          mine[g] = select(vec4<f32>(0.0), vec4<f32>(loadA(aMine[g] + aSeg + min(kA, len4 - 1u))), kA < len4);
        }
      }
      let n = min(steps, len4 - k0);
      for (var s = 0u; s < n; s++) {
        let k = bSeg + k0 + s;
        // B[col0 + c, k … k + 3] for c < 4, column c of the matrix.
        let b = mat4x4<f32>(vec4<f32>(loadB(bRows.x + k)), vec4<f32>(loadB(bRows.y + k)), vec4<f32>(loadB(bRows.z + k)), vec4<f32>(loadB(bRows.w + k)));
        addStep(&acc, &mine, s, b, rowsHere);
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
