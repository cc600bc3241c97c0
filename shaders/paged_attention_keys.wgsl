// Paged attention's body for decode steps (and small trees), appended to paged_attention.wgsl: a
// workgroup per (query row, HPW query heads h0 … h0 + HPW − 1 of one key/value head, h0 = wid.y·HPW), the
// row's work entry wid.x: info[workBase + 2·wid.x] (its sequence) and info[workBase + 2·wid.x + 1]
// (which of its new tokens). The row's keys are spread over the WG invocations (key j to invocation
// j mod WG); each K and V row loaded serves the HPW heads (GQA: the heads sharing a key/value head),
// each head with its own online softmax (m, l, acc) per invocation. The parts go to workgroup memory
// once (one barrier: little state lives across it, which keeps CPU rasterizers' compiles short), and
// the invocations merge them, each taking some (head, vec4) outputs: M = the max of the head's m's, then
// the parts' l and acc rescaled by 2^(m − M) and summed.
// Host guarantees: prepends DH4, WG, HPW, LOOP (HPW divides H / G; WG·HPW·(Dh + 2)·4 bytes fit workgroup
// memory); dispatch = (rows in the work list, H / HPW, 1).

var<workgroup> partM: array<f32, WG * HPW>;          // [WG, HPW]
var<workgroup> partL: array<f32, WG * HPW>;          // [WG, HPW]
var<workgroup> partAcc: array<vec4<f32>, WG * HPW * DH4>;  // [WG, HPW, DH4]

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  // LOOP = 1: loops over the head size run to a value the compiler does not unroll (fast to compile at any
  // head size; the first tier); LOOP = 0: to the constant DH4, unrolled (fast code, slow to compile on CPU rasterizers).
  let dh4 = select(DH4, params.Dh4, LOOP == 1u);
  let seq = pagedSequence(info[params.workBase + 2u * wid.x]);
  let i = info[params.workBase + 2u * wid.x + 1u];
  let h0 = wid.y * HPW;
  let g = h0 / (params.H / params.G);
  let Skv = seq.start + seq.length;
  let band = keyBand(i, seq.length, Skv);
  let ip = i32(seq.start + i);

  var q: array<vec4<f32>, HPW * DH4>;
  var acc: array<vec4<f32>, HPW * DH4>;
  var m: array<f32, HPW>;
  var l: array<f32, HPW>;
  for (var hh = 0u; hh < HPW; hh++) {
    for (var d = 0u; d < dh4; d++) {
      q[hh * DH4 + d] = pagedQuery(h0 + hh, seq.row + i, d);
      acc[hh * DH4 + d] = vec4<f32>(0.0);
    }
    m[hh] = NO_SCORE;
    l[hh] = 0.0;
  }
  var k: array<vec4<f32>, DH4>;
  for (var j = band.x + lid.x; j < band.y; j += WG) {
    let bias = pagedBias(seq, i, j, band);
    if (bias > MASKED_BELOW) {
      let at = poolRow(seq.table, g, j) * DH4;
      for (var d = 0u; d < dh4; d++) {
        k[d] = loadKey(at + d);
      }
      var p: array<f32, HPW>;
      for (var hh = 0u; hh < HPW; hh++) {
        var dotv = vec4<f32>(0.0);
        for (var d = 0u; d < dh4; d++) {
          dotv += q[hh * DH4 + d] * k[d];
        }
        let score = modifyScore(dotv.x + dotv.y + dotv.z + dotv.w, 0u, h0 + hh, ip, j) + bias * LOG2E;
        let mNew = max(m[hh], score);
        let alpha = exp2(m[hh] - mNew);
        p[hh] = exp2(score - mNew);
        l[hh] = l[hh] * alpha + p[hh];
        m[hh] = mNew;
        for (var d = 0u; d < dh4; d++) {
          acc[hh * DH4 + d] *= alpha;
        }
      }
      for (var d = 0u; d < dh4; d++) {
        let v = loadValue(params.poolV4 + at + d);
        for (var hh = 0u; hh < HPW; hh++) {
          acc[hh * DH4 + d] += p[hh] * v;
        }
      }
    }
  }
  for (var hh = 0u; hh < HPW; hh++) {
    partM[lid.x * HPW + hh] = m[hh];
    partL[lid.x * HPW + hh] = l[hh];
    for (var d = 0u; d < dh4; d++) {
      partAcc[(lid.x * HPW + hh) * DH4 + d] = acc[hh * DH4 + d];
    }
  }
  workgroupBarrier();
  let wg = params.loopWG;  // WG, as a value the compiler does not unroll the merge's loops over
  for (var e = lid.x; e < HPW * DH4; e += WG) {
    let hh = e / DH4;
    let d = e % DH4;
    var M = NO_SCORE;
    for (var w = 0u; w < wg; w++) {
      M = max(M, partM[w * HPW + hh]);
    }
    var L = 0.0;
    var sum = vec4<f32>(0.0);
    for (var w = 0u; w < wg; w++) {
      let mw = partM[w * HPW + hh];
      let alpha = select(exp2(mw - M), 0.0, mw <= NO_SCORE);
      L += partL[w * HPW + hh] * alpha;
      sum += partAcc[(w * HPW + hh) * DH4 + d] * alpha;
    }
    let h = h0 + hh;
    let stats = withSink(M, L, h);
    let scale = select(0.0, stats.z / stats.y, stats.y > 0.0);
    out[(h * params.T + seq.row + i) * DH4 + d] = ST4(sum * scale);
  }
}
