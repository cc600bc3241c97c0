// The projections of a layer on the 'wasm' backend, y [rows, N] = x [rows, K] · Wᵀ + b, with W in the
// kernel instance's memory for the layer's life in one of two forms:
//   float     float32 panels of 8 columns (kernels.ts packWeights) for gemm (wasm/gemm.ts)
//   quantized kept packed, 4 or 8 bits a weight plus a (scale, offset) float pair per group along K:
//             src/quant's PackedWeight regrouped so that 4 rows' words lie side by side (panelQuantized,
//             the layout at the top of wasm/qgemm.ts), for qgemv (≤ 8 rows: decoding) and qgemm.
// No float copy of a quantized weight is made: qgemv applies each group's scale and offset to its sums
// (y += s·Σ x·q − o·Σ x); qgemm dequantizes one panel of 8 columns at a time, [K, 8] float32, into a
// scratch buffer of its thread in the call's arena and gives, bit for bit, what gemm gives on the
// float32 weights src/quant's unpackWeight stands for.
// With `activations: 'q8'` (src/quant/activations.ts) the same packed weights go to wasm/q8.ts instead:
// qgemv8 and qgemm8 quantize x per block of 32 as ggml's Q8_0 and multiply in integers (llama.cpp's
// arithmetic), in scratch of their own size (scratchFloats). Either way the scales are kept as f16
// alone where every group's offset is its scale·2^(bits−1) and the scale a finite f16 (q4_0, q8_0,
// MatMulNBits without zero points: halfScalesFit): a decode step then streams 4.5 bits a 4-bit weight, not 6.

import { InvalidArgumentError } from '../errors.ts';
import { packWeight } from '../quant/pack.ts';
import type { PackedWeight, QuantizedDtype, WeightTensor } from '../quant/types.ts';
import { floatToHalfBits, halfToFloat } from '../util/f16.ts';
import { DOT_ADD, DOT_ADD_MIN_TRIAL_PRODUCTS, dotAddChoice } from './dot-add.ts';
import { packBias, packWeights, type WasmKernels } from './kernels.ts';
import { listsFor, sizeClass } from './thread-choice.ts';
import type { KernelCall } from './threads.ts';

interface FloatProjection {
  kind: 'float';
  w: number; // packed W [⌈N/8⌉, K, 8] f32
  bias: number; // [⌈N/8⌉·8] f32
  N: number;
  K: number;
}

interface QuantizedProjection {
  kind: 'quantized';
  wq: number; // [⌈N/8⌉·2, W, 4] u32 (wasm/qgemm.ts)
  so: number; // [⌈N/8⌉·2, groups, 8] f32: 4 scales, then 4 offsets; with halfScales [⌈N/8⌉·2, groups, 4] f16 scales
  /** `so` holds f16 scales alone, each offset being scale·2^(bits−1) (halfScalesFit; wasm/qgemm.ts HALF_SCALES). */
  halfScales: boolean;
  bias: number; // [⌈N/8⌉·8] f32
  N: number;
  K: number;
  bits: 4 | 8;
  group: number;
  dtype: QuantizedDtype;
  /** 'q8': x quantized per block of 32 (src/quant/activations.ts), integer dot products (wasm/q8.ts). */
  activations: Activations;
}

/** How a projection with packed weights takes its input: as float32, or quantized to q8 first. */
export type Activations = 'f32' | 'q8';

export type Projection = FloatProjection | QuantizedProjection;

/** wasm/qgemm.ts's HALF_SCALES, or'ed into `bits`. */
const HALF_SCALES = 0x100;

/** Rows at most which quantized projections run qgemv (each weight word read once for all rows). */
export const GEMV_ROWS = 8;

/**
 * W [N, K] (float32 or quantized) and its bias (b[offset … offset + N), or none) put into `kernels`' memory.
 * `activations` picks the arithmetic of packed weights (float weights ignore it): 'f32' (qgemv, qgemm)
 * or 'q8' (qgemv8, qgemm8: llama.cpp's, on x quantized per block of 32). `halfScales` false keeps the
 * scales and offsets in f32 where they would fit f16 scales alone (tests and benchmarks: the same bits).
 */
export function createProjection(
  kernels: WasmKernels,
  W: WeightTensor,
  N: number,
  K: number,
  b: Float32Array | null,
  offset: number,
  activations: Activations = 'f32',
  halfScales = true,
): Projection {
  if (activations !== 'f32' && activations !== 'q8') {
    throw new InvalidArgumentError({
      where: "the 'wasm' backend's projections",
      argument: 'activations',
      expected: "'f32' or 'q8'",
      given: typeof activations === 'string' ? `'${activations}'` : String(activations),
      fix: "Leave it out for float32 activations, or pass 'q8' for llama.cpp's 8-bit activations with packed weights.",
    });
  }
  if (W instanceof Float32Array) return { kind: 'float', w: kernels.put(packWeights(W, N, K)), bias: kernels.put(packBias(b, offset, N)), N, K };
  const packed = packWeight(W);
  const half = halfScales && halfScalesFit(packed);
  const { wq, so } = panelQuantized(packed, !half); // f16 scales alone: panelHalfScales, not the f32 pairs
  return {
    kind: 'quantized',
    wq: kernels.putBytes(new Uint8Array(wq.buffer)),
    so: half ? kernels.putBytes(new Uint8Array(panelHalfScales(packed).buffer)) : kernels.put(so),
    halfScales: half,
    bias: kernels.put(packBias(b, offset, N)),
    N,
    K,
    bits: packed.bits,
    group: packed.group,
    dtype: packed.dtype,
    activations,
  };
}

