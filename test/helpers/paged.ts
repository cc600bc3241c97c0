// Paged KV caches against solo runs: a PagedKvCache of one layer beside its model, one plain KvCache
// (batch 1) per sequence that sees the same calls, and every sequence's token history. Each paged call
// is checked row by row against the same tokens on that sequence's plain cache; a fork's plain cache is
// the parent's tokens replayed; a tree is checked node by node against its root-to-node path run alone.
// test/paged-kv-cache.test.ts runs it on every backend that implements paged caches; a backend's own
// test file may call it too (`new SoloMirror(mha, paged)` on its engine's layer).

import { expect } from 'vitest';
import type { KvCache, MultiHeadAttention, PagedForwardOptions, PagedKvCache, PagedSequence } from '../../src/index.ts';
import { expectClose, type Tolerance } from '../../src/util/tolerance.ts';
import { mulberry32, uniform } from './random.ts';

/** The project's float32 rule, |out − ref| ≤ 2e-4 + 2e-3·|ref| (a NaN fails). */
export const PAGED_TOLERANCE: Tolerance = { atol: 2e-4, rtol: 2e-3 };

/** A call's score and window options (the ones a paged call takes beside `sequences`). */
export type PagedScoreOptions = Pick<PagedForwardOptions, 'window' | 'softcap' | 'sinks' | 'scale' | 'alibiSlopes'>;

/** Rows `which` of x [n, E], stacked. */
export function pickRows(x: Float32Array, E: number, which: readonly number[]): Float32Array {
  const out = new Float32Array(which.length * E);
  for (let i = 0; i < which.length; i++) out.set(x.subarray(which[i] * E, (which[i] + 1) * E), i * E);
  return out;
}

/** The root-to-node path of node i of a tree (root first). */
export function pathTo(parents: Int32Array, i: number): number[] {
  const path: number[] = [];
  for (let a = i; a >= 0; a = parents[a]) path.unshift(a);
  return path;
}

/** Rows concatenated. */
function concat(rows: readonly Float32Array[]): Float32Array {
  const out = new Float32Array(rows.reduce((n, r) => n + r.length, 0));
  let at = 0;
  for (const r of rows) {
    out.set(r, at);
    at += r.length;
  }
  return out;
}

/** One entry of SoloMirror.call: a sequence's new tokens (or a tree of them). */
export interface MirrorPart {
  id: number;
  length: number;
  treeParents?: Int32Array;
}

/**
 * A PagedKvCache of one layer and its model: every sequence's kept tokens (`history`, rows of E) and a
 * plain KvCache per sequence that saw the same calls (`plain`). Every method acts on both and checks
 * the paged side against the plain one.
 */
export class SoloMirror {
  readonly E: number;
  readonly history = new Map<number, Float32Array[]>();
  readonly plain = new Map<number, KvCache>();
  /** Pending trees (after a tree call, until acceptPath): their tokens and parents. */
  private readonly trees = new Map<number, { rows: Float32Array; parents: Int32Array }>();
  private readonly rng: () => number;
  /** Calls made (for messages). */
  calls = 0;
  /** The block count's model (when the cache had no sequences at the start): freeBlocks is checked after every change. */
  readonly model: BlockModel | null;

  constructor(
    readonly mha: MultiHeadAttention,
    readonly paged: PagedKvCache,
    readonly options: PagedScoreOptions = {},
    readonly maxSeqLen = 256,
    seed = 1,
    readonly tolerance: Tolerance = PAGED_TOLERANCE,
  ) {
    this.E = mha.embedDim;
    this.rng = mulberry32(seed);
    this.model = paged.sequenceIds.length === 0 ? new BlockModel(paged.blockSize, paged.maxBlocks) : null;
  }

  /** paged.freeBlocks against the model's. */
  checkBlocks(what = 'freeBlocks'): void {
    if (this.model) expect(this.paged.freeBlocks, what).toBe(this.model.freeBlocks);
  }

  /** A new plain cache holding `rows` (the solo run of a sequence with that history, as one prefill). */
  async replay(rows: readonly Float32Array[]): Promise<KvCache> {
    const cache = this.mha.createKvCache({ batchSize: 1, maxSeqLen: this.maxSeqLen });
    if (rows.length > 0) await this.mha.forward(concat(rows), { batchSize: 1, seqLen: rows.length, kvCache: cache, isCausal: true, ...this.options });
    return cache;
  }

  add(): number {
    const id = this.paged.addSequence();
    expect(typeof id).toBe('number');
    this.history.set(id, []);
    this.plain.set(id, this.mha.createKvCache({ batchSize: 1, maxSeqLen: this.maxSeqLen }));
    expect(this.paged.lengthOf(id)).toBe(0);
    this.model?.add(id);
    this.checkBlocks('freeBlocks after addSequence');
    return id;
  }

