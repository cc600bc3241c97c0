// The engine's lifecycle and memory: backends agree, weights are uploaded once, scratch buffers are
// reused, dispose() gives everything back, concurrent calls keep their own results.

import { describe, expect, test } from 'vitest';
import { createAttentionEngine } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { BufferPool, MAX_IDLE_SCRATCH_BYTES, Usage } from '../src/webgpu/buffers.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';

const config = { embedDim: 32, numHeads: 4 };
const stateDict = randomStateDict(config, 3);

const engines = useEngines();

describe('createAttentionEngine', () => {
  test("with no options on this software adapter it holds WebGPU and 'wasm', answers on 'wasm' first, and reports the adapter", async () => {
    // On a GPU it would be WebGPU alone; lavapipe and SwiftShader run shaders on the CPU (test/auto-backend.test.ts).
    const engine = await createAttentionEngine();
    expect(engine.backend).toBe('wasm');
    expect(engine.tuning?.backends?.current).toBe('wasm');
    expect(engine.device).not.toBeNull();
    expect(engine.fallbackReason).toBeNull();
    expect(engine.adapterInfo?.vendor).toBeTruthy();
    engine.dispose();
  });

  test('runs on a device the caller gives, and leaves it alive on dispose', async () => {
    const device = engines.gpu.device!;
    // The built-in kernels, as the shared engine runs (test/helpers/gpu.ts): a sweep would pick
    // variants by timing, and another variant's rounding differs in the last bits.
    const engine = await createAttentionEngine({ device, tuning: { mode: 'off' } });
    expect(engine.backend).toBe('webgpu');
    expect(engine.device).toBe(device);
    const mha = engine.createMultiHeadAttention(config, stateDict);
    const x = uniform(2 * 5 * 32, 1, mulberry32(1));
    const { output } = await withErrorScopes(device, () => mha.forward(x, { batchSize: 2, seqLen: 5 }));
    engine.dispose();
    // The device still works: the shared engine runs a layer on it.
    const again = engines.gpu.createMultiHeadAttention(config, stateDict);
    const { output: output2 } = await withErrorScopes(device, () => again.forward(x, { batchSize: 2, seqLen: 5 }));
    expect(Array.from(output2)).toEqual(Array.from(output));
    again.dispose();
  });
});

describe('memory', () => {
  test('weights are uploaded once; repeated forwards of one shape allocate nothing more; dispose returns to the start', async () => {
    const start = engines.gpu.stats();
    const mha = engines.gpu.createMultiHeadAttention(config, stateDict);
    const weightBytes = (3 * 32 * 32 + 3 * 32 + 32 * 32 + 32) * 4;
    expect(engines.gpu.stats().buffers).toBe(start.buffers + 4);
    expect(engines.gpu.stats().bytes - start.bytes).toBeGreaterThanOrEqual(weightBytes);
    const x = uniform(3 * 40 * 32, 1, mulberry32(2));
    await mha.forward(x, { batchSize: 3, seqLen: 40 });
    const afterFirst = engines.gpu.stats();
    for (let i = 0; i < 50; i++) await mha.forward(x, { batchSize: 3, seqLen: 40, isCausal: i % 2 === 0 });
    expect(engines.gpu.stats()).toEqual(afterFirst);
    mha.dispose();
    expect(engines.gpu.stats()).toEqual({ ...start, peakBytes: afterFirst.peakBytes }); // the high-water mark stays
  });

  test('engine.dispose() releases every buffer', async () => {
    const engine = await createGpuEngine();
    expect(engine.stats()).toEqual({ buffers: 0, bytes: 0, peakBytes: 0 });
    const mha = engine.createMultiHeadAttention(config, stateDict);
    await mha.forward(uniform(64, 1, mulberry32(3)), { batchSize: 1, seqLen: 2 });
    expect(engine.stats().buffers).toBeGreaterThan(4);
    const pool = (engine as unknown as { impl: { pool: { stats(): unknown } } }).impl.pool;
    engine.dispose();
    expect(pool.stats()).toEqual({ buffers: 0, bytes: 0 });
  });

  test('idle scratch buffers are bounded, oldest dropped first; trim() drops them all', () => {
    const pool = new BufferPool(engines.gpu.device!, 'test');
    const size = 48 * 1024 * 1024;
    const taken = [1, 2, 3].map((i) => pool.acquire(size + i * 4096, Usage.STORAGE, `big${i}`));
    expect(pool.stats().buffers).toBe(3);
    for (const b of taken) pool.release(b);
    // 3 × ~48 MiB exceeds the 128 MiB bound: the first released is gone, the later two stay.
    expect(pool.stats().buffers).toBe(2);
    expect(pool.stats().bytes).toBeLessThanOrEqual(MAX_IDLE_SCRATCH_BYTES);
    expect(pool.acquire(size + 3 * 4096, Usage.STORAGE, 'again')).toBe(taken[2]);
    pool.trim();
    expect(pool.stats().buffers).toBe(1); // the one in use stays
    pool.destroyAll();
    expect(pool.stats()).toEqual({ buffers: 0, bytes: 0 });
  });

  test('the CPU backend holds no GPU memory', () => {
    expect(engines.cpu.stats()).toEqual({ buffers: 0, bytes: 0, peakBytes: 0 });
  });
});

describe('results', () => {
  test('the layer keeps its own copy of the weights', async () => {
    const sd = randomStateDict(config, 11);
    const x = uniform(4 * 32, 1, mulberry32(4));
    for (const engine of [engines.gpu, engines.cpu]) {
      const copy = Object.fromEntries(Object.entries(sd).map(([k, v]) => [k, v.slice()]));
      const mha = engine.createMultiHeadAttention(config, copy);
      const before = (await mha.forward(x, { batchSize: 1, seqLen: 4 })).output;
      copy.in_proj_weight.fill(0);
      const after = (await mha.forward(x, { batchSize: 1, seqLen: 4 })).output;
      expect(Array.from(after)).toEqual(Array.from(before));
      mha.dispose();
    }
  });

  test('both backends agree', async () => {
    const x = uniform(2 * 9 * 32, 1, mulberry32(5));
    const a = engines.gpu.createMultiHeadAttention(config, stateDict);
    const b = engines.cpu.createMultiHeadAttention(config, stateDict);
    for (const isCausal of [false, true]) {
      const options = { batchSize: 2, seqLen: 9, isCausal };
      const [g, c] = await Promise.all([a.forward(x, options), b.forward(x, options)]);
      expectClose(g.output, c.output, f32Tolerance([32, 9, 32]));
    }
    a.dispose();
    b.dispose();
  });

  test('sixteen concurrent forwards of different shapes each get their own result', async () => {
    const mha = engines.gpu.createMultiHeadAttention(config, stateDict);
    const ref = engines.cpu.createMultiHeadAttention(config, stateDict);
    const calls = Array.from({ length: 16 }, (_, i) => {
      const B = 1 + (i % 3);
      const S = 1 + ((i * 7) % 23);
      return { x: uniform(B * S * 32, 1, mulberry32(100 + i)), options: { batchSize: B, seqLen: S, isCausal: i % 2 === 1 } };
    });
    const results = await withErrorScopes(engines.gpu.device!, () => Promise.all(calls.map((c) => mha.forward(c.x, c.options))));
    for (const [i, c] of calls.entries()) {
      const expected = await ref.forward(c.x, c.options);
      expectClose(results[i].output, expected.output, f32Tolerance([32, c.options.seqLen, 32]), `call ${i}`);
    }
    mha.dispose();
    ref.dispose();
  });
});
