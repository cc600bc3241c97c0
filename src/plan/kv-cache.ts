// The checks of a forward with a KV cache: the new tokens' keys and values are appended to the cache,
// and the queries attend over every position it holds.

import { InvalidArgumentError, UnsupportedError } from '../errors.ts';
import { KvCache } from '../kv-cache.ts';
import { describe } from '../validate.ts';
import { clampWindow, resolveMasks, resolveScore } from './checks.ts';
import { geometryOf } from './geometry.ts';
import type { ForwardPlan, LayerSpec } from './types.ts';

/** forward(x, { kvCache }): the new tokens' K/V are appended, and the queries see everything cached. */
export function resolveCachedPlan(
  where: string,
  spec: LayerSpec,
  query: Float32Array,
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
  for (const name of ['key', 'value', 'kvSeqLen'] as const) {
    if (o[name] !== undefined) {
      throw new UnsupportedError({
        where,
        argument: `options.${name}`,
        expected: 'left out with kvCache',
        given: describe(o[name]),
        fix: "A KV cache holds the layer's own keys and values (self-attention over all positions so far).",
      });
    }
  }
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
  const H = spec.numHeads;
  return {
    layer: spec,
    mode: 'self',
    batchSize,
    seqLen,
    kvSeqLen,
    isCausal,
    needWeights,
    masks: resolveMasks(where, o, batchSize, H, seqLen, kvSeqLen, clampWindow(window, seqLen, kvSeqLen)),
    score: resolveScore(where, o, H, spec.headDim),
    cuSeqlens: null,
    geometry: geometryOf('self', batchSize, seqLen, kvSeqLen),
    query,
    key: query,
    value: query,
    cache: { cache, start },
    gpu: null,
    returnBuffer: false,
  };
}
