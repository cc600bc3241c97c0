// The checks of a forward with a KV cache: the new tokens' keys and values are appended to the cache,
// and the queries attend over every position it holds.

import { InvalidArgumentError, ShapeMismatchError } from '../errors.ts';
import { KvCache } from '../kv-cache.ts';
import { KV_CACHE_KEYS } from '../option-keys.ts';
import { describe, rejectUnknownKeys, requireFloat32Array, requireObject, requirePositiveInteger } from '../validate.ts';
import { makeBatchedPlan } from './batched.ts';
import { refuseGiven, requireBothOrNeither } from './checks.ts';
import type { ForwardPlan, LayerSpec } from './types.ts';

/** forward(x, { kvCache }): the new tokens' K/V are appended, and the queries see everything cached. */
export function resolveCachedPlan(
  where: string,
  spec: LayerSpec,
  /** The query [B, Sq, E] (empty when it is a GPUBuffer), and what forward checked of the call's GPU inputs and output. */
  inputs: Pick<ForwardPlan, 'query' | 'gpu' | 'returnBuffer'>,
  o: Record<string, unknown>,
  batchSize: number,
  seqLen: number,
  isCausal: boolean,
  needWeights: boolean,
  window: number,
  owner: object | null,
): ForwardPlan {
  const cache = o.kvCache;
  if (!(cache instanceof KvCache)) {
    throw new InvalidArgumentError({ where, argument: 'options.kvCache', expected: "a KvCache from this layer's createKvCache()", given: describe(cache) });
  }
  if (cache.disposed)
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvCache',
      expected: 'a live KvCache',
      given: 'a disposed one',
      fix: 'Create a new one with mha.createKvCache().',
    });
  if (owner && cache.owner !== owner) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvCache',
      expected: 'a KvCache made by this layer',
      given: 'one made by another layer',
      fix: "Each layer keeps its own keys and values: create the cache with this layer's createKvCache().",
    });
  }
  refuseGiven(
    where,
    o,
    ['key', 'value', 'kvSeqLen'],
    'left out with kvCache',
    () => "A KV cache holds the layer's own keys and values (self-attention over all positions so far).",
  );
  if (batchSize !== cache.batchSize) {
    throw new InvalidArgumentError({ where, argument: 'options.batchSize', expected: `the cache's batchSize (${cache.batchSize})`, given: String(batchSize) });
  }
  if (cache.busy) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvCache',
      expected: 'not in use by another forward',
      given: 'a cache a forward is still appending to',
      fix: 'Await each forward on a cache before the next one: positions are appended in order.',
    });
  }
  const start = cache.length;
  const kvSeqLen = start + seqLen;
  if (kvSeqLen > cache.maxSeqLen) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvCache',
      expected: `room for ${seqLen} more position(s): length ${start} + seqLen ${seqLen} ≤ maxSeqLen ${cache.maxSeqLen}`,
      given: `a cache with ${cache.maxSeqLen - start} free`,
      fix: 'reset() the cache, or create one with a larger maxSeqLen.',
    });
  }
  return makeBatchedPlan(where, spec, o, { batchSize, seqLen, kvSeqLen, start, isCausal, needWeights, window }, { mode: 'self', ...inputs, cache: { cache, start } });
}

/** mha.createKvCache's options: sizes, and a past to start from (key and value [B, G, length, Dh]). */
export function resolveKvCacheOptions(
  spec: LayerSpec,
  options: unknown,
): { batchSize: number; maxSeqLen: number; past: { key: Float32Array; value: Float32Array; length: number } | null } {
  const where = 'MultiHeadAttention.createKvCache';
  const o = requireObject(where, 'options', options, 'Pass { batchSize, maxSeqLen } (and key, value to start from a past).');
  rejectUnknownKeys(where, 'options', o, KV_CACHE_KEYS);
  const batchSize = requirePositiveInteger(where, 'options.batchSize', o.batchSize);
  const maxSeqLen = requirePositiveInteger(where, 'options.maxSeqLen', o.maxSeqLen);
  if (o.key === undefined && o.value === undefined) {
    if (o.length !== undefined) {
      throw new InvalidArgumentError({
        where,
        argument: 'options.length',
        expected: 'left out without key and value',
        given: describe(o.length),
        fix: 'Pass the past as key and value [B, G, length, Dh].',
      });
    }
    return { batchSize, maxSeqLen, past: null };
  }
  requireBothOrNeither(where, 'options', o, 'key', 'value', 'A past is both its keys and its values.');
  const block = batchSize * spec.numKvHeads * spec.headDim; // elements per position
  const shape = (n: number | string) => `[B, G, length, Dh] = [${batchSize}, ${spec.numKvHeads}, ${n}, ${spec.headDim}]`;
  if (!(o.key instanceof Float32Array))
    throw new InvalidArgumentError({ where, argument: 'options.key', expected: `a Float32Array ${shape('length')}`, given: describe(o.key) });
  const length = o.length === undefined ? o.key.length / block : requirePositiveInteger(where, 'options.length', o.length);
  if (!Number.isInteger(length) || length < 1) {
    throw new ShapeMismatchError({
      where,
      argument: 'options.key',
      expected: `a positive multiple of B·G·Dh = ${block} elements ${shape('length')}`,
      given: `length ${o.key.length}`,
    });
  }
  if (length > maxSeqLen) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.length',
      expected: `at most maxSeqLen (${maxSeqLen})`,
      given: String(length),
      fix: 'Create the cache with a larger maxSeqLen.',
    });
  }
  const key = requireFloat32Array(where, 'options.key', o.key, length * block, `${shape(length)} = ${length * block}`);
  const value = requireFloat32Array(where, 'options.value', o.value, length * block, `${shape(length)} = ${length * block}`);
  return { batchSize, maxSeqLen, past: { key, value, length } };
}
