// Whether the relaxed build's 4-bit 'q8' products (wasm/q8.ts qgemm8, qgemv8) take DOT_ADD on this
// platform: i32x4.relaxed_dot_i8x16_i7x16_add_s, one instruction for 16 products and their sum where the
// CPU has one (x86's AVX-VNNI vpdpbusd, Arm's sdot), in place of two i16 dot products and two adds. Both
// forms sum the same integers, so they give the same bits where the platform computes the instruction
// as the specification says. Not everywhere does, nor everywhere fast:
//   - Node 20's baseline compiler (Liftoff) drops the addend (2·Σ a·b): a kernel's first calls would be
//     wrong there;
//   - V8 without AVX-VNNI lowers it to three instructions: in Node 20 on a CPU with VNNI, 28 G products a
//     second against the i16 form's 54 (scripts/bench-wasm-peak.ts, 2026-12-06). Chromium 156 on the
//     same CPU: 91 against 70, and on q4_0 (K 2048 → N 3072) qgemm8 of 512 rows 74 → 59 ms, qgemv8 of
//     one row 0.375 → 0.351 ms (in cache; 0.474 → 0.443 from memory), of 4 rows 0.97 → 0.85 ms.
// So DotAddChoice, one per compiled module (every layer of an engine shares it):
//   1. a check, once: simd.ts relaxedDotAddRight (the instruction alone, in a fresh module's first call,
//      V8's baseline code, whatever tier the kernels have reached), then computesRight (qgemm8 on a few
//      rows of random 4-bit words with both forms, compared bit for bit: every row count of its
//      micro-kernel, a unit cut short); wrong: never DOT_ADD (qgemv8's rows are checked the same way on
//      the first decode step after a verdict for DOT_ADD, never before it);
//   2. then the 4-bit 'q8' prefill passes (of DOT_ADD_MIN_TRIAL_PRODUCTS at least) alternate the two
//      forms (the same bits, so a caller sees no difference) and their times per product are kept; past SKIP passes of each (the kernels' first
//      runs, V8's baseline code), the medians of the next SAMPLES decide, DOT_ADD where it took less
//      than PAYS of the i16 form's time; every later pass takes the verdict, smaller prefills and decode
//      steps (qgemv8, checked first) too (before it, they take the i16 form).
// As ThreadChoice (thread-choice.ts) chooses the threads: measured on the work itself, never guessed.

import { mulberry32, uniform } from '../util/seeded.ts';
import { median } from '../util/stats.ts';
import type { WasmKernels } from './kernels.ts';
import { relaxedDotAddRight } from './simd.ts';

/** wasm/q8.ts's DOT_ADD flag of qgemm8 (the same value), or'ed into its `bits`. */
export const DOT_ADD = 0x200;

/** The share of the i16 form's time below which DOT_ADD is taken (a margin for noise). */
const PAYS = 0.9;
/** Passes of each form not counted (first runs), then passes of each form that decide. */
const [SKIP, SAMPLES] = [1, 2];
/** The 4-bit 'q8' prefill passes a choice times before its verdict (half with each form). */
export const DOT_ADD_TRIAL_PASSES = 2 * (SKIP + SAMPLES);
/**
 * The fewest multiply-adds a pass must have to be timed (about 0.1 ms of qgemm8 in Chromium): a browser
 * that is not cross-origin isolated rounds performance.now() to 0.1 ms. A smaller pass takes the verdict,
 * or the i16 form before there is one.
 */
export const DOT_ADD_MIN_TRIAL_PRODUCTS = 2 ** 22;

/** The kernel a check runs: the prefills' qgemm8 or the decode steps' qgemv8. */
export type DotAddProduct = 'qgemm8' | 'qgemv8';

/** The choice of a module: right or not, the passes' times per product (ms) of each form, the verdict. */
export class DotAddChoice {
  private right: boolean | null = null;
  private decodeRight: boolean | null = null;
  private readonly times: [i16: number[], dotAdd: number[]] = [[], []];
  /** DOT_ADD or not for good; null while the passes are still measured (or nothing was asked yet). */
  verdict: boolean | null = null;

  /** `check` answers whether DOT_ADD gives the i16 form's bits on the module's kernels (computesRight). */
  constructor(private readonly check: (kernels: WasmKernels, product: DotAddProduct) => boolean) {}

  /** Forgets the passes' times and the verdict (not the check): the next passes measure again. */
  remeasure(): void {
    this.times[0].length = 0;
    this.times[1].length = 0;
    this.verdict = this.right === false ? false : null;
  }

  /** Passes timed so far, both forms. */
  get passes(): number {
    return this.times[0].length + this.times[1].length;
  }

  /**
   * Whether the next 4-bit 'q8' prefill pass, on `kernels` (an instance of the module), takes DOT_ADD: the
   * verdict, else the form with fewer passes timed (the i16 form first); the check runs on the first ask.
   */
  next(kernels: WasmKernels): boolean {
    if (this.verdict !== null) return this.verdict;
    this.right ??= this.check(kernels, 'qgemm8');
    if (!this.right) {
      this.verdict = false;
      return false;
    }
    return this.times[1].length < this.times[0].length;
  }

