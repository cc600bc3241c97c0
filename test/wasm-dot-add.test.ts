// The relaxed build's DOT_ADD form of its 4-bit 'q8' prefill loop (wasm/q8.ts, src/wasm/dot-add.ts):
//   1. DotAddChoice: never where the form computes wrong (checked once); else the trial passes alternate
//      the two forms (the i16 form first) until the medians of their times per product decide (each
//      form's first left out); then every pass takes the verdict, and no more times are kept;
//   2. dotAddChoice: one per compiled module of the relaxed build, none for the 'simd128' build;
//   3. computesRight: the 'simd128' build ignores the flag (the same bits), and the probe leaves the arena
//      as it found it; kernelBits sets the flag only for 4-bit 'q8' projections;
//   4. project(): a 4-bit 'q8' prefill of DOT_ADD_MIN_TRIAL_PRODUCTS or more is timed for the module's
//      choice, a smaller one or a decode step not; the outputs are the i16 form's whatever it chose (the
//      'simd128' build's bits).
// Node 20 computes the instruction wrong in its baseline compiler, so the form itself is checked bit for
// bit in Chromium (e2e/wasm-threads.spec.ts), where it is right and taken.

import { afterEach, describe, expect, test, vi } from 'vitest';
import { checkDotAdd, computesRight, DOT_ADD, DOT_ADD_MIN_TRIAL_PRODUCTS, DOT_ADD_TRIAL_PASSES as TRIALS, DotAddChoice, dotAddChoice } from '../src/wasm/dot-add.ts';
import { compileKernels, WasmKernels } from '../src/wasm/kernels.ts';
import { relaxedDotAddRight } from '../src/wasm/simd.ts';
import { WASM_RELAXED_BASE64 } from '../src/wasm/module.ts';
import { createProjection, kernelBits, project } from '../src/wasm/projection.ts';
import { type Kind, randomQuantized } from './helpers/quantized.ts';
import { mulberry32, uniform } from './helpers/random.ts';

/** DotAddChoice's tests below give it a check of their own, which never looks at the kernels. */
const NO_KERNELS = null as unknown as WasmKernels;

/** The forms of the trial passes: the i16 form first, then each in turn. */
const ALTERNATING = Array.from({ length: TRIALS }, (_, i) => i % 2 === 1);

/** Drives a choice through passes: `ms(dotAdd)` the time a pass of 1 product takes with that form; returns the forms asked. */
function drive(choice: DotAddChoice, passes: number, ms: (dotAdd: boolean, pass: number) => number): boolean[] {
  const forms: boolean[] = [];
  for (let i = 0; i < passes; i++) {
    const dotAdd = choice.next(NO_KERNELS);
    forms.push(dotAdd);
    choice.record(dotAdd, ms(dotAdd, i), 1);
  }
  return forms;
}

describe('DotAddChoice', () => {
  test('wrong here: never DOT_ADD, the check run once', () => {
    let checks = 0;
    const choice = new DotAddChoice(() => {
      checks++;
      return false;
    });
    expect(drive(choice, 6, () => 1)).toEqual([false, false, false, false, false, false]);
    expect([choice.verdict, checks]).toEqual([false, 1]);
    choice.remeasure(); // the check stands
    expect([choice.next(NO_KERNELS), choice.verdict, checks]).toEqual([false, false, 1]);
  });

  test('right and faster: the forms alternate (i16 first) through the trial passes, then DOT_ADD for good', () => {
    let checks = 0;
    const choice = new DotAddChoice(() => {
      checks++;
      return true;
    });
    // The first two of each form slow (first runs), then DOT_ADD at 0.8 of the i16 form's time.
    const forms = drive(choice, TRIALS + 4, (dotAdd, pass) => (pass < 2 ? 50 : dotAdd ? 0.8 : 1));
    expect(forms.slice(0, TRIALS)).toEqual(ALTERNATING);
    expect(forms.slice(TRIALS)).toEqual([true, true, true, true]);
    expect([choice.verdict, checks]).toEqual([true, 1]);
  });

  test('right but not faster by the margin: the i16 form for good', () => {
    for (const ratio of [0.95, 1, 1.5]) {
      const choice = new DotAddChoice(() => true);
      const forms = drive(choice, TRIALS + 3, (dotAdd) => (dotAdd ? ratio : 1));
      expect(choice.verdict, `DOT_ADD at ${ratio}× the i16 form's time`).toBe(false);
      expect(forms.slice(TRIALS)).toEqual([false, false, false]);
    }
  });

  test('times are per product; a pass of no products, and passes after the verdict, are not kept', () => {
    const choice = new DotAddChoice(() => true);
    // The i16 form's passes are 4× larger and take 2× longer: per product DOT_ADD is slower (0.5 against 1/4·… = 2×).
    for (let i = 0; i < TRIALS / 2; i++) {
      expect(choice.next(NO_KERNELS)).toBe(false);
      choice.record(false, 2, 4);
      choice.record(false, 1000, 0); // no products: ignored
      expect(choice.next(NO_KERNELS)).toBe(true);
      choice.record(true, 1, 1);
    }
    expect(choice.verdict).toBe(false);
    choice.record(true, 1e-9, 1);
    expect(choice.next(NO_KERNELS)).toBe(false);
    choice.remeasure(); // measured again: the forms alternate anew
    expect([choice.verdict, choice.passes]).toEqual([null, 0]);
    expect(drive(choice, TRIALS, (dotAdd) => (dotAdd ? 0.5 : 1))).toEqual(ALTERNATING);
    expect(choice.verdict).toBe(true);
  });
});

