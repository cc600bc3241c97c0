// PagedKvCache: the keys and values of many sequences in fixed-size blocks of positions, one pool of
// blocks per layer, served by one block table (vLLM's PagedAttention). A sequence is a list of blocks;
// fork shares them copy-on-write; truncate and remove give whole blocks back to the free list. A call
// (forward with `sequences`) packs the new tokens of several sequences, prefills and single steps mixed.
//
// One BlockTable serves every layer of a model: the first layer's mha.createPagedKvCache({ blockSize,
// maxBlocks }) makes it, each further layer joins it with mha.createPagedKvCache({ sharing: first }).
// The table holds the sequences' ids and blocks and the free list; each layer's cache holds its own pool
// (the storage: every block's K and V for that layer) and how many positions of each sequence that
// layer has written (lengthOf), so that a step runs the layers one after another, each appending at
// its own length. addSequence, fork, truncate and remove act on the table, for every layer at once.

import { DisposedError, InvalidArgumentError } from './errors.ts';
import { checkPath } from './kv-cache.ts';
import type { KvCacheDtype } from './quant/kv.ts';
import { describe } from './validate.ts';

/** What a backend keeps for a paged cache of one layer: K and V of maxBlocks blocks [G, blockSize, Dh], stored as the dtype. */
export interface PagedKvStorage {
  /** Bytes the pool holds. */
  readonly bytes: number;
  /** Block `from` → block `to`: K and V of every key/value head (copy-on-write of a shared block). */
  copyBlock(from: number, to: number): void;
  /** Positions 0 … length − 1 of a sequence whose position p is in blocks[⌊p / blockSize⌋]: K, V float32 [G, length, Dh] (dequantized). */
  read(blocks: Int32Array, length: number): Promise<{ key: Float32Array; value: Float32Array }>;
  /** Within one sequence: position rows[i] → position to + i, in order (rows ascending, rows[i] ≥ to + i): acceptPath's move. */
  moveRows(blocks: Int32Array, rows: readonly number[], to: number): void;
  dispose(): void;
}

/** The blocks and sequences every layer's PagedKvCache shares. */
class BlockTable {
  /** Sequences' blocks, by id: position p of a sequence is in blocks[⌊p / blockSize⌋]. */
  readonly sequences = new Map<number, number[]>();
  /** How many sequences hold each block (0: free). */
  readonly refs: Int32Array;
  /** Free blocks, the lowest on top. */
  private free: number[];
  private nextId = 0;
  readonly members = new Set<PagedKvCache>();

  constructor(
    readonly blockSize: number,
    readonly maxBlocks: number,
    readonly dtype: KvCacheDtype,
  ) {
    this.refs = new Int32Array(maxBlocks);
    this.free = Array.from({ length: maxBlocks }, (_, i) => maxBlocks - 1 - i);
  }

  get freeBlocks(): number {
    return this.free.length;
  }

  newId(): number {
    return this.nextId++;
  }

  take(): number {
    const block = this.free.pop();
    if (block === undefined) throw new Error('BlockTable.take: no free block (an engine bug: the call reserved too few)');
    this.refs[block] = 1;
    return block;
  }

  release(block: number): void {
    if (--this.refs[block] === 0) {
      this.free.push(block);
      this.free.sort((a, b) => b - a);
    }
  }
}

/** One sequence's part of a call, as the table reserved it. */
export interface PagedReservation {
  id: number;
  /** The layer's length of the sequence before the call. */
  start: number;
  /** New tokens. */
  length: number;
  /** Its blocks after the reservation: enough for start + length positions, none shared where the call writes. */
  blocks: Int32Array;
}

/**
 * The keys and values of many sequences for one layer, in blocks; made by mha.createPagedKvCache().
 * Pass it as `forward(x, { kvCache: paged, sequences: [{ id, length }, …] })`.
 */
