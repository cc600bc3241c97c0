// MultiHeadAttention.forward's checks: a call of a layer, resolved into a ForwardPlan (self- or
// cross-attention, a varlen batch with cuSeqlens, GPU-resident inputs; kv-cache.ts for calls with a cache).

import { InvalidArgumentError, ShapeMismatchError, UnsupportedError } from '../errors.ts';
import { BATCHED_ONLY_KEYS, FORWARD_KEYS } from '../option-keys.ts';
import type { ForwardOptions } from '../types.ts';
import { describe, rejectUnknownKeys, requireBoolean, requireObject, requirePositiveInteger } from '../validate.ts';
import {
  clampWindow,
  isTensorArray,
  refuseDropout,
  refuseGiven,
  requireBothOrNeither,
  requireTensorArray,
  resolveHeadMask,
  resolveOutputType,
  resolveScore,
  resolveWindow,
  tensorInput,
} from './checks.ts';
import { makeBatchedPlan } from './batched.ts';
import { resolvePositions } from './head-transform.ts';
import { resolveCachedPlan } from './kv-cache.ts';
import { refuseForLinear } from './linear.ts';
import { makePlan } from './make-plan.ts';
import type { ForwardPlan, LayerSpec } from './types.ts';

function resolveCuSeqlens(where: string, value: unknown, queryLength: unknown, E: number): { cu: Int32Array; maxLen: number } {
  if (!(value instanceof Int32Array)) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.cuSeqlens',
      expected: 'an Int32Array [n + 1] of cumulative sequence lengths, 0 … T',
      given: describe(value),
    });
  }
  if (value.length < 2) {
    throw new ShapeMismatchError({ where, argument: 'options.cuSeqlens', expected: 'of length n + 1 ≥ 2 (at least one sequence)', given: `length ${value.length}` });
  }
  if (value[0] !== 0) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.cuSeqlens[0]',
      expected: '0',
      given: String(value[0]),
      fix: 'cuSeqlens are cumulative offsets: [0, len0, len0 + len1, …, T].',
    });
  }
  let maxLen = 0;
  for (let i = 1; i < value.length; i++) {
    const len = value[i] - value[i - 1];
    if (len < 1) {
      throw new InvalidArgumentError({
        where,
        argument: `options.cuSeqlens[${i}]`,
        expected: `greater than cuSeqlens[${i - 1}] (${value[i - 1]}): offsets strictly increase`,
        given: String(value[i]),
        fix: 'Leave empty sequences out.',
      });
    }
    maxLen = Math.max(maxLen, len);
  }
  const T = value[value.length - 1];
  const qLen = queryLength as number;
  if (typeof qLen === 'number' && qLen !== T * E) {
    throw new ShapeMismatchError({
      where,
      argument: 'options.cuSeqlens',
      expected: `to end at T = query.length / embedDim = ${qLen / E}`,
      given: `${T} (the last offset)`,
      fix: 'The last offset is the total number of tokens packed in query [T, E].',
    });
  }
  return { cu: value, maxLen };
}