describe('DotAddChoice.taken: the passes that are not trials', () => {
  test("no verdict, or one against: never, and nothing checked; one for DOT_ADD: prefills at once, decode steps once qgemv8's check passed", () => {
    const checks: string[] = [];
    const make = (decodeRight: boolean) =>
      new DotAddChoice((_, product) => {
        checks.push(product);
        return product === 'qgemm8' || decodeRight;
      });
    const undecided = make(true);
    expect([undecided.taken(NO_KERNELS, false), undecided.taken(NO_KERNELS, true), checks]).toEqual([false, false, []]);
    for (const decodeRight of [true, false]) {
      checks.length = 0;
      const choice = make(decodeRight);
      drive(choice, TRIALS, (dotAdd) => (dotAdd ? 0.5 : 1));
      expect(choice.verdict).toBe(true);
      expect(checks).toEqual(['qgemm8']);
      expect([choice.taken(NO_KERNELS, false), choice.taken(NO_KERNELS, true), choice.taken(NO_KERNELS, true)]).toEqual([true, decodeRight, decodeRight]);
      expect(checks, "qgemv8's check: once").toEqual(['qgemm8', 'qgemv8']);
    }
    const against = make(true);
    drive(against, TRIALS, (dotAdd) => (dotAdd ? 2 : 1));
    checks.length = 0;
    expect([against.verdict, against.taken(NO_KERNELS, false), against.taken(NO_KERNELS, true), checks]).toEqual([false, false, false, []]);
  });
});

describe('relaxedDotAddRight: the instruction alone, in a fresh module (simd.ts)', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  /** The probe's f() made to store `lanes` (as a platform that computed them would). */
  const computing = (lanes: (right: number[]) => number[]) => {
    const instance = WebAssembly.Instance;
    vi.spyOn(WebAssembly, 'Instance').mockImplementation(function (this: unknown, module: WebAssembly.Module, imports?: WebAssembly.Imports) {
      const real = new instance(module, imports);
      const { m, f } = real.exports as { m: WebAssembly.Memory; f: () => void };
      return {
        exports: {
          m,
          f: () => {
            f();
            const out = new Int32Array(m.buffer, 0, 4);
            out.set(lanes(Array.from(RIGHT)));
          },
        },
      };
    } as unknown as typeof WebAssembly.Instance);
  };
  // What the specification gives for the probe's operands (a = 17·i − 128, b = 15 − i, the addends).
  const A = Array.from({ length: 16 }, (_, i) => 17 * i - 128);
  const B = Array.from({ length: 16 }, (_, i) => 15 - i);
  const ADDEND = [1 << 20, -12345, 7, -(1 << 24)];
  const RIGHT = ADDEND.map((c, i) => c + [0, 1, 2, 3].reduce((sum, k) => sum + A[4 * i + k] * B[4 * i + k], 0));

  test("right where a platform stores the specification's sums; wrong where it drops the addend and doubles the sums (Node 20's baseline compiler), or is off by one", () => {
    computing((right) => right);
    expect(relaxedDotAddRight()).toBe(true);
    vi.restoreAllMocks();
    computing((right) => right.map((v, i) => 2 * (v - ADDEND[i])));
    expect(relaxedDotAddRight()).toBe(false);
    vi.restoreAllMocks();
    computing((right) => right.map((v, i) => (i === 3 ? v + 1 : v)));
    expect(relaxedDotAddRight()).toBe(false);
  });

  test("without relaxed SIMD: false, and checkDotAdd (a choice's check) false without running the kernels", async () => {
    const kernels = new WasmKernels(await compileKernels('single', 'relaxed'));
    vi.spyOn(WebAssembly, 'validate').mockReturnValue(false);
    const arena = vi.spyOn(kernels, 'mark');
    expect([relaxedDotAddRight(), checkDotAdd(kernels, 'qgemm8'), checkDotAdd(kernels, 'qgemv8')]).toEqual([false, false, false]);
    expect(arena).not.toHaveBeenCalled();
  });
});

