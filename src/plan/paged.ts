// The checks of a call on a PagedKvCache (forward(x, { kvCache: paged, sequences })) and of
// mha.createPagedKvCache's options. A call is resolved into a PagedPlan: each sequence's part is the
// plan of that sequence run alone on a plain cache (B 1, its new tokens, its own positions, masks
// and score options), so every backend applies the same rules per sequence as in a plain call.

import { InvalidArgumentError, ShapeMismatchError, UnsupportedError } from '../errors.ts';
import { FORWARD_KEYS, PAGED_CACHE_KEYS, PAGED_KEYS, PAGED_SEQUENCE_KEYS } from '../option-keys.ts';
import { PagedKvCache } from '../paged-kv-cache.ts';
import type { KvCacheDtype, PagedForwardOptions } from '../types.ts';
import { describe, rejectUnknownKeys, requireObject, requirePositiveInteger } from '../validate.ts';
import { makeBatchedPlan } from './batched.ts';
import { isTensorArray, refuseDropout, requireTensorArray, resolveOutputType, resolveWindow } from './checks.ts';
import { checkTreeParents, resolveKvCacheDtype, treeMask } from './kv-cache.ts';
import type { LayerSpec, PagedPlan, PagedSequencePlan } from './types.ts';

/** A sequence plan's blocks until the reservation fills them in. */
const NO_BLOCKS = new Int32Array(0);

/** Whether forward's options are a call on a paged cache (they have `sequences`, or a PagedKvCache as kvCache). */
export function isPagedCall(options: unknown): options is PagedForwardOptions {
  if (typeof options !== 'object' || options === null) return false;
  const o = options as Record<string, unknown>;
  return o.sequences !== undefined || o.kvCache instanceof PagedKvCache;
}

