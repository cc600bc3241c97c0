// A layer run as a model decodes, for the e2e pages (harness.ts, wasm-threads.ts): a prefill into a
// new KV cache, then one-token decode steps, the outputs put back in token order.

import type { KvCacheDtype, MultiHeadAttention } from '../src/index.ts';

/**
 * The output [B, S, E] of `layer` on x [B, S, E]: the first S − steps tokens of each sequence as one
 * prefill into a new KV cache (of `cacheDtype`, or the backend's default), then the last `steps` as
 * one-token decode steps over it.
 */
export async function prefillThenDecode(
  layer: MultiHeadAttention,
  x: Float32Array,
  B: number,
  S: number,
  E: number,
  steps: number,
  isCausal: boolean,
  cacheDtype?: KvCacheDtype,
): Promise<Float32Array> {
  const out = new Float32Array(B * S * E);
  const cache = layer.createKvCache({ batchSize: B, maxSeqLen: S, ...(cacheDtype ? { dtype: cacheDtype } : {}) });
  try {
    const span = async (t0: number, t1: number) => {
      const rows = new Float32Array(B * (t1 - t0) * E);
      for (let b = 0; b < B; b++) rows.set(x.subarray((b * S + t0) * E, (b * S + t1) * E), b * (t1 - t0) * E);
      const y = (await layer.forward(rows, { batchSize: B, seqLen: t1 - t0, kvCache: cache, isCausal })).output;
      for (let b = 0; b < B; b++) out.set(y.subarray(b * (t1 - t0) * E, (b + 1) * (t1 - t0) * E), (b * S + t0) * E);
    };
    await span(0, S - steps);
    for (let t = S - steps; t < S; t++) await span(t, t + 1);
  } finally {
    cache.dispose();
  }
  return out;
}