describe('dotAddChoice, computesRight, kernelBits', () => {
  test("one choice per relaxed module, shared by its instances; none for the 'simd128' build or a module of another making", async () => {
    const relaxed = await compileKernels('single', 'relaxed');
    const [a, b] = [new WasmKernels(relaxed), new WasmKernels(relaxed)];
    expect(a.build).toBe('relaxed');
    expect(dotAddChoice(a)).not.toBeNull();
    expect(dotAddChoice(a)).toBe(dotAddChoice(b));
    const plain = new WasmKernels(await compileKernels('single', 'simd128'));
    expect([plain.build, dotAddChoice(plain)]).toEqual(['simd128', null]);
    const other = new WasmKernels(await WebAssembly.compile(Uint8Array.from(atob(WASM_RELAXED_BASE64), (c) => c.charCodeAt(0))));
    expect([other.build, dotAddChoice(other)]).toEqual([null, null]);
  });

  test("computesRight: the 'simd128' build ignores the flag (the same bits); the probe leaves the arena as it was", async () => {
    const plain = new WasmKernels(await compileKernels('single', 'simd128'));
    const relaxed = new WasmKernels(await compileKernels('single', 'relaxed'));
    for (const kernels of [plain, relaxed]) {
      for (const product of ['qgemm8', 'qgemv8'] as const) {
        const mark = kernels.mark();
        const right = computesRight(kernels, product);
        if (kernels === plain) expect(right, product).toBe(true);
        expect(kernels.mark()).toBe(mark);
      }
    }
  });

  test("kernelBits: DOT_ADD only for 4-bit 'q8' projections, and only when asked", async () => {
    const kernels = new WasmKernels(await compileKernels('single', 'relaxed'));
    const K = 64;
    const q4 = createProjection(kernels, randomQuantized('q4_0', 8, K, 1), 8, K, null, 0, 'q8');
    const q4f32 = createProjection(kernels, randomQuantized('q4_0', 8, K, 1), 8, K, null, 0, 'f32');
    const q8 = createProjection(kernels, randomQuantized('q8_0', 8, K, 2), 8, K, null, 0, 'q8');
    if (q4.kind !== 'quantized' || q4f32.kind !== 'quantized' || q8.kind !== 'quantized') throw new Error('packed weights expected');
    expect([kernelBits(q4, true) & DOT_ADD, kernelBits(q4) & DOT_ADD, kernelBits(q4, false) & DOT_ADD]).toEqual([DOT_ADD, 0, 0]);
    expect([kernelBits(q4f32, true) & DOT_ADD, kernelBits(q8, true) & DOT_ADD]).toEqual([0, 0]);
    expect(kernelBits(q4, true) & ~DOT_ADD).toBe(kernelBits(q4));
  });
});

describe("project(): a 4-bit 'q8' prefill asks its module's choice, and gives the i16 form's bits either way", () => {
  test("q4_0 and 4-bit MatMulNBits with zero points, decode steps, small prefills and prefills of 2²² products and more: the 'simd128' build's bits; only the large prefills timed, or the choice refused", async () => {
    const relaxed = new WasmKernels(await compileKernels('single', 'relaxed'));
    const plain = new WasmKernels(await compileKernels('single', 'simd128'));
    const choice = dotAddChoice(relaxed)!;
    const right = relaxedDotAddRight(); // the first half of the choice's check: the instruction in baseline code
    // [kind, K, N, rows]: decode steps (1, 4), small prefills (9 … 69 rows of 96 × 21), and prefills of
    // at least DOT_ADD_MIN_TRIAL_PRODUCTS (64 × 512 × 128), enough of them for the trial passes.
    const cases: [Kind, number, number, number[]][] = [
      ['q4_0', 96, 21, [1, 4, 9, 12, 13, 64, 69]],
      ['nbits4-32-zp', 70, 13, [1, 9, 69]],
      ['q4_0', 512, 128, Array.from({ length: TRIALS }, (_, i) => 64 + 4 * i)],
    ];
    let large = 0;
    for (const [kind, K, N, rowsList] of cases) {
      const t = randomQuantized(kind, N, K, K + N);
      const [pr, pp] = [createProjection(relaxed, t, N, K, null, 0, 'q8'), createProjection(plain, t, N, K, null, 0, 'q8')];
      relaxed.keep();
      plain.keep();
      for (const M of rowsList) {
        const xs = uniform(M * K, 1, mulberry32(M));
        const passes = choice.passes;
        const [yr] = await project(relaxed, [[relaxed.put(xs), M, pr]]);
        const [yp] = await project(plain, [[plain.put(xs), M, pp]]);
        expect(relaxed.take(yr, M * N), `${kind} M=${M}`).toEqual(plain.take(yp, M * N));
        if (M * K * N < DOT_ADD_MIN_TRIAL_PRODUCTS) expect(choice.passes, `${kind} K=${K} N=${N} M=${M}: not timed`).toBe(passes);
        else large++;
        relaxed.release(0);
        plain.release(0);
      }
    }
    expect(large).toBe(TRIALS);
    // Where the instruction computes wrong in baseline code (Node 20) the verdict was false from the first
    // pass on; else the large prefill passes were timed, and they decided (computesRight on the kernels
    // passes wherever that probe does: the same instruction).
    if (right) expect([choice.passes, choice.verdict === null]).toEqual([TRIALS, false]);
    else expect([choice.passes, choice.verdict]).toEqual([0, false]);
  });
});
