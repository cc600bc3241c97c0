// The 'wasm' backend's kernels (wasm/*.ts, compiled into module.ts) as the host sees them: the module,
// compiled once per page or process, and WasmKernels, one instance with its own memory, laid out by
// the host as: weights at the bottom for a layer's life (kept), then held blocks (KV caches: taken
// and freed in any order, gaps reused first-fit), then a bump arena for each call's buffers.

import { DeviceLimitError } from '../errors.ts';
import { WASM_BASE64, WASM_SHARED_BASE64 } from './module.ts';
import { median } from '../util/stats.ts';
import type { KernelCall, ThreadPool } from './threads.ts';

/** y = x · Wᵀ + bias with W packed (wasm/qgemm.ts: quants `wq`, scales and offsets `so`): qgemv and qgemm take the same arguments. */
type QuantizedProduct = (
  x: number,
  ldx: number,
  M: number,
  K: number,
  wq: number,
  so: number,
  N: number,
  bias: number,
  y: number,
  ldy: number,
  bits: number,
  group: number,
  scratch: number,
) => void;

/** What the module exports (wasm/gemm.ts, wasm/qgemm.ts, wasm/attention.ts); pointers are byte addresses. */
interface KernelExports {
  heapBase(): number;
  gemm(x: number, ldx: number, M: number, K: number, wp: number, N: number, bias: number, y: number, ldy: number): void;
  qgemv: QuantizedProduct;
  qgemm: QuantizedProduct;
  /** wasm/q8.ts: the same products on activations quantized to q8 (src/quant/activations.ts), integer dot products. */
  qgemv8: QuantizedProduct;
  qgemm8: QuantizedProduct;
  /** wasm/q8.ts: x [M, K] quantized per block of 32 as quantizeActivationsQ8 (i16 values in `layout` 0, 4 or 8; (d, d·S) per unit). */
  quantizeQ8(x: number, ldx: number, M: number, K: number, unit: number, layout: number, q: number, ldq: number, ds: number): void;
  transpose(k: number, ldk: number, rows: number, Dh: number, kt: number): void;
  setRule(
    scale: number,
    softcap: number,
    slope: number,
    sink: number,
    hasSink: number,
    headScale: number,
    causal: number,
    window: number,
    pad: number,
    mask: number,
    kind: number,
    ks: number,
    vRow: number,
    dec: number,
  ): void;
  attend(q: number, ldq: number, kt: number, v: number, ldv: number, o: number, ldo: number, Sq: number, Skv: number, Dh: number, stats: number, scratch: number): void;
  attendHeads(q: number, ldq: number, kt: number, v: number, ldv: number, o: number, ldo: number, heads: number, Skv: number, Dh: number, scratch: number): void;
  probabilities(q: number, ldq: number, kt: number, Sq: number, Skv: number, Dh: number, stats: number, out: number, ldp: number): void;
  /** wasm/paged.ts: a PagedKvCache's attention, K and V read in place through a block table (src/wasm/paged-attention.ts). */
  setPagedRule(scale: number, softcap: number, slope: number, sink: number, hasSink: number, window: number, mask: number, kind: number, rowBytes: number): void;
  attendPaged(
    q: number,
    ldq: number,
    Sq: number,
    onePosition: number,
    kPool: number,
    vPool: number,
    table: number,
    shift: number,
    blockBytes: number,
    headBytes: number,
    o: number,
    ldo: number,
    Skv: number,
    Dh: number,
    scratch: number,
  ): void;
}

const compiled: Partial<Record<'single' | 'shared', Promise<WebAssembly.Module>>> = {};

/**
 * The kernels' module, compiled once (asynchronously: browsers refuse large synchronous compiles on
 * the main thread): 'single' owns its memory; 'shared' imports a shared one, for threads.
 */
