// Every call is checked by WebGPU: faults injected into a device the test owns (passed as
// createAttentionEngine({ device })) make forward, scaledDotProductAttention, linearAttention and a
// KV-cache decode step (and reading a KV cache back) reject with WebGPUCallError (an AttentionError); the call frees what it made,
// a failed decode step leaves the cache's length as it was, and the next call, with other inputs, is
// right against the float64 reference (no buffer a failed call wrote is read as a result). Work that
// has no call of its own (a layer's weight upload, a KV cache's write) is checked too: the calls that
// use what WebGPU refused reject, naming it.

import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { AttentionError, type AttentionEngine, createAttentionEngine, WebGPUCallError } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { resolveForwardPlan, resolveLayerSpec } from '../src/plan/index.ts';
import { acquireDevice } from '../src/webgpu/device.ts';
import { shapeClass as shapeClass_, TUNING_VERSION } from '../src/webgpu/tuning/tuner.ts';
import { KERNEL_NAMES } from '../src/webgpu/variants.ts';
import { watchDevice } from './helpers/gpu.ts';

const [COPY_SRC, COPY_DST] = [0x4, 0x8]; // GPUBufferUsage, which Node has no global for

type Fault = 'destroyed buffer' | 'invalid copy' | 'out of memory' | 'refused write';

/**
 * Arms one fault for the next command buffer the engine submits on `device`:
 * - 'destroyed buffer': the submit also carries a command buffer that reads a destroyed buffer;
 * - 'invalid copy': the engine's encoder gets a copy of 3 bytes (copies must be multiples of 4);
 * - 'out of memory': the next out-of-memory error scope popped reports an error (a forced one);
 * - 'refused write': the next queue.writeBuffer also writes to a destroyed buffer (a validation error).
 */
function injector(device: GPUDevice) {
  let armed: Fault | null = null;
  const submit = device.queue.submit.bind(device.queue);
  device.queue.submit = (buffers: Iterable<GPUCommandBuffer>) => {
    if (armed !== 'destroyed buffer') return submit(buffers);
    armed = null;
    const gone = device.createBuffer({ label: 'fault.destroyed', size: 256, usage: COPY_SRC });
    const target = device.createBuffer({ label: 'fault.target', size: 256, usage: COPY_DST });
    gone.destroy();
    const encoder = device.createCommandEncoder({ label: 'fault.readsDestroyed' });
    encoder.copyBufferToBuffer(gone, 0, target, 0, 256);
    submit([...buffers, encoder.finish()]);
    target.destroy();
  };
  const writeBuffer = device.queue.writeBuffer.bind(device.queue) as (...args: unknown[]) => void;
  device.queue.writeBuffer = ((...args: unknown[]) => {
    if (armed === 'refused write') {
      armed = null;
      const gone = device.createBuffer({ label: 'fault.destroyedWriteTarget', size: 256, usage: COPY_DST });
      gone.destroy();
      writeBuffer(gone, 0, new Uint32Array(4));
    }
    writeBuffer(...args);
  }) as GPUQueue['writeBuffer'];
  const createCommandEncoder = device.createCommandEncoder.bind(device);
  device.createCommandEncoder = (descriptor?: GPUCommandEncoderDescriptor) => {
    const encoder = createCommandEncoder(descriptor);
    if (armed === 'invalid copy') {
      armed = null;
      const a = device.createBuffer({ label: 'fault.a', size: 256, usage: COPY_SRC });
      const b = device.createBuffer({ label: 'fault.b', size: 256, usage: COPY_DST });
      encoder.copyBufferToBuffer(a, 0, b, 0, 3);
      void device.queue.onSubmittedWorkDone().then(() => {
        a.destroy();
        b.destroy();
      });
    }
    return encoder;
  };
  const scopes: GPUErrorFilter[] = [];
  const push = device.pushErrorScope.bind(device);
  const pop = device.popErrorScope.bind(device);
  device.pushErrorScope = (filter: GPUErrorFilter) => {
    scopes.push(filter);
    push(filter);
  };
  device.popErrorScope = () => {
    const filter = scopes.pop();
    const popped = pop();
    if (filter !== 'out-of-memory' || armed !== 'out of memory') return popped;
    armed = null;
    return popped.then(() => ({ message: 'injected: not enough memory for buffer "AttentionEngine.qkv"' }) as GPUError);
  };
  // The buffers made for returnBuffer (output, weights), and whether each was destroyed.
  const outputs = new Map<GPUBuffer, boolean>();
  const createBuffer = device.createBuffer.bind(device);
  device.createBuffer = (descriptor: GPUBufferDescriptor) => {
    const buffer = createBuffer(descriptor);
    if (/\.(outputBuffer|attentionWeightsBuffer)$/.test(descriptor.label ?? '')) {
      outputs.set(buffer, false);
      const destroy = buffer.destroy.bind(buffer);
      buffer.destroy = () => {
        outputs.set(buffer, true);
        destroy();
      };
    }
    return buffer;
  };
  return {
    outputs,
    arm(fault: Fault) {
      armed = fault;
    },
    /** Whether the armed fault was used. */
    get fired() {
      return armed === null;
    },
  };
}

