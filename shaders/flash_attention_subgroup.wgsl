// FlashAttention body in which the lanes of a subgroup share one query row, appended to
// flash_attention.wgsl (which describes the algorithm, the masks and split-KV); needs the `subgroups`
// feature (the host prepends `enable subgroups;`).
//
// A workgroup covers BR query rows. Its subgroups take rows one at a time from a workgroup counter
// (atomicAdd by one lane, broadcast to the others), so nothing depends on how many subgroups there
// are or which invocations form them. The lanes of a subgroup split the row's keys among themselves
// (lane t of n takes keys t, t + n, t + 2n, …, read straight from K and V: no workgroup tiles and no
// barriers), each keeping its own online softmax (running max m, sum l, accumulator). Then the row's
// statistics are subgroup reductions: M = subgroupMax(m), L = subgroupAdd(l · exp2(m − M)), and the
// output subgroupAdd(acc · exp2(m − M)): the merge of decode_merge.wgsl, inside a subgroup.
//
// Correct at any subgroup size (4…128) and with partial subgroups: a lane's place among the keys is
// its rank among the subgroup's active lanes (subgroupExclusiveAdd(1)), and the stride the number of
// them (subgroupAdd(1)), never `subgroup_size`, whose lanes need not all be present. SUBGROUP_LANES
// > 0 makes only the first that many lanes take keys (the others contribute nothing to the
// reductions), as if the subgroup were that small: the tests run the arithmetic of other sizes.
//
// Subgroup operations follow a row claimed through an atomic, which the uniformity analysis cannot
// see is the same across the subgroup (it is: one lane claims, subgroupBroadcastFirst shares it), hence
// the diagnostic attribute on main. Host guarantees: as flash_attention.wgsl, with BC a multiple used
// only for split-KV chunks; dispatch = (ceil(max Sq / BR), H, B).

override WG: u32 = 64u;             // invocations per workgroup
override BR: u32 = 16u;             // query rows per workgroup
override SUBGROUP_LANES: u32 = 0u;  // 0: every active lane takes keys; else at most this many (tests)

var<workgroup> nextRow: atomic<u32>;  // rows of the workgroup's BR claimed so far (zero-initialised)

@compute @workgroup_size(WG) @diagnostic(off, subgroup_uniformity)
fn main(@builtin(workgroup_id) wid: vec3u) {
  let wg = workgroupOf(wid, BR);  // (b, h), the sequence, the split, the first row
  let firstRow = wg.firstRow;
  if (firstRow >= wg.Sq) {
    return;  // a tile past a short sequence: the whole workgroup leaves, uniformly
  }
  let rank = subgroupExclusiveAdd(1u);  // this lane's place among the subgroup's active lanes
  let count = subgroupAdd(1u);          // how many are active
  let lanes = select(count, min(count, SUBGROUP_LANES), SUBGROUP_LANES > 0u);
  let takesKeys = rank < lanes;

  loop {
    var claimed = 0u;
    if (subgroupElect()) {
      claimed = atomicAdd(&nextRow, 1u);
    }
    let r = subgroupBroadcastFirst(claimed);
    let i = firstRow + r;  // this subgroup's query row
    if (r >= BR || i >= wg.Sq) {
      break;  // claims only grow: no row is left for this subgroup
    }

    // Keys this row sees: its band (score_rule.wgsl), within this split's keys under split-KV.
    let rule = rowRule(wg.b, wg.h, i, wg.Sq, wg.Skv);
    let band = rule.band;
    let keys = splitKeys(band, wg.split);
    let kStart = keys.x;
    let kEnd = keys.y;
    var q: array<vec4<f32>, DH4>;
    var acc: array<vec4<f32>, DH4>;
    for (var d = 0u; d < DH4; d++) {
      q[d] = scaledQuery(wg.qHead + i, d);
      acc[d] = vec4<f32>(0.0);
    }
    var m = NO_SCORE;  // this lane's running max (log2 units)
    var l = 0.0;       // this lane's running sum of exp2(score − m)
    let maskRow = rule.maskRow;
    let ip = rule.ip;
    for (var j = select(kEnd, kStart + rank, takesKeys); j < kEnd; j += lanes) {
      let bias = keyBias(wg.b, j, band, maskRow, wg.Skv);
      if (bias > MASKED_BELOW) {
        let kRow = params.kBase4 + wg.kvOffset + j * DH4;
        var dotv = vec4<f32>(0.0);
        for (var d = 0u; d < DH4; d++) {
          dotv += q[d] * loadKey(kRow + d);
        }
        let score = modifyScore(dotv.x + dotv.y + dotv.z + dotv.w, wg.b, wg.h, ip, j) + bias * LOG2E;
        let mNew = max(m, score);
        let alpha = exp2(m - mNew);  // 1 while the max holds; 0 on this lane's first key, as m is NO_SCORE
        let p = exp2(score - mNew);
        l = l * alpha + p;
        let vRow = params.vBase4 + wg.kvOffset + j * DH4;
        for (var d = 0u; d < DH4; d++) {
          acc[d] = acc[d] * alpha + p * loadValue(vRow + d);
        }
        m = mNew;
      }
    }

    // The row's statistics and output: the lanes' online softmaxes merged by subgroup reductions.
    let rowMax = subgroupMax(m);
    let factor = select(0.0, exp2(m - rowMax), m > NO_SCORE);  // a lane that saw no key adds nothing
    let rowSum = subgroupAdd(l * factor);
    for (var d = 0u; d < DH4; d++) {
      acc[d] = subgroupAdd(acc[d] * factor);
    }
    if (subgroupElect()) {
      let o = finishRow(i, wg.qHead, wg.split, rowMax, rowSum, wg.b, wg.h);
      for (var d = 0u; d < DH4; d++) {
        out[o.row * DH4 + d] = ST4(acc[d] * o.scale);
      }
    }
  }
}