  /** paged.fork(id); the child's solo run is the parent's tokens replayed. */
  async fork(id: number): Promise<number> {
    expect(this.trees.has(id), 'fork with a tree pending is not modelled').toBe(false);
    const child = this.paged.fork(id);
    expect(typeof child).toBe('number');
    const rows = [...this.history.get(id)!];
    this.history.set(child, rows);
    this.plain.set(child, await this.replay(rows));
    expect(this.paged.lengthOf(child)).toBe(this.paged.lengthOf(id));
    this.model?.fork(id, child);
    this.checkBlocks('freeBlocks after fork (blocks shared, none taken)');
    return child;
  }

  truncate(id: number, length: number): void {
    this.paged.truncate(id, length);
    this.plain.get(id)!.truncate(length);
    this.history.get(id)!.length = length;
    this.trees.delete(id);
    expect(this.paged.lengthOf(id)).toBe(length);
    this.model?.truncate(id, length);
    this.checkBlocks(`freeBlocks after truncate(${id}, ${length})`);
  }

  remove(id: number): void {
    this.paged.remove(id);
    this.plain.get(id)!.dispose();
    this.plain.delete(id);
    this.history.delete(id);
    this.trees.delete(id);
    this.model?.remove(id);
    this.checkBlocks(`freeBlocks after remove(${id})`);
  }

  /**
   * One paged call of `parts` (random tokens unless `x` is given), checked against each sequence's plain
   * cache fed the same tokens (a tree: the same tree, and each node against its path run alone).
   * Returns the paged output.
   */
  async call(parts: readonly MirrorPart[], x?: Float32Array): Promise<Float32Array> {
    const { E } = this;
    const T = parts.reduce((n, p) => n + p.length, 0);
    const input = x ?? uniform(T * E, 1, this.rng);
    const sequences: PagedSequence[] = parts.map((p) => (p.treeParents ? { id: p.id, length: p.length, treeParents: p.treeParents } : { id: p.id, length: p.length }));
    const before = parts.map((p) => this.paged.lengthOf(p.id));
    const { output } = await this.mha.forward(input, { kvCache: this.paged, sequences, isCausal: true, ...this.options });
    this.calls++;
    expect(output.length).toBe(T * E);
    this.model?.write(parts.map((p, i) => ({ id: p.id, start: before[i], length: p.length })));
    this.checkBlocks(`freeBlocks after call ${this.calls}`);
    let row = 0;
    for (const [i, p] of parts.entries()) {
      const rows = input.subarray(row * E, (row + p.length) * E);
      const got = output.subarray(row * E, (row + p.length) * E);
      const what = `call ${this.calls}, sequence ${p.id} (entry ${i}, ${before[i]} + ${p.length})`;
      expect(this.paged.lengthOf(p.id), `${what}: lengthOf`).toBe(before[i] + p.length);
      const plain = this.plain.get(p.id)!;
      const { output: want } = p.treeParents
        ? await this.mha.forward(rows, { batchSize: 1, seqLen: p.length, kvCache: plain, treeParents: p.treeParents, ...this.options })
        : await this.mha.forward(rows, { batchSize: 1, seqLen: p.length, kvCache: plain, isCausal: true, ...this.options });
      expectClose(got, want, this.tolerance, `${what}: paged rows vs the plain cache's`);
      if (p.treeParents) {
        // Each node against its root-to-node path run alone after the sequence's history.
        const history = this.history.get(p.id)!;
        for (let n = 0; n < p.length; n++) {
          const path = pathTo(p.treeParents, n);
          const alone = await this.replay(history);
          const { output: pathOut } = await this.mha.forward(pickRows(rows, E, path), {
            batchSize: 1,
            seqLen: path.length,
            kvCache: alone,
            isCausal: true,
            ...this.options,
          });
          expectClose(pickRows(got, E, [n]), pathOut.subarray((path.length - 1) * E), this.tolerance, `${what}: tree node ${n} vs its path ${path} alone`);
          alone.dispose();
        }
        this.trees.set(p.id, { rows: rows.slice(), parents: p.treeParents });
      } else {
        this.trees.delete(p.id);
        const h = this.history.get(p.id)!;
        for (let r = 0; r < p.length; r++) h.push(rows.slice(r * E, (r + 1) * E));
      }
      row += p.length;
    }
    return output;
  }