const L = { embedDim: 16, numHeads: 2 };
const sd = randomStateDict(L, 31);
const FAULTS: Fault[] = ['destroyed buffer', 'invalid copy', 'out of memory'];

let device: GPUDevice;
let engine: AttentionEngine;
let cpu: AttentionEngine;
let faults: ReturnType<typeof injector>;

beforeAll(async () => {
  device = (await acquireDevice()).device;
  watchDevice(device);
  faults = injector(device);
  engine = await createAttentionEngine({ device, tuning: { mode: 'off' } });
  cpu = await createAttentionEngine({ backend: 'cpu' });
});

afterAll(() => {
  engine.dispose();
  cpu.dispose();
  device.destroy();
});

/** Runs `call` with `fault` armed: it must reject with WebGPUCallError, and hold no more GPU memory after than before. */
async function expectRefused(fault: Fault, where: string, call: () => Promise<unknown>): Promise<WebGPUCallError> {
  const before = engine.stats();
  faults.arm(fault);
  const error = await call().then(
    () => null,
    (e: unknown) => e,
  );
  expect(faults.fired, `the ${fault} fault was injected`).toBe(true);
  expect(error, `${where} with a ${fault}`).toBeInstanceOf(WebGPUCallError);
  expect(error).toBeInstanceOf(AttentionError);
  const e = error as WebGPUCallError;
  expect(e.where).toBe(where);
  expect(e.scope).toBe(fault === 'out of memory' ? 'out-of-memory' : 'validation');
  expect(e.gpuMessage.length).toBeGreaterThan(0);
  expect(e.message).toContain(e.gpuMessage.trim());
  expect(e.message).toMatch(fault === 'out of memory' ? /ran out of memory.*smaller calls/s : /fault in webgpu-attention.*please report it/s);
  // What the call took is freed (its scratch destroyed, not pooled): nothing more is held than before.
  expect(engine.stats().buffers).toBeLessThanOrEqual(before.buffers);
  expect(engine.stats().bytes).toBeLessThanOrEqual(before.bytes);
  return e;
}