/** forward(x, { kvCache: paged, sequences, … }) checked, its blocks reserved (the last step: nothing changes before every check passed). */
export function resolvePagedPlan(spec: LayerSpec, query: unknown, options: unknown, owner: object): PagedPlan {
  const where = 'MultiHeadAttention.forward';
  const o = requireObject(where, 'options', options, 'Pass { kvCache, sequences: [{ id, length }, …] }.');
  rejectUnknownKeys(where, 'options', o, FORWARD_KEYS);
  for (const name of Object.keys(o)) {
    if (o[name] !== undefined && (name === 'cuSeqlens' || !(PAGED_KEYS as readonly string[]).includes(name))) {
      throw new InvalidArgumentError({
        where,
        argument: `options.${name}`,
        expected: `left out with sequences (a call on a PagedKvCache takes ${PAGED_KEYS.filter((k) => k !== 'cuSeqlens').join(', ')})`,
        given: describe(o[name]),
        fix:
          name === 'needWeights' || name === 'attnMask' || name === 'keyPaddingMask' || name === 'positionIds' || name === 'headMask'
            ? "Each sequence's mask and positions come from its own length; run a sequence on a plain KvCache for weights or masks of your own."
            : 'Sizes come from sequences: x is [Σ length, embedDim].',
      });
    }
  }
  const cache = o.kvCache;
  if (!(cache instanceof PagedKvCache)) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvCache',
      expected: "a PagedKvCache from this layer's createPagedKvCache() with sequences",
      given: describe(cache),
      fix: 'Pass the paged cache as kvCache beside sequences (a plain KvCache takes batchSize and seqLen).',
    });
  }
  if (cache.disposed) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvCache',
      expected: 'a live PagedKvCache',
      given: 'a disposed one',
      fix: 'Create a new one with mha.createPagedKvCache().',
    });
  }
  if (cache.owner !== owner) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvCache',
      expected: 'a PagedKvCache made by this layer',
      given: 'one made by another layer',
      fix: "Each layer keeps its own keys and values: create its cache with this layer's createPagedKvCache({ sharing }) to share the block table.",
    });
  }
  if (cache.tableBusy) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.kvCache',
      expected: 'not in use by another forward (of this layer or of one sharing its block table)',
      given: cache.busy ? 'a cache a forward is still appending to' : "a cache whose block table another layer's forward is using",
      fix: 'Await each forward before the next one: the layers of a step run one after another.',
    });
  }
  if (spec.attention === 'linear' || spec.scoreMod) {
    throw new UnsupportedError({
      where,
      argument: 'options.kvCache',
      expected: 'a softmax layer without config.scoreMod for a PagedKvCache',
      given: spec.scoreMod ? 'a layer with a scoreMod' : "a layer with attention: 'linear'",
      fix: 'Run each sequence on a plain KvCache (mha.createKvCache).',
    });
  }
  if (o.isCausal === false) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.isCausal',
      expected: 'true or left out with sequences (new tokens attend causally to their past and themselves)',
      given: 'false',
    });
  }
  refuseDropout(where, 'options.dropout', o.dropout);
  resolveOutputType(where, o);
  const window = resolveWindow(where, o.window);

  const list = o.sequences;
  if (!Array.isArray(list) || list.length === 0) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.sequences',
      expected: 'a non-empty array of { id, length } (the sequences whose new tokens x holds, in row order)',
      given: describe(list),
    });
  }
  const entries: { id: number; length: number; tree: Int32Array | null }[] = [];
  const seen = new Set<number>();
  for (let i = 0; i < list.length; i++) {
    const argument = `options.sequences[${i}]`;
    const e = requireObject(where, argument, list[i], 'Each entry is { id, length } (and treeParents for a tree of drafts).');
    rejectUnknownKeys(where, argument, e, PAGED_SEQUENCE_KEYS);
    const id = e.id;
    if (typeof id !== 'number' || !cache.has(id)) {
      throw new InvalidArgumentError({
        where,
        argument: `${argument}.id`,
        expected: `the id of a sequence of this cache (${cache.sequenceIds.length === 0 ? 'it has none' : `one of ${cache.sequenceIds.join(', ')}`})`,
        given: typeof id === 'number' ? `${id}, an unknown or removed id` : describe(id),
        fix: 'Take ids from addSequence() or fork().',
      });
    }
    if (seen.has(id)) {
      throw new InvalidArgumentError({
        where,
        argument: `${argument}.id`,
        expected: 'an id not listed before in this call',
        given: `${id} again`,
        fix: "Put all of a sequence's new tokens in one entry.",
      });
    }
    seen.add(id);
    const length = requirePositiveInteger(where, `${argument}.length`, e.length);
    let tree: Int32Array | null = null;
    if (e.treeParents !== undefined) {
      checkTreeParents(where, `${argument}.treeParents`, e.treeParents, length, `${argument}.length`);
      tree = e.treeParents.slice();
    }
    entries.push({ id, length, tree });
  }
  if (entries.some((e) => e.tree)) {
    for (const name of ['window', 'alibiSlopes'] as const) {
      if (o[name] !== undefined) {
        throw new InvalidArgumentError({
          where,
          argument: `options.${name}`,
          expected: 'left out with treeParents',
          given: describe(o[name]),
          fix: "A tree makes its own mask and positions (each token's depth); options that read positions along the cache do not fit its branches.",
        });
      }
    }
  }
  const E = spec.embedDim;
  const T = entries.reduce((sum, e) => sum + e.length, 0);
  if (!isTensorArray(query)) requireTensorArray(where, 'query', query, T * E, '[T, embedDim]'); // throws: GPU buffers and the rest
  if ((query as ArrayLike<number>).length !== T * E) {
    throw new ShapeMismatchError({
      where,
      argument: 'query.length',
      expected: `[T, embedDim] with T = Σ sequences[i].length = ${T}: ${T}·${E} = ${T * E}`,
      given: String((query as ArrayLike<number>).length),
      fix: "Pack each sequence's new tokens in the order of sequences, and give each entry its number of rows.",
    });
  }
  const x = requireTensorArray(where, 'query', query, T * E, `[T, embedDim] = [${T}, ${E}] = ${T * E}`);
  const capacity = cache.maxBlocks * cache.blockSize;
  for (const [i, e] of entries.entries()) {
    const start = cache.lengthOf(e.id);
    if (start + e.length > capacity) {
      throw new InvalidArgumentError({
        where,
        argument: `options.sequences[${i}].length`,
        expected: `at most ${capacity - start}: the sequence holds ${start} positions and the pool ${capacity} (maxBlocks·blockSize)`,
        given: String(e.length),
      });
    }
  }

  // Each sequence's plan, as a plain cached call of it alone (checks the score options once per sequence; they are the same).
  let row = 0;
  const scoreOptions = { scale: o.scale, softcap: o.softcap, sinks: o.sinks, alibiSlopes: o.alibiSlopes };
  const sequences: PagedSequencePlan[] = entries.map((e) => {
    const start = cache.lengthOf(e.id);
    const Skv = start + e.length;
    const rows = x.subarray(row * E, (row + e.length) * E);
    const first = row;
    row += e.length;
    const call = { batchSize: 1, seqLen: e.length, kvSeqLen: Skv, start, isCausal: true, needWeights: false, window };
    let options: Record<string, unknown> = scoreOptions;
    if (e.tree) {
      const { mask, depths } = treeMask(e.tree, start);
      options = { ...scoreOptions, attnMask: mask, ...(spec.rotary ? { positionIds: depths.map((d) => start + d) } : {}) };
    }
    const plan = makeBatchedPlan(where, spec, options, call, { mode: 'self', query: rows });
    return { id: e.id, row: first, start, length: e.length, tree: e.tree, plan, blocks: NO_BLOCKS };
  });
  // Every check passed: the blocks are reserved (the only change to the cache before the call runs).
  const reserved = cache.reserve(where, entries);
  for (let i = 0; i < sequences.length; i++) sequences[i].blocks = reserved[i].blocks;
  return { layer: spec, cache, query: x, tokens: T, sequences };
}

