// Faults and limits: device loss between calls and during one, devices the caller owns, limits
// smaller than the device's (calls split into chunks that give the unchunked answer), and memory
// that stays flat over many calls.

import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type AttentionEngine, createAttentionEngine, DeviceLimitError, DeviceLostError, type ForwardOptions } from '../src/index.ts';
import { makePlan, resolveLayerSpec } from '../src/plan/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { withinDispatchLimit } from '../src/webgpu/backend.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';

const L = { embedDim: 32, numHeads: 4 };
const sd = randomStateDict(L, 21);

const engines = useEngines('cpu');

async function reference(x: Float32Array, options: ForwardOptions) {
  const mha = engines.cpu.createMultiHeadAttention(L, sd);
  const r = await mha.forward(x, options);
  mha.dispose();
  return r;
}

describe('device loss', () => {
  test('lost between calls: the next call runs on a new device, with the weights re-uploaded', async () => {
    const engine = await createGpuEngine();
    const mha = engine.createMultiHeadAttention(L, sd);
    const x = uniform(2 * 9 * 32, 1, mulberry32(1));
    const options = { batchSize: 2, seqLen: 9, isCausal: true };
    const before = await mha.forward(x, options);
    const first = engine.device!;
    first.destroy();
    const after = await mha.forward(x, options);
    expect(engine.device).not.toBe(first);
    expect(engine.backend).toBe('webgpu');
    expect(Array.from(after.output)).toEqual(Array.from(before.output));
    expectClose(after.output, (await reference(x, options)).output, f32Tolerance([32, 9, 32]));
    // Layers created after the loss work too, and the new device's memory is accounted for.
    const second = engine.createMultiHeadAttention(L, sd);
    await withErrorScopes(engine.device!, () => second.forward(x, options));
    expect(engine.stats().buffers).toBeGreaterThan(8);
    engine.dispose();
  });

  test('lost during a call: that call rejects with DeviceLostError; the next one is right', async () => {
    const engine = await createGpuEngine();
    const big = { embedDim: 256, numHeads: 4 };
    const bigSd = randomStateDict(big, 3);
    const mha = engine.createMultiHeadAttention(big, bigSd);
    const x = uniform(2 * 256 * 256, 1, mulberry32(2));
    const options = { batchSize: 2, seqLen: 256 };
    const inFlight = mha.forward(x, options);
    engine.device!.destroy();
    const error = await inFlight.then(
      () => null,
      (e) => e,
    );
    expect(error).toBeInstanceOf(DeviceLostError);
    expect((error as DeviceLostError).reason).toBe('destroyed');
    expect((error as Error).message).toContain('lost during the call');
    const again = await mha.forward(x, options);
    const ref = engines.cpu.createMultiHeadAttention(big, bigSd);
    expectClose(again.output, (await ref.forward(x, options)).output, f32Tolerance([256, 256, 256]));
    ref.dispose();
    engine.dispose();
  });

  test('scaledDotProductAttention recovers too', async () => {
    const engine = await createGpuEngine();
    const q = uniform(2 * 4 * 5 * 8, 1, mulberry32(3));
    const opts = { batchSize: 2, numHeads: 4, seqLen: 5, headDim: 8 };
    const before = await engine.scaledDotProductAttention(q, q, q, opts);
    engine.device!.destroy();
    const after = await engine.scaledDotProductAttention(q, q, q, opts);
    expect(Array.from(after.output)).toEqual(Array.from(before.output));
    engine.dispose();
  });

  test('a device the caller gave cannot be replaced: calls reject, naming what was lost', async () => {
    const owner = await createGpuEngine(); // only to get a device we own
    // Dawn's GPU object must outlive its devices (collected early, it takes the process down): keep it.
    const gpu = (await import('webgpu')).create([]);
    const adapter = await gpu.requestAdapter();
    const device = await adapter!.requestDevice();
    const engine = await createAttentionEngine({ device });
    const mha = engine.createMultiHeadAttention(L, sd);
    const x = uniform(32, 1, mulberry32(4));
    await mha.forward(x, { batchSize: 1, seqLen: 1 });
    device.destroy();
    const error = await mha.forward(x, { batchSize: 1, seqLen: 1 }).then(
      () => null,
      (e) => e,
    );
    expect(error).toBeInstanceOf(DeviceLostError);
    expect((error as Error).message).toContain('given to createAttentionEngine was lost');
    engine.dispose();
    owner.dispose();
    // A real use of `gpu` after its device is gone (which also keeps it alive until here): it still hands out adapters.
    expect(await gpu.requestAdapter()).not.toBeNull();
  });
});