export function compileKernels(kind: 'single' | 'shared' = 'single'): Promise<WebAssembly.Module> {
  let module = compiled[kind];
  if (!module) {
    const bytes = Uint8Array.from(atob(kind === 'single' ? WASM_BASE64 : WASM_SHARED_BASE64), (c) => c.charCodeAt(0));
    module = WebAssembly.compile(bytes);
    compiled[kind] = module;
    module.catch(() => {
      delete compiled[kind]; // let a later engine try again
    });
  }
  return module;
}

/** The most memory an instance may grow to: 65536 pages, 4 GiB (wasm32; the shared module's declared maximum). */
const MAXIMUM_PAGES = 65536;
let nextId = 0;

const ALIGN = 64; // bytes: every buffer starts on a cache line
const PAGE = 65536;

/**
 * One instance of the kernels and its memory; with a thread pool, the memory is shared and every
 * worker holds an instance on it too.
 */
export class WasmKernels {
  readonly k: KernelExports;
  readonly memory: WebAssembly.Memory;
  /** Threads a pass is split over (1 without a pool). */
  readonly threads: number;
  /** This instance's id in the thread pool (its instance on each worker). */
  readonly id = nextId++;
  /** Which kinds of pass run on the threads (listsFor): the pool's, shared by the engine's layers (one schedule of trials for all). */
  readonly choice: ThreadChoice;
  private top: number;
  /** The first byte the host may use. */
  private readonly bottom: number;
  /** Where held blocks start (the end of what keep() kept). */
  private heldFrom: number;
  /** Live held blocks [ptr, end), by address. */
  private readonly held: [ptr: number, end: number][] = [];
  /** Passes run so far per kind and side ('kind:1' on the threads, 'kind:0' on this thread alone): the first of each is not a trial's evidence. */
  private readonly passesRun = new Map<string, number>();
  private f32View: Float32Array;
  private u8View: Uint8Array;

  /** `module` from compileKernels('single'), or from compileKernels('shared') with a pool. */
  constructor(
    module: WebAssembly.Module,
    private readonly pool: ThreadPool | null = null,
  ) {
    if (pool) {
      this.memory = new WebAssembly.Memory({ initial: 1, maximum: MAXIMUM_PAGES, shared: true });
      this.k = new WebAssembly.Instance(module, { env: { memory: this.memory } }).exports as unknown as KernelExports;
      pool.open(this.id, module, this.memory);
    } else {
      const exports = new WebAssembly.Instance(module, {}).exports;
      this.k = exports as unknown as KernelExports;
      this.memory = exports.memory as WebAssembly.Memory;
    }
    this.threads = pool ? pool.size : 1;
    this.choice = pool ? choiceOf(pool) : new ThreadChoice();
    this.bottom = Math.ceil(this.k.heapBase() / ALIGN) * ALIGN;
    this.top = this.bottom;
    this.heldFrom = this.bottom;
    this.f32View = new Float32Array(this.memory.buffer);
    this.u8View = new Uint8Array(this.memory.buffer);
  }

  /**
   * Runs lists of kernel calls, each list's calls in order on one thread, the lists claimed by the
   * threads as they come free (all on this one without a pool). `kind`: the kind listsFor was asked
   * about, whose choice this pass's time informs.
   */
  async run(lists: KernelCall[][], kind?: string): Promise<void> {
    const local = (calls: KernelCall[]) => {
      const k = this.k as unknown as Record<string, (...args: number[]) => void>;
      for (const [name, ...args] of calls) k[name](...args);
    };
    const t0 = performance.now();
    if (this.pool) await this.pool.run(this.id, lists, local);
    else for (const calls of lists) local(calls);
    if (kind === undefined) return;
    // This layer's first pass of a kind on each side is cold (its weights and cache first read, a
    // worker's instance first run: 1.6 ms on two threads where a warm pass takes 0.4, in an 8-layer
    // q4_0 stack's first token): not evidence for the pool's choice, which a model's first token would
    // otherwise settle against the threads for the next PERIOD passes.
    const side = `${kind}:${lists.length > 1 ? 1 : 0}`;
    const n = this.passesRun.get(side) ?? 0;
    this.passesRun.set(side, n + 1);
    if (n > 0) this.choice.record(kind, lists.length > 1, performance.now() - t0);
  }