  /** paged.acceptPath(id, path) and the plain cache's acceptPath(path); the history gains the path's tokens. */
  acceptPath(id: number, path: readonly number[]): void {
    const tree = this.trees.get(id)!;
    const start = this.history.get(id)!.length;
    this.paged.acceptPath(id, path);
    this.plain.get(id)!.acceptPath(path);
    this.model?.truncate(id, start + path.length); // the dropped nodes' whole blocks go back
    for (const n of path) this.history.get(id)!.push(tree.rows.slice(n * this.E, (n + 1) * this.E));
    this.trees.delete(id);
    expect(this.paged.lengthOf(id)).toBe(start + path.length);
  }

  /** The paged contents of `id` against its plain cache's, and (with `replay`) against its history replayed on a fresh cache. */
  async checkContents(id: number, replay = false): Promise<void> {
    const got = await this.paged.read(id);
    const refs = [await this.plain.get(id)!.read()];
    let fresh: KvCache | null = null;
    if (replay && !this.trees.has(id)) {
      fresh = await this.replay(this.history.get(id)!);
      refs.push(await fresh.read());
    }
    for (const want of refs) {
      expectClose(got.key, want.key, this.tolerance, `sequence ${id}: keys`);
      expectClose(got.value, want.value, this.tolerance, `sequence ${id}: values`);
    }
    fresh?.dispose();
  }

  /** Every sequence's length, the free blocks: to check that a refusal changed nothing. */
  snapshot(): { lengths: [number, number][]; freeBlocks: number } {
    return { lengths: this.paged.sequenceIds.map((id) => [id, this.paged.lengthOf(id)]), freeBlocks: this.paged.freeBlocks };
  }

  dispose(): void {
    for (const c of this.plain.values()) c.dispose();
    this.plain.clear();
    this.history.clear();
  }
}

/**
 * The block table's rules, as a model that counts blocks: a sequence holds ⌈positions written / blockSize⌉
 * blocks (fork shares them; a write into a shared block takes one new block for the writer: copy-on-write;
 * truncate keeps ⌈length / blockSize⌉; remove releases all; a block is free when no sequence holds it).
 * `freeBlocks` is what the cache's freeBlocks must be; `need(parts)` the blocks a call takes.
 */
export class BlockModel {
  private readonly seqs = new Map<number, number[]>();
  private readonly refs = new Map<number, number>();
  private next = 0;

  constructor(
    readonly blockSize: number,
    readonly maxBlocks: number,
  ) {}

  get freeBlocks(): number {
    return this.maxBlocks - this.refs.size;
  }

  /** Blocks sequence `id` holds. */
  blocksOf(id: number): number {
    return this.seqs.get(id)!.length;
  }

  add(id: number): void {
    this.seqs.set(id, []);
  }

  fork(id: number, child: number): void {
    const blocks = [...this.seqs.get(id)!];
    for (const b of blocks) this.refs.set(b, this.refs.get(b)! + 1);
    this.seqs.set(child, blocks);
  }

  /** Blocks a call of `parts` (each { id, start: its length before, length }) needs. */
  need(parts: readonly { id: number; start: number; length: number }[]): number {
    return this.plan(parts, false);
  }

  /** Applies the call's writes. */
  write(parts: readonly { id: number; start: number; length: number }[]): void {
    this.plan(parts, true);
  }

  truncate(id: number, length: number): void {
    const blocks = this.seqs.get(id)!;
    for (const b of blocks.splice(Math.ceil(length / this.blockSize))) this.release(b);
  }

  remove(id: number): void {
    for (const b of this.seqs.get(id)!) this.release(b);
    this.seqs.delete(id);
  }

  private plan(parts: readonly { id: number; start: number; length: number }[], apply: boolean): number {
    const refs = new Map(this.refs);
    let need = 0;
    for (const { id, start, length } of parts) {
      const blocks = apply ? this.seqs.get(id)! : [...this.seqs.get(id)!];
      for (let b = Math.floor(start / this.blockSize); b < Math.ceil((start + length) / this.blockSize); b++) {
        if (b >= blocks.length) {
          need++;
          if (apply) {
            blocks.push(this.next);
            this.refs.set(this.next++, 1);
          }
        } else if (refs.get(blocks[b])! > 1) {
          refs.set(blocks[b], refs.get(blocks[b])! - 1);
          need++;
          if (apply) {
            this.release(blocks[b]);
            blocks[b] = this.next;
            this.refs.set(this.next++, 1);
          }
        }
      }
    }
    return need;
  }

  private release(b: number): void {
    const n = this.refs.get(b)! - 1;
    if (n === 0) this.refs.delete(b);
    else this.refs.set(b, n);
  }
}