describe("limits smaller than the device's: calls are split, and equal the unsplit ones", () => {
  let full: AttentionEngine;
  beforeAll(async () => {
    full = await createGpuEngine();
  });
  afterAll(() => full?.dispose());

  async function compare(limits: Record<string, number>, x: Float32Array, options: ForwardOptions, layer = L, weights = sd) {
    // The same kernel variants as `full` (createGpuEngine does not tune), so the results may be compared bit for bit.
    const small = await createAttentionEngine({ backend: 'webgpu', limits, tuning: { mode: 'off' } });
    const a = small.createMultiHeadAttention(layer, weights);
    const b = full.createMultiHeadAttention(layer, weights);
    const chunked = await withErrorScopes(small.device!, () => a.forward(x, options));
    const whole = await b.forward(x, options);
    expect(Array.from(chunked.output)).toEqual(Array.from(whole.output));
    if (whole.attentionWeights) expect(Array.from(chunked.attentionWeights!)).toEqual(Array.from(whole.attentionWeights));
    a.dispose();
    b.dispose();
    small.dispose();
  }

  test('maxStorageBufferBindingSize: over the batch, with padding, a per-head mask, a head mask and weights', async () => {
    // One batch element (S = 33): Q/K/V 3·33·32·4 = 12672 bytes; its per-head mask and weights
    // 4·33·33·4 = 17424. A limit of 25344 holds the layer's weights (12288) and one element per call.
    const B = 7;
    const S = 33;
    const x = uniform(B * S * 32, 1, mulberry32(5));
    const r = mulberry32(6);
    await compare({ maxStorageBufferBindingSize: 25344 }, x, {
      batchSize: B,
      seqLen: S,
      isCausal: true,
      needWeights: true,
      keyPaddingMask: Uint8Array.from({ length: B * S }, () => (r() < 0.2 ? 1 : 0)),
      attnMask: uniform(B * 4 * S * S, 1, r),
      headMask: uniform(B * 4, 1, r),
    });
  });

  test('maxComputeWorkgroupsPerDimension: over the batch', async () => {
    const x = uniform(10 * 9 * 32, 1, mulberry32(7));
    await compare({ maxComputeWorkgroupsPerDimension: 3 }, x, { batchSize: 10, seqLen: 9 });
  });

  test('a GEMM variant whose row tiles would exceed the workgroup limit gives way to register-4x4', () => {
    // chunking.ts bounds the rows per call by 32 rows per workgroup; the subgroup cores cover 4 to 16.
    const choice = { qkv_projection: 'subgroup-16x4', flash_attention: 'rows64-keys32-r4', output_projection: 'subgroup-4x4' } as const;
    const spec = resolveLayerSpec(L);
    const plan = (batchSize: number, seqLen: number, kvSeqLen = seqLen) =>
      makePlan({ layer: spec, mode: kvSeqLen === seqLen ? 'self' : 'cross', batchSize, seqLen, kvSeqLen, query: new Float32Array(0) });
    expect(withinDispatchLimit(choice, plan(1, 16), 4)).toEqual(choice); // 16/16 = 1, 16/4 = 4 workgroups
    expect(withinDispatchLimit(choice, plan(2, 32), 4)).toEqual({ ...choice, output_projection: 'register-4x4' }); // 64/4 = 16 > 4
    expect(withinDispatchLimit(choice, plan(1, 8, 128), 4)).toEqual({ ...choice, qkv_projection: 'register-4x4' }); // cross: 128 K/V rows
    expect(withinDispatchLimit(choice, plan(1, 65535 * 16 + 1), 65535)).toMatchObject({ qkv_projection: 'register-4x4', output_projection: 'register-4x4' });
  });

  test('cross-attention with kdim and vdim', async () => {
    const layer = { embedDim: 32, numHeads: 2, kdim: 8, vdim: 12 };
    const r = mulberry32(8);
    const w = {
      q_proj_weight: uniform(32 * 32, 0.3, r),
      k_proj_weight: uniform(32 * 8, 0.3, r),
      v_proj_weight: uniform(32 * 12, 0.3, r),
      in_proj_bias: uniform(96, 0.1, r),
      'out_proj.weight': uniform(1024, 0.2, r),
      'out_proj.bias': uniform(32, 0.1, r),
    };
    // One batch element's Q/K/V is (H·Sq + 2G·Skv)·Dh·4 = 2048 bytes: two per call.
    await compare(
      { maxStorageBufferBindingSize: 4096 },
      uniform(5 * 4 * 32, 1, r),
      {
        batchSize: 5,
        seqLen: 4,
        kvSeqLen: 6,
        key: uniform(5 * 6 * 8, 1, r),
        value: uniform(5 * 6 * 12, 1, r),
      },
      layer,
      w,
    );
  });

  test('packed sequences: over groups of whole sequences', async () => {
    const cu = Int32Array.from([0, 5, 35, 52, 53, 62]); // lengths 5, 30, 17, 1, 9
    const x = uniform(62 * 32, 1, mulberry32(9));
    // Q/K/V take 3·32·4 bytes a token: at most 40 tokens per call: [5, 30], then [17, 1, 9].
    await compare({ maxStorageBufferBindingSize: 40 * 32 * 4 * 3 }, x, { cuSeqlens: cu, isCausal: true });
  });

  test('scaledDotProductAttention over the batch', async () => {
    const small = await createAttentionEngine({ backend: 'webgpu', limits: { maxStorageBufferBindingSize: 2 * 4 * 6 * 8 * 4 }, tuning: { mode: 'off' } });
    const r = mulberry32(10);
    const q = uniform(5 * 4 * 6 * 8, 1, r);
    const k = uniform(5 * 2 * 6 * 8, 1, r);
    const opts = { batchSize: 5, numHeads: 4, numKvHeads: 2, seqLen: 6, headDim: 8, isCausal: true, needWeights: true };
    const a = await small.scaledDotProductAttention(q, k, k, opts);
    const b = await full.scaledDotProductAttention(q, k, k, opts);
    expect(Array.from(a.output)).toEqual(Array.from(b.output));
    expect(Array.from(a.attentionWeights!)).toEqual(Array.from(b.attentionWeights!));
    small.dispose();
  });

  test('where one batch element alone does not fit, the error names the limit and the size', async () => {
    // The weights (in_proj_weight: 12288 bytes) fit; one sequence of 40 tokens (Q/K/V: 15360 bytes) does not.
    const small = await createAttentionEngine({ backend: 'webgpu', limits: { maxStorageBufferBindingSize: 12288 } });
    const mha = small.createMultiHeadAttention(L, sd);
    const before = small.stats();
    const error = await mha.forward(uniform(40 * 32, 1, mulberry32(11)), { batchSize: 1, seqLen: 40 }).then(
      () => null,
      (e) => e,
    );
    expect(error).toBeInstanceOf(DeviceLimitError);
    expect((error as Error).message).toContain('the Q/K/V buffer must be at most maxStorageBufferBindingSize = 12288 bytes; got 15360 for a single batch element');
    expect(small.stats()).toEqual(before);
    small.dispose();
  });

  test('limits: bad values and unknown names are refused', async () => {
    await expect(createAttentionEngine({ limits: { maxBufferSize: 0 } })).rejects.toThrow(/options\.limits\.maxBufferSize must be a positive integer/);
    await expect(createAttentionEngine({ limits: { maxBindingSize: 5 } as never })).rejects.toThrow(/options\.limits\.maxBindingSize/);
  });
});

