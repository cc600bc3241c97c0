// Quantized weights on the WebGPU backend: kept packed on the GPU (engine.stats().bytes counts the packed
// size) and dequantized inside the projection kernels: the GEMM cores for a prefill, the GEMV core for a
// decode step over a KV cache (M ≤ 8). Every type (GGUF q4_0, q8_0, q4_k, q6_k; MatMulNBits 4 and 8 bits,
// with and without zero points, f32 and f16 scales, K not a multiple of the block) against the float64
// reference with the weights dequantized exactly (src/quant/dequantize.ts), at the f32 rule; GQA, B > 1,
// an odd N, mixed q/k/v types, f16 precision. Kept small: each bit width and precision is a compile.

import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { referenceForward } from '../src/cpu/reference.ts';
import { resolveForwardPlan, resolveLayerSpec, resolveWeights } from '../src/plan/index.ts';
import type { AttentionEngine, QuantizedStateDict as StateDict, QuantizedTensor } from '../src/index.ts';
import { packWeight } from '../src/quant/pack.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f16Tolerance, f32Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';
import { toF16 } from '../src/util/f16.ts';
import { OUTPUT_PACKED_BINDINGS, outputProjectionPipeline } from '../src/webgpu/kernels/output-projection.ts';
import { QKV_PACKED_BINDINGS, qkvProjectionPipeline } from '../src/webgpu/kernels/qkv-projection.ts';
import { gateVariant } from '../src/webgpu/tuning/gate.ts';
import { defaultChoice, PROJECTION_VARIANTS } from '../src/webgpu/variants.ts';
import { recordPipelines } from './helpers/dispatches.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';

type Rng = () => number;
type Make = (N: number, K: number, rng: Rng) => QuantizedTensor;

/** Random bytes. */
function bytes(n: number, rng: Rng): Uint8Array {
  return Uint8Array.from({ length: n }, () => Math.floor(rng() * 256));
}

/** f16 bits of v, written little-endian at `at`. */
function putHalf(d: Uint8Array, at: number, v: number): void {
  const h = toF16(new Float32Array([v]))[0];
  d[at] = h & 0xff;
  d[at + 1] = h >> 8;
}

/** GGUF blocks of random quants with scales sized so that weights stay within about ±1/√K. */
function gguf(dtype: 'q4_0' | 'q8_0' | 'q4_k' | 'q6_k'): Make {
  const layout = { q4_0: [18, 32], q8_0: [34, 32], q4_k: [144, 256], q6_k: [210, 256] }[dtype];
  return (N, K, rng) => {
    const [blockBytes, weights] = layout;
    const blocks = (N * K) / weights;
    const data = bytes(blocks * blockBytes, rng);
    const unit = 1 / Math.sqrt(K);
    for (let b = 0; b < blocks; b++) {
      const at = b * blockBytes;
      const r = 0.5 + rng();
      if (dtype === 'q4_0') putHalf(data, at, (r * unit) / 8);
      if (dtype === 'q8_0') putHalf(data, at, (r * unit) / 128);
      if (dtype === 'q4_k') {
        putHalf(data, at, (r * unit) / (63 * 8));
        putHalf(data, at + 2, (r * unit) / (63 * 2));
      }
      if (dtype === 'q6_k') putHalf(data, at + 208, (r * unit) / (128 * 32));
    }
    return { dtype, shape: [N, K], data };
  };
}

/** MatMulNBits: random quants, scales f32 or f16 bits, zero points or the default. */
function nbits(bits: 4 | 8, blockSize: 16 | 32 | 64, opts: { zeroPoints?: boolean; f16?: boolean } = {}): Make {
  return (N, K, rng) => {
    const blocks = Math.ceil(K / blockSize);
    const data = bytes((N * blocks * blockSize * bits) / 8, rng);
    const values = Float32Array.from({ length: N * blocks }, () => ((rng() - 0.5) * 4) / (Math.sqrt(K) * 2 ** bits));
    const scales = opts.f16 ? toF16(values) : values;
    const zeroPoints = opts.zeroPoints ? bytes(N * Math.ceil((blocks * bits) / 8), rng) : undefined;
    return { dtype: 'nbits', bits, blockSize, shape: [N, K], data, scales, ...(zeroPoints ? { zeroPoints } : {}) };
  };
}

interface Layer {
  embedDim: number;
  numHeads: number;
  numKvHeads: number;
}

