// The checks of a forward with a KV cache: the new tokens' keys and values are appended to the cache,
// and the queries attend over every position it holds.

import { InvalidArgumentError, ShapeMismatchError, UnsupportedError } from '../errors.ts';
import { KvCache } from '../kv-cache.ts';
import { isBlockDtype, KV_CACHE_DTYPES } from '../quant/kv.ts';
import type { KvCacheDtype } from '../types.ts';
import { KV_CACHE_KEYS } from '../option-keys.ts';
import { describe, rejectUnknownKeys, requireFloat32Array, requireObject, requirePositiveInteger } from '../validate.ts';
import { makeBatchedPlan } from './batched.ts';
import { refuseGiven, requireBothOrNeither } from './checks.ts';
import type { ForwardPlan, LayerSpec } from './types.ts';

/**
 * forward(x, { kvCache }): the new tokens' K/V are appended, and the queries see everything cached.
 * With treeParents the new tokens are a tree: a mask [Sq, Skv] and positions from it, the tree kept by the cache for acceptPath.
 */
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
  const tree = resolveTreeParents(where, spec, o, batchSize, seqLen);
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
  if (tree) {
    // A tree of drafts: the mask lets token i see the cache, its ancestors and itself; each token sits at start + its depth.
    const { mask, depths } = treeMask(tree, start);
    const positions = spec.rotary ? { positionIds: depths.map((d) => start + d) } : {};
    const treeOptions = { ...o, attnMask: mask, ...positions };
    return makeBatchedPlan(
      where,
      spec,
      treeOptions,
      { batchSize, seqLen, kvSeqLen, start, isCausal: true, needWeights, window },
      { mode: 'self', ...inputs, cache: { cache, start, tree } },
    );
  }
  return makeBatchedPlan(where, spec, o, { batchSize, seqLen, kvSeqLen, start, isCausal, needWeights, window }, { mode: 'self', ...inputs, cache: { cache, start } });
}

/** forward's options.treeParents, checked (a copy), or null when left out. */
function resolveTreeParents(where: string, spec: LayerSpec, o: Record<string, unknown>, batchSize: number, seqLen: number): Int32Array | null {
  const value = o.treeParents;
  if (value === undefined) return null;
  checkTreeParents(where, 'options.treeParents', value, seqLen, 'seqLen');
  if (batchSize !== 1) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.batchSize',
      expected: '1 with treeParents (one tree of drafts per call)',
      given: String(batchSize),
      fix: 'Verify each sequence’s tree in a call of its own, on a cache of batchSize 1.',
    });
  }
  if (o.isCausal === false) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.isCausal',
      expected: 'true or left out with treeParents (a tree is causal along its branches)',
      given: 'false',
    });
  }
  refuseGiven(
    where,
    o,
    ['attnMask', 'positionIds', 'window', 'alibiSlopes'],
    'left out with treeParents',
    () => "A tree makes its own mask and positions (each token's depth); options that read positions along the cache do not fit its branches.",
  );
  if (spec.scoreMod || spec.attention === 'linear') {
    throw new UnsupportedError({
      where,
      argument: 'options.treeParents',
      expected: 'a softmax layer without config.scoreMod',
      given: spec.scoreMod ? 'a layer with a scoreMod (its i and j are cache positions, not tree depths)' : "a layer with attention: 'linear' (it has no mask of keys)",
      fix: 'Verify the drafts as a sequence (one branch per call), then truncate() the rejected tokens.',
    });
  }
  return value.slice();
}

/** A tree of drafts' parents, checked: an Int32Array [seqLen] whose entry i is −1 or in [0, i). */
export function checkTreeParents(where: string, argument: string, value: unknown, seqLen: number, lengthName: string): asserts value is Int32Array {
  if (!(value instanceof Int32Array)) {
    throw new InvalidArgumentError({
      where,
      argument,
      expected: `an Int32Array [${lengthName}] = [${seqLen}]: −1 for a root, else the index (< i) of token i's parent`,
      given: describe(value),
    });
  }
  if (value.length !== seqLen) {
    throw new ShapeMismatchError({
      where,
      argument,
      expected: `of length ${lengthName} = ${seqLen} (one parent per new token)`,
      given: `length ${value.length}`,
    });
  }
  for (let i = 0; i < value.length; i++) {
    const p = value[i];
    if (p < -1 || p >= i) {
      throw new InvalidArgumentError({
        where,
        argument: `${argument}[${i}]`,
        expected: `in [−1, ${i}): −1 for a root, else the index of an earlier token (parents come before their children)`,
        given: String(p),
        fix: 'Order the tree so that every node follows its parent (breadth- or depth-first).',
      });
    }
  }
}

/** The mask [k, start + k] (1 = not seen) of a tree of k tokens after `start` cached positions, and each token's depth. */
export function treeMask(parents: Int32Array, start: number): { mask: Uint8Array; depths: Int32Array } {
  const k = parents.length;
  const Skv = start + k;
  const mask = new Uint8Array(k * Skv);
  const depths = new Int32Array(k);
  for (let i = 0; i < k; i++) {
    const p = parents[i];
    depths[i] = p < 0 ? 0 : depths[p] + 1;
    mask.fill(1, i * Skv + start, (i + 1) * Skv);
    for (let a = i; a >= 0; a = parents[a]) mask[i * Skv + start + a] = 0;
  }
  return { mask, depths };
}

/** mha.createKvCache's options: sizes, and a past to start from (key and value [B, G, length, Dh]). */
export function resolveKvCacheOptions(
  spec: LayerSpec,
  options: unknown,
): {
  batchSize: number;
  maxSeqLen: number;
  /** options.dtype, or null: the backend's default. */
  dtype: KvCacheDtype | null;
  past: { key: Float32Array; value: Float32Array; length: number } | null;
} {
  const where = 'MultiHeadAttention.createKvCache';
  const o = requireObject(where, 'options', options, 'Pass { batchSize, maxSeqLen } (and key, value to start from a past).');
  rejectUnknownKeys(where, 'options', o, KV_CACHE_KEYS);
  const batchSize = requirePositiveInteger(where, 'options.batchSize', o.batchSize);
  const maxSeqLen = requirePositiveInteger(where, 'options.maxSeqLen', o.maxSeqLen);
  const dtype = resolveKvCacheDtype(where, 'options.dtype', o.dtype, spec);
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
    return { batchSize, maxSeqLen, dtype, past: null };
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
  return { batchSize, maxSeqLen, dtype, past: { key, value, length } };
}

/** A cache's dtype option, checked against the layer (blocks of 32 need Dh % 32 = 0); null when left out. */
export function resolveKvCacheDtype(where: string, argument: string, value: unknown, spec: LayerSpec): KvCacheDtype | null {
  if (value === undefined) return null;
  if (typeof value !== 'string' || !(KV_CACHE_DTYPES as readonly string[]).includes(value)) {
    throw new InvalidArgumentError({ where, argument, expected: KV_CACHE_DTYPES.map((d) => `'${d}'`).join(', '), given: describe(value) });
  }
  const dtype = value as KvCacheDtype;
  const Dh = spec.unpaddedHeadDim ?? spec.headDim;
  if (isBlockDtype(dtype) && Dh % 32 !== 0) {
    throw new InvalidArgumentError({
      where,
      argument,
      expected: `'f32' or 'f16' for this layer: '${dtype}' stores blocks of 32 along the head dimension, and headDim ${Dh} is not a multiple of 32`,
      given: `'${dtype}'`,
      fix: "Use dtype 'f16' (or 'f32') for this layer's cache.",
    });
  }
  return dtype;
}
