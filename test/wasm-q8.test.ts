// The 'wasm' backend's projections with `activations: 'q8'` (issue 41; wasm/q8.ts):
//   1. quantizeQ8 quantizes x bit for bit as src/quant/activations.ts's quantizeActivationsQ8 (random
//      values, zeros, ties, huge and tiny ones, NaN and ±∞), in each of its three layouts, with (d, d·S)
//      per unit of 16 or 32;
//   2. createProjection(…, 'q8') and project(): qgemv8 (≤ 8 rows) and qgemm8 (more) for every packed type,
//      K whole blocks and K with a partial last block (and word), rows 1 … 69, N not a multiple of 8, with
//      bias and without: within |y − ref| ≤ 2e-4 + 2e-3·|ref| of the float64 product of
//      roundActivationsQ8(x) with unpackWeight(packWeight(W)) (+ bias);
//   3. 2 threads give the bits 1 gives, the q8 kernels run on the worker; 'f32' (the default) still calls
//      qgemv / qgemm; an unknown `activations` is refused;
//   4. f16 scales alone (projection.ts halfScalesFit: q4_0, q8_0, MatMulNBits without zero points) give
//      the bits of f32 scales and offsets, and are taken exactly there;
//   5. the two builds of the module (src/wasm/kernels.ts WasmSimd): the tests above run the default,
//      'relaxed' (vite.config.ts turns relaxed SIMD on in Node 20); 'simd128' gives its bits for every
//      kind and row count, on 1 and 2 threads, and at the largest sums Q8.rdot's i16 lanes can hold.

import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { InvalidArgumentError } from '../src/errors.ts';
import { quantizeActivationsQ8, roundActivationsQ8 } from '../src/quant/activations.ts';
import { packWeight, unpackWeight } from '../src/quant/pack.ts';
import type { NBitsTensor, QuantizedTensor } from '../src/quant/types.ts';
import { expectClose } from '../src/util/tolerance.ts';
import { compileKernels, relaxedSimdSupported, WasmKernels, type WasmSimd } from '../src/wasm/kernels.ts';
import { setThreadChoiceMode } from '../src/wasm/thread-choice.ts';
import { type Activations, createProjection, project } from '../src/wasm/projection.ts';
import { ThreadPool } from '../src/wasm/threads.ts';
import { type Kind, randomQuantized } from './helpers/quantized.ts';
import { mulberry32, uniform } from './helpers/random.ts';

/** The rule of issue 41 for 'q8' against its float64 reference. */
const Q8_TOLERANCE = { atol: 2e-4, rtol: 2e-3 };

/** A one-thread instance of the kernels; `simd`: the build (default: the platform's, 'relaxed' here). */
async function kernelInstance(simd?: WasmSimd): Promise<WasmKernels> {
  return new WasmKernels(await compileKernels('single', simd));
}

/** Byte offset of value k of a row quantized by quantizeQ8 in `layout` (wasm/q8.ts position()). */
function position(layout: 0 | 4 | 8 | 12, k: number): number {
  if (layout === 12) return ((k >> 3) << 3) + ((k & 1) << 2) + ((k & 7) >> 1);
  if (layout === 4) return ((k >> 3) << 4) + ((k & 3) << 2) + ((k >> 2) & 1) * 2;
  if (layout === 8) return ((k >> 2) << 3) + ((k & 1) << 2) + ((k >> 1) & 1) * 2;
  return 2 * k;
}

