// FlashAttention body for CPU drivers whose JIT neither unrolls loops nor skips untaken branches
// (SwiftShader), appended to flash_attention.wgsl (which describes the algorithm, the masks and
// split-KV). What such a driver does, and what this body does about it:
//   - It runs 4 invocations in the lanes of a SIMD register, and a workgroup barrier switches every
//     invocation's context: K and V are read straight from storage (no workgroup tiles, no barriers),
//     and each invocation owns RPI consecutive query rows, so every K and V element read serves RPI rows.
//   - A private array indexed by a variable is a gather (a store into it a scatter): the host writes
//     out the loops over the head size (DH4) and the rows (RPI), so q, the accumulators and the row
//     statistics are indexed by constants only. (The loops that stay loops say why: compile time.)
//   - Every instruction of both sides of a branch runs, masked: the keys that every row of the
//     invocation sees with nothing to add or change (no padding, attnMask, softcap, ALiBi or scoreMod)
//     go through a loop that holds none of the score rule's code, KC = 4 keys a step (a vec4 of scores
//     per row, one rescale of the accumulator per step); the others (a causal diagonal, masked keys)
//     through a second loop that applies the rule, one key at a time.
//
// Host guarantees: as flash_attention.wgsl, with `const RPI: u32` (rows per invocation) and this
// file's loops over RPI written out (src/webgpu/software/unroll.ts), and those over DH4 too up to Dh = 64
// (past it they run to params.Dh4: compile time); dispatch = (ceil(max Sq / (WG·RPI)), H, B).