describe.each(FAULTS)('a %s', (fault) => {
  test('forward rejects with WebGPUCallError; the next forward, with other inputs, is right', async () => {
    const mha = engine.createMultiHeadAttention(L, sd);
    const ref = cpu.createMultiHeadAttention(L, sd);
    const options = { batchSize: 2, seqLen: 5, isCausal: true };
    const x = (seed: number) => uniform(2 * 5 * 16, 1, mulberry32(seed));
    await mha.forward(x(1), options); // compiled, and its scratch pooled: the failed call reuses it
    await expectRefused(fault, 'MultiHeadAttention.forward', () => mha.forward(x(2), options));
    const next = await mha.forward(x(3), options);
    expectClose(next.output, (await ref.forward(x(3), options)).output, f32Tolerance([16, 5, 16]));
    // The output buffers a failed returnBuffer call made are destroyed, not handed out.
    faults.outputs.clear();
    await expectRefused(fault, 'MultiHeadAttention.forward', () => mha.forward(x(4), { ...options, returnBuffer: true, needWeights: true }));
    expect([...faults.outputs.values()]).toEqual([true, true]); // the output's and the weights'
    mha.dispose();
    ref.dispose();
  });

  test('scaledDotProductAttention and linearAttention reject; the next calls are right', async () => {
    const shape = { batchSize: 1, numHeads: 2, seqLen: 6, headDim: 8 };
    const qkv = (seed: number) => [0, 1, 2].map((i) => uniform(2 * 6 * 8, 1, mulberry32(10 * seed + i))) as [Float32Array, Float32Array, Float32Array];
    const [q0, k0, v0] = qkv(1);
    await engine.scaledDotProductAttention(q0, k0, v0, shape);
    await expectRefused(fault, 'scaledDotProductAttention', () => engine.scaledDotProductAttention(...qkv(2), shape));
    const [q, k, v] = qkv(3);
    expectClose((await engine.scaledDotProductAttention(q, k, v, shape)).output, (await cpu.scaledDotProductAttention(q, k, v, shape)).output, f32Tolerance([8, 6, 8]));

    const linear = { ...shape, isCausal: true };
    await engine.linearAttention(q0, k0, v0, linear);
    await expectRefused(fault, 'linearAttention', () => engine.linearAttention(...qkv(4), linear));
    const [lq, lk, lv] = qkv(5);
    expectClose((await engine.linearAttention(lq, lk, lv, linear)).output, (await cpu.linearAttention(lq, lk, lv, linear)).output, f32Tolerance([8, 6, 8]));
  });

  test('a decode step rejects and leaves the cache as it was; the next step is right', async () => {
    const mha = engine.createMultiHeadAttention(L, sd);
    const ref = cpu.createMultiHeadAttention(L, sd);
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: 8 });
    const refCache = ref.createKvCache({ batchSize: 1, maxSeqLen: 8 });
    const step = (seqLen: number, seed: number) => uniform(seqLen * 16, 1, mulberry32(seed));
    const prompt = step(4, 1);
    await mha.forward(prompt, { batchSize: 1, seqLen: 4, kvCache: cache, isCausal: true });
    await ref.forward(prompt, { batchSize: 1, seqLen: 4, kvCache: refCache, isCausal: true });
    await mha.forward(step(1, 2), { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true }); // the decode kernels compiled
    await ref.forward(step(1, 2), { batchSize: 1, seqLen: 1, kvCache: refCache, isCausal: true });
    expect(cache.length).toBe(5);
    await expectRefused(fault, 'MultiHeadAttention.forward', () => mha.forward(step(1, 3), { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true }));
    expect(cache.length).toBe(5);
    const x = step(1, 4);
    const next = await mha.forward(x, { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
    const want = await ref.forward(x, { batchSize: 1, seqLen: 1, kvCache: refCache, isCausal: true });
    expect(cache.length).toBe(6);
    expectClose(next.output, want.output, f32Tolerance([16, 6, 16]));
    const [got, expected] = [await cache.read(), await refCache.read()];
    expectClose(got.key, expected.key, f32Tolerance([16]));
    expectClose(got.value, expected.value, f32Tolerance([16]));
    // Reading the cache back is checked too: a refused read rejects, and the next read is right.
    await expectRefused(fault, 'KvCache.read', () => cache.read());
    const again = await cache.read();
    expectClose(again.key, expected.key, f32Tolerance([16]));
    expectClose(again.value, expected.value, f32Tolerance([16]));
    mha.dispose();
    ref.dispose();
  });
});