/**
 * A PackedWeight in wasm/qgemm.ts's layout: rows padded with zeros to a multiple of 8, in panels of 4
 * rows, the panel's 4 words w side by side (wq [P, W, 4] u32), and its groups' 4 scales then 4 offsets
 * (so [P, groups, 8] f32), P = ⌈N/8⌉·2. The same bits, regrouped: nothing is dequantized. `scales`
 * false leaves `so` empty (a layer that keeps f16 scales alone: panelHalfScales).
 */
export function panelQuantized(p: PackedWeight, scales = true): { wq: Uint32Array; so: Float32Array } {
  const { rows: N, wordsPerRow: W } = p;
  const groups = scales ? p.groups : 0;
  const P = Math.ceil(N / 8) * 2;
  const wq = new Uint32Array(P * W * 4);
  const so = new Float32Array(P * groups * 8);
  for (let n = 0; n < N; n++) {
    const [c, r] = [n >> 2, n & 3];
    for (let w = 0; w < W; w++) wq[(c * W + w) * 4 + r] = p.quants[n * W + w];
    for (let g = 0; g < groups; g++) {
      so[(c * groups + g) * 8 + r] = p.scaleOffset[2 * (n * groups + g)];
      so[(c * groups + g) * 8 + 4 + r] = p.scaleOffset[2 * (n * groups + g) + 1];
    }
  }
  return { wq, so };
}

/**
 * Whether every group's scale is a finite f16 (it widens back to itself) and its offset exactly scale·2^(bits−1)
 * in float32: ggml's q4_0 and q8_0 (an f16 d, offsets 8·d and 128·d), MatMulNBits without zero points
 * (the default zero point 2^(bits−1)); not q4_k, q6_k (scales are products) nor explicit zero points.
 */
export function halfScalesFit(p: PackedWeight): boolean {
  const factor = 2 ** (p.bits - 1);
  const so = p.scaleOffset;
  for (let i = 0; i < so.length; i += 2) {
    const s = so[i];
    if (!Number.isFinite(s) || halfToFloat(floatToHalfBits(s)) !== s || Math.fround(s * factor) !== so[i + 1]) return false;
  }
  return true;
}

/** panelQuantized's `so` as f16 scales alone: [P, groups, 4] u16, P = ⌈N/8⌉·2 (zeros past N). */
function panelHalfScales(p: PackedWeight): Uint16Array {
  const { rows: N, groups } = p;
  const out = new Uint16Array(Math.ceil(N / 8) * 2 * groups * 4);
  for (let n = 0; n < N; n++) {
    const [c, r] = [n >> 2, n & 3];
    for (let g = 0; g < groups; g++) out[(c * groups + g) * 4 + r] = floatToHalfBits(p.scaleOffset[2 * (n * groups + g)]);
  }
  return out;
}

/**
 * The `bits` argument of p's kernel calls: its bits, | wasm/qgemm.ts's HALF_SCALES with halfScales, |
 * DOT_ADD with `dotAdd` where p has 4 bits and 'q8' activations (qgemv8, qgemm8; src/wasm/dot-add.ts).
 */
export function kernelBits(p: QuantizedProjection, dotAdd = false): number {
  return p.bits | (p.halfScales ? HALF_SCALES : 0) | (dotAdd && p.bits === 4 && p.activations === 'q8' ? DOT_ADD : 0);
}

/** The kernel call for rows [0, rows) and columns [c0, c0 + n) of projection p (c0 a multiple of 8); x, y at row 0; `dotAdd` as kernelBits. */
function call(p: Projection, x: number, rows: number, c0: number, n: number, y: number, scratch: number, dotAdd: boolean): KernelCall {
  if (p.kind === 'float') return ['gemm', x, p.K, rows, p.K, p.w + 4 * c0 * p.K, n, p.bias + 4 * c0, y + 4 * c0, p.N];
  const panel = c0 / 4;
  const wq = p.wq + panel * Math.ceil((p.K * p.bits) / 32) * 16;
  const so = p.so + panel * Math.ceil(p.K / p.group) * (p.halfScales ? 8 : 32);
  const args = [x, p.K, rows, p.K, wq, so, n, p.bias + 4 * c0, y + 4 * c0, p.N, kernelBits(p, dotAdd), p.group] as const;
  const name = rows <= GEMV_ROWS ? 'qgemv' : 'qgemm';
  return [p.activations === 'q8' ? `${name}8` : name, ...args, scratch];
}

