// The benchmark's FLOP count (demo/bench, scripts/bench-roofline.ts, scripts/gpu/bench-gpu.ts); not part of the package.
// FLOPs of one multi-head self-attention forward, as the FlashAttention benchmarks count them:
// QKV projection 6·B·S·E², scores 2·B·S²·E, probabilities·V 2·B·S²·E, output projection 2·B·S·E².
// Causal attention counts half of the S² terms. Softmax and biases are not counted.
// (With grouped-query heads the K/V projection is smaller; this counts the MHA figure, the usual convention.)
// With a KV cache of `cacheLen` past positions (a decode step), the S new rows attend over cacheLen + S
// keys: row i over cacheLen + i + 1 of them when causal, all cacheLen + S otherwise.

/** The two terms: projections 8·B·S·E² (QKV and output), attention 4·B·S²·E (halved when causal; see above with a cache). */
export function attentionFlopTerms(B: number, S: number, E: number, isCausal: boolean, cacheLen = 0): { projections: number; attention: number } {
  const projections = 8 * B * S * E * E;
  if (cacheLen > 0) {
    const keysSeen = isCausal ? S * cacheLen + (S * (S + 1)) / 2 : S * (cacheLen + S);
    return { projections, attention: 4 * B * keysSeen * E };
  }
  const attention = 4 * B * S * S * E;
  return { projections, attention: isCausal ? attention / 2 : attention };
}

export function attentionFlops(B: number, S: number, E: number, isCausal: boolean, cacheLen = 0): number {
  const { projections, attention } = attentionFlopTerms(B, S, E, isCausal, cacheLen);
  return projections + attention;
}
