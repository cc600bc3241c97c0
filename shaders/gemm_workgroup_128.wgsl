// GEMM core for GPUs, 128 × 128 tiles through workgroup memory, 8 × 8 per invocation:
// Y[m, n] = Σ_k A[m, k] · B[n, k] for one projection.
//
// Appended by the host to a projection's problem file, like gemm_register_4x4.wgsl (see there for what
// the problem file supplies); its sizes are fixed below.
//
// The classic shape of a fast SGEMM on GPUs, a step past gemm_workgroup.wgsl (64 × 64 tiles, 4 × 4 per
// invocation): a workgroup of 16 × 16 invocations computes a 128 × 128 tile of Y, each invocation
// 8 rows × 8 columns of it, so every value read from workgroup memory serves 8 multiply-adds (4 in the
// 64 × 64 core). K is walked TK = 8 at a time: each invocation stages one vec4 of A and one of B
// (coalesced along K), written transposed (aT[k][m], bT[k][n]), so that after the barrier an
// invocation reads its rows and its columns at one k as two vec4s each, and does the 64 products of
// that k as fused multiply-adds on f32 accumulators. Its rows are ty·4 … ty·4 + 3 and 64 + the same,
// its columns likewise from tx·4: neighbouring invocations read neighbouring vec4s of workgroup memory.
// Products run in f32 whatever the storage type (staging converts). Elements past M, N or K stage as
// zeros; rows and columns past M and N are never stored.
//
// Not a candidate on CPU adapters (variants.ts): there barriers cost more than the reuse gains.
// Uses 8 KiB of workgroup storage (WebGPU's default limit is 16 KiB).
// Host guarantees: N % 4 == 0; dispatch = (ceil(N / 128), ceil(M / 128), 1).

const TILE4 = 32u;  // vec4s across the 128 rows (or columns) of a tile
const TK = 8u;      // K per stage
const TK4 = 2u;     // vec4s of K per stage

var<workgroup> aT: array<vec4<f32>, TK * TILE4>;  // aT[k · 32 + m / 4][m % 4] = A[tileRow + m, k0 + k]
var<workgroup> bT: array<vec4<f32>, TK * TILE4>;  // bT[k · 32 + n / 4][n % 4] = B[tileCol + n, k0 + k]

// acc + a · b: one row's value at one k times that k's 4 columns.
fn outer(a: f32, b: vec4<f32>, acc: vec4<f32>) -> vec4<f32> {
  return fma(vec4<f32>(a), b, acc);
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u, @builtin(local_invocation_index) li: u32) {
  let tileRow = wid.y * 128u;
  let tileCol = wid.x * 128u;
  // The vec4 this invocation stages: row (or column) `sr` of the tile, vec4 `sk` of the stage's K.
  let sr = li / TK4;
  let sk = li % TK4;
  let aM = tileRow + sr;
  let bN = tileCol + sr;
  let aStart = aRow(min(aM, params.M - 1u));
  let bStart = bRow(min(bN, params.N - 1u));
  let len4 = segLen4();
  let K4 = kSegments() * len4;
  let tx = lid.x;
  let ty = lid.y;

  // Rows ty·4 + i (acc0i_) and 64 + ty·4 + i (acc1i_); columns tx·4 … (acc__0) and 64 + tx·4 … (acc__1).
  var acc000 = vec4<f32>(0.0); var acc001 = vec4<f32>(0.0);
  var acc010 = vec4<f32>(0.0); var acc011 = vec4<f32>(0.0);
  var acc020 = vec4<f32>(0.0); var acc021 = vec4<f32>(0.0);
  var acc030 = vec4<f32>(0.0); var acc031 = vec4<f32>(0.0);
  var acc100 = vec4<f32>(0.0); var acc101 = vec4<f32>(0.0);
  var acc110 = vec4<f32>(0.0); var acc111 = vec4<f32>(0.0);
  var acc120 = vec4<f32>(0.0); var acc121 = vec4<f32>(0.0);
  var acc130 = vec4<f32>(0.0); var acc131 = vec4<f32>(0.0);
  for (var k0 = 0u; k0 < K4; k0 += TK4) {
    let k = k0 + sk;
    var a = vec4<f32>(0.0);
    var b = vec4<f32>(0.0);
    if (k < K4) {
      if (aM < params.M) {
        a = vec4<f32>(loadA(aStart + (k / len4) * aSegStride() + k % len4));
      }
      if (bN < params.N) {
        b = vec4<f32>(loadB(bStart + k));
      }
    }
    let slot = sk * 4u * TILE4 + sr / 4u;  // row k = 4·sk of the stage, vec4 sr / 4
    let c = sr % 4u;
    aT[slot][c] = a.x;
    aT[slot + TILE4][c] = a.y;
    aT[slot + 2u * TILE4][c] = a.z;
    aT[slot + 3u * TILE4][c] = a.w;
    bT[slot][c] = b.x;
    bT[slot + TILE4][c] = b.y;
    bT[slot + 2u * TILE4][c] = b.z;
    bT[slot + 3u * TILE4][c] = b.w;
    workgroupBarrier();
    for (var kk = 0u; kk < TK; kk++) {
      let a0 = aT[kk * TILE4 + ty];
      let a1 = aT[kk * TILE4 + 16u + ty];
      let b0 = bT[kk * TILE4 + tx];
      let b1 = bT[kk * TILE4 + 16u + tx];
      acc000 = outer(a0.x, b0, acc000); acc001 = outer(a0.x, b1, acc001);
      acc010 = outer(a0.y, b0, acc010); acc011 = outer(a0.y, b1, acc011);
      acc020 = outer(a0.z, b0, acc020); acc021 = outer(a0.z, b1, acc021);
      acc030 = outer(a0.w, b0, acc030); acc031 = outer(a0.w, b1, acc031);
      acc100 = outer(a1.x, b0, acc100); acc101 = outer(a1.x, b1, acc101);
      acc110 = outer(a1.y, b0, acc110); acc111 = outer(a1.y, b1, acc111);
      acc120 = outer(a1.z, b0, acc120); acc121 = outer(a1.z, b1, acc121);
      acc130 = outer(a1.w, b0, acc130); acc131 = outer(a1.w, b1, acc131);
    }
    workgroupBarrier();
  }

  let m0 = tileRow + ty * 4u;
  let n0 = tileCol + tx * 4u;
  store4Rows(m0, n0, acc000, acc010, acc020, acc030);
  store4Rows(m0 + 64u, n0, acc100, acc110, acc120, acc130);
  store4Rows(m0, n0 + 64u, acc001, acc011, acc021, acc031);
  store4Rows(m0 + 64u, n0 + 64u, acc101, acc111, acc121, acc131);
}

// Rows m … m + 3, columns n … n + 3 of Y, those inside M and N (N % 4 == 0: 4 columns are all in or all out).
fn store4Rows(m: u32, n: u32, y0: vec4<f32>, y1: vec4<f32>, y2: vec4<f32>, y3: vec4<f32>) {
  if (n >= params.N) {
    return;
  }
  if (m < params.M) { store4(m, n, y0); }
  if (m + 1u < params.M) { store4(m + 1u, n, y1); }
  if (m + 2u < params.M) { store4(m + 2u, n, y2); }
  if (m + 3u < params.M) { store4(m + 3u, n, y3); }
}