/** Rows of x chosen to try the rounding: random, zeros, ties, huge, tiny, subnormal, NaN and ±∞. */
function hardRows(K: number, seed: number): Float32Array[] {
  const rng = mulberry32(seed);
  const rows: Float32Array[] = [];
  rows.push(Float32Array.from({ length: K }, () => (rng() - 0.5) * 4));
  rows.push(Float32Array.from({ length: K }, (_, k) => (k % 40 < 20 ? 0 : (rng() - 0.5) * 1e-3))); // zero blocks
  // ties: a block's max 127 makes d = 1, id = 1, and values n + 0.5 lie half way (also −)
  rows.push(Float32Array.from({ length: K }, (_, k) => (k % 32 === 3 ? 127 : Math.floor(rng() * 253) - 126 + 0.5 * Math.sign(rng() - 0.5))));
  // ties after the scale: max 63.5 → d = 0.5
  rows.push(Float32Array.from({ length: K }, (_, k) => (k % 32 === 7 ? -63.5 : (Math.floor(rng() * 127) - 63) / 2 + 0.25)));
  rows.push(Float32Array.from({ length: K }, () => (rng() - 0.5) * 3e38)); // huge: d past f16's largest (∞)
  rows.push(Float32Array.from({ length: K }, () => (rng() - 0.5) * 2e6)); // d near f16's largest
  rows.push(Float32Array.from({ length: K }, () => (rng() - 0.5) * 1e-4)); // d an f16 subnormal
  rows.push(Float32Array.from({ length: K }, () => (rng() - 0.5) * 1e-30)); // d rounds to 0
  rows.push(Float32Array.from({ length: K }, () => (rng() - 0.5) * 1e-40)); // subnormal x: 1/d overflows
  rows.push(Float32Array.from({ length: K }, (_, k) => (k === 5 ? Number.NaN : k === K - 1 ? Number.POSITIVE_INFINITY : k === 40 ? -Infinity : rng() - 0.5)));
  // just under and at powers of two, and in each block a max whose d lies about f16's largest, 65504 (to it, a tie, to ∞)
  rows.push(
    Float32Array.from({ length: K }, (_, k) =>
      k % 3 === 0 ? 2 ** (k % 13) * (1 - 2 ** -24) : k % 3 === 1 ? -(2 ** (k % 7)) : (65500 + 4 * (((k >> 5) * 3 + 5) % 10)) * 127,
    ),
  );
  return rows;
}

describe('quantizeQ8: bit for bit quantizeActivationsQ8', () => {
  test.each([7, 32, 48, 64, 80, 100, 257])('K=%i, every layout (12: i8), units of 16 and 32', async (K) => {
    const kernels = await kernelInstance();
    const rows = hardRows(K, K);
    const M = rows.length;
    const x = new Float32Array(M * K);
    for (const [m, r] of rows.entries()) x.set(r, m * K);
    const { q, d } = quantizeActivationsQ8(x, M, K);
    const blocks = Math.ceil(K / 32);
    const Kp = Math.ceil(K / 8) * 8;
    const xp = kernels.put(x);
    for (const layout of [0, 4, 8, 12] as const) {
      const bytes = layout === 12 ? 1 : 2; // a value's
      for (const unit of [16, 32]) {
        const units = Math.ceil(K / unit);
        const mark = kernels.mark();
        const out = kernels.alloc(M * Kp * 2, true);
        const ds = kernels.alloc(M * units * 2);
        kernels.u8.fill(0x5a, out, out + M * Kp * 2); // what the kernel does not write shows
        kernels.k.quantizeQ8(xp, K, M, K, unit, layout, out, bytes * Kp, ds);
        const view = new DataView(kernels.memory.buffer);
        const dsv = kernels.take(ds, M * units * 2);
        for (let m = 0; m < M; m++) {
          const at = (k: number) => out + m * bytes * Kp + position(layout, k);
          const got = Array.from({ length: Kp }, (_, k) => (bytes === 1 ? view.getInt8(at(k)) : view.getInt16(at(k), true)));
          const want = Array.from({ length: Kp }, (_, k) => (k < K ? q[m * K + k] : 0));
          expect(got, `layout ${layout} row ${m}: q`).toEqual(want);
          if (bytes === 1)
            expect(view.getUint8(out + (m + 1) * Kp), `layout 12 row ${m}: nothing past its Kp bytes`).toBe(m + 1 < M ? view.getUint8(out + (m + 1) * Kp) : 0x5a);
          for (let u = 0; u < units; u++) {
            const blk = Math.floor((u * unit) / 32);
            let S = 0;
            for (let k = u * unit; k < Math.min(K, (u + 1) * unit); k++) S += q[m * K + k];
            expect(dsv[2 * (m * units + u)], `row ${m} unit ${u}: d`).toBe(d[m * blocks + blk]);
            expect(dsv[2 * (m * units + u) + 1], `row ${m} unit ${u}: d·S`).toBe(Math.fround(d[m * blocks + blk] * S));
          }
        }
        kernels.release(mark);
      }
    }
    kernels.dispose();
  });
});

