// Linear attention's checks: engine.linearAttention's arguments, and what a layer with
// config.attention = 'linear' refuses in a forward call (options that only mean something for a
// softmax over scores).

import { InvalidArgumentError } from '../errors.ts';
import { LINEAR_KEYS } from '../option-keys.ts';
import type { ForwardOptions, LinearAttentionOptions } from '../types.ts';
import { describe, type KeysOf, rejectUnknownKeys, requireBoolean, requireFloat32Array, requireObject } from '../validate.ts';
import { refuseGiven, requireUint8Array, resolveHeadShape } from './checks.ts';
import { makePlan } from './make-plan.ts';
import type { ForwardPlan, LayerSpec } from './types.ts';

/** Options of softmax attention that linear attention has no use for, with why. */
const SOFTMAX_ONLY: Readonly<Partial<Record<KeysOf<ForwardOptions>, string>>> = {
  attnMask: 'an additive mask needs scores to add to; linear attention has none',
  window: 'a sliding window breaks the running sums; use causal linear attention',
  headMask: 'not offered with linear attention',
  scale: 'linear attention does not scale q·k (φ(x) = elu(x) + 1 on the raw projections)',
  softcap: 'there are no scores to soft-cap',
  sinks: 'sinks join a softmax; linear attention has none',
  alibiSlopes: 'ALiBi biases scores; linear attention has none',
  cuSeqlens: 'packed batches are not offered with linear attention; pass a batch of equal lengths with keyPaddingMask',
};

/** The linear-attention ε: a positive finite number, default 1e-6 (the seed's). */
function resolveEps(where: string, value: unknown): number {
  if (value === undefined) return 1e-6;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new InvalidArgumentError({ where, argument: 'options.eps', expected: 'a finite number > 0 (added to the denominator; default 1e-6)', given: describe(value) });
  }
  return value;
}

/** needWeights asks for probabilities that linear attention never forms. */
function refuseWeights(where: string, value: unknown): void {
  if (value === undefined || requireBoolean(where, 'options.needWeights', value) === false) return;
  throw new InvalidArgumentError({
    where,
    argument: 'options.needWeights',
    expected: 'false or left out with linear attention',
    given: 'true',
    fix: 'Linear attention never forms a [Sq, Skv] matrix of probabilities; use softmax attention to see the weights.',
  });
}

/** A forward call of a linear-attention layer: refuses the options it cannot honour, naming each. */
export function refuseForLinear(where: string, o: Record<string, unknown>): void {
  refuseWeights(where, o.needWeights);
  refuseGiven(where, o, Object.keys(SOFTMAX_ONLY), "left out on a layer with config.attention = 'linear'", (name) => {
    const why = SOFTMAX_ONLY[name as keyof typeof SOFTMAX_ONLY]!;
    return `${why[0].toUpperCase()}${why.slice(1)}.`;
  });
}

/**
 * engine.linearAttention: query [B, H, Sq, Dh], key and value [B, G, Skv, Dh] (projected, as for
 * scaledDotProductAttention), planned as a cross-attention "layer" of width H·Dh whose projections are skipped.
 */
export function resolveLinearPlan(query: unknown, key: unknown, value: unknown, options: unknown): ForwardPlan {
  const where = 'linearAttention';
  const o = requireObject(where, 'options', options, 'Pass { batchSize, numHeads, seqLen, headDim }.') as Partial<LinearAttentionOptions> & Record<string, unknown>;
  rejectUnknownKeys(where, 'options', o, LINEAR_KEYS);
  const { B, H, G, Sq, Skv, Dh } = resolveHeadShape(where, o);
  const isCausal = o.isCausal === undefined ? false : requireBoolean(where, 'options.isCausal', o.isCausal);
  refuseWeights(where, o.needWeights);
  const eps = resolveEps(where, o.eps);
  const q = requireFloat32Array(where, 'query', query, B * H * Sq * Dh, `[B, H, Sq, Dh] = [${B}, ${H}, ${Sq}, ${Dh}] = ${B * H * Sq * Dh}`);
  const k = requireFloat32Array(where, 'key', key, B * G * Skv * Dh, `[B, G, Skv, Dh] = [${B}, ${G}, ${Skv}, ${Dh}] = ${B * G * Skv * Dh}`);
  const v = requireFloat32Array(where, 'value', value, B * G * Skv * Dh, `[B, G, Skv, Dh] = [${B}, ${G}, ${Skv}, ${Dh}] = ${B * G * Skv * Dh}`);
  const keyPaddingMask =
    o.keyPaddingMask === undefined ? null : requireUint8Array(where, 'options.keyPaddingMask', o.keyPaddingMask, B * Skv, `[B, Skv] = [${B}, ${Skv}] = ${B * Skv}`);
  const layer: LayerSpec = {
    embedDim: H * Dh,
    numHeads: H,
    numKvHeads: G,
    headDim: Dh,
    kdim: H * Dh,
    vdim: H * Dh,
    bias: false,
    rotary: null,
    qkNorm: null,
    scoreMod: null,
    attention: 'linear',
  };
  return makePlan({ layer, mode: 'cross', batchSize: B, seqLen: Sq, kvSeqLen: Skv, isCausal, masks: { keyPaddingMask }, score: { eps }, query: q, key: k, value: v });
}