describe('memory over many calls', () => {
  test('a thousand forwards of one shape leave stats() unchanged; dispose() returns it to the start', async () => {
    const engine = await createGpuEngine();
    const start = engine.stats();
    const mha = engine.createMultiHeadAttention(L, sd);
    const x = uniform(3 * 5 * 32, 1, mulberry32(12));
    await mha.forward(x, { batchSize: 3, seqLen: 5 });
    const settled = engine.stats();
    for (let i = 0; i < 1000; i++) await mha.forward(x, { batchSize: 3, seqLen: 5 });
    expect(engine.stats()).toEqual(settled);
    mha.dispose();
    expect(engine.stats()).toEqual({ ...start, peakBytes: settled.peakBytes }); // the high-water mark stays
    engine.dispose();
  });
});

describe('splitPlan', () => {
  test('splits exactly as far as the limits require', async () => {
    const { resolveForwardPlan, resolveLayerSpec } = await import('../src/plan/index.ts');
    const { splitPlan } = await import('../src/webgpu/chunking.ts');
    const spec = resolveLayerSpec(L);
    const big = { maxStorageBufferBindingSize: 1 << 30, maxBufferSize: 1 << 30, maxComputeWorkgroupsPerDimension: 65535 };
    const x = new Float32Array(7 * 9 * 32);
    const plan = resolveForwardPlan(spec, x, { batchSize: 7, seqLen: 9 });
    expect(splitPlan(plan, big)).toHaveLength(1);
    // Q/K/V: 3·9·32·4 = 3456 bytes per batch element; 3 per call → 3 calls (3 + 3 + 1).
    const parts = splitPlan(plan, { ...big, maxStorageBufferBindingSize: 3 * 3456 });
    expect(parts.map((p) => p.batchSize)).toEqual([3, 3, 1]);
    expect(parts[2].query).toEqual(x.subarray(6 * 9 * 32));
    const packed = resolveForwardPlan(spec, new Float32Array(62 * 32), { cuSeqlens: Int32Array.from([0, 5, 35, 52, 53, 62]) });
    const groups = splitPlan(packed, { ...big, maxStorageBufferBindingSize: 31 * 32 * 4 * 3 });
    expect(groups.map((p) => Array.from(p.cuSeqlens!))).toEqual([
      [0, 5],
      [0, 30],
      [0, 17, 18, 27],
    ]);
  });
});

test('weights larger than the binding limit are refused when the layer is created', async () => {
  const small = await createAttentionEngine({ backend: 'webgpu', limits: { maxStorageBufferBindingSize: 4096 } });
  expect(() => small.createMultiHeadAttention(L, sd)).toThrow(
    /stateDict\["in_proj_weight"\] must be at most maxStorageBufferBindingSize = 4096 bytes on this device; got 12288 bytes/,
  );
  expect(small.stats()).toEqual({ buffers: 0, bytes: 0, peakBytes: 0 });
  small.dispose();
});