const KINDS: [Kind, number][] = [
  // [kind, K]: whole blocks, and K that leaves a partial last block (and word)
  ['q4_0', 96],
  ['q8_0', 64],
  ['q4_k', 256],
  ['q6_k', 256],
  ['nbits4-16', 48],
  ['nbits4-16', 80],
  ['nbits4-32', 100],
  ['nbits4-64', 160],
  ['nbits4-128', 300],
  ['nbits8-16', 80],
  ['nbits8-16', 33],
  ['nbits8-16', 7], // less than a word pair's 8 values: all padding
  ['nbits4-32', 12],
  ['nbits8-32', 66],
  ['nbits8-64', 64],
  ['nbits8-128', 130],
  ['nbits4-32-zp', 70],
  ['nbits8-64-zp', 200],
];
const ROWS = [1, 2, 3, 7, 8, 9, 17, 69];

/** float64 Σ_k roundActivationsQ8(x)[m, k]·W[n, k] + b[n], W the packed weight's float values. */
function reference(xs: Float32Array, M: number, K: number, W: Float32Array, N: number, bias: Float32Array | null): Float64Array {
  const xr = roundActivationsQ8(xs, M, K);
  const ref = new Float64Array(M * N);
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let sum = bias ? bias[n] : 0;
      for (let k = 0; k < K; k++) sum += xr[m * K + k] * W[n * K + k];
      ref[m * N + n] = sum;
    }
  }
  return ref;
}

describe("createProjection(…, 'q8') and project(): the float64 product of the q8-rounded x and the packed weights", () => {
  test.each(KINDS)('%s, K=%i', async (kind, K) => {
    const kernels = await kernelInstance();
    const N = 21; // a partial 4-column panel and a partial 8-column one
    const t = randomQuantized(kind, N, K, K * 13 + kind.length);
    const W = unpackWeight(packWeight(t));
    const bias = uniform(N, 0.1, mulberry32(5));
    const withBias = createProjection(kernels, t, N, K, bias, 0, 'q8');
    const noBias = createProjection(kernels, t, N, K, null, 0, 'q8');
    kernels.keep();
    const calls = vi.spyOn(kernels, 'run');
    try {
      for (const M of ROWS) {
        const xs = uniform(M * K, 1, mulberry32(M + K));
        const x = kernels.put(xs);
        const [y, y0] = await project(kernels, [
          [x, M, withBias],
          [x, M, noBias],
        ]);
        const names = calls.mock.lastCall![0].flat().map(([name]) => name);
        expect(new Set(names), `M=${M}: the q8 kernels`).toEqual(new Set([M <= 8 ? 'qgemv8' : 'qgemm8']));
        const out = kernels.take(y, M * N);
        expectClose(out, reference(xs, M, K, W, N, bias), Q8_TOLERANCE, `${kind} K=${K} M=${M}, bias`);
        expectClose(kernels.take(y0, M * N), reference(xs, M, K, W, N, null), Q8_TOLERANCE, `${kind} K=${K} M=${M}, no bias`);
        kernels.release(0);
      }
    } finally {
      calls.mockRestore();
      kernels.dispose();
    }
  });

  test('activations of very different sizes (outliers, zeros, tiny ones) stay within the rule; a NaN or ±∞ in a row gives NaN outputs', async () => {
    const kernels = await kernelInstance();
    const [N, K] = [12, 256];
    for (const kind of ['q4_0', 'nbits8-16', 'nbits4-128'] as const) {
      const t = randomQuantized(kind, N, K, 99);
      const W = unpackWeight(packWeight(t));
      const p = createProjection(kernels, t, N, K, null, 0, 'q8');
      kernels.keep();
      for (const M of [3, 12]) {
        const rng = mulberry32(M);
        const xs = new Float32Array(M * K);
        for (let m = 0; m < M; m++) {
          for (let k = 0; k < K; k++) xs[m * K + k] = (rng() - 0.5) * (k % 37 === 5 ? 3e4 : k % 11 === 0 ? 1e-3 : m % 3 === 1 && k < 64 ? 0 : 1);
        }
        const bad = new Float32Array(xs);
        bad[K + 17] = Number.NaN;
        bad[2 * K + 200] = Number.POSITIVE_INFINITY;
        const [y, yBad] = await project(kernels, [
          [kernels.put(xs), M, p],
          [kernels.put(bad), M, p],
        ]);
        expectClose(kernels.take(y, M * N), reference(xs, M, K, W, N, null), Q8_TOLERANCE, `${kind} M=${M}`);
        const outBad = kernels.take(yBad, M * N);
        for (const m of [1, 2]) expect(outBad.subarray(m * N, (m + 1) * N).every(Number.isNaN), `${kind} M=${M}: row ${m} NaN`).toBe(true);
        expect(outBad.subarray(0, N), `${kind} M=${M}: row 0 as without the NaN`).toEqual(kernels.take(y, N));
        kernels.release(0);
      }
    }
    kernels.dispose();
  });
});