override WG: u32 = 16u;  // invocations per workgroup; each owns RPI consecutive query rows
const KC: u32 = 4u;      // keys per step of the plain loop (a vec4 of scores per row)

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let BR = WG * RPI;
  let h = wid.y;
  let b = wid.z;
  let sequence = sequenceOf(b, h);
  let Sq = sequence.Sq;
  let Skv = sequence.Skv;
  let qHead = sequence.qHead;
  let kvOffset = sequence.kvHeadRow * DH4;
  let split = wid.x;
  let firstRow = select(wid.x * BR, 0u, params.splitChunk > 0u) + lid.x * RPI;  // this invocation's first row
  if (firstRow >= Sq) {
    return;  // no barriers below: an invocation past the last row may leave alone
  }

  // Keys this invocation's rows see lie in [kStart, kEnd); each row's own band is band[r].
  let keys = splitKeys(vec2<u32>(keyBand(firstRow, Sq, Skv).x, keyBand(min(firstRow + RPI, Sq) - 1u, Sq, Skv).y), split);
  let kStart = keys.x;
  let kEnd = max(keys.y, kStart);  // an empty range stays empty: the counts below are unsigned

  // Rows firstRow + r (rows past Sq compute a copy of the last row, never stored): q scaled, acc the
  // unnormalised output, m the running max of the scores seen (log2 units), l the running sum of
  // exp2(score − m), the keys the row sees by position, where its attnMask entries start, its
  // position among the keys.
  var q: array<vec4<f32>, RPI * DH4>;
  var acc: array<vec4<f32>, RPI * DH4>;
  var m: array<f32, RPI>;
  var l: array<f32, RPI>;
  var band: array<vec2<u32>, RPI>;
  var maskRow: array<u32, RPI>;
  var ip: array<i32, RPI>;
  for (var r = 0u; r < RPI; r++) {
    let iq = min(firstRow + r, Sq - 1u);
    let row = qHead + iq;
    for (var d = 0u; d < DH4; d++) {
      q[r * DH4 + d] = scaledQuery(row, d);
      acc[r * DH4 + d] = vec4<f32>(0.0);
    }
    m[r] = NO_SCORE;
    l[r] = 0.0;
    let rule = rowRule(b, h, iq, Sq, Skv);
    band[r] = rule.band;
    maskRow[r] = rule.maskRow;
    ip[r] = rule.ip;
  }

  // Keys every row of this invocation sees with nothing to add or change ("plain": no padding, attnMask,
  // softcap, ALiBi or scoreMod, and inside each row's band), in whole steps of KC: [pStart, pEnd).
  // The rest, [kStart, pStart) and [pEnd, kEnd), go through the score rule one key at a time.
  let plain = plainScores();
  let pStart = select(kStart, clamp(keyBand(min(firstRow + RPI, Sq) - 1u, Sq, Skv).x, kStart, kEnd), plain);
  let pEnd = select(pStart, pStart + (max(min(kEnd, keyBand(firstRow, Sq, Skv).y), pStart) - pStart) / KC * KC, plain);

  for (var j = pStart; j < pEnd; j += KC) {
    // q·k of each row for the step's keys, key c in component c of s[r]. The loop over c is not
    // written out, and its bound is not a constant, so no compiler unrolls it (the code stays small
    // enough for lavapipe's LLVM to compile in seconds); within it every K element read serves RPI rows.
    var s: array<vec4<f32>, RPI>;
    for (var r = 0u; r < RPI; r++) {
      s[r] = vec4<f32>(0.0);
    }
    for (var c = 0u; c < min(KC, pEnd - j); c++) {
      let kRow = params.kBase4 + kvOffset + (j + c) * DH4;
      var dots: array<vec4<f32>, RPI>;
      for (var r = 0u; r < RPI; r++) {
        dots[r] = vec4<f32>(0.0);
      }
      for (var d = 0u; d < DH4; d++) {
        let kk = loadKey(kRow + d);
        for (var r = 0u; r < RPI; r++) {
          dots[r] += q[r * DH4 + d] * kk;
        }
      }
      for (var r = 0u; r < RPI; r++) {
        s[r][c] = dot(dots[r], vec4<f32>(1.0));
      }
    }
    // Online softmax over the step: one rescale per row per KC keys.
    var p: array<vec4<f32>, RPI>;
    var alpha: array<f32, RPI>;
    for (var r = 0u; r < RPI; r++) {
      let mNew = max(m[r], max(max(s[r].x, s[r].y), max(s[r].z, s[r].w)));
      alpha[r] = exp2(m[r] - mNew);  // 0 on the row's first keys, as m is NO_SCORE
      p[r] = exp2(s[r] - mNew);
      l[r] = l[r] * alpha[r] + dot(p[r], vec4<f32>(1.0));
      m[r] = mNew;
    }
    let vRow = params.vBase4 + kvOffset + j * DH4;
    for (var d = 0u; d < DH4; d++) {
      let v0 = loadValue(vRow + d);
      let v1 = loadValue(vRow + DH4 + d);
      let v2 = loadValue(vRow + 2u * DH4 + d);
      let v3 = loadValue(vRow + 3u * DH4 + d);
      for (var r = 0u; r < RPI; r++) {
        acc[r * DH4 + d] = acc[r * DH4 + d] * alpha[r] + p[r].x * v0 + p[r].y * v1 + p[r].z * v2 + p[r].w * v3;
      }
    }
  }

  // The other keys, one at a time through the score rule. Its loops over the head size run to
  // params.Dh4 (= DH4), which no compiler unrolls: this loop's code stays small (compile time), as it
  // sees few keys unless a mask or score option applies to them all.
  let before = pStart - kStart;
  let others = before + kEnd - pEnd;
  for (var t = 0u; t < others; t++) {
    let j = select(pEnd + t - before, kStart + t, t < before);
    let kRow = params.kBase4 + kvOffset + j * DH4;
    var dots: array<vec4<f32>, RPI>;
    var p: array<f32, RPI>;
    var alpha: array<f32, RPI>;
    for (var r = 0u; r < RPI; r++) {
      dots[r] = vec4<f32>(0.0);
      p[r] = 0.0;
      alpha[r] = 1.0;
    }
    for (var d = 0u; d < params.Dh4; d++) {
      let kk = loadKey(kRow + d);
      for (var r = 0u; r < RPI; r++) {
        dots[r] += q[r * DH4 + d] * kk;
      }
    }
    // Each row's probability of key j (0 where it does not see it), its max raised first if need be.
    for (var r = 0u; r < RPI; r++) {
      let bias = keyBias(b, j, band[r], maskRow[r], Skv);
      if (bias > MASKED_BELOW) {
        let score = modifyScore(dots[r].x + dots[r].y + dots[r].z + dots[r].w, b, h, ip[r], j) + bias * LOG2E;
        let mNew = max(m[r], score);
        alpha[r] = exp2(m[r] - mNew);  // 0 on the row's first key, as m is NO_SCORE
        p[r] = exp2(score - mNew);
        l[r] = l[r] * alpha[r] + p[r];
        m[r] = mNew;
      }
    }
    let vRow = params.vBase4 + kvOffset + j * DH4;
    for (var d = 0u; d < params.Dh4; d++) {
      let vv = loadValue(vRow + d);
      for (var r = 0u; r < RPI; r++) {
        acc[r * DH4 + d] = acc[r * DH4 + d] * alpha[r] + p[r] * vv;
      }
    }
  }

  for (var r = 0u; r < RPI; r++) {
    let i = firstRow + r;
    if (i < Sq) {
      let o = finishRow(i, qHead, split, m[r], l[r], b, h);
      for (var d = 0u; d < DH4; d++) {
        out[o.row * DH4 + d] = ST4(acc[r * DH4 + d] * o.scale);
      }
    }
  }
}
