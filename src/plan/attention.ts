// engine.scaledDotProductAttention's checks: the attention kernel alone on tensors the caller projected.

import { InvalidArgumentError } from '../errors.ts';
import { SDPA_KEYS } from '../option-keys.ts';
import type { ScaledDotProductAttentionOptions } from '../types.ts';
import { describe, rejectUnknownKeys, requireBoolean, requireObject } from '../validate.ts';
import { clampWindow, refuseDropout, resolveHeadShape, resolveMasks, resolveOutputType, resolveScore, resolveScoreMod, resolveWindow, tensorInput } from './checks.ts';
import { resolvePositions, resolveRotary } from './head-transform.ts';
import { makePlan } from './make-plan.ts';
import type { ForwardPlan, LayerSpec } from './types.ts';

/**
 * engine.scaledDotProductAttention: the attention kernel alone on projected tensors, query
 * [B, H, Sq, Dh], key and value [B, G, Skv, Dh]. Planned as a cross-attention "layer" of width H·Dh
 * whose projections are skipped.
 */
export function resolveAttentionPlan(query: unknown, key: unknown, value: unknown, options: unknown): ForwardPlan {
  const where = 'scaledDotProductAttention';
  const o = requireObject(where, 'options', options, 'Pass { batchSize, numHeads, seqLen, headDim }.') as Partial<ScaledDotProductAttentionOptions> &
    Record<string, unknown>;
  rejectUnknownKeys(where, 'options', o, SDPA_KEYS);
  const { B, H, G, Sq, Skv, Dh } = resolveHeadShape(where, o);
  const isCausal = o.isCausal === undefined ? false : requireBoolean(where, 'options.isCausal', o.isCausal);
  const needWeights = o.needWeights === undefined ? false : requireBoolean(where, 'options.needWeights', o.needWeights);
  refuseDropout(where, 'options.dropout', o.dropout);
  resolveOutputType(where, o); // read by engine.scaledDotProductAttention once the call has run
  // Float32Arrays (or half arrays, widened), or GPUBuffers on the engine's device (their sizes are checked by the WebGPU backend, which knows the element size).
  const q = tensorInput(where, 'query', query, B * H * Sq * Dh, `[B, H, Sq, Dh] = [${B}, ${H}, ${Sq}, ${Dh}] = ${B * H * Sq * Dh}`);
  const k = tensorInput(where, 'key', key, B * G * Skv * Dh, `[B, G, Skv, Dh] = [${B}, ${G}, ${Skv}, ${Dh}] = ${B * G * Skv * Dh}`);
  const v = tensorInput(where, 'value', value, B * G * Skv * Dh, `[B, G, Skv, Dh] = [${B}, ${G}, ${Skv}, ${Dh}] = ${B * G * Skv * Dh}`);
  const returnBuffer = o.returnBuffer === undefined ? false : requireBoolean(where, 'options.returnBuffer', o.returnBuffer);
  const E = H * Dh;
  // Rotary here rotates the queries and the last Sq keys at their positions (default Skv − Sq + i);
  // the keys before them are taken as already rotated (ONNX Runtime's GroupQueryAttention, Hugging Face's past_key_values).
  const rotary = resolveRotary(where, o.rotary, Dh, 'options.rotary');
  if (rotary && Skv < Sq) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvSeqLen',
      expected: `at least seqLen (${Sq}) with rotary: the last Sq keys are the queries' own`,
      given: String(Skv),
    });
  }
  if (o.positionIds !== undefined && !rotary) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.positionIds',
      expected: 'left out without options.rotary',
      given: describe(o.positionIds),
      fix: 'positionIds place tokens for rotary embeddings.',
    });
  }
  const layer: LayerSpec = {
    embedDim: E,
    numHeads: H,
    numKvHeads: G,
    headDim: Dh,
    kdim: E,
    vdim: E,
    bias: false,
    rotary,
    qkNorm: null,
    scoreMod: resolveScoreMod(where, 'options.scoreMod', o.scoreMod),
    attention: 'softmax',
  };
  return makePlan({
    layer,
    mode: 'cross',
    positions: rotary ? resolvePositions(where, rotary, { batchSize: B, seqLen: Sq, start: Skv - Sq, cuSeqlens: null }, o.positionIds) : null,
    batchSize: B,
    seqLen: Sq,
    kvSeqLen: Skv,
    isCausal,
    needWeights,
    masks: resolveMasks(where, o, B, H, Sq, Skv, clampWindow(resolveWindow(where, o.window), Sq, Skv)),
    score: resolveScore(where, o, H, Dh),
    query: q.host,
    key: k.host,
    value: v.host,
    gpu: q.gpu || k.gpu || v.gpu ? { query: q.gpu, key: k.gpu, value: v.gpu } : null,
    returnBuffer,
  });
}