export function resolveForwardPlan(spec: LayerSpec, query: unknown, options: unknown, owner: object | null = null): ForwardPlan {
  const where = 'MultiHeadAttention.forward';
  const o = requireObject(where, 'options', options, 'Pass { batchSize, seqLen }.') as Partial<ForwardOptions> & Record<string, unknown>;
  rejectUnknownKeys(where, 'options', o, FORWARD_KEYS);
  const E = spec.embedDim;
  const H = spec.numHeads;
  const isCausal = o.isCausal === undefined ? false : requireBoolean(where, 'options.isCausal', o.isCausal);
  const needWeights = o.needWeights === undefined ? false : requireBoolean(where, 'options.needWeights', o.needWeights);
  refuseDropout(where, 'options.dropout', o.dropout);
  resolveOutputType(where, o); // read by MultiHeadAttention.forward once the call has run
  const window = resolveWindow(where, o.window);
  if (spec.attention === 'linear') refuseForLinear(where, o);
  if (o.positionIds !== undefined && !spec.rotary) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.positionIds',
      expected: 'left out: this layer has no rotary embeddings',
      given: describe(o.positionIds),
      fix: 'positionIds place tokens for rotary embeddings: create the layer with config.rotary.',
    });
  }

  if (o.cuSeqlens !== undefined) {
    refuseGiven(where, o, BATCHED_ONLY_KEYS, 'left out with cuSeqlens', (name) =>
      name === 'needWeights'
        ? 'Packed sequences have no [B, H, S, S] weights; run a sequence alone (batchSize 1) to get its weights.'
        : 'With cuSeqlens the sequences and their lengths come from the offsets; attention stays within each sequence (isCausal, window and headMask apply).',
    );
    if (!isTensorArray(query)) requireTensorArray(where, 'query', query, 0, '[T, embedDim]'); // throws: not an array
    const { cu, maxLen } = resolveCuSeqlens(where, o.cuSeqlens, (query as ArrayLike<number>).length, E);
    const n = cu.length - 1;
    const T = cu[n];
    const packed = requireTensorArray(where, 'query', query, T * E, `[T, embedDim] = [${T}, ${E}] = ${T * E}`);
    return makePlan({
      layer: spec,
      mode: 'varlen',
      positions: spec.rotary ? resolvePositions(where, spec.rotary, { batchSize: n, seqLen: T, start: 0, cuSeqlens: cu }, undefined) : null,
      batchSize: n,
      seqLen: T,
      isCausal,
      masks: {
        window: clampWindow(window, maxLen, maxLen),
        headMask: o.headMask === undefined ? null : resolveHeadMask(where, o.headMask, n, H),
      },
      score: resolveScore(where, o, H, spec.headDim),
      cuSeqlens: cu,
      query: packed,
    });
  }

  const batchSize = requirePositiveInteger(where, 'options.batchSize', o.batchSize);
  const seqLen = requirePositiveInteger(where, 'options.seqLen', o.seqLen);
  const length = batchSize * seqLen * E;
  if (isTensorArray(query) && query.length !== length) {
    throw new ShapeMismatchError({
      where,
      argument: 'query.length',
      expected: `batchSize·seqLen·embedDim = ${batchSize}·${seqLen}·${E} = ${length}`,
      given: String(query.length),
      fix: 'Pass an array laid out [batchSize, seqLen, embedDim] (batch first), or fix batchSize/seqLen.',
    });
  }
  const q = tensorInput(where, 'query', query, length, `[batchSize, seqLen, embedDim] = [${batchSize}, ${seqLen}, ${E}] = ${length}`);
  const returnBuffer = o.returnBuffer === undefined ? false : requireBoolean(where, 'options.returnBuffer', o.returnBuffer);
  /** GPU-resident inputs, or null when every input is an array. */
  const gpuInputs = (key: GPUBuffer | null, value: GPUBuffer | null): ForwardPlan['gpu'] => (q.gpu || key || value ? { query: q.gpu, key, value } : null);

  if (o.kvCache !== undefined) {
    const inputs = { query: q.host, gpu: gpuInputs(null, null), returnBuffer };
    return resolveCachedPlan(where, spec, inputs, o, batchSize, seqLen, isCausal, needWeights, window, owner);
  }

  if (o.treeParents !== undefined) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.treeParents',
      expected: 'given with options.kvCache (a tree of drafts is verified after a cached context)',
      given: 'treeParents without a kvCache',
      fix: 'Create a cache with mha.createKvCache({ batchSize: 1, maxSeqLen }), prefill the context, then pass it with treeParents.',
    });
  }

  // Cross-attention: key and value come together; kvSeqLen defaults to seqLen.
  const cross = o.key !== undefined || o.value !== undefined;
  if (cross && spec.rotary) {
    throw new UnsupportedError({
      where,
      argument: 'options.key',
      expected: 'left out: this layer has rotary embeddings (config.rotary)',
      given: 'cross-attention inputs',
      fix: 'Rotary positions belong to self-attention; make a layer without rotary for cross-attention.',
    });
  }
  requireBothOrNeither(
    where,
    'options',
    o,
    'key',
    'value',
    'Cross-attention takes both key [B, Skv, kdim] and value [B, Skv, vdim] (pass the same array twice if they are one tensor).',
  );
  if (cross && spec.kEqV && o.key !== o.value) {
    throw new UnsupportedError({
      where,
      argument: 'options.value',
      expected: 'the same array (or buffer) as options.key: this layer has config.kEqV, its values are the keys’ projection',
      given: 'another input',
      fix: 'Pass key twice, as key and as value.',
    });
  }
  if (!cross && (spec.kdim !== E || spec.vdim !== E)) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.key',
      expected: `given: this layer has kdim ${spec.kdim} / vdim ${spec.vdim} ≠ embedDim ${E}`,
      given: 'nothing',
      fix: 'Pass key and value (cross-attention); self-attention needs kdim = vdim = embedDim.',
    });
  }
  const kvSeqLen = o.kvSeqLen === undefined ? seqLen : requirePositiveInteger(where, 'options.kvSeqLen', o.kvSeqLen);
  if (!cross && kvSeqLen !== seqLen) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvSeqLen',
      expected: `equal to seqLen (${seqLen}) without key and value`,
      given: String(kvSeqLen),
      fix: 'Pass key and value for cross-attention.',
    });
  }
  /** Cross-attention's key or value [B, Skv, dim]; self-attention's is the query's. */
  const kvInput = (name: 'key' | 'value', dim: number) =>
    cross
      ? tensorInput(
          where,
          `options.${name}`,
          o[name],
          batchSize * kvSeqLen * dim,
          `[B, Skv, ${name === 'key' ? 'kdim' : 'vdim'}] = [${batchSize}, ${kvSeqLen}, ${dim}] = ${batchSize * kvSeqLen * dim}`,
        )
      : q;
  const key = kvInput('key', spec.kdim);
  const value = cross && o.value === o.key && spec.kdim === spec.vdim ? key : kvInput('value', spec.vdim); // one array passed twice: checked (and converted) once
  return makeBatchedPlan(
    where,
    spec,
    o,
    { batchSize, seqLen, kvSeqLen, start: 0, isCausal, needWeights, window },
    { mode: cross ? 'cross' : 'self', query: q.host, key: key.host, value: value.host, gpu: gpuInputs(cross ? key.gpu : null, cross ? value.gpu : null), returnBuffer },
  );
}