describe('work with no call of its own: a weight upload, a KV cache write', () => {
  const options = { batchSize: 2, seqLen: 5, isCausal: true };
  const x = uniform(2 * 5 * 16, 1, mulberry32(41));
  const refusal = (call: () => Promise<unknown>) =>
    call().then(
      () => null,
      (e: unknown) => e as WebGPUCallError,
    );

  test('a refused weight upload rejects every forward of the layer, naming it; a new layer is right', async () => {
    faults.arm('out of memory');
    const mha = engine.createMultiHeadAttention(L, sd);
    expect(faults.fired, 'the fault was injected into the upload').toBe(true);
    for (let i = 0; i < 2; i++) {
      const e = await refusal(() => mha.forward(x, options));
      expect(e).toBeInstanceOf(WebGPUCallError);
      expect(e!.where).toBe('MultiHeadAttention weight upload');
      expect(e!.scope).toBe('out-of-memory');
      expect(e!.message).toMatch(/^MultiHeadAttention weight upload: the GPU ran out of memory.*injected/s);
    }
    mha.dispose();
    const again = engine.createMultiHeadAttention(L, sd);
    const ref = cpu.createMultiHeadAttention(L, sd);
    expectClose((await again.forward(x, options)).output, (await ref.forward(x, options)).output, f32Tolerance([16, 5, 16]));
    again.dispose();
    ref.dispose();
  });

  test('a refused KvCache write rejects the forwards and reads of that cache until reset(); the next prefill is right', async () => {
    const mha = engine.createMultiHeadAttention(L, sd);
    const ref = cpu.createMultiHeadAttention(L, sd);
    const past = { key: uniform(2 * 3 * 8, 1, mulberry32(42)), value: uniform(2 * 3 * 8, 1, mulberry32(43)) }; // [B=1, G=2, 3, Dh=8]
    faults.arm('refused write');
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: 8, ...past });
    expect(faults.fired, 'the fault was injected into the write').toBe(true);
    expect(cache.length).toBe(3);
    const step = { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true };
    for (const call of [() => mha.forward(x.subarray(0, 16), step), () => cache.read()]) {
      const e = await refusal(call);
      expect(e).toBeInstanceOf(WebGPUCallError);
      expect(e!.where).toBe('KvCache.write');
      expect(e!.scope).toBe('validation');
    }
    expect(cache.length).toBe(3); // the refused step did not advance it
    cache.reset();
    const refCache = ref.createKvCache({ batchSize: 1, maxSeqLen: 8 });
    const prompt = { batchSize: 1, seqLen: 5, isCausal: true };
    const got = await mha.forward(x.subarray(0, 5 * 16), { ...prompt, kvCache: cache });
    const want = await ref.forward(x.subarray(0, 5 * 16), { ...prompt, kvCache: refCache });
    expectClose(got.output, want.output, f32Tolerance([16, 5, 16]));
    mha.dispose();
    ref.dispose();
  });
});

describe('memory the background work leaves behind', () => {
  test('after settled() the engine holds no more than after the first call; the next call is right', async () => {
    // Its own engine, on choices remembered as an earlier engine's sweep would have left them (the
    // projections' tier 0, an attention kernel that is not): the first call runs tier 0, and the
    // background compiles the remembered attention kernel and runs it once on trial buffers of the
    // call's shape (what a sweep does for every candidate, at a fraction of its time on a software adapter).
    const config = { embedDim: 32, numHeads: 4 };
    const options = { batchSize: 1, seqLen: 9 };
    const plan = resolveForwardPlan(resolveLayerSpec(config), uniform(9 * 32, 1, mulberry32(1)), options);
    const a = engine.adapterInfo!;
    const adapter = [a.vendor, a.architecture, a.device, a.description].join('/');
    const remembered = { qkv_projection: 'register-4x4', flash_attention: 'rows32-keys32-r2', output_projection: 'register-4x4' } as const;
    const records = Object.fromEntries(
      KERNEL_NAMES.map((kernel) => {
        const shapeClass = shapeClass_(kernel, plan, 'f32');
        return [`v${TUNING_VERSION}|${adapter}|${kernel}|${shapeClass}`, { kernel, shapeClass, variant: remembered[kernel], source: 'sweep' as const, steady: true }];
      }),
    );
    const tuned = await createAttentionEngine({ device, tuning: { store: { where: 'test', load: async () => records, save: async () => {} } } });
    const weights = randomStateDict(config, 5);
    const mha = tuned.createMultiHeadAttention(config, weights);
    const ref = cpu.createMultiHeadAttention(config, weights);
    await mha.forward(uniform(9 * 32, 1, mulberry32(1)), options);
    const afterFirst = tuned.stats();
    await tuned.settled();
    expect(tuned.tuning!.compiled.map((c) => c.variant)).toEqual(['rows32-keys32-r2']);
    const afterBackground = tuned.stats();
    // The trials' buffers, and the idle scratch with them, went when the queue emptied.
    expect(afterBackground.buffers).toBeLessThan(afterFirst.buffers);
    expect(afterBackground.bytes).toBeLessThanOrEqual(afterFirst.bytes);
    const x = uniform(9 * 32, 1, mulberry32(2));
    const next = await mha.forward(x, options);
    expectClose(next.output, (await ref.forward(x, options)).output, f32Tolerance([32, 9, 32]));
    expect(tuned.stats().buffers).toBeLessThanOrEqual(afterFirst.buffers);
    mha.dispose();
    ref.dispose();
    tuned.dispose();
  });
});
