// FlashAttention body with RPI query rows per invocation, appended to flash_attention.wgsl (which
// describes the algorithm, the masks and split-KV). Each invocation owns rows firstRow + lid.x + r·WG,
// r < RPI: every K element read from the tile feeds RPI dot products and every V element RPI
// accumulators, so a tile's loads are shared by RPI rows. Per-row state lives in arrays of RPI, which
// drivers that unroll constant loops (lavapipe) keep in registers, where it beats one row per
// invocation (figures: README, Performance). Drivers that do not unroll (SwiftShader's JIT)
// prefer flash_attention_row.wgsl; the tuner measures which.

override WG: u32 = 32u;  // invocations per workgroup; each owns RPI query rows, so BR = WG·RPI rows per workgroup

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let BR = WG * RPI;
  let wg = workgroupOf(wid, BR);  // (b, h), the sequence, the split, the first row
  let firstRow = wg.firstRow;
  if (firstRow >= wg.Sq) {
    return;  // a tile past a short sequence: the whole workgroup leaves, uniformly
  }

  // Keys the workgroup's rows see lie in [tileStart, tileEnd), the same for every invocation, so
  // the loop (and its barriers) is uniform; each row's own band is band[r] (score_rule.wgsl).
  let tiles = splitKeys(vec2<u32>(keyBand(firstRow, wg.Sq, wg.Skv).x / BC * BC, keyBand(min(firstRow + BR, wg.Sq) - 1u, wg.Sq, wg.Skv).y), wg.split);
  let tileStart = tiles.x;
  let tileEnd = tiles.y;

  // This invocation's rows firstRow + lid.x + r·WG (rows past Sq compute a copy of the last row,
  // never stored): q scaled, acc the unnormalised output, m the running max of the scores seen (log2
  // units), l the running sum of exp2(score − m), the keys the row sees by position, and where its
  // attnMask entries start.
  var q: array<vec4<f32>, RPI * DH4>;
  var acc: array<vec4<f32>, RPI * DH4>;
  var m: array<f32, RPI>;
  var l: array<f32, RPI>;
  var band: array<vec2<u32>, RPI>;
  var maskRow: array<u32, RPI>;
  var ip: array<i32, RPI>;  // each row's position among the keys
  for (var r = 0u; r < RPI; r++) {
    let iq = min(firstRow + lid.x + r * WG, wg.Sq - 1u);
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

  var s: array<f32, RPI * BC>;  // this tile's scores, s[r·BC + c]
  for (var j0 = tileStart; j0 < tileEnd; j0 += BC) {
    stageTile(j0, wg.Skv, wg.kvOffset, lid.x, WG);
    workgroupBarrier();

    // Scores of the keys of this tile each row sees; NO_SCORE for the others. Each K element read
    // from the tile serves all RPI rows.
    var tileMax: array<f32, RPI>;
    for (var r = 0u; r < RPI; r++) {
      tileMax[r] = NO_SCORE;
    }
    for (var c = 0u; c < BC; c++) {
      let j = j0 + c;
      // Zeroed explicitly: lavapipe kept the previous iteration's values in a loop-local array
      // declared without an initializer (WGSL says each declaration zero-initialises it).
      var dotv: array<vec4<f32>, RPI>;
      for (var r = 0u; r < RPI; r++) {
        dotv[r] = vec4<f32>(0.0);
      }
      for (var d = 0u; d < DH4; d++) {
        let kk = kTile[c * DH4 + d];
        for (var r = 0u; r < RPI; r++) {
          dotv[r] += q[r * DH4 + d] * kk;
        }
      }
      for (var r = 0u; r < RPI; r++) {
        let bias = keyBias(wg.b, j, band[r], maskRow[r], wg.Skv);
        var score = NO_SCORE;
        if (bias > MASKED_BELOW) {
          score = modifyScore(dotv[r].x + dotv[r].y + dotv[r].z + dotv[r].w, wg.b, wg.h, ip[r], j) + bias * LOG2E;
          tileMax[r] = max(tileMax[r], score);
        }
        s[r * BC + c] = score;
      }
    }
    // Online softmax: rescale by exp2(m_old − m_new) where the max grew, then add this tile's keys.
    var mNew: array<f32, RPI>;
    for (var r = 0u; r < RPI; r++) {
      mNew[r] = max(m[r], tileMax[r]);
      let alpha = select(1.0, exp2(m[r] - mNew[r]), tileMax[r] > NO_SCORE);  // 0 on a row's first visible tile
      l[r] *= alpha;
      for (var d = 0u; d < DH4; d++) {
        acc[r * DH4 + d] *= alpha;
      }
    }
    for (var c = 0u; c < BC; c++) {
      var p: array<f32, RPI>;  // every element is assigned below before it is read
      var seen = false;
      for (var r = 0u; r < RPI; r++) {
        let score = s[r * BC + c];
        p[r] = select(0.0, exp2(score - mNew[r]), score > NO_SCORE);
        l[r] += p[r];
        seen = seen || score > NO_SCORE;
      }
      if (seen) {
        for (var d = 0u; d < DH4; d++) {
          let vv = vTile[c * DH4 + d];
          for (var r = 0u; r < RPI; r++) {
            acc[r * DH4 + d] += p[r] * vv;
          }
        }
      }
    }
    for (var r = 0u; r < RPI; r++) {
      m[r] = mNew[r];
    }
    workgroupBarrier();
  }

  for (var r = 0u; r < RPI; r++) {
    let i = firstRow + lid.x + r * WG;
    if (i < wg.Sq) {
      let o = finishRow(i, wg.qHead, wg.split, m[r], l[r], wg.b, wg.h);
      for (var d = 0u; d < DH4; d++) {
        out[o.row * DH4 + d] = ST4(acc[r * DH4 + d] * o.scale);
      }
    }
  }
}