  /**
   * Whether a pass that is not a trial takes DOT_ADD: where the verdict is for it, and for a decode step
   * (qgemv8) where qgemv8 computes it right too (checked on the first such step, on `kernels`).
   */
  taken(kernels: WasmKernels, decode: boolean): boolean {
    if (this.verdict !== true) return false;
    if (!decode) return true;
    this.decodeRight ??= this.check(kernels, 'qgemv8');
    return this.decodeRight;
  }

  /** A pass's time (ms) for `products` multiply-adds, taken with DOT_ADD or not (as next() said). */
  record(dotAdd: boolean, ms: number, products: number): void {
    if (this.verdict !== null || !(products > 0)) return;
    this.times[dotAdd ? 1 : 0].push(ms / products);
    const [i16, withDotAdd] = this.times;
    if (i16.length >= SKIP + SAMPLES && withDotAdd.length >= SKIP + SAMPLES) {
      this.verdict = median(withDotAdd.slice(SKIP)) < PAYS * median(i16.slice(SKIP));
    }
  }
}

const choices = new WeakMap<WebAssembly.Module, DotAddChoice>();

/** The DotAddChoice of `kernels`' module; null for the 'simd128' build (and a module compileKernels did not make). */
export function dotAddChoice(kernels: WasmKernels): DotAddChoice | null {
  if (kernels.build !== 'relaxed') return null;
  let choice = choices.get(kernels.module);
  if (!choice) {
    choice = new DotAddChoice(checkDotAdd);
    choices.set(kernels.module, choice);
  }
  return choice;
}

/** A choice's check: the instruction alone in baseline code (simd.ts relaxedDotAddRight), then `product` on `kernels` (computesRight). */
export function checkDotAdd(kernels: WasmKernels, product: DotAddProduct): boolean {
  return relaxedDotAddRight() && computesRight(kernels, product);
}

/** The DotAddChoice a module has so far (its first 4-bit 'q8' prefill makes it), else null: tests and benchmarks. */
export function dotAddChoiceOf(module: WebAssembly.Module): DotAddChoice | null {
  return choices.get(module) ?? null;
}

/** The probe's sizes: K of two whole units and 16 values, N of one 8-column panel and 4 more, and rows for each of qgemv8's steps (1, 2) and qgemm8's micro-kernel's last steps (9 … 12). */
const [K, N, GROUP] = [80, 12, 32];
const ROWS: Record<DotAddProduct, number[]> = { qgemv8: [1, 2], qgemm8: [9, 10, 11, 12] };

/**
 * Whether `product` (qgemm8, or qgemv8) with DOT_ADD gives the i16 form's bits on `kernels` (in its arena,
 * released after): random activations and 4-bit words, f32 scales and offsets, rows of each of its steps.
 */
export function computesRight(kernels: WasmKernels, product: DotAddProduct = 'qgemm8'): boolean {
  const mark = kernels.mark();
  try {
    const rng = mulberry32(0x2545f491);
    const M = Math.max(...ROWS[product]);
    const x = kernels.alloc(M * K);
    const panels = Math.ceil(N / 8) * 2; // 4-column panels (wasm/qgemm.ts), zeros past N as the host packs them
    const words = Math.ceil((K * 4) / 32);
    const groups = Math.ceil(K / GROUP);
    const wq = kernels.alloc(panels * words * 4);
    const so = kernels.alloc(panels * groups * 8); // per group: 4 scales, then 4 offsets (f32)
    const bias = kernels.alloc(Math.ceil(N / 8) * 8);
    const y = [kernels.alloc(M * N), kernels.alloc(M * N)];
    const scratch = kernels.alloc(64 + 4 * K + 16 * groups + 2 * M * groups + M * K); // qgemm8's, generously
    const [f32, i32] = [kernels.f32, kernels.i32];
    f32.set(uniform(M * K, 1, rng), x >> 2);
    for (let i = 0; i < panels * words * 4; i++) i32[(wq >> 2) + i] = Math.floor(rng() * 2 ** 32) | 0; // any nibbles
    for (let i = 0; i < panels * groups * 4; i++) {
      const s = (1 + Math.floor(rng() * 1024) / 1024) / 64;
      f32[(so >> 2) + 8 * (i >> 2) + (i & 3)] = s;
      f32[(so >> 2) + 8 * (i >> 2) + 4 + (i & 3)] = s * Math.floor(rng() * 16);
    }
    f32.set(uniform(Math.ceil(N / 8) * 8, 0.01, rng), bias >> 2);
    const kernel = kernels.k[product];
    for (const rows of ROWS[product]) {
      for (const form of [0, 1]) kernel(x, K, rows, K, wq, so, N, bias, y[form], N, form ? 4 | DOT_ADD : 4, GROUP, scratch);
      const u = kernels.i32; // the memory may have grown
      for (let i = 0; i < rows * N; i++) if (u[(y[0] >> 2) + i] !== u[(y[1] >> 2) + i]) return false;
    }
    return true;
  } finally {
    kernels.release(mark);
  }
}