/** A state_dict with quantized projection weights: in_proj_weight of one type, or q/k/v of their own. */
function quantizedStateDict(layer: Layer, inProj: Make | [Make, Make, Make], out: Make, seed: number): StateDict {
  const { embedDim: E, numHeads: H, numKvHeads: G } = layer;
  const Dh = E / H;
  const rng = mulberry32(seed);
  const weights: StateDict = Array.isArray(inProj)
    ? { q_proj_weight: inProj[0](H * Dh, E, rng), k_proj_weight: inProj[1](G * Dh, E, rng), v_proj_weight: inProj[2](G * Dh, E, rng) }
    : { in_proj_weight: inProj((H + 2 * G) * Dh, E, rng) };
  return { ...weights, in_proj_bias: uniform((H + 2 * G) * Dh, 0.1, rng), 'out_proj.weight': out(E, E, rng), 'out_proj.bias': uniform(E, 0.1, rng) };
}

/** Rows s0 … s1 − 1 of every batch element of x [B, S, E]. */
function rows<T extends Float32Array | Float64Array>(x: T, B: number, S: number, E: number, s0: number, s1: number): T {
  const out = new (x.constructor as new (n: number) => T)(B * (s1 - s0) * E);
  for (let b = 0; b < B; b++) out.set(x.subarray((b * S + s0) * E, (b * S + s1) * E), b * (s1 - s0) * E);
  return out;
}

/** Bytes the packed layout of every quantized weight takes on the GPU, plus the float ones and the biases (f32). */
function packedBytes(sd: StateDict, elementBytes: number): number {
  let total = 0;
  for (const [name, w] of Object.entries(sd)) {
    if (w instanceof Float32Array) total += Math.max(16, w.length * elementBytes);
    else if (name.endsWith('weight')) {
      const p = packWeight(w as QuantizedTensor);
      total += Math.max(16, p.quants.byteLength) + Math.max(16, p.scaleOffset.byteLength);
    }
  }
  return total;
}

// The first test of each bit width compiles its kernels (seconds each on an idle lavapipe, minutes on a loaded machine).
vi.setConfig({ testTimeout: 600_000, hookTimeout: 120_000 });

describe('packed pipelines: their own bindings, one per (variant, precision, bits), and the GEMV at decode', () => {
  test.each(PROJECTION_VARIANTS)('%s: packed weights bind quants and scaleOffset in place of w', (variant) => {
    for (const [spec, bindings] of [
      [qkvProjectionPipeline('f32', variant, { bits: 4, group: 32 }), QKV_PACKED_BINDINGS],
      [outputProjectionPipeline('f32', variant, { bits: 8, group: 16 }), OUTPUT_PACKED_BINDINGS],
    ] as const) {
      expect(spec.bindings).toBe(bindings);
      const names = [...spec.code.matchAll(/@binding\((\d+)\) var<[^>]+> (\w+):/g)].map((m) => m[2]);
      expect(names).toEqual(bindings.decls.map(([name]) => name));
      expect(names).toContain('quants');
      expect(names).not.toContain('w');
    }
    // The group is a uniform: formats of one bit width share a pipeline; another width is another.
    expect(qkvProjectionPipeline('f32', variant, { bits: 4, group: 16 })).toBe(qkvProjectionPipeline('f32', variant, { bits: 4, group: 256 }));
    expect(qkvProjectionPipeline('f32', variant, { bits: 4, group: 32 }).key).not.toBe(qkvProjectionPipeline('f32', variant, { bits: 8, group: 32 }).key);
    expect(qkvProjectionPipeline('f32', variant, { bits: 4, group: 32 }).key).not.toBe(qkvProjectionPipeline('f32', variant).key);
  });

  test('the built-in choice: a GEMV for packed weights at M ≤ 8 rows (gemv on GPUs, gemv-rows-subgroup on lavapipe with subgroups, gemv-rows on other CPU adapters; SwiftShader the 4×4 register GEMM), the GEMM otherwise; float weights unchanged', () => {
    for (const kind of ['unrolling-cpu', 'jit-cpu', 'cpu', 'gpu'] as const) {
      for (const subgroups of [false, true]) {
        const call = (rows: number, packed: boolean) => ({ queryRows: 1, keys: 100, rows, packed });
        const gemv = { gpu: 'gemv', 'jit-cpu': 'register-4x4', 'unrolling-cpu': subgroups ? 'gemv-rows-subgroup' : 'gemv-rows', cpu: 'gemv-rows' }[kind];
        expect(defaultChoice(kind, subgroups, call(8, true)).qkv_projection).toBe(gemv);
        expect(defaultChoice(kind, subgroups, call(1, true)).output_projection).toBe(gemv);
        expect(defaultChoice(kind, subgroups, call(9, true)).qkv_projection).toBe(defaultChoice(kind, subgroups).qkv_projection);
        expect(defaultChoice(kind, subgroups, call(1, false))).toEqual(defaultChoice(kind, subgroups, { queryRows: 1, keys: 100 }));
      }
    }
  });
});