  /** Drops the workers' instances (this one goes with its last reference). */
  dispose(): void {
    this.pool?.close(this.id);
  }

  /** Reserves `floats` float32s (or bytes, with bytes = true), growing the memory if needed; returns the byte address. */
  alloc(count: number, bytes = false): number {
    const ptr = this.top;
    const top = ptr + Math.ceil((bytes ? count : 4 * count) / ALIGN) * ALIGN;
    this.ensure(top);
    this.top = top;
    return ptr;
  }

  /** Keeps everything allocated so far (a layer's weights) for the instance's life: release() leaves it. */
  keep(): void {
    this.heldFrom = this.top;
  }

  /**
   * A block of `floats` float32s that stays until free(): the first gap between held blocks that fits,
   * else above them. Only while no call's buffers are in use (the arena starts above held blocks).
   */
  hold(floats: number): number {
    const size = Math.ceil((4 * floats) / ALIGN) * ALIGN;
    let at = this.heldFrom;
    let i = 0;
    for (; i < this.held.length && this.held[i][0] - at < size; i++) at = this.held[i][1];
    this.ensure(at + size);
    this.held.splice(i, 0, [at, at + size]);
    this.top = Math.max(this.top, this.heldEnd);
    return at;
  }

  /** Gives a held block back (for the next hold, and the arena when it was the highest). */
  free(ptr: number): void {
    const i = this.held.findIndex(([p]) => p === ptr);
    if (i >= 0) this.held.splice(i, 1);
  }

  /** Where the held blocks end: each call's arena starts here. */
  get heldEnd(): number {
    return this.held.length > 0 ? this.held[this.held.length - 1][1] : this.heldFrom;
  }

  /** Grows the memory to at least `end` bytes. */
  private ensure(end: number): void {
    const have = this.memory.buffer.byteLength;
    if (end <= have) return;
    try {
      if (end > MAXIMUM_PAGES * PAGE) throw new RangeError('past the 4 GiB of a 32-bit WebAssembly memory');
      this.memory.grow(Math.ceil((end - have) / PAGE));
    } catch (e) {
      throw new DeviceLimitError({
        where: "the 'wasm' backend",
        argument: 'the memory of this layer (weights, KV caches) and call (inputs, Q, K, V, outputs, and with needWeights [B, H, Sq, Skv])',
        expected: 'within what the WebAssembly memory can grow to (4 GiB at most)',
        given: `${end} bytes (${(e as Error).message})`,
        fix: 'Split the batch into smaller calls, or leave out needWeights (and dispose of KV caches no longer needed).',
      });
    }
  }

  /** Where the arena ends now: release(mark()) frees everything allocated after it. */
  mark(): number {
    return this.top;
  }

  /** Frees everything allocated after `mark` (0: everything but what was kept and held). */
  release(mark: number): void {
    this.top = Math.max(mark, this.heldEnd);
  }

  /** The memory as float32 (a fresh view after the memory grew). */
  get f32(): Float32Array {
    if (this.f32View.byteLength !== this.memory.buffer.byteLength) this.f32View = new Float32Array(this.memory.buffer);
    return this.f32View;
  }

  get u8(): Uint8Array {
    if (this.u8View.byteLength !== this.memory.buffer.byteLength) this.u8View = new Uint8Array(this.memory.buffer);
    return this.u8View;
  }

  /** Copies `data` into a new buffer; returns its address. */
  put(data: Float32Array): number {
    const ptr = this.alloc(data.length);
    this.f32.set(data, ptr >> 2);
    return ptr;
  }