/**
 * Scratch floats a thread's kernel call needs for `rows` rows of projection p: qgemm's dequantized panel
 * [K rounded up to a word, 8] f32, or qgemv's sums of x over each group [rows, groups], its x as 16-bit
 * pairs [rows, K] and a scale a row; with q8 activations (wasm/q8.ts) (d, d·S) per unit of min(group, 32)
 * [rows, units, 2] (to a multiple of 4) and the rows as i16 [rows, Kp] (Kp = K to a multiple of 8), and
 * for qgemm8, of a chunk of at most 64 rows, after a tile [4, 8] f32, a pair panel [Kp/2, 8, 2] i16 and a
 * panel's scales and offsets [2, groups, 8] f32 (widened from halfScales).
 */
export function scratchFloats(p: Projection, rows: number): number {
  if (p.kind === 'float') return 0;
  if (p.activations === 'f32') return rows > GEMV_ROWS ? (p.K + 7) * 8 : rows * (2 * Math.ceil(p.K / p.group) + p.K);
  const units = Math.ceil(p.K / Math.min(p.group, 32));
  const Kp = Math.ceil(p.K / 8) * 8;
  const R = Math.min(rows, 64);
  const perRows = Math.ceil((2 * R * units) / 4) * 4 + (R * Kp) / 2;
  return rows > GEMV_ROWS ? 32 + 4 * Kp + 16 * Math.ceil(p.K / p.group) + perRows : perRows;
}

/**
 * y [rows, N] = x [rows, K] · Wᵀ + b for each (x, rows, W), split over the threads: by rows, or by
 * panels of 8 columns when there are few rows (decoding), so that each thread reads only its part
 * of W. Either way each y element is computed as one thread would. Returns the y addresses.
 */
export async function project(kernels: WasmKernels, jobs: [x: number, rows: number, p: Projection][]): Promise<number[]> {
  // The kind of pass (ThreadChoice): the projections' sizes and kinds, and the rows (a size class past a decode step's).
  // (One thread: no choice to make, no name needed.)
  const rows0 = jobs[0][1];
  const kind =
    kernels.threads > 1
      ? `project:${rows0 <= GEMV_ROWS ? rows0 : `~${sizeClass(rows0)}`}:${jobs.map(([, , p]) => `${p.kind === 'float' ? 'f' : `${p.bits}${p.activations === 'q8' ? 'q8' : ''}`}:${p.K}x${p.N}`).join('+')}`
      : undefined;
  const T =
    kind === undefined
      ? 1
      : listsFor(
          kernels,
          jobs.reduce((sum, [, rows, p]) => sum + rows * p.K * p.N, 0),
          kind,
        );
  const lists: KernelCall[][] = Array.from({ length: T }, () => []);
  const ys = jobs.map(([, rows, p]) => kernels.alloc(rows * p.N));
  // The quantized kernels' scratch, one per thread (scratchFloats), as large as the largest job's.
  const floats = Math.max(0, ...jobs.map(([, rows, p]) => scratchFloats(p, rows)));
  const scratch = Array.from({ length: T }, () => (floats > 0 ? kernels.alloc(floats) : 0));
  // 4-bit 'q8' products: the relaxed build's DOT_ADD form where it pays (dot-add.ts), measured on the
  // prefill passes (more than GEMV_ROWS rows, DOT_ADD_MIN_TRIAL_PRODUCTS in all); the other passes take
  // the verdict once there is one.
  const fourBitQ8 = (p: Projection) => p.kind === 'quantized' && p.bits === 4 && p.activations === 'q8';
  const choice = jobs.some(([, , p]) => fourBitQ8(p)) ? dotAddChoice(kernels) : null;
  const products = jobs.reduce((sum, [, rows, p]) => sum + rows * p.K * p.N, 0);
  const trial = choice !== null && choice.verdict === null && products >= DOT_ADD_MIN_TRIAL_PRODUCTS && jobs.some(([, rows, p]) => rows > GEMV_ROWS && fourBitQ8(p));
  const dotAdd = trial
    ? choice.next(kernels)
    : (choice?.taken(
        kernels,
        jobs.some(([, rows]) => rows <= GEMV_ROWS),
      ) ?? false);
  jobs.forEach(([x, rows, p], j) => {
    const y = ys[j];
    if (rows >= 64 * T) {
      const chunk = Math.ceil(rows / T / 4) * 4; // whole micro-kernel steps of 4 rows (and at least gemm's 64-row blocks)
      for (let t = 0, r0 = 0; r0 < rows; t++, r0 += chunk) {
        lists[t].push(call(p, x + 4 * r0 * p.K, Math.min(chunk, rows - r0), 0, p.N, y + 4 * r0 * p.N, scratch[t], dotAdd));
      }
    } else {
      const panels = Math.ceil(Math.ceil(p.N / 8) / T);
      for (let t = 0, p0 = 0; p0 * 8 < p.N; t++, p0 += panels) {
        lists[t].push(call(p, x, rows, p0 * 8, Math.min(panels * 8, p.N - p0 * 8), y, scratch[t], dotAdd)); // columns p0·8 …
      }
    }
  });
  const t0 = performance.now();
  await kernels.run(lists, kind);
  if (trial) choice.record(dotAdd, performance.now() - t0, products);
  return ys;
}
