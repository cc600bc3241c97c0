// The score rule in float64: which keys query row i sees, and what is added to the score of a key it
// sees. The twin of shaders/score_rule.wgsl (the GPU kernels' one copy of the rule); a new mask or
// score modification changes these two places, the plan's checks (src/plan/) and a test.
//
// Row i of a sequence of Sq queries and Skv keys is aligned to the end of the keys, i' = i + Skv − Sq,
// and sees key j when all of these hold:
//   causal:         j ≤ i'
//   window w > 0:   i' − w < j ≤ i'
//   key padding:    keyPaddingMask[b, j] == 0
//   attnMask:       mask[(b·H + h, or 0), i, j] is not −Infinity; its value is added to the score
//
// A score is made as: s = scale·q·k (scale: the caller's, else 1/√Dh); softcap: s ← c·tanh(s / c);
// ALiBi: s ← s − slope[h]·|i' − j| (modifyScore); then the key's bias (keyBias: attnMask, or −∞).
// Sinks join the softmax in attention() (reference.ts): one more logit per head, value 0.

import type { ForwardPlan } from '../plan/index.ts';

/** The keys row i may see by position alone (causal, window): first … last, inclusive (empty when last < first). */
export function keyBand(plan: ForwardPlan, i: number, Sq: number, Skv: number): { first: number; last: number } {
  const { window } = plan.masks;
  const ip = i + Skv - Sq;
  return {
    first: window > 0 ? ip - window + 1 : 0,
    last: plan.isCausal || window > 0 ? ip : Skv - 1,
  };
}

/**
 * What the rule adds to the score q·k/√Dh of key j for row i of head h of sequence b: 0 or the
 * attnMask value when the row sees j, −Infinity when it does not (so that, as in PyTorch, a NaN score
 * of a masked key still poisons the row).
 */
export function keyBias(plan: ForwardPlan, band: { first: number; last: number }, b: number, h: number, i: number, j: number, Sq: number, Skv: number): number {
  const { attnMask, attnMaskPerHead, keyPaddingMask } = plan.masks;
  if (j < band.first || j > band.last || keyPaddingMask?.[b * Skv + j]) return -Infinity;
  if (!attnMask) return 0;
  return attnMask[((attnMaskPerHead ? b * plan.layer.numHeads + h : 0) * Sq + i) * Skv + j];
}

/** What the head mask multiplies head h's probabilities by: 1 without one. */
export function headScale(plan: ForwardPlan, b: number, h: number): number {
  return plan.masks.headMask ? plan.masks.headMask[b * plan.layer.numHeads + h] : 1;
}

/** The scaled score s = scale·q·k of key j for row i' (aligned) of head h of batch b: soft-capped, with its ALiBi term, then the custom scoreMod. */
export function modifyScore(plan: ForwardPlan, s: number, b: number, h: number, ip: number, j: number): number {
  const { softcap, alibiSlopes } = plan.score;
  let score = softcap > 0 ? softcap * Math.tanh(s / softcap) : s;
  if (alibiSlopes) score -= alibiSlopes[h] * Math.abs(ip - j);
  if (plan.layer.scoreMod) score = plan.layer.scoreMod.reference(score, b, h, Math.max(ip, 0), j);
  return score;
}
