// A plan of a call's shape without its data: what engine.warmup() and engine.tune() prepare kernels
// for (pipelines and tuning depend on sizes, never on values).

import { InvalidArgumentError } from '../errors.ts';
import { describe, rejectUnknownKeys, requireBoolean, requireObject, requirePositiveInteger } from '../validate.ts';
import { resolvePositions } from './head-transform.ts';
import { makePlan } from './make-plan.ts';
import type { ForwardPlan, LayerSpec } from './types.ts';

const NO_DATA = new Float32Array(0);

/** Self-attention of batchSize × seqLen tokens over kvSeqLen keys (more than seqLen: a KV cache's, or cross-attention's). */
export function shapePlan(spec: LayerSpec, shape: { batchSize: number; seqLen: number; kvSeqLen: number; isCausal: boolean }): ForwardPlan {
  const { batchSize, seqLen, kvSeqLen, isCausal } = shape;
  const mode = kvSeqLen === seqLen ? 'self' : 'cross';
  return makePlan({
    layer: spec,
    mode,
    positions: spec.rotary ? resolvePositions('AttentionEngine.warmup', spec.rotary, { batchSize, seqLen, start: kvSeqLen - seqLen, cuSeqlens: null }, undefined) : null,
    batchSize,
    seqLen,
    kvSeqLen,
    isCausal,
    query: NO_DATA,
  });
}

/**
 * engine.warmup's and engine.tune's `calls`: each a layer of this engine (`specOf` knows it) and a
 * shape. Checked like every argument, before any GPU work. `known`: WarmupCall's keys (engine.ts
 * owns that type, which names the layer class, and so its table).
 */
export function resolveShapeCalls(where: string, calls: unknown, known: readonly string[], specOf: (layer: unknown) => LayerSpec | undefined): ForwardPlan[] {
  if (!Array.isArray(calls)) {
    throw new InvalidArgumentError({ where, argument: 'calls', expected: 'an array of { layer, seqLen, batchSize?, kvSeqLen?, isCausal? }', given: describe(calls) });
  }
  return calls.map((call, i) => {
    const argument = `calls[${i}]`;
    const c = requireObject(where, argument, call, 'Pass { layer, seqLen } (batchSize, kvSeqLen and isCausal optional).');
    rejectUnknownKeys(where, argument, c, known);
    const spec = specOf(c.layer);
    if (!spec) {
      throw new InvalidArgumentError({
        where,
        argument: `${argument}.layer`,
        expected: 'a live layer made by this engine (engine.createMultiHeadAttention)',
        given: describe(c.layer),
        fix: 'Pass a layer of this engine that has not been disposed.',
      });
    }
    const seqLen = requirePositiveInteger(where, `${argument}.seqLen`, c.seqLen);
    return shapePlan(spec, {
      batchSize: c.batchSize === undefined ? 1 : requirePositiveInteger(where, `${argument}.batchSize`, c.batchSize),
      seqLen,
      kvSeqLen: c.kvSeqLen === undefined ? seqLen : requirePositiveInteger(where, `${argument}.kvSeqLen`, c.kvSeqLen),
      isCausal: c.isCausal === undefined ? false : requireBoolean(where, `${argument}.isCausal`, c.isCausal),
    });
  });
}