/** mha.createPagedKvCache's options: a new block table, or `sharing` another layer's. */
export function resolvePagedCacheOptions(
  spec: LayerSpec,
  options: unknown,
): { blockSize: number; maxBlocks: number; dtype: KvCacheDtype | null; sharing: PagedKvCache | null } {
  const where = 'MultiHeadAttention.createPagedKvCache';
  const o = requireObject(where, 'options', options, 'Pass { blockSize, maxBlocks } (and dtype), or { sharing } for a further layer.');
  rejectUnknownKeys(where, 'options', o, PAGED_CACHE_KEYS);
  const dtype = resolveKvCacheDtype(where, 'options.dtype', o.dtype, spec);
  if (o.sharing !== undefined) {
    const sharing = o.sharing;
    if (!(sharing instanceof PagedKvCache) || sharing.disposed) {
      throw new InvalidArgumentError({
        where,
        argument: 'options.sharing',
        expected: "a live PagedKvCache (another layer's), whose block table this layer's cache joins",
        given: sharing instanceof PagedKvCache ? 'a disposed one' : describe(sharing),
      });
    }
    const given = { blockSize: o.blockSize, maxBlocks: o.maxBlocks, dtype } as const;
    for (const [name, value] of Object.entries(given)) {
      const own = sharing[name as keyof typeof given];
      if (value !== undefined && value !== null && value !== own) {
        throw new InvalidArgumentError({
          where,
          argument: `options.${name}`,
          expected: `left out or equal to the shared table's (${describe(own)}) with sharing`,
          given: describe(value),
          fix: 'Every layer sharing a block table has its block size, block count and dtype.',
        });
      }
    }
    return { blockSize: sharing.blockSize, maxBlocks: sharing.maxBlocks, dtype: sharing.dtype, sharing };
  }
  const blockSize = requirePositiveInteger(where, 'options.blockSize', o.blockSize);
  if (blockSize > 1024 || (blockSize & (blockSize - 1)) !== 0) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.blockSize',
      expected: 'a power of two from 1 to 1024 (16 is usual)',
      given: String(blockSize),
    });
  }
  const maxBlocks = requirePositiveInteger(where, 'options.maxBlocks', o.maxBlocks);
  return { blockSize, maxBlocks, dtype, sharing: null };
}
