// The plan of a batched forward (query [B, S, E]; self- or cross-attention, or onto a KV cache): the
// part forward.ts and kv-cache.ts resolve alike (rotary positions, masks, score options), once.

import { clampWindow, resolveMasks, resolveScore } from './checks.ts';
import { resolvePositions } from './head-transform.ts';
import { makePlan, type PlanParts } from './make-plan.ts';
import type { ForwardPlan, LayerSpec } from './types.ts';

/** What the caller resolved of a batched call: its sizes (`start`: the positions already cached, 0 without a cache) and flags. */
export interface BatchedCall {
  batchSize: number;
  seqLen: number;
  kvSeqLen: number;
  start: number;
  isCausal: boolean;
  needWeights: boolean;
  /** resolveWindow's value, clamped here to the call's sizes. */
  window: number;
}

/** The ForwardPlan of a batched call: `o`'s positions, masks and score options checked against the call's sizes, then `rest` (mode, inputs, cache). */
export function makeBatchedPlan(
  where: string,
  spec: LayerSpec,
  o: Record<string, unknown>,
  call: BatchedCall,
  rest: Pick<PlanParts, 'mode' | 'query'> & Pick<Partial<ForwardPlan>, 'key' | 'value' | 'gpu' | 'returnBuffer' | 'cache'>,
): ForwardPlan {
  const { batchSize, seqLen, kvSeqLen, start, isCausal, needWeights, window } = call;
  const H = spec.numHeads;
  return makePlan({
    layer: spec,
    positions: spec.rotary ? resolvePositions(where, spec.rotary, { batchSize, seqLen, start, cuSeqlens: null }, o.positionIds) : null,
    batchSize,
    seqLen,
    kvSeqLen,
    isCausal,
    needWeights,
    masks: resolveMasks(where, o, batchSize, H, seqLen, kvSeqLen, clampWindow(window, seqLen, kvSeqLen)),
    score: resolveScore(where, o, H, spec.headDim),
    ...rest,
  });
}