describe('the host: defaults, refusals, threads', () => {
  test("'f32' (the default) keeps qgemv and qgemm; float weights ignore 'q8'", async () => {
    const kernels = await kernelInstance();
    const [N, K] = [16, 64];
    const t = randomQuantized('q4_0', N, K, 1);
    const p = createProjection(kernels, t, N, K, null, 0);
    const pf = createProjection(kernels, uniform(N * K, 0.1, mulberry32(2)), N, K, null, 0, 'q8');
    expect(p.kind === 'quantized' && p.activations).toBe('f32');
    expect(pf.kind).toBe('float');
    kernels.keep();
    const calls = vi.spyOn(kernels, 'run');
    for (const M of [2, 20]) {
      const x = kernels.put(uniform(M * K, 1, mulberry32(M)));
      await project(kernels, [
        [x, M, p],
        [x, M, pf],
      ]);
      expect(calls.mock.lastCall![0].flat().map(([name]) => name)).toEqual([M <= 8 ? 'qgemv' : 'qgemm', 'gemm']);
      kernels.release(0);
    }
    calls.mockRestore();
    kernels.dispose();
  });

  test('an unknown activations is refused with a typed error naming it, before anything is put in memory', async () => {
    const kernels = await kernelInstance();
    const top = kernels.mark();
    const t = randomQuantized('q4_0', 8, 32, 1);
    const call = () => createProjection(kernels, t, 8, 32, null, 0, 'int8' as Activations);
    expect(call).toThrow(InvalidArgumentError);
    expect(call).toThrow(/activations must be 'f32' or 'q8'; got 'int8'/);
    expect(kernels.mark()).toBe(top);
    kernels.dispose();
  });

  describe("2 threads give the bits 1 gives (and the 'simd128' build's), the q8 kernels on the worker", () => {
    let pool: ThreadPool | null = null;
    // These passes run on the threads whatever their measured choice (thread-choice.ts ThreadChoice).
    beforeAll(() => setThreadChoiceMode('always'));
    afterAll(() => {
      setThreadChoiceMode('measured');
      pool?.dispose();
    });
    test.each([
      ['decode: columns (qgemv8)', 'q4_0', 1024, 1024, 1],
      ['decode, partial panels on the split', 'nbits4-64-zp', 356, 1020, 3], // 3·356·1020 ≥ MIN_WORK_PER_THREAD (2^20)
      ['prefill: rows (qgemm8; 4 lists a thread: rows ≥ 64·8)', 'q6_k', 256, 256, 520],
      ['prefill, few rows: columns (qgemm8)', 'nbits8-128', 1020, 1024, 12],
      ['prefill of 4-bit weights (the relaxed micro-kernel), rows', 'nbits4-32-zp', 512, 1000, 530],
    ] as const)('%s', async (_, kind, N, K, M) => {
      pool ??= await ThreadPool.create(2);
      const one = await kernelInstance();
      const two = new WasmKernels(await compileKernels('shared'), pool);
      const plain = await kernelInstance('simd128');
      const t = randomQuantized(kind, N, K, N + K);
      const xs = uniform(M * K, 1, mulberry32(M));
      const outs: Float32Array[] = [];
      for (const kernels of [one, two, plain]) {
        const p = createProjection(kernels, t, N, K, uniform(N, 0.1, mulberry32(1)), 0, 'q8');
        kernels.keep();
        const run = vi.spyOn(pool, 'run');
        const [y] = await project(kernels, [[kernels.put(xs), M, p]]);
        outs.push(kernels.take(y, M * N));
        if (kernels === two) {
          const onWorker = run.mock.calls.flatMap(([, lists]) => lists.slice(1).flatMap((calls) => calls.map(([name]) => name)));
          expect(onWorker).toContain(M <= 8 ? 'qgemv8' : 'qgemm8');
          const rowsACall = run.mock.calls.flatMap(([, lists]) => lists.flat().map((c) => c[3])); // [name, x, ldx, M, …]
          expect(Math.max(...rowsACall), 'split by rows past 64 a list').toBe(M >= 512 ? Math.ceil(M / 8 / 4) * 4 : M);
        }
        run.mockRestore();
        kernels.dispose();
      }
      expect(outs[1]).toEqual(outs[0]);
      expect(outs[2], "the 'simd128' build").toEqual(outs[0]);
      expectClose(outs[0], reference(xs, M, K, unpackWeight(packWeight(t)), N, uniform(N, 0.1, mulberry32(1))), Q8_TOLERANCE, kind);
    });
  });
});

