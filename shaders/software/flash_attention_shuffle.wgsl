// FlashAttention body for CPU drivers with subgroups (lavapipe), appended to flash_attention.wgsl
// (which describes the algorithm, the masks and split-KV). What such a driver does, and what this
// body does about it:
//   - A subgroup is one SIMD register per value (lavapipe: 8 lanes of AVX2), and every load from
//     storage or workgroup memory is done one lane and one element at a time, bounds-checked: a vec4
//     load costs about as much as 24 vec4 fused multiply-adds there, uniform address or not, while a
//     shuffle between lanes costs almost nothing (microbenchmarks: README, Performance). So K
//     and V are read from storage once per subgroup, not once per lane: in each block of `lanes` keys,
//     lane t loads key t's rows of K and V, and every lane takes each key's rows from it by
//     subgroupShuffle. Each lane owns RPI consecutive query rows, so every element loaded serves
//     lanes · RPI rows (the rows body's tiles: RPI rows, and a load from workgroup memory each time).
//   - A private array indexed by a variable is a gather: the host writes out the loops over the head
//     size (DH4, up to Dh 64), the rows (RPI) and the keys of a step (KC), so q, the accumulators, the
//     loaded rows and the row statistics are indexed by constants only.
//   - Keys go KC = 4 a step, with one rescale of the accumulator per step. A step of keys every row of
//     the workgroup sees with nothing to add or change (no padding, attnMask, softcap, ALiBi or
//     scoreMod, inside every row's band) skips the score rule; the others (a causal diagonal, masked
//     keys) apply it to their scores, in loops left as loops (one copy of the rule's code). The loop
//     over blocks of keys is bounded by workgroup-uniform values, so every shuffle is in uniform
//     control flow.
//
// Correct at any subgroup size (4…128, a multiple of 4): the block of keys is the `subgroup_size`
// builtin's count, the lane a key is taken from is a value, and the host makes WG a multiple of the
// adapter's largest subgroup size, so subgroups are whole. SUBGROUP_LANES > 0 makes each run of that
// many lanes act as a subgroup of its own (tests: sizes smaller than the adapter's).
//
// Host guarantees: as flash_attention.wgsl, with `const RPI: u32`, this file's loops over RPI and KC
// written out (src/webgpu/software/unroll.ts), and those over DH4 too up to Dh = 64 (past it they run to
// params.Dh4); WG a multiple of the largest subgroup size; dispatch = (ceil(max Sq / (WG·RPI)), H, B).