export class PagedKvCache {
  private readonly table: BlockTable;
  /** Positions of each sequence this layer holds. */
  private readonly lengths = new Map<number, number>();
  /** Each sequence's last call's tree (treeParents) and its length before it, until acceptPath, truncate or the next call. */
  private readonly trees = new Map<number, { parents: Int32Array; start: number }>();
  private storageImpl: PagedKvStorage | null;
  /** @internal A forward is appending to it. */
  busy = false;

  /** @internal Use MultiHeadAttention.createPagedKvCache. */
  constructor(
    table: { blockSize: number; maxBlocks: number; dtype: KvCacheDtype } | PagedKvCache,
    storage: PagedKvStorage,
    /** @internal The layer that made it (a cache serves that layer only). */
    readonly owner: object,
  ) {
    this.table = table instanceof PagedKvCache ? table.table : new BlockTable(table.blockSize, table.maxBlocks, table.dtype);
    for (const id of this.table.sequences.keys()) this.lengths.set(id, 0);
    this.table.members.add(this);
    this.storageImpl = storage;
  }

  /** Positions per block. */
  get blockSize(): number {
    return this.table.blockSize;
  }

  /** Blocks in each layer's pool. */
  get maxBlocks(): number {
    return this.table.maxBlocks;
  }

  /** How K and V are stored (KvCacheDtype). */
  get dtype(): KvCacheDtype {
    return this.table.dtype;
  }

  /** Blocks no sequence holds. */
  get freeBlocks(): number {
    return this.table.freeBlocks;
  }

  /** The ids of the sequences, in the order they were added. */
  get sequenceIds(): number[] {
    return [...this.table.sequences.keys()];
  }

  /** Bytes this layer's pool holds on its backend (0 once disposed). */
  get bytes(): number {
    return this.storageImpl?.bytes ?? 0;
  }

  /** A new empty sequence; returns its id. It takes blocks as its positions are written. */
  addSequence(): number {
    this.refuseBusy('PagedKvCache.addSequence');
    const id = this.table.newId();
    this.table.sequences.set(id, []);
    for (const member of this.table.members) member.lengths.set(id, 0);
    return id;
  }

  /**
   * A new sequence with the positions of `id` (parallel sampling, a shared prompt): it shares the
   * blocks, and a block is copied only when one of them writes into a block both hold. Returns its id.
   */
  fork(id: number): number {
    const where = 'PagedKvCache.fork';
    this.refuseBusy(where);
    const blocks = this.blocksOf(where, 'id', id);
    if ([...this.table.members].some((member) => member.trees.has(id))) {
      throw new InvalidArgumentError({
        where,
        argument: 'id',
        expected: 'a sequence without a tree pending (its last call had no treeParents, or the tree was accepted or truncated)',
        given: `sequence ${id}, with a tree of drafts pending in ${this.table.members.size > 1 ? 'a layer' : 'this cache'}`,
        fix: 'acceptPath (or truncate) first, in every layer: a fork shares the blocks that acceptPath rearranges.',
      });
    }
    const child = this.table.newId();
    for (const block of blocks) this.table.refs[block]++;
    this.table.sequences.set(child, [...blocks]);
    for (const member of this.table.members) member.lengths.set(child, member.lengths.get(id) ?? 0);
    return child;
  }

  /**
   * Keeps positions 0 … length − 1 of sequence `id` in every layer and drops the rest; whole blocks
   * past the new length go back to the free list. `length` is an integer in [0, lengthOf(id)].
   */
  truncate(id: number, length: number): void {
    const where = 'PagedKvCache.truncate';
    this.refuseBusy(where);
    const blocks = this.blocksOf(where, 'id', id);
    const now = this.lengths.get(id) ?? 0;
    if (typeof length !== 'number' || !Number.isInteger(length) || length < 0 || length > now) {
      throw new InvalidArgumentError({
        where,
        argument: 'length',
        expected: `an integer in [0, lengthOf(${id}) = ${now}]`,
        given: describe(length),
        fix: 'A sequence only shrinks: pass the number of positions to keep.',
      });
    }
    for (const member of this.table.members) {
      member.lengths.set(id, Math.min(member.lengths.get(id) ?? 0, length));
      member.trees.delete(id);
    }
    const keep = Math.ceil(length / this.table.blockSize);
    for (const block of blocks.splice(keep)) this.table.release(block);
  }

