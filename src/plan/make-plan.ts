// The one place a ForwardPlan (types.ts) is put together: each entry point's checks (forward.ts and
// kv-cache.ts through batched.ts, attention.ts, linear.ts, shape.ts) resolve what the call gives and
// pass only that; makePlan fills in every default once (no masks, the plain score, no cache, no GPU inputs, no
// returned buffer, key = value = query) and computes the call's geometry.

import { geometryOf } from './geometry.ts';
import type { ForwardPlan, MaskPlan, ScorePlan } from './types.ts';

/** No mask of any kind, and no window. */
export const NO_MASKS: Readonly<MaskPlan> = Object.freeze({ attnMask: null, attnMaskPerHead: false, keyPaddingMask: null, window: 0, headMask: null });

/** The score options of a call that has none: 1/√Dh, no softcap, sinks or ALiBi; linear attention's ε 1e-6. */
export function plainScore(Dh: number): ScorePlan {
  return { scale: 1 / Math.sqrt(Dh), softcap: 0, sinks: null, alibiSlopes: null, eps: 1e-6 };
}

/**
 * What makePlan needs: the layer, the mode, the sizes and the query; everything else may be left out
 * for its default. `masks` and `score` name only what differs from NO_MASKS and plainScore.
 * The geometry is never given: it follows from the mode and the sizes (varlen: from cuSeqlens).
 */
export type PlanParts = Pick<ForwardPlan, 'layer' | 'mode' | 'batchSize' | 'seqLen' | 'query'> &
  Partial<Omit<ForwardPlan, 'layer' | 'mode' | 'batchSize' | 'seqLen' | 'query' | 'masks' | 'score' | 'geometry'>> & {
    masks?: Partial<MaskPlan>;
    score?: Partial<ScorePlan>;
  };

/** A ForwardPlan from what the call gave, every default filled in. */
export function makePlan(parts: PlanParts): ForwardPlan {
  const { layer, mode, batchSize, seqLen, query } = parts;
  const kvSeqLen = parts.kvSeqLen ?? seqLen;
  const cuSeqlens = parts.cuSeqlens ?? null;
  if ((mode === 'varlen') !== (cuSeqlens !== null)) throw new Error(`makePlan: mode '${mode}' ${cuSeqlens ? 'with' : 'without'} cuSeqlens (an engine bug)`);
  return {
    layer,
    mode,
    batchSize,
    seqLen,
    kvSeqLen,
    isCausal: parts.isCausal ?? false,
    needWeights: parts.needWeights ?? false,
    masks: { ...NO_MASKS, ...parts.masks },
    score: { ...plainScore(layer.headDim), ...parts.score },
    positions: parts.positions ?? null,
    cuSeqlens,
    geometry: cuSeqlens ? geometryOf('varlen', batchSize, seqLen, seqLen, longestSequence(cuSeqlens)) : geometryOf(mode, batchSize, seqLen, kvSeqLen),
    query,
    key: parts.key ?? query,
    value: parts.value ?? query,
    cache: parts.cache ?? null,
    gpu: parts.gpu ?? null,
    returnBuffer: parts.returnBuffer ?? false,
  };
}

/** The most tokens of one sequence in a varlen batch: the largest step between offsets. */
function longestSequence(cuSeqlens: Int32Array): number {
  let longest = 0;
  for (let i = 1; i < cuSeqlens.length; i++) longest = Math.max(longest, cuSeqlens[i] - cuSeqlens[i - 1]);
  return longest;
}
