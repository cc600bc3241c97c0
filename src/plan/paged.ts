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
import { clampWindow, isTensorArray, refuseDropout, requireTensorArray, resolveOutputType, resolveScore, resolveWindow } from './checks.ts';
import { resolvePositions } from './head-transform.ts';
import { makePlan } from './make-plan.ts';
import { checkTreeParents, resolveKvCacheDtype, treeMask } from './kv-cache.ts';
import type { ForwardPlan, LayerSpec, PagedPlan, PagedSequencePlan } from './types.ts';

/** A sequence plan's blocks until the reservation fills them in. */
const NO_BLOCKS = new Int32Array(0);

/** Whether forward's options are a call on a paged cache (they have `sequences`, or a PagedKvCache as kvCache). */
export function isPagedCall(options: unknown): options is PagedForwardOptions {
  if (typeof options !== 'object' || options === null) return false;
  const o = options as Record<string, unknown>;
  return o.sequences !== undefined || o.kvCache instanceof PagedKvCache;
}

/** The options a call on a PagedKvCache takes (cuSeqlens is a plain call's). */
const PAGED_OPTIONS: ReadonlySet<string> = new Set(PAGED_KEYS.filter((k) => k !== 'cuSeqlens'));

/** forward's options with sequences: only PAGED_OPTIONS (another forward option is refused unless left undefined). */
function checkOptionNames(where: string, o: Record<string, unknown>): void {
  const names = Object.keys(o);
  if (names.every((name) => PAGED_OPTIONS.has(name))) return; // a call's usual options: nothing more to check
  rejectUnknownKeys(where, 'options', o, FORWARD_KEYS);
  for (const name of names) {
    if (o[name] !== undefined && !PAGED_OPTIONS.has(name)) {
      throw new InvalidArgumentError({
        where,
        argument: `options.${name}`,
        expected: `left out with sequences (a call on a PagedKvCache takes ${[...PAGED_OPTIONS].join(', ')})`,
        given: describe(o[name]),
        fix:
          name === 'needWeights' || name === 'attnMask' || name === 'keyPaddingMask' || name === 'positionIds' || name === 'headMask'
            ? "Each sequence's mask and positions come from its own length; run a sequence on a plain KvCache for weights or masks of your own."
            : 'Sizes come from sequences: x is [Σ length, embedDim].',
      });
    }
  }
}

/** One entry of `sequences`, checked: its id, new tokens, tree, and the positions the sequence holds. */
interface PagedEntry {
  id: number;
  length: number;
  tree: Int32Array | null;
  start: number;
}

/** options.sequences[i] checked: its keys, id (of this cache, not listed before) and length, and treeParents if given. */
function checkEntry(where: string, cache: PagedKvCache, value: unknown, i: number, seen: Set<number>): PagedEntry {
  const argument = `options.sequences[${i}]`;
  const e = requireObject(where, argument, value, 'Each entry is { id, length } (and treeParents for a tree of drafts).');
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
  return { id, length, tree, start: cache.lengthOf(id) };
}

/** forward(x, { kvCache: paged, sequences, … }) checked, its blocks reserved (the last step: nothing changes before every check passed). */
export function resolvePagedPlan(spec: LayerSpec, query: unknown, options: unknown, owner: object): PagedPlan {
  const where = 'MultiHeadAttention.forward';
  const o = requireObject(where, 'options', options, 'Pass { kvCache, sequences: [{ id, length }, …] }.');
  checkOptionNames(where, o);
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
  const entries: PagedEntry[] = [];
  const seen = new Set<number>();
  for (let i = 0; i < list.length; i++) entries.push(checkEntry(where, cache, list[i], i, seen));
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
  let T = 0;
  for (const e of entries) T += e.length;
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
  for (let i = 0; i < entries.length; i++) {
    const { start, length } = entries[i];
    if (start + length > capacity) {
      throw new InvalidArgumentError({
        where,
        argument: `options.sequences[${i}].length`,
        expected: `at most ${capacity - start}: the sequence holds ${start} positions and the pool ${capacity} (maxBlocks·blockSize)`,
        given: String(length),
      });
    }
  }

  // Each sequence's plan, as a plain cached call of it alone. The score options are the call's, the same
  // for every sequence: checked once, their plan shared (makeBatchedPlan's, for a sequence without a tree).
  const scoreOptions = { scale: o.scale, softcap: o.softcap, sinks: o.sinks, alibiSlopes: o.alibiSlopes };
  const score = resolveScore(where, scoreOptions, spec.numHeads, spec.headDim);
  const sequences: PagedSequencePlan[] = [];
  let row = 0;
  for (const e of entries) {
    const { id, start, length, tree } = e;
    const Skv = start + length;
    const rows = x.subarray(row * E, (row + length) * E);
    let plan: ForwardPlan;
    if (tree) {
      const { mask, depths } = treeMask(tree, start);
      const options = { ...scoreOptions, attnMask: mask, ...(spec.rotary ? { positionIds: depths.map((d) => start + d) } : {}) };
      const call = { batchSize: 1, seqLen: length, kvSeqLen: Skv, start, isCausal: true, needWeights: false, window };
      plan = makeBatchedPlan(where, spec, options, call, { mode: 'self', query: rows });
    } else {
      plan = makePlan({
        layer: spec,
        mode: 'self',
        batchSize: 1,
        seqLen: length,
        kvSeqLen: Skv,
        isCausal: true,
        positions: spec.rotary ? resolvePositions(where, spec.rotary, { batchSize: 1, seqLen: length, start, cuSeqlens: null }, undefined) : null,
        masks: window > 0 ? { window: clampWindow(window, length, Skv) } : undefined,
        score,
        query: rows,
      });
    }
    sequences.push({ id, row, start, length, tree, plan, blocks: NO_BLOCKS });
    row += length;
  }
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