  /** Removes sequence `id` from every layer; its blocks go back to the free list (those it shared stay with the others). */
  remove(id: number): void {
    const where = 'PagedKvCache.remove';
    this.refuseBusy(where);
    const blocks = this.blocksOf(where, 'id', id);
    for (const block of blocks) this.table.release(block);
    this.table.sequences.delete(id);
    for (const member of this.table.members) {
      member.lengths.delete(id);
      member.trees.delete(id);
    }
  }

  /** Positions of sequence `id` this layer holds. */
  lengthOf(id: number): number {
    this.blocksOf('PagedKvCache.lengthOf', 'id', id);
    return this.lengths.get(id) ?? 0;
  }

  /** The keys and values of sequence `id` in this layer, float32 [G, length, Dh] each (dequantized). */
  async read(id: number): Promise<{ key: Float32Array; value: Float32Array }> {
    const where = 'PagedKvCache.read';
    this.refuseBusy(where);
    const blocks = this.blocksOf(where, 'id', id);
    return this.storage.read(Int32Array.from(blocks), this.lengths.get(id) ?? 0);
  }

  /**
   * After a call whose entry for `id` had `treeParents`: keeps the listed new tokens of that sequence, a
   * root-to-node path of its tree in order, and drops the other nodes (as KvCache.acceptPath). Applies to
   * this layer; call it on every layer's cache.
   */
  acceptPath(id: number, indices: ArrayLike<number>): void {
    const where = 'PagedKvCache.acceptPath';
    this.refuseBusy(where);
    const blocks = this.blocksOf(where, 'id', id);
    const tree = this.trees.get(id);
    if (!tree) {
      throw new InvalidArgumentError({
        where,
        argument: 'id',
        expected: `a sequence with a tree pending: this layer's last call on sequence ${id} had treeParents`,
        given: `sequence ${id}, whose last call was not a tree (or whose tree was accepted or truncated)`,
        fix: 'Call mha.forward(x, { kvCache, sequences: [{ id, length: k, treeParents }] }) first; accept one path per tree.',
      });
    }
    const rows = checkPath(where, tree.parents, indices).map((i) => tree.start + i);
    if (rows.some((r, j) => r !== tree.start + j)) this.storage.moveRows(Int32Array.from(blocks), rows, tree.start);
    this.lengths.set(id, tree.start + rows.length);
    this.trees.delete(id);
    // Blocks past what every layer still holds of the sequence go back (the last layer to accept frees the dropped nodes' blocks).
    const held = Math.max(...[...this.table.members].map((member) => member.lengths.get(id) ?? 0));
    for (const block of blocks.splice(Math.ceil(held / this.table.blockSize))) this.table.release(block);
  }

  /** @internal Whether a forward of any layer sharing the block table is under way. */
  get tableBusy(): boolean {
    for (const member of this.table.members) if (member.busy) return true;
    return false;
  }

  /** Releases this layer's pool at once (the table stays with the other layers); using it afterwards throws. */
  dispose(): void {
    this.storageImpl?.dispose();
    this.storageImpl = null;
    this.table.members.delete(this);
  }

  /** True after dispose(). */
  get disposed(): boolean {
    return this.storageImpl === null;
  }

  /** @internal */
  get storage(): PagedKvStorage {
    if (!this.storageImpl) throw new DisposedError('PagedKvCache', 'Create a new one with mha.createPagedKvCache().');
    return this.storageImpl;
  }

  /** @internal Whether sequence `id` exists. */
  has(id: number): boolean {
    return this.table.sequences.has(id);
  }