let engine: AttentionEngine;
beforeAll(async () => {
  engine = await createGpuEngine();
});
afterAll(() => engine?.dispose());

/**
 * Prefill P tokens into a KV cache (B·P > 8 rows: the GEMM cores), then one decode step (B rows: the
 * GEMV core); both against the float64 reference of the causal forward over the P + 1 tokens.
 */
async function prefillAndDecode(e: AttentionEngine, layer: Layer, sd: StateDict, B: number, P: number, precision: 'f32' | 'f16' = 'f32') {
  const E = layer.embedDim;
  const S = P + 1;
  const x = uniform(B * S * E, 1, mulberry32(S * 31 + B));
  // The float64 reference, its weights dequantized exactly as ggml / ONNX Runtime do (plan/layer.ts, quant/dequantize.ts).
  const spec = resolveLayerSpec(layer);
  const expected = referenceForward(resolveForwardPlan(spec, x, { batchSize: B, seqLen: S, isCausal: true }), resolveWeights(spec, sd)).output;
  const before = e.stats().bytes;
  const mha = e.createMultiHeadAttention(layer, sd);
  const held = e.stats().bytes - before;
  const cache = mha.createKvCache({ batchSize: B, maxSeqLen: S });
  const device = e.device!;
  const run = (s0: number, s1: number) =>
    recordPipelines(device, () =>
      withErrorScopes(device, () => mha.forward(rows(x, B, S, E, s0, s1), { batchSize: B, seqLen: s1 - s0, kvCache: cache, isCausal: true })),
    );
  const prefill = await run(0, P);
  const decode = await run(P, S);
  const want = (s0: number, s1: number) => rows(expected, B, S, E, s0, s1);
  const tol = (ref: Float64Array) => (precision === 'f16' ? f16Tolerance([E, S, E], maxAbsFinite(ref)) : f32Tolerance([E, S, E]));
  expectClose(prefill.result.output, want(0, P), tol(want(0, P)), 'prefill');
  expectClose(decode.result.output, want(P, S), tol(want(P, S)), 'decode step');
  cache.dispose();
  mha.dispose();
  return { held, prefill: prefill.pipelines, decode: decode.pipelines };
}

const GQA: Layer = { embedDim: 256, numHeads: 4, numKvHeads: 2 };

/** The decode GEMV of this adapter: lavapipe, where these tests run, is a CPU adapter with subgroups (variants.ts withGemv). */
const GEMV = 'gemv-rows-subgroup';

const types: [string, Make][] = [
  ['q4_0', gguf('q4_0')],
  ['q8_0', gguf('q8_0')],
  ['q4_k', gguf('q4_k')],
  ['q6_k', gguf('q6_k')],
  ['nbits 4-bit bs32, zero points, f16 scales', nbits(4, 32, { zeroPoints: true, f16: true })],
  ['nbits 8-bit bs64, no zero points', nbits(8, 64)],
  ['nbits 8-bit bs16, zero points', nbits(8, 16, { zeroPoints: true })],
];