  putBytes(data: Uint8Array): number {
    const ptr = this.alloc(data.length, true);
    this.u8.set(data, ptr);
    return ptr;
  }

  /** A copy of `length` float32s at ptr. */
  take(ptr: number, length: number): Float32Array {
    return this.f32.slice(ptr >> 2, (ptr >> 2) + length);
  }
}

/**
 * Below this many multiply-adds a pass runs on the calling thread alone: handing work to a worker
 * costs tens of microseconds (a postMessage round trip: 39 µs median, 58 µs p90, Node 20 on a 2-core
 * EPYC), about what one thread needs for half a million (a decode step's attention over 1024 keys at
 * E=2048 is 2M: 0.9 ms on one thread there; it was under the 4M of an earlier bound, and did not split).
 */
export const MIN_WORK_PER_THREAD = 1 << 19;

/**
 * Lists a pass's work is cut into per thread when it runs on several: the threads claim them one at a
 * time (threads.ts), so that one slowed down (its core shared with another process) takes fewer.
 */
export const LISTS_PER_THREAD = 4;

/**
 * The lists a pass of `work` multiply-adds of kind `kind` is split into: 1 (the caller alone) for small
 * passes, on one thread, or where one thread was measured faster for this kind (ThreadChoice), else
 * LISTS_PER_THREAD a thread. Each list is computed as one thread computes it: results do not depend on
 * the split. Pass the lists to kernels.run with the same kind, which times them for the choice.
 */
export function listsFor(kernels: WasmKernels, work: number, kind: string): number {
  if (work < MIN_WORK_PER_THREAD || kernels.threads === 1) return 1;
  return kernels.choice.threaded(kind) ? kernels.threads * LISTS_PER_THREAD : 1;
}

/** How ThreadChoice chooses: by measurement (the default), or always / never on the threads (tests). */
export type ThreadChoiceMode = 'measured' | 'always' | 'never';
let choiceMode: ThreadChoiceMode = 'measured';

/** Sets how every engine's 'wasm' passes choose their threads (tests; not public API). */
export function setThreadChoiceMode(mode: ThreadChoiceMode): void {
  choiceMode = mode;
}

/** Passes of a trial; passes between trials, at first and at most (the gap doubles while the trials confirm the choice); the window of trial times kept per kind and option; the margin threads must win by. */
const TRIAL = 16;
const PERIOD = 256;
const MAX_PERIOD = 8192;
const WINDOW = 5;
const MARGIN = 0.95;

/**
 * Whether a kind of pass (a projection of given sizes and rows, an attention of given shape) runs on
 * the threads or on the caller alone, measured rather than guessed (issue 41). Every pass of an engine
 * counts toward one schedule: a trial of TRIAL passes all on the threads, one of TRIAL passes all on the
 * caller alone, then passes where each kind takes what its trials measured (the threads only where
 * their median over the kind's last WINDOW trial passes is below MARGIN × one thread's; a kind not yet
 * measured both ways takes the threads), and again after PERIOD passes, a gap that doubles (up to
 * MAX_PERIOD) each time a trial leaves every kind's choice as it was, and starts over when one changes.
 * Trials cover every kind at once, so a trial measures the threads as they run when they run steadily:
 * a worker that took the previous pass a moment ago is still awake, where one asked once in a while
 * after a stretch on one thread sleeps (on a virtual machine its wake-up can cost more than a decode
 * step's pass). A kind's first pass in each trial is not counted (it pays for the switch), nor is a
 * layer's first pass of a kind on either side (WasmKernels.run: cold). The trials
 * repeat, so the choice follows the machine: another process taking a core makes the threads lose, and
 * the kinds move to one thread.
 */
export class ThreadChoice {
  private readonly kinds = new Map<string, { one: number[]; all: number[]; seen: number }>();
  /** Passes so far; where the current (or next) trial starts; the gap after it; the trial's number and the side of the pass being planned. */
  private passes = 0;
  private start = 0;
  private period = PERIOD;
  private trial = 0;
  private side: 'all' | 'one' | null = null;
  /** Every kind's choice after the last trial (to see whether a trial changed any). */
  private settled = '';