describe("the relaxed build gives the 'simd128' build's bits (wasm/q8.ts Q8.rdot: 4-bit weights)", () => {
  test('relaxed SIMD runs here (vite.config.ts: Node 20 with --experimental-wasm-relaxed-simd; Node 22, Chromium: on)', () => {
    expect(relaxedSimdSupported(), 'src/wasm/kernels.ts relaxedSimdSupported: relaxed SIMD missing, or its probe computed the wrong sums').toBe(true);
  });

  test.each(KINDS)('%s, K=%i, every row count', async (kind, K) => {
    const [relaxed, plain] = [await kernelInstance('relaxed'), await kernelInstance('simd128')];
    const N = 21;
    const t = randomQuantized(kind, N, K, K * 7 + kind.length);
    const bias = uniform(N, 0.1, mulberry32(3));
    try {
      const [pr, pp] = [createProjection(relaxed, t, N, K, bias, 0, 'q8'), createProjection(plain, t, N, K, bias, 0, 'q8')];
      relaxed.keep();
      plain.keep();
      for (const M of ROWS) {
        const xs = uniform(M * K, 1, mulberry32(M * 3 + K));
        const [yr] = await project(relaxed, [[relaxed.put(xs), M, pr]]);
        const [yp] = await project(plain, [[plain.put(xs), M, pp]]);
        expect(relaxed.take(yr, M * N), `${kind} K=${K} M=${M}`).toEqual(plain.take(yp, M * N));
        relaxed.release(0);
        plain.release(0);
      }
    } finally {
      relaxed.dispose();
      plain.dispose();
    }
  });

  test('the largest sums an i16 lane of Q8.rdot holds: every nibble 15 against every activation ±127 (units of 16 and 32)', async () => {
    // A lane adds 4 products a word, 16 over a unit of 32 values: 16·15·127 = 30480, under 2¹⁵.
    const [relaxed, plain] = [await kernelInstance('relaxed'), await kernelInstance('simd128')];
    try {
      for (const blockSize of [16, 32, 64] as const) {
        const [N, K] = [8, 128];
        const blocks = K / blockSize;
        const t: NBitsTensor = {
          dtype: 'nbits',
          bits: 4,
          blockSize,
          shape: [N, K],
          data: new Uint8Array((N * K) / 2).fill(0xff),
          scales: new Uint16Array(N * blocks).fill(0x3c00), // 1
          zeroPoints: new Uint8Array(N * Math.ceil(blocks / 2)), // 0: w = q = 15
        };
        for (const M of [1, 2, 12]) {
          const xs = Float32Array.from({ length: M * K }, (_, i) => (Math.floor(i / K) % 2 ? -1 : 1)); // every value ±127 after the rule
          const outs: Float32Array[] = [];
          for (const kernels of [relaxed, plain]) {
            const p = createProjection(kernels, t, N, K, null, 0, 'q8');
            kernels.keep();
            const [y] = await project(kernels, [[kernels.put(xs), M, p]]);
            outs.push(kernels.take(y, M * N));
            kernels.release(0);
          }
          const want = Float32Array.from({ length: M * N }, (_, i) => (Math.floor(i / N) % 2 ? -1 : 1) * 15 * K); // 15·(±127·d)·K, d = 1/127 as f16
          expect(outs[0], `block ${blockSize} M=${M}: relaxed = simd128`).toEqual(outs[1]);
          expectClose(outs[0], Float64Array.from(want), Q8_TOLERANCE, `block ${blockSize} M=${M}`);
        }
      }
    } finally {
      relaxed.dispose();
      plain.dispose();
    }
  });
});