describe('quantized weights on WebGPU: packed on the GPU, dequantized in the kernels', () => {
  test.each(types)('%s: prefill (GEMM) and a decode step (GEMV) with GQA, B=2, match the float64 reference', async (name, make) => {
    const sd = quantizedStateDict(GQA, make, make, name.length);
    const { held, prefill, decode } = await prefillAndDecode(engine, GQA, sd, 2, 6);
    // The weights are held packed: exactly the packed buffers and the biases, far below float32.
    expect(held).toBe(packedBytes(sd, 4));
    const E = GQA.embedDim;
    expect(held).toBeLessThan(0.6 * (2 * E * E + 2 * E) * 4);
    // Which kernels ran: the packed GEMM for the prefill's 12 rows (two dispatches with a KV cache: Q, then K and V), the packed GEMV for the decode step's 2.
    const bits = name.includes('8') || name === 'q6_k' ? 8 : 4;
    expect(prefill.filter((l) => l.startsWith('QkvProjection.') && l.includes(`.q${bits}.`) && !l.includes('gemv')).length).toBe(2);
    expect(prefill.some((l) => l.startsWith('OutputProjection.') && l.includes(`.q${bits}.`) && !l.includes('gemv'))).toBe(true);
    expect(decode).toContain(`QkvProjection.${GEMV}.q${bits}.pipeline`);
    expect(decode).toContain(`OutputProjection.${GEMV}.q${bits}.pipeline`);
  });

  test('q, k, v quantized apart in different types (Q4_K_M: q6_k V), a float out_proj.weight beside them', async () => {
    const rng = mulberry32(5);
    const sd = { ...quantizedStateDict(GQA, [gguf('q4_k'), gguf('q4_k'), gguf('q6_k')], gguf('q4_k'), 3), 'out_proj.weight': uniform(256 * 256, 1 / 16, rng) };
    const { held, prefill, decode } = await prefillAndDecode(engine, GQA, sd, 1, 9);
    expect(held).toBe(packedBytes(sd, 4));
    // Three dispatches (q, k and v) for the prefill, of both bit widths; the float output projection.
    expect(prefill.filter((l) => l.startsWith('QkvProjection.')).map((l) => l.includes('.q8.'))).toEqual([false, false, true]);
    expect(prefill.some((l) => l.startsWith('OutputProjection.') && !l.includes('.q'))).toBe(true);
    expect(decode.filter((l) => l.startsWith(`QkvProjection.${GEMV}.`)).length).toBe(3);
  });

  test('q, k, v quantized apart in one type: one weight, dispatched as in_proj_weight is', async () => {
    const sd = quantizedStateDict(GQA, [gguf('q8_0'), gguf('q8_0'), gguf('q8_0')], gguf('q8_0'), 4);
    const { held, prefill } = await prefillAndDecode(engine, GQA, sd, 2, 5);
    expect(held).toBe(packedBytes(sd, 4));
    expect(prefill.filter((l) => l.startsWith('QkvProjection.')).length).toBe(2); // Q, then K and V into the cache (apart: three)
  });

  test('an odd N ((H + 2G)·Dh = 100 and E = 60, not multiples of the GEMV block of 8), K not a multiple of the block (nbits 4-bit bs16), B=3', async () => {
    const layer: Layer = { embedDim: 60, numHeads: 3, numKvHeads: 1 };
    const make = nbits(4, 16, { zeroPoints: true });
    const sd = quantizedStateDict(layer, make, make, 6);
    const { held, decode } = await prefillAndDecode(engine, layer, sd, 3, 4);
    expect(held).toBe(packedBytes(sd, 4));
    expect(decode).toContain(`QkvProjection.${GEMV}.q4.pipeline`);
  });

  test('a layer that needs padding (E = 30, heads of 10): dequantized at upload and run as a float layer (docs/QUANTIZED-GPU.md)', async () => {
    const layer: Layer = { embedDim: 30, numHeads: 3, numKvHeads: 3 };
    const make = nbits(4, 16);
    const { prefill, decode } = await prefillAndDecode(engine, layer, quantizedStateDict(layer, make, make, 8), 1, 9);
    expect([...prefill, ...decode].some((l) => l.includes('.q4'))).toBe(false);
  });

  test("precision 'f16': packed weights (f32 scales) with f16 activations", async () => {
    const half = await createGpuEngine({ precision: 'f16' });
    try {
      expect(half.precision).toBe('f16');
      const sd = quantizedStateDict(GQA, gguf('q4_0'), gguf('q4_0'), 7);
      const { held, decode } = await prefillAndDecode(half, GQA, sd, 2, 6, 'f16');
      expect(held).toBe(packedBytes(sd, 2));
      expect(decode).toContain(`QkvProjection.${GEMV}.q4.pipeline`);
    } finally {
      half.dispose();
    }
  });

  test("the tuner's gate checks a variant on packed weights of a bit width against float64", async () => {
    const pool = (engine as unknown as { impl: { pool: Parameters<typeof gateVariant>[0] } }).impl.pool;
    expect(await gateVariant(pool, 'unrolling-cpu', 'qkv_projection', 'gemv', 16, { bits: 4, group: 32 })).toBeNull();
    expect(await gateVariant(pool, 'unrolling-cpu', 'output_projection', 'register-4x4', 16, { bits: 8, group: 16 })).toBeNull();
  });
});