override WG: u32 = 32u;              // invocations per workgroup; each owns RPI consecutive query rows
override SUBGROUP_LANES: u32 = 0u;   // 0: the whole subgroup; else runs of this many lanes (tests)
const KC: u32 = 4u;                  // keys per step (a vec4 of scores per row)

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(local_invocation_id) lid: vec3u,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) subgroupSize: u32,
) {
  let lanes = select(subgroupSize, min(subgroupSize, SUBGROUP_LANES), SUBGROUP_LANES > 0u);
  // The first lane of this lane's (emulated) subgroup: 0 unless emulating, a constant then, so the
  // lane each shuffle reads is the same in every lane (the driver's cheap shuffle).
  let base = select(0u, lane / lanes * lanes, SUBGROUP_LANES > 0u);
  let mine = lane - base;  // the key of each block this lane loads
  let BR = WG * RPI;
  let wg = workgroupOf(wid, BR);  // (b, h), the sequence, the split, the first row
  let tileRow = wg.firstRow;
  if (tileRow >= wg.Sq) {
    return;  // a tile past a short sequence: the whole workgroup leaves, uniformly
  }
  let lastRow = min(tileRow + BR, wg.Sq) - 1u;

  // Keys the workgroup's rows see lie in [kStart, kEnd), the same for every invocation (uniform
  // loops below); each row's own band is band[r].
  let keys = splitKeys(vec2<u32>(keyBand(tileRow, wg.Sq, wg.Skv).x, keyBand(lastRow, wg.Sq, wg.Skv).y), wg.split);
  let kStart = keys.x;
  let kEnd = max(keys.y, kStart);  // an empty range stays empty: the counts below are unsigned

  // This invocation's rows firstRow + r (rows past Sq compute a copy of the last row, never stored):
  // q scaled, acc the unnormalised output, m the running max of the scores seen (log2 units), l the
  // running sum of exp2(score − m), the keys the row sees by position, where its attnMask entries
  // start, its position among the keys.
  let firstRow = tileRow + lid.x * RPI;
  var q: array<vec4<f32>, RPI * DH4>;
  var acc: array<vec4<f32>, RPI * DH4>;
  var m: array<f32, RPI>;
  var l: array<f32, RPI>;
  var band: array<vec2<u32>, RPI>;
  var maskRow: array<u32, RPI>;
  var ip: array<i32, RPI>;
  for (var r = 0u; r < RPI; r++) {
    let iq = min(firstRow + r, wg.Sq - 1u);
    let row = wg.qHead + iq;
    for (var d = 0u; d < DH4; d++) {
      q[r * DH4 + d] = scaledQuery(row, d);
      acc[r * DH4 + d] = vec4<f32>(0.0);
    }
    m[r] = NO_SCORE;
    l[r] = 0.0;
    let rule = rowRule(wg.b, wg.h, iq, wg.Sq, wg.Skv);
    band[r] = rule.band;
    maskRow[r] = rule.maskRow;
    ip[r] = rule.ip;
  }

  // Keys every row of the workgroup sees with nothing to add or change: [pStart, pEnd). A step of KC
  // keys inside it skips the score rule.
  let plain = plainScores();
  let pStart = select(kEnd, clamp(keyBand(lastRow, wg.Sq, wg.Skv).x, kStart, kEnd), plain);
  let pEnd = select(kEnd, max(min(kEnd, keyBand(tileRow, wg.Sq, wg.Skv).y), pStart), plain);

  var kr: array<vec4<f32>, DH4>;  // this lane's key of the block: its row of K
  var vr: array<vec4<f32>, DH4>;  // and of V
  for (var j0 = kStart; j0 < kEnd; j0 += lanes) {
    let n = min(lanes, kEnd - j0);  // keys in this block (the last step's keys past it are masked)
    let jm = min(j0 + mine, kEnd - 1u);
    let kRow = params.kBase4 + wg.kvOffset + jm * DH4;
    let vRow = params.vBase4 + wg.kvOffset + jm * DH4;
    for (var d = 0u; d < DH4; d++) {
      kr[d] = loadKey(kRow + d);
      vr[d] = loadValue(vRow + d);
    }
    for (var c0 = 0u; c0 < n; c0 += KC) {
      // q·k of each row for keys j0 + c0 + c, c < KC (from lane base + c0 + c), in component c of s[r].
      var s: array<vec4<f32>, RPI>;
      for (var c = 0u; c < KC; c++) {
        var dots: array<vec4<f32>, RPI>;
        for (var r = 0u; r < RPI; r++) {
          dots[r] = vec4<f32>(0.0);
        }
        for (var d = 0u; d < DH4; d++) {
          let kk = subgroupShuffle(kr[d], base + c0 + c);
          for (var r = 0u; r < RPI; r++) {
            dots[r] = fma(q[r * DH4 + d], kk, dots[r]);
          }
        }
        for (var r = 0u; r < RPI; r++) {
          s[r][c] = dot(dots[r], vec4<f32>(1.0));
        }
      }
      // A step not wholly inside [pStart, pEnd) goes through the score rule: NO_SCORE for the keys a
      // row does not see (and those past the block), the rest modified and biased. Its loops stay
      // loops (one copy of the rule's code: compile time); the condition is uniform.
      let j = j0 + c0;
      if (j < pStart || j + KC > pEnd) {
        for (var r = 0u; r < RPI; r += 1u) {
          for (var c = 0u; c < KC; c += 1u) {
            var score = NO_SCORE;
            let bias = keyBias(wg.b, j + c, band[r], maskRow[r], wg.Skv);
            if (c0 + c < n && bias > MASKED_BELOW) {
              score = modifyScore(s[r][c], wg.b, wg.h, ip[r], j + c) + bias * LOG2E;
            }
            s[r][c] = score;
          }
        }
      }
      // Online softmax over the step: one rescale per row per KC keys; a key of NO_SCORE adds nothing,
      // and a step of none leaves the row as it was.
      var p: array<vec4<f32>, RPI>;
      var alpha: array<f32, RPI>;
      for (var r = 0u; r < RPI; r++) {
        let stepMax = max(max(s[r].x, s[r].y), max(s[r].z, s[r].w));
        let mNew = max(m[r], stepMax);
        alpha[r] = select(1.0, exp2(m[r] - mNew), stepMax > NO_SCORE);  // 0 on the row's first keys, as m is NO_SCORE
        p[r] = select(vec4<f32>(0.0), exp2(s[r] - mNew), s[r] > vec4<f32>(NO_SCORE));
        l[r] = l[r] * alpha[r] + dot(p[r], vec4<f32>(1.0));
        m[r] = mNew;
      }
      for (var d = 0u; d < DH4; d++) {
        let v0 = subgroupShuffle(vr[d], base + c0);
        let v1 = subgroupShuffle(vr[d], base + c0 + 1u);
        let v2 = subgroupShuffle(vr[d], base + c0 + 2u);
        let v3 = subgroupShuffle(vr[d], base + c0 + 3u);
        for (var r = 0u; r < RPI; r++) {
          acc[r * DH4 + d] = fma(vec4<f32>(p[r].w), v3, fma(vec4<f32>(p[r].z), v2, fma(vec4<f32>(p[r].y), v1, fma(vec4<f32>(p[r].x), v0, acc[r * DH4 + d] * alpha[r]))));
        }
      }
    }
  }

  for (var r = 0u; r < RPI; r++) {
    let i = firstRow + r;
    if (i < wg.Sq) {
      let o = finishRow(i, wg.qHead, wg.split, m[r], l[r], wg.b, wg.h);
      for (var d = 0u; d < DH4; d++) {
        out[o.row * DH4 + d] = ST4(acc[r * DH4 + d] * o.scale);
      }
    }
  }
}
