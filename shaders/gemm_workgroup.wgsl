// GEMM core, tiled through workgroup memory: Y[m, n] = Σ_k A[m, k] · B[n, k] for one projection.
//
// Appended by the host to a projection's problem file, like gemm_register_4x4.wgsl (see there for what
// the problem file supplies); its sizes are fixed below.
//
// A workgroup of 16 × 16 invocations computes a 64 × 64 tile of Y. K is walked TK4 vec4s at a time:
// the workgroup stages a 64 × TK4 slice of A and of B in workgroup memory (one vec4 of each per
// invocation, coalesced along K), waits at a barrier, and each invocation multiplies its 4 × 4
// sub-tile out of workgroup memory. Every A and B element is read from global memory once per
// workgroup instead of once per invocation: the shape that is fast on GPUs, where barriers are cheap
// and global bandwidth is what runs out. Elements past M, N or K stage as zeros.
//
// Host guarantees: N % 4 == 0; dispatch = (ceil(N / 64), ceil(M / 64), 1).

const TILE = 64u;   // rows and columns of Y per workgroup
const TK4 = 4u;     // vec4s of K per stage

var<workgroup> aTile: array<ST4, TILE * TK4>;  // [64 rows of A, TK4]
var<workgroup> bTile: array<ST4, TILE * TK4>;  // [64 rows of B, TK4]

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u, @builtin(local_invocation_index) li: u32) {
  let tileRow = wid.y * TILE;
  let tileCol = wid.x * TILE;
  let row0 = lid.y * 4u;  // this invocation's 4 × 4 sub-tile, within the tile
  let col0 = lid.x * 4u;
  // The vec4 this invocation stages: row `sr` of the slice, vec4 `sk` of K within it.
  let sr = li / TK4;
  let sk = li % TK4;
  let aM = tileRow + sr;
  let bN = tileCol + sr;
  let aStart = aRow(min(aM, params.M - 1u));
  let bStart = bRow(min(bN, params.N - 1u));
  let len4 = segLen4();
  let K4 = kSegments() * len4;

  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  for (var k0 = 0u; k0 < K4; k0 += TK4) {
    let k = k0 + sk;
    var a = ST4(0.0);
    var b = ST4(0.0);
    if (k < K4) {
      if (aM < params.M) {
        a = loadA(aStart + (k / len4) * aSegStride() + k % len4);
      }
      if (bN < params.N) {
        b = loadB(bStart + k);
      }
    }
    aTile[li] = a;
    bTile[li] = b;
    workgroupBarrier();
    for (var kk = 0u; kk < TK4; kk++) {
      let bm = SM4(bTile[col0 * TK4 + kk], bTile[(col0 + 1u) * TK4 + kk], bTile[(col0 + 2u) * TK4 + kk], bTile[(col0 + 3u) * TK4 + kk]);
      acc0 += vec4<f32>(aTile[row0 * TK4 + kk] * bm);
      acc1 += vec4<f32>(aTile[(row0 + 1u) * TK4 + kk] * bm);
      acc2 += vec4<f32>(aTile[(row0 + 2u) * TK4 + kk] * bm);
      acc3 += vec4<f32>(aTile[(row0 + 3u) * TK4 + kk] * bm);
    }
    workgroupBarrier();
  }

  let m = tileRow + row0;
  let n = tileCol + col0;
  if (n >= params.N) {
    return;
  }
  if (m < params.M) { store4(m, n, acc0); }
  if (m + 1u < params.M) { store4(m + 1u, n, acc1); }
  if (m + 2u < params.M) { store4(m + 2u, n, acc2); }
  if (m + 3u < params.M) { store4(m + 3u, n, acc3); }
}
