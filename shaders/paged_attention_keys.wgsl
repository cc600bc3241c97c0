// Paged attention's body for decode steps (and small trees), appended to paged_attention.wgsl: a
// workgroup per (query row, head h = wid.y), the row info[workBase + 2·wid.x] (its sequence) and
// info[workBase + 2·wid.x + 1] (which of its new tokens); the row's keys spread over the WG invocations
// (key j to invocation j mod WG), each keeping its own online softmax (m, l, acc), merged at the end in
// workgroup memory: max of the m's, then each part's l and acc rescaled by 2^(m − M) and summed.
// Host guarantees: prepends DH4, WG (WG·Dh·4 bytes fit workgroup memory); dispatch = (rows in the work list, H, 1).

var<workgroup> partM: array<f32, WG>;
var<workgroup> partL: array<f32, WG>;
var<workgroup> partAcc: array<vec4<f32>, WG * DH4>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let seq = pagedSequence(info[params.workBase + 2u * wid.x]);
  let i = info[params.workBase + 2u * wid.x + 1u];
  let h = wid.y;
  let g = h / (params.H / params.G);
  let Skv = seq.start + seq.length;
  let band = keyBand(i, seq.length, Skv);
  let ip = i32(seq.start + i);

  var q: array<vec4<f32>, DH4>;
  var acc: array<vec4<f32>, DH4>;
  for (var d = 0u; d < DH4; d++) {
    q[d] = pagedQuery(h, seq.row + i, d);
    acc[d] = vec4<f32>(0.0);
  }
  var m = NO_SCORE;
  var l = 0.0;
  for (var j = band.x + lid.x; j < band.y; j += WG) {
    let bias = pagedBias(seq, i, j, band);
    if (bias > MASKED_BELOW) {
      let at = poolRow(seq.table, g, j) * DH4;
      var dotv = vec4<f32>(0.0);
      for (var d = 0u; d < DH4; d++) {
        dotv += q[d] * vec4<f32>(pool[at + d]);
      }
      let score = modifyScore(dotv.x + dotv.y + dotv.z + dotv.w, 0u, h, ip, j) + bias * LOG2E;
      let mNew = max(m, score);
      let alpha = exp2(m - mNew);
      let p = exp2(score - mNew);
      l = l * alpha + p;
      for (var d = 0u; d < DH4; d++) {
        acc[d] = acc[d] * alpha + p * vec4<f32>(pool[params.poolV4 + at + d]);
      }
      m = mNew;
    }
  }
  partM[lid.x] = m;
  workgroupBarrier();
  var M = NO_SCORE;
  for (var w = 0u; w < WG; w++) {
    M = max(M, partM[w]);
  }
  let alpha = select(exp2(m - M), 0.0, m <= NO_SCORE);
  partL[lid.x] = l * alpha;
  for (var d = 0u; d < DH4; d++) {
    partAcc[lid.x * DH4 + d] = acc[d] * alpha;
  }
  workgroupBarrier();
  var L = 0.0;
  for (var w = 0u; w < WG; w++) {
    L += partL[w];
  }
  let stats = withSink(M, L, h);
  let scale = select(0.0, stats.z / stats.y, stats.y > 0.0);
  let o = (h * params.T + seq.row + i) * DH4;
  for (var d = lid.x; d < DH4; d += WG) {
    var sum = vec4<f32>(0.0);
    for (var w = 0u; w < WG; w++) {
      sum += partAcc[w * DH4 + d];
    }
    out[o + d] = ST4(sum * scale);
  }
}