  /** Whether the next pass of `kind` runs on the threads. */
  threaded(kind: string): boolean {
    if (choiceMode !== 'measured') return choiceMode === 'always';
    const at = this.passes++ - this.start;
    if (at === 0) this.trial++;
    this.side = at < 0 ? null : at < TRIAL ? 'all' : at < 2 * TRIAL ? 'one' : null;
    if (at === 2 * TRIAL) this.afterTrial(); // this pass is the gap's first
    if (this.side) return this.side === 'all';
    const k = this.kinds.get(kind);
    if (!k || k.all.length === 0 || k.one.length === 0) return true;
    return median(k.all) < MARGIN * median(k.one);
  }

  /** A trial ended: the next one after the gap, doubled if no kind's choice changed. */
  private afterTrial(): void {
    const now = this.report()
      .map((r) => `${r.kind}=${r.threads}`)
      .join(';');
    this.period = now === this.settled ? Math.min(2 * this.period, MAX_PERIOD) : PERIOD;
    this.settled = now;
    this.start += 2 * TRIAL + this.period;
  }

  /** Records a pass of `kind` that took `ms`, on the threads or not: kept if it was a trial's (and not the kind's first in it). */
  record(kind: string, threaded: boolean, ms: number): void {
    if (choiceMode !== 'measured' || this.side === null || threaded !== (this.side === 'all')) return;
    let k = this.kinds.get(kind);
    if (!k) {
      k = { one: [], all: [], seen: 0 };
      this.kinds.set(kind, k);
    }
    const mark = 2 * this.trial + (threaded ? 0 : 1); // this trial, this side
    if (k.seen !== mark) {
      k.seen = mark; // the first pass of the kind in this trial
      return;
    }
    const times = threaded ? k.all : k.one;
    times.push(ms);
    if (times.length > WINDOW) times.shift();
  }

  /** The kinds measured so far and their choice (diagnostics, tests). */
  report(): { kind: string; threads: boolean | null; one: number | null; all: number | null }[] {
    return [...this.kinds].map(([kind, k]) => ({
      kind,
      threads: k.all.length && k.one.length ? median(k.all) < MARGIN * median(k.one) : null,
      one: k.one.length ? median(k.one) : null,
      all: k.all.length ? median(k.all) : null,
    }));
  }
}

const choices = new WeakMap<ThreadPool, ThreadChoice>();

/** The ThreadChoice of a pool's passes (every kernel instance on it: an engine's layers). */
function choiceOf(pool: ThreadPool): ThreadChoice {
  let choice = choices.get(pool);
  if (!choice) {
    choice = new ThreadChoice();
    choices.set(pool, choice);
  }
  return choice;
}

/** A size class: n rounded down to a power of two (kinds of pass group sizes so). */
export function sizeClass(n: number): number {
  return n < 1 ? 0 : 2 ** Math.floor(Math.log2(n));
}

/** W [N, K] (row-major) packed for gemm: panels of 8 rows of W, k-major inside a panel, zero past N. */
export function packWeights(W: Float32Array, N: number, K: number): Float32Array {
  const P = Math.ceil(N / 8);
  const out = new Float32Array(P * K * 8);
  for (let n = 0; n < N; n++) {
    const p = n >> 3;
    const c = n & 7;
    for (let k = 0; k < K; k++) out[(p * K + k) * 8 + c] = W[n * K + k];
  }
  return out;
}

/** A bias of N values (or none: zeros) padded to whole panels of 8. */
export function packBias(bias: Float32Array | null, offset: number, N: number): Float32Array {
  const out = new Float32Array(Math.ceil(N / 8) * 8);
  if (bias) out.set(bias.subarray(offset, offset + N));
  return out;
}