  /**
   * @internal Before a call: blocks for each sequence's new positions (start … start + length − 1),
   * a shared block copied (in every layer) before this layer writes into it. Counts first: when the free
   * blocks do not suffice, throws naming the need, with nothing changed.
   */
  reserve(where: string, calls: readonly { id: number; length: number }[]): PagedReservation[] {
    const { blockSize } = this.table;
    // The holders of each block as the count goes: the table's own, copied at the first shared block
    // (a decode step writes into blocks it alone holds: no copy).
    let refs: Int32Array | null = null;
    let need = 0;
    let total = 0;
    for (const { id, length } of calls) {
      const blocks = this.table.sequences.get(id)!;
      const start = this.lengths.get(id) ?? 0;
      const first = Math.floor(start / blockSize);
      const end = Math.ceil((start + length) / blockSize);
      total += Math.max(end, blocks.length); // its blocks after the reservation
      for (let b = first; b < end; b++) {
        if (b >= blocks.length) need++;
        else if ((refs ?? this.table.refs)[blocks[b]] > 1) {
          refs ??= this.table.refs.slice();
          refs[blocks[b]]--;
          need++;
        }
      }
    }
    if (need > this.table.freeBlocks) {
      throw new InvalidArgumentError({
        where,
        argument: 'options.sequences',
        expected: `new positions that fit the free blocks: this call needs ${need} block(s) of ${blockSize} positions`,
        given: `a cache with ${this.table.freeBlocks} free of ${this.table.maxBlocks}`,
        fix: 'remove() or truncate() sequences to free blocks, split the call, or create the cache with more maxBlocks.',
      });
    }
    // Each sequence's blocks a view of one array (one allocation for the call, not one per sequence).
    const all = new Int32Array(total);
    const reserved: PagedReservation[] = [];
    let at = 0;
    for (const { id, length } of calls) {
      const blocks = this.table.sequences.get(id)!;
      const start = this.lengths.get(id) ?? 0;
      const end = Math.ceil((start + length) / blockSize);
      for (let b = Math.floor(start / blockSize); b < end; b++) {
        if (b >= blocks.length) blocks.push(this.table.take());
        else if (this.table.refs[blocks[b]] > 1) {
          const copy = this.table.take();
          for (const member of this.table.members) member.storageImpl?.copyBlock(blocks[b], copy);
          this.table.release(blocks[b]);
          blocks[b] = copy;
        }
      }
      all.set(blocks, at);
      reserved.push({ id, start, length, blocks: all.subarray(at, at + blocks.length) });
      at += blocks.length;
    }
    return reserved;
  }

  /** @internal After a call: each sequence's length grows by its new tokens; a tree stays pending for acceptPath. */
  advance(calls: readonly { id: number; length: number; tree: Int32Array | null }[]): void {
    for (const { id, length, tree } of calls) {
      const start = this.lengths.get(id) ?? 0;
      if (tree) this.trees.set(id, { parents: tree, start });
      else this.trees.delete(id);
      this.lengths.set(id, start + length);
    }
  }

  /** A sequence's blocks, or a typed error naming an unknown or removed id. */
  private blocksOf(where: string, argument: string, id: unknown): number[] {
    const blocks = typeof id === 'number' ? this.table.sequences.get(id) : undefined;
    if (!blocks) {
      throw new InvalidArgumentError({
        where,
        argument,
        expected: `the id of a sequence of this cache (${this.table.sequences.size === 0 ? 'it has none' : `one of ${[...this.table.sequences.keys()].join(', ')}`})`,
        given: typeof id === 'number' ? `${id}, an unknown or removed id` : describe(id),
        fix: 'Take ids from addSequence() or fork().',
      });
    }
    return blocks;
  }

  private refuseBusy(where: string): void {
    if (this.storageImpl === null) throw new DisposedError('PagedKvCache', 'Create a new one with mha.createPagedKvCache().');
    for (const member of this.table.members) {
      if (member.busy) {
        throw new InvalidArgumentError({
          where,
          argument: 'this cache',
          expected: 'not in use by a forward (of any layer sharing its block table)',
          given: 'a cache a forward is still appending to',
          fix: 'Await the forward first.',
        });
      }
    }
  }
}
