// GPU-resident tensors: forward reads GPUBuffers in place and, with returnBuffer, leaves its result in
// GPUBuffers the caller owns, so layers chain without readbacks and the engine sits between other
// WebGPU code on the caller's device.

import { describe, expect, test } from 'vitest';
import { InvalidArgumentError, ShapeMismatchError, UnsupportedError } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { useEngines } from './helpers/engines.ts';
import { withErrorScopes } from './helpers/gpu.ts';

const engines = useEngines();
const L = { embedDim: 32, numHeads: 4 };
const sd = randomStateDict(L, 41);
const STORAGE = 0x80;
const COPY_SRC = 0x04;
const COPY_DST = 0x08;
const MAP_READ = 0x01;

function upload(device: GPUDevice, data: Float32Array, usage = STORAGE | COPY_DST): GPUBuffer {
  const buffer = device.createBuffer({ size: data.byteLength, usage });
  device.queue.writeBuffer(buffer, 0, data.buffer as ArrayBuffer, data.byteOffset, data.byteLength);
  return buffer;
}

async function download(device: GPUDevice, buffer: GPUBuffer): Promise<Float32Array> {
  const staging = device.createBuffer({ size: buffer.size, usage: MAP_READ | COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, staging, 0, buffer.size);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(MAP_READ);
  const out = new Float32Array(staging.getMappedRange().slice(0));
  staging.destroy();
  return out;
}

describe('GPU buffers in, GPU buffers out', () => {
  test('a GPUBuffer query gives what the same Float32Array gives', async () => {
    const device = engines.gpu.device!;
    const mha = engines.gpu.createMultiHeadAttention(L, sd);
    const x = uniform(2 * 9 * 32, 1, mulberry32(1));
    const xb = upload(device, x);
    const fromArray = await mha.forward(x, { batchSize: 2, seqLen: 9, isCausal: true });
    const fromBuffer = await withErrorScopes(device, () => mha.forward(xb, { batchSize: 2, seqLen: 9, isCausal: true }));
    expect(Array.from(fromBuffer.output)).toEqual(Array.from(fromArray.output));
    xb.destroy();
    mha.dispose();
  });

  test('returnBuffer: the output (and weights) stay on the GPU in buffers the caller owns', async () => {
    const device = engines.gpu.device!;
    const mha = engines.gpu.createMultiHeadAttention(L, sd);
    const x = uniform(2 * 9 * 32, 1, mulberry32(2));
    const plain = await mha.forward(x, { batchSize: 2, seqLen: 9, needWeights: true });
    const before = engines.gpu.stats();
    const r = await withErrorScopes(device, () => mha.forward(x, { batchSize: 2, seqLen: 9, needWeights: true, returnBuffer: true }));
    expect(engines.gpu.stats()).toEqual(before); // the caller's buffers are not the engine's
    expect(r.outputBuffer.size).toBe(2 * 9 * 32 * 4);
    expect(Array.from(await download(device, r.outputBuffer))).toEqual(Array.from(plain.output));
    expect(Array.from(await download(device, r.attentionWeightsBuffer!))).toEqual(Array.from(plain.attentionWeights!));
    r.outputBuffer.destroy();
    r.attentionWeightsBuffer!.destroy();
    mha.dispose();
  });

  test('two layers chained on the GPU equal the CPU backend run twice', async () => {
    const sd2 = randomStateDict(L, 42);
    const x = uniform(3 * 7 * 32, 1, mulberry32(3));
    const g1 = engines.gpu.createMultiHeadAttention(L, sd);
    const g2 = engines.gpu.createMultiHeadAttention(L, sd2);
    const c1 = engines.cpu.createMultiHeadAttention(L, sd);
    const c2 = engines.cpu.createMultiHeadAttention(L, sd2);
    const options = { batchSize: 3, seqLen: 7, isCausal: true };
    const mid = await g1.forward(x, { ...options, returnBuffer: true });
    const out = await withErrorScopes(engines.gpu.device!, () => g2.forward(mid.outputBuffer, options));
    mid.outputBuffer.destroy();
    const ref = await c2.forward((await c1.forward(x, options)).output, options);
    expectClose(out.output, ref.output, f32Tolerance([32, 7, 32, 32, 7, 32]));
    for (const l of [g1, g2, c1, c2]) l.dispose();
  });

  test('cross-attention with key and value in one GPUBuffer', async () => {
    const device = engines.gpu.device!;
    const mha = engines.gpu.createMultiHeadAttention(L, sd);
    const x = uniform(2 * 3 * 32, 1, mulberry32(4));
    const kv = uniform(2 * 20 * 32, 1, mulberry32(5));
    const kvb = upload(device, kv);
    const options = { batchSize: 2, seqLen: 3, kvSeqLen: 20 };
    const a = await mha.forward(x, { ...options, key: kv, value: kv });
    const b = await withErrorScopes(device, () => mha.forward(x, { ...options, key: kvb as never, value: kvb as never }));
    expect(Array.from(b.output)).toEqual(Array.from(a.output));
    kvb.destroy();
    mha.dispose();
  });
});

describe('GPU buffers: bad input', () => {
  test('a buffer without STORAGE usage, or too small', async () => {
    const device = engines.gpu.device!;
    const mha = engines.gpu.createMultiHeadAttention(L, sd);
    const noStorage = device.createBuffer({ size: 9 * 32 * 4, usage: COPY_SRC | COPY_DST });
    await expect(mha.forward(noStorage, { batchSize: 1, seqLen: 9 })).rejects.toThrow(InvalidArgumentError);
    await expect(mha.forward(noStorage, { batchSize: 1, seqLen: 9 })).rejects.toThrow(/query must be a GPUBuffer with GPUBufferUsage\.STORAGE/);
    const small = device.createBuffer({ size: 64, usage: STORAGE });
    await expect(mha.forward(small, { batchSize: 1, seqLen: 9 })).rejects.toThrow(ShapeMismatchError);
    await expect(mha.forward(small, { batchSize: 1, seqLen: 9 })).rejects.toThrow(/at least 1152 bytes .*; got 64 bytes/);
    noStorage.destroy();
    small.destroy();
    mha.dispose();
  });

  test('a buffer from another device is refused, naming engine.device', async () => {
    const { createGpuEngine } = await import('./helpers/gpu.ts');
    const other = await createGpuEngine();
    const foreign = upload(other.device!, uniform(9 * 32, 1, mulberry32(6)));
    const mha = engines.gpu.createMultiHeadAttention(L, sd);
    const error = await mha.forward(foreign, { batchSize: 1, seqLen: 9 }).then(
      () => null,
      (e) => e,
    );
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toContain("a buffer of this engine's device (engine.device)");
    // The engine still works afterwards.
    const ok = await mha.forward(uniform(9 * 32, 1, mulberry32(7)), { batchSize: 1, seqLen: 9 });
    expect(ok.output.length).toBe(9 * 32);
    mha.dispose();
    other.dispose();
  });

  test('the CPU backend refuses GPU buffers and returnBuffer; packed calls refuse returnBuffer', async () => {
    const mha = engines.cpu.createMultiHeadAttention(L, sd);
    const buffer = upload(engines.gpu.device!, new Float32Array(32));
    await expect(mha.forward(buffer, { batchSize: 1, seqLen: 1 })).rejects.toThrow(UnsupportedError);
    await expect(mha.forward(new Float32Array(32), { batchSize: 1, seqLen: 1, returnBuffer: true })).rejects.toThrow(
      /options\.returnBuffer must be used on the WebGPU backend only/,
    );
    const g = engines.gpu.createMultiHeadAttention(L, sd);
    await expect(g.forward(new Float32Array(64), { cuSeqlens: Int32Array.from([0, 2]), returnBuffer: true } as never)).rejects.toThrow(
      /options\.returnBuffer must be left out with cuSeqlens/,
    );
    buffer.destroy();
    g.dispose();
    mha.dispose();
  });
});