describe('weights with f16 scales alone (wasm/qgemm.ts HALF_SCALES), activations q8 and f32', () => {
  test.each(KINDS)('%s, K=%i: the bits of f32 scales and offsets, every row count; taken where every offset is scale·2^(bits−1)', async (kind, K) => {
    for (const [simd, act] of [
      ['relaxed', 'q8'],
      ['simd128', 'q8'],
      ['relaxed', 'f32'],
    ] as const) {
      const kernels = await kernelInstance(simd);
      const N = 21;
      const t = randomQuantized(kind, N, K, K * 5 + kind.length);
      const bias = uniform(N, 0.1, mulberry32(7));
      try {
        const half = createProjection(kernels, t, N, K, bias, 0, act);
        const full = createProjection(kernels, t, N, K, bias, 0, act, false);
        const fits = kind === 'q4_0' || kind === 'q8_0' || (kind.startsWith('nbits') && !kind.endsWith('-zp'));
        expect([half.kind === 'quantized' && half.halfScales, full.kind === 'quantized' && full.halfScales], kind).toEqual([fits, false]);
        kernels.keep();
        for (const M of ROWS) {
          const xs = uniform(M * K, 1, mulberry32(M * 5 + K));
          const x = kernels.put(xs);
          const [yh, yf] = await project(kernels, [
            [x, M, half],
            [x, M, full],
          ]);
          expect(kernels.take(yh, M * N), `${simd} ${act} ${kind} K=${K} M=${M}`).toEqual(kernels.take(yf, M * N));
          kernels.release(0);
        }
      } finally {
        kernels.dispose();
      }
    }
  });
});

test.each(['q8', 'f32'] as const)(
  'f16 scales alone, activations %s: subnormal, zero and negative q4_0 scales widen exactly (the bits of f32 scales); an infinite one keeps f32',
  async (act) => {
    const kernels = await kernelInstance();
    const [N, K] = [16, 128];
    const t = randomQuantized('q4_0', N, K, 3) as QuantizedTensor & { data: Uint8Array };
    const specials = [0x0001, 0x03ff, 0x0200, 0x0000, 0x8000, 0x8123, 0x0400, 0xfbff, 0x7bff];
    for (let b = 0; b < (N * K) / 32; b++) {
      const h = specials[b % specials.length];
      t.data[b * 18] = h & 0xff;
      t.data[b * 18 + 1] = h >> 8;
    }
    try {
      const half = createProjection(kernels, t, N, K, null, 0, act);
      const full = createProjection(kernels, t, N, K, null, 0, act, false);
      const inf = { ...t, data: Uint8Array.from(t.data) };
      inf.data[18 * 3] = 0x00;
      inf.data[18 * 3 + 1] = 0x7c; // +∞
      const withInf = createProjection(kernels, inf, N, K, null, 0, act);
      expect([half, full, withInf].map((p) => p.kind === 'quantized' && p.halfScales)).toEqual([true, false, false]);
      kernels.keep();
      for (const M of [1, 2, 9, 33]) {
        const x = kernels.put(uniform(M * K, 1, mulberry32(M)));
        const [yh, yf] = await project(kernels, [
          [x, M, half],
          [x, M, full],
        ]);
        expect(kernels.take(yh, M * N), `M=${M}`).toEqual(kernels.take(yf, M * N));
        kernels.release(0);
      }
    } finally {
      kernels.dispose();
    }
  },
);
