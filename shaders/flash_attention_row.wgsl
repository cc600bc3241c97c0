// FlashAttention body with one invocation per query row, appended to flash_attention.wgsl (which
// describes the algorithm, the masks and split-KV). Per-row state is scalars and the row's q and
// accumulator arrays: the shape that suits drivers which keep little in registers unless told.
//
// Its loops over the head size run to DH4, a constant, which compilers unroll (fast code, slow to
// compile: the cost grows with Dh), or, with LOOP = 1 (variant "-loop", the first tier), to the same
// number read from params, which they leave as loops: slower, but it compiles fast at any Dh.

override BR: u32 = 32u;  // query rows per workgroup, one per invocation

@compute @workgroup_size(BR)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let h = wid.y;
  let dh4 = select(DH4, params.Dh4, LOOP == 1u);  // Dh / 4 either way
  let b = wid.z;
  let sequence = sequenceOf(b, h);
  let Sq = sequence.Sq;
  let Skv = sequence.Skv;
  let qHead = sequence.qHead;
  let kvHeadRow = sequence.kvHeadRow;
  let split = wid.x;
  let firstRow = select(wid.x * BR, 0u, params.splitChunk > 0u);
  if (firstRow >= Sq) {
    return;  // a tile past a short sequence: the whole workgroup leaves, uniformly
  }
  let i = firstRow + lid.x;        // this invocation's query row
  let iq = min(i, Sq - 1u);        // rows past Sq compute a copy of the last row, never stored

  // Keys this row sees by position lie in band = [band.x, band.y) (score_rule.wgsl); the workgroup
  // loads tiles covering [tileStart, tileEnd), the same for every invocation, so the loop (and its
  // barriers) is uniform.
  let rule = rowRule(b, h, iq, Sq, Skv);
  let band = rule.band;
  let tiles = splitKeys(vec2<u32>(keyBand(firstRow, Sq, Skv).x / BC * BC, keyBand(min(firstRow + BR, Sq) - 1u, Sq, Skv).y), split);
  let tileStart = tiles.x;
  let tileEnd = tiles.y;

  // q: this row of Q, scaled; acc: unnormalised output row.
  var q: array<vec4<f32>, DH4>;
  var acc: array<vec4<f32>, DH4>;
  let row = qHead + iq;
  for (var d = 0u; d < dh4; d++) {
    q[d] = scaledQuery(row, d);
    acc[d] = vec4<f32>(0.0);
  }
  var m = NO_SCORE;  // running max of the scores seen (log2 units)
  var l = 0.0;       // running sum of exp2(score - m)

  let maskRow = rule.maskRow;
  let ip = rule.ip;  // the row's position among the keys
  let kvOffset = kvHeadRow * DH4;
  var s: array<f32, BC>;
  for (var j0 = tileStart; j0 < tileEnd; j0 += BC) {
    stageTile(j0, Skv, kvOffset, lid.x, BR);
    workgroupBarrier();

    // Scores of the keys of this tile this row sees; NO_SCORE for the others.
    var tileMax = NO_SCORE;
    for (var c = 0u; c < BC; c++) {
      let j = j0 + c;
      var score = NO_SCORE;
      let bias = keyBias(b, j, band, maskRow, Skv);
      if (bias > MASKED_BELOW) {
        var dotv = vec4<f32>(0.0);
        for (var d = 0u; d < dh4; d++) {
          dotv += q[d] * kTile[c * DH4 + d];
        }
        score = modifyScore(dotv.x + dotv.y + dotv.z + dotv.w, b, h, ip, j) + bias * LOG2E;
        tileMax = max(tileMax, score);
      }
      s[c] = score;
    }
    if (tileMax > NO_SCORE) {
      let mNew = max(m, tileMax);
      let alpha = exp2(m - mNew);  // 0 on the first visible tile, as m is NO_SCORE
      l *= alpha;
      for (var d = 0u; d < dh4; d++) {
        acc[d] *= alpha;
      }
      for (var c = 0u; c < BC; c++) {
        if (s[c] > NO_SCORE) {
          let p = exp2(s[c] - mNew);
          l += p;
          for (var d = 0u; d < dh4; d++) {
            acc[d] += p * vTile[c * DH4 + d];
          }
        }
      }
      m = mNew;
    }
    workgroupBarrier();
  }

  if (i < Sq) {
    let o = finishRow(i, qHead, split, m, l, b, h);
    for (var d = 0u; d < dh4; d++) {
      out[o.row * DH4 + d] = ST4(acc[d] * o.scale);
    }
  }
}