describe("the GPUs' GEMV (gemv: K split across a workgroup), forced on packed weights of every type", () => {
  let gemv: AttentionEngine;
  beforeAll(async () => {
    gemv = await createGpuEngine({ tuning: { mode: 'off', kernels: { qkv_projection: 'gemv', output_projection: 'gemv' } } });
  });
  afterAll(() => gemv?.dispose());

  test.each(types)('%s: prefill and a decode step with GQA, B=2, match the float64 reference', async (name, make) => {
    const sd = quantizedStateDict(GQA, make, make, name.length + 100);
    const { decode } = await prefillAndDecode(gemv, GQA, sd, 2, 6);
    const bits = name.includes('8') || name === 'q6_k' ? 8 : 4;
    expect(decode).toContain(`QkvProjection.gemv.q${bits}.pipeline`);
    expect(decode).toContain(`OutputProjection.gemv.q${bits}.pipeline`);
  });
});

// gemv-rows is the decode GEMV of CPU adapters without subgroups (SwiftShader here: too slow for these
// shapes; Firefox and Deno, whose suites run it on packed weights too); lavapipe runs gemv-rows-subgroup.
describe('gemv-rows (the decode GEMV of CPU adapters without subgroups), forced on packed weights of each bit width', () => {
  let rows: AttentionEngine;
  beforeAll(async () => {
    rows = await createGpuEngine({ tuning: { mode: 'off', kernels: { qkv_projection: 'gemv-rows', output_projection: 'gemv-rows' } } });
  });
  afterAll(() => rows?.dispose());

  const some = types.filter(([name]) => name === 'q4_k' || name.startsWith('nbits 8-bit bs16'));
  test.each(some)('%s: prefill and a decode step with GQA, B=2, match the float64 reference', async (name, make) => {
    const sd = quantizedStateDict(GQA, make, make, name.length + 200);
    const { decode } = await prefillAndDecode(rows, GQA, sd, 2, 6);
    const bits = name.includes('8') ? 8 : 4;
    expect(decode).toContain(`QkvProjection.gemv-rows.q${bits}.pipeline`);
    expect(decode).toContain(`OutputProjection.gemv-rows.q${bits}.pipeline`);
  });
});

describe.each(['gemv-rows', 'gemv-rows-subgroup'] as const)(
  "%s (the CPU adapters' decode GEMV) forced on float weights: its 16-element steps and single-vec4 edges",
  (variant) => {
    let rowsEngine: AttentionEngine;
    let half: AttentionEngine;
    const forced = { mode: 'off', kernels: { qkv_projection: variant, output_projection: variant } } as const;
    beforeAll(async () => {
      rowsEngine = await createGpuEngine({ tuning: forced });
      half = await createGpuEngine({ precision: 'f16', tuning: forced });
    });
    afterAll(() => {
      rowsEngine?.dispose();
      half?.dispose();
    });

    // E = 256 (K/4 = 64: every step 16 wide); E = 60 (K/4 = 15: a 16-wide tail of 3 vec4s; heads of 20, so the
    // output projection's per-head segments of 5 vec4s start off the 4-vec4 grid); E = 4 (K/4 = 1: no 16-wide step).
    const layers: [string, Layer][] = [
      ['GQA E=256', GQA],
      ['E=60 H=3 G=1', { embedDim: 60, numHeads: 3, numKvHeads: 1 }],
      ['E=4 H=1', { embedDim: 4, numHeads: 1, numKvHeads: 1 }],
    ];
    test.each(layers)('%s, f32: prefill and a decode step of B=3 match the float64 reference', async (_name, layer) => {
      const sd = randomStateDict(layer, layer.embedDim + 1) as StateDict;
      const { decode } = await prefillAndDecode(rowsEngine, layer, sd, 3, 4);
      expect(decode).toContain(`QkvProjection.${variant}.pipeline`);
      expect(decode).toContain(`OutputProjection.${variant}.pipeline`);
    });
    test("E=60, precision 'f16': the same at the f16 rule", async () => {
      const layer: Layer = { embedDim: 60, numHeads: 3, numKvHeads: 1 };
      const { decode } = await prefillAndDecode(half, layer, randomStateDict(layer, 9) as StateDict, 2, 5, 'f16');
      expect(decode).toContain(`QkvProjection.${variant}.pipeline`);
    });
  },
);
