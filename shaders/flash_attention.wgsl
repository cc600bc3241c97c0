// FlashAttention-style attention: O = softmax(Q·Kᵀ / √Dh + mask) · V, without ever storing the scores.
//
//   Q    [B, H, Sq, Dh]     read from qkv at offset 0
//   K, V [B, G, Skv, Dh]    read from qkv at kBase4 and vBase4 (vec4s); query head h uses key/value
//                           head h / (H / G), read in place
//   O    [B, H, Sq, Dh]
//
// One workgroup per (query tile of BR rows, head h, batch b); one invocation per query row. The row's
// q (pre-multiplied by log2(e)/√Dh, so exp becomes exp2) and its output accumulator stay in registers
// while K and V stream through workgroup memory in tiles of BC keys. For each tile, each row computes
// its BC scores, then the online softmax: a running max m and sum l per row; when the max grows, the
// accumulator and l are rescaled by exp2(m_old − m_new). At the end O = acc / l. The Sq×Skv score
// matrix never exists in memory; memory use is linear in S.
//
// Masking: with causal set, row i sees keys j ≤ i + causalOffset (causalOffset = Skv − Sq aligns the
// queries to the end of the keys). Tiles that lie wholly above the diagonal of the last row of the
// workgroup are never loaded. A row that sees no key at all gets O = 0 (l stays 0), never NaN.
//
// Each row's softmax statistics (m, l) go to `rowStats` [B, H, Sq]: 8 bytes per row, from which
// attention_probs.wgsl recomputes the probabilities when the caller asks. (m and l are kept apart
// rather than folded into one log-sum-exp m + log2(l): with logits in the thousands, that sum would
// round away l's contribution at float32's spacing there, ~1e-4.)
//
// Host guarantees: prepends `const DH4: u32` (Dh / 4, 1…64) and `const BC: u32` (keys per tile) so
// the register arrays have fixed sizes; 2·BC·Dh·4 bytes fit maxComputeWorkgroupStorageSize;
// dispatch = (ceil(Sq / BR), H, B).

struct Params {
  H: u32,
  G: u32,
  Sq: u32,
  Skv: u32,
  kBase4: u32,       // where K starts in qkv, in vec4s
  vBase4: u32,       // where V starts in qkv, in vec4s
  causal: u32,       // 1: row i sees keys j <= i + causalOffset
  causalOffset: i32, // Skv - Sq
  scaleLog2e: f32,   // log2(e) / sqrt(Dh)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;  // [B, H, Sq, Dh/4]
@group(0) @binding(3) var<storage, read_write> rowStats: array<vec2<f32>>;  // (m, l) per row [B, H, Sq]

override BR: u32 = 32u;  // query rows per workgroup, one per invocation

// A score no real one goes below; finite, because WGSL lets implementations assume no infinities.
const NO_SCORE: f32 = -3.0e38;

var<workgroup> kTile: array<vec4<f32>, BC * DH4>;  // [BC, Dh/4]
var<workgroup> vTile: array<vec4<f32>, BC * DH4>;  // [BC, Dh/4]

@compute @workgroup_size(BR)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let h = wid.y;
  let b = wid.z;
  let firstRow = wid.x * BR;
  let i = firstRow + lid.x;              // this invocation's query row
  let iq = min(i, params.Sq - 1u);       // rows past Sq compute a copy of the last row, never stored
  let kvHead = h / (params.H / params.G);

  // Keys this row sees: [0, rowEnd). Keys the workgroup needs: [0, tileEnd), the same for every
  // invocation, so the tile loop (and its barriers) stays in uniform control flow.
  var rowEnd = params.Skv;
  var tileEnd = params.Skv;
  if (params.causal != 0u) {
    let lastRow = min(firstRow + BR, params.Sq) - 1u;
    rowEnd = u32(clamp(i32(iq) + params.causalOffset + 1, 0, i32(params.Skv)));
    tileEnd = u32(clamp(i32(lastRow) + params.causalOffset + 1, 0, i32(params.Skv)));
  }

  // q: this row of Q, scaled; acc: unnormalised output row.
  var q: array<vec4<f32>, DH4>;
  var acc: array<vec4<f32>, DH4>;
  let qOffset = ((b * params.H + h) * params.Sq + iq) * DH4;
  for (var d = 0u; d < DH4; d++) {
    q[d] = qkv[qOffset + d] * params.scaleLog2e;
    acc[d] = vec4<f32>(0.0);
  }
  var m = NO_SCORE;  // running max of the scores seen (log2 units)
  var l = 0.0;       // running sum of exp2(score - m)

  let kvOffset = (b * params.G + kvHead) * params.Skv * DH4;
  var s: array<f32, BC>;
  for (var j0 = 0u; j0 < tileEnd; j0 += BC) {
    // Stage keys j0 .. j0+BC-1 of K and V (zeros past Skv), all invocations helping.
    for (var t = lid.x; t < BC * DH4; t += BR) {
      let j = j0 + t / DH4;
      var kv = vec4<f32>(0.0);
      var vv = vec4<f32>(0.0);
      if (j < params.Skv) {
        kv = qkv[params.kBase4 + kvOffset + j0 * DH4 + t];
        vv = qkv[params.vBase4 + kvOffset + j0 * DH4 + t];
      }
      kTile[t] = kv;
      vTile[t] = vv;
    }
    workgroupBarrier();

    // Keys of this tile this row sees: the first `visible` of them.
    let visible = min(BC, select(0u, rowEnd - j0, rowEnd > j0));
    if (visible > 0u) {
      var tileMax = NO_SCORE;
      for (var c = 0u; c < visible; c++) {
        var dotv = vec4<f32>(0.0);
        for (var d = 0u; d < DH4; d++) {
          dotv += q[d] * kTile[c * DH4 + d];
        }
        let score = dotv.x + dotv.y + dotv.z + dotv.w;
        s[c] = score;
        tileMax = max(tileMax, score);
      }
      let mNew = max(m, tileMax);
      let alpha = exp2(m - mNew);  // 0 on the first visible tile, as m is NO_SCORE
      l *= alpha;
      for (var d = 0u; d < DH4; d++) {
        acc[d] *= alpha;
      }
      for (var c = 0u; c < visible; c++) {
        let p = exp2(s[c] - mNew);
        l += p;
        for (var d = 0u; d < DH4; d++) {
          acc[d] += p * vTile[c * DH4 + d];
        }
      }
      m = mNew;
    }
    workgroupBarrier();
  }

  if (i < params.Sq) {
    let row = (b * params.H + h) * params.Sq + i;
    rowStats[row] = vec2<f32>(m, l);
    let outOffset = row * DH4;
    let invL = select(0.0, 1.0 / l, l > 0.0);  // a row that saw no key gives 0
    for (var d = 0u; d < DH4; d++) {
      out[outOffset + d] = acc[d] * invL;
    }
  }
}
