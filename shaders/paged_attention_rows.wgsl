// Paged attention's body for prefills, appended to paged_attention.wgsl: a workgroup per (query tile of
// BR rows, head h = wid.y, sequence info[workBase + wid.z]), a row per invocation; the tile's keys are
// staged BC at a time into workgroup memory through the block table (the same for every invocation, so
// the loop and its barriers are uniform: info is read-only storage, read at uniform indices).
// Host guarantees: prepends DH4, BR, BC, HPW, LOOP (HPW divides H / G; BR·HPW invocations a workgroup) (2·BC·Dh·4 bytes fit workgroup memory);
// dispatch = (ceil(longest length / BR), H / HPW, sequences in the work list).

var<workgroup> kTile: array<vec4<f32>, BC * DH4>;
var<workgroup> vTile: array<vec4<f32>, BC * DH4>;

@compute @workgroup_size(BR * HPW)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  // LOOP = 1: loops run to values the compiler does not unroll (fast to compile at any head size; the
  // first tier); LOOP = 0: to the constants DH4 and BC, unrolled (fast code, slow to compile on CPU rasterizers).
  let dh4 = select(DH4, params.Dh4, LOOP == 1u);
  let bc = select(BC, params.loopBC, LOOP == 1u);
  let seq = pagedSequence(info[params.workBase + wid.z]);
  let h = wid.y * HPW + lid.x / BR;  // this invocation's head: the workgroup's HPW heads share a key/value head
  let g = (wid.y * HPW) / (params.H / params.G);
  let Sq = seq.length;
  let Skv = seq.start + seq.length;
  let firstRow = wid.x * BR;
  if (firstRow >= Sq) {
    return;  // a tile past a short sequence: the whole workgroup leaves, uniformly
  }
  let i = firstRow + lid.x % BR;
  let iq = min(i, Sq - 1u);  // rows past Sq compute a copy of the last row, never stored
  let band = keyBand(iq, Sq, Skv);
  let ip = i32(seq.start + iq);
  let tileStart = keyBand(firstRow, Sq, Skv).x / BC * BC;
  let tileEnd = keyBand(min(firstRow + BR, Sq) - 1u, Sq, Skv).y;

  var q: array<vec4<f32>, DH4>;
  var acc: array<vec4<f32>, DH4>;
  for (var d = 0u; d < dh4; d++) {
    q[d] = pagedQuery(h, seq.row + iq, d);
    acc[d] = vec4<f32>(0.0);
  }
  var m = NO_SCORE;
  var l = 0.0;
  var s: array<f32, BC>;
  for (var j0 = tileStart; j0 < tileEnd; j0 += BC) {
    for (var t = lid.x; t < BC * DH4; t += BR * HPW) {
      let j = j0 + t / DH4;
      var kk = vec4<f32>(0.0);
      var vv = vec4<f32>(0.0);
      if (j < Skv) {
        let at = poolRow(seq.table, g, j) * DH4 + t % DH4;
        kk = loadKey(at);
        vv = loadValue(params.poolV4 + at);
      }
      kTile[t] = kk;
      vTile[t] = vv;
    }
    workgroupBarrier();
    var tileMax = NO_SCORE;
    for (var c = 0u; c < bc; c++) {
      let j = j0 + c;
      var score = NO_SCORE;
      let bias = pagedBias(seq, iq, j, band);
      if (bias > MASKED_BELOW) {
        var dotv = vec4<f32>(0.0);
        for (var d = 0u; d < dh4; d++) {
          dotv += q[d] * kTile[c * DH4 + d];
        }
        score = modifyScore(dotv.x + dotv.y + dotv.z + dotv.w, 0u, h, ip, j) + bias * LOG2E;
        tileMax = max(tileMax, score);
      }
      s[c] = score;
    }
    if (tileMax > NO_SCORE) {
      let mNew = max(m, tileMax);
      let alpha = exp2(m - mNew);
      l *= alpha;
      for (var d = 0u; d < dh4; d++) {
        acc[d] *= alpha;
      }
      for (var c = 0u; c < bc; c++) {
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
    let stats = withSink(m, l, h);
    let scale = select(0.0, stats.z / stats.y, stats.y > 0.0);
    let o = (h * params.T + seq.row + i) * DH4;
    for (var d = 0u; d < dh4; d++) {
      out[o + d] = ST4(acc[d] * scale);
    }
  }
}
