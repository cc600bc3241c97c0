// The 'wasm' backend's kernels (wasm/*.ts, compiled into module.ts) as the host sees them: the module,
// compiled once per page or process, and WasmKernels, one instance with its own memory, laid out by
// the host as: weights at the bottom for a layer's life (kept), then held blocks (KV caches: taken
// and freed in any order, gaps reused first-fit), then a bump arena for each call's buffers.

import { DeviceLimitError } from '../errors.ts';
import { WASM_BASE64, WASM_RELAXED_BASE64, WASM_SHARED_BASE64, WASM_SHARED_RELAXED_BASE64 } from './module.ts';
import { resolveWasmSimd, type WasmSimd } from './simd.ts';
import { choiceOf, ThreadChoice } from './thread-choice.ts';
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
  rotary(x: number, ldx: number, rows: number, heads: number, Dh: number, angles: number, dim: number, interleaved: number): void;
  /** wasm/halves.ts: a K row into a column of Kᵀ and a V row, as f16 (halfBitsOfFloat32Bits's bits); 1 where a half written is ±∞ or NaN. */
  toHalves(k: number, kt: number, stride: number, v: number, vo: number, Dh: number, scratch: number): number;
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
    finite: number,
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
    blockStride: number,
    headOffset: number,
    o: number,
    ldo: number,
    Skv: number,
    Dh: number,
    scratch: number,
  ): void;
}

export { relaxedSimdSupported, resolveWasmSimd, type WasmSimd } from './simd.ts';

const compiled: Partial<Record<`${'single' | 'shared'}-${WasmSimd}`, Promise<WebAssembly.Module>>> = {};
/** The build of each module compileKernels made (WasmKernels.build). */
const builds = new WeakMap<WebAssembly.Module, WasmSimd>();
const SOURCES = {
  'single-simd128': WASM_BASE64,
  'shared-simd128': WASM_SHARED_BASE64,
  'single-relaxed': WASM_RELAXED_BASE64,
  'shared-relaxed': WASM_SHARED_RELAXED_BASE64,
} as const;

/**
 * The kernels' module, compiled once a build (asynchronously: browsers refuse large synchronous
 * compiles on the main thread): 'single' owns its memory; 'shared' imports a shared one, for threads;
 * `simd` as resolveWasmSimd() gives it (default: relaxed where supported).
 */
export function compileKernels(kind: 'single' | 'shared' = 'single', simd: WasmSimd = resolveWasmSimd() ?? 'simd128'): Promise<WebAssembly.Module> {
  const key = `${kind}-${simd}` as const;
  let module = compiled[key];
  if (!module) {
    const bytes = Uint8Array.from(atob(SOURCES[key]), (c) => c.charCodeAt(0));
    module = WebAssembly.compile(bytes).then((m) => {
      builds.set(m, simd);
      return m;
    });
    compiled[key] = module;
    module.catch(() => {
      delete compiled[key]; // let a later engine try again
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
 * Runs one call: its arguments by index (no rest array, no spread: a decode step makes dozens of calls),
 * up to 16 of them (the kernels' longest takes 15); a wasm function ignores the undefined ones past its own.
 */
export function callKernel(k: Record<string, (...args: number[]) => void>, c: KernelCall): void {
  const f = k[c[0]];
  if (typeof f !== 'function') throw new Error(`no kernel ${c[0]} in this instance`); // as a worker says it (worker.ts)
  if (c.length > 17) {
    f(...(c.slice(1) as number[]));
    return;
  }
  const a = c as unknown as number[];
  f(a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16]);
}

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
  /** The kinds of pass this instance has run, with their side ('kind:1' on the threads, 'kind:0' on this thread alone): the first of each is not a trial's evidence. */
  private readonly warm = new Set<string>();
  private f32View: Float32Array;
  private u8View: Uint8Array;
  private i32View: Int32Array;

  /** The build of `module` where compileKernels made it ('simd128' or 'relaxed'), else null. */
  readonly build: WasmSimd | null;

  /** `module` from compileKernels('single'), or from compileKernels('shared') with a pool. */
  constructor(
    readonly module: WebAssembly.Module,
    private readonly pool: ThreadPool | null = null,
  ) {
    this.build = builds.get(module) ?? null;
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
    this.i32View = new Int32Array(this.memory.buffer);
  }

  /**
   * Runs lists of kernel calls, each list's calls in order on one thread, the lists claimed by the
   * threads as they come free (all on this one without a pool). `kind`: the kind listsFor was asked
   * about, whose choice this pass's time informs.
   */
  async run(lists: KernelCall[][], kind?: string): Promise<void> {
    const local = (calls: KernelCall[]) => {
      const k = this.k as unknown as Record<string, (...args: number[]) => void>;
      for (let i = 0; i < calls.length; i++) callKernel(k, calls[i]);
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
    if (this.warm.has(side)) this.choice.record(kind, lists.length > 1, performance.now() - t0);
    else this.warm.add(side);
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

  get i32(): Int32Array {
    if (this.i32View.byteLength !== this.memory.buffer.byteLength) this.i32View = new Int32Array(this.memory.buffer);
    return this.i32View;
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
