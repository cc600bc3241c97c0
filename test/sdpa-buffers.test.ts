// engine.scaledDotProductAttention on GPU buffers: query, key and value given as GPUBuffers on the
// engine's device (any of them), and the output left in a buffer the caller owns (returnBuffer), so a
// caller runs its own kernels around the attention without a trip through the CPU. The same results
// as Float32Arrays; f16 storage with precision 'f16'; the typed errors (sizes, another device, the CPU
// backend).

import { describe, expect, test } from 'vitest';
import { createAttentionEngine, InvalidArgumentError, ShapeMismatchError, UnsupportedError } from '../src/index.ts';
import { mulberry32, uniform } from './helpers/random.ts';
import { expectClose, f16Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';
import { Usage } from '../src/webgpu/buffers.ts';
import { fromF16, toF16 } from '../src/util/f16.ts';
import { useEngines } from './helpers/engines.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';

const engines = useEngines();
const [B, H, G, Sq, Skv, Dh] = [2, 4, 2, 5, 11, 8];
const r = mulberry32(77);
const q = uniform(B * H * Sq * Dh, 1, r);
const k = uniform(B * G * Skv * Dh, 1, r);
const v = uniform(B * G * Skv * Dh, 1, r);
const opts = {
  batchSize: B,
  numHeads: H,
  numKvHeads: G,
  seqLen: Sq,
  kvSeqLen: Skv,
  headDim: Dh,
  isCausal: true,
  needWeights: true,
  sinks: Float32Array.from([0, 1, -1, 0.5]),
};

function buffer(device: GPUDevice, data: Float32Array | Uint16Array): GPUBuffer {
  const b = device.createBuffer({ size: Math.ceil(data.byteLength / 4) * 4, usage: Usage.STORAGE | Usage.COPY_DST });
  device.queue.writeBuffer(b, 0, data.buffer, data.byteOffset, data.byteLength);
  return b;
}

async function read(device: GPUDevice, source: GPUBuffer, bytes: number): Promise<ArrayBuffer> {
  const staging = device.createBuffer({ size: bytes, usage: Usage.MAP_READ | Usage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(source, 0, staging, 0, bytes);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(0x0001); // GPUMapMode.READ
  const copy = staging.getMappedRange().slice(0);
  staging.destroy();
  return copy;
}

describe('GPU buffers in and out', () => {
  test('buffers in, arrays out; arrays in, buffers out; both: the same results as arrays', async () => {
    const gpu = engines.gpu;
    const device = gpu.device!;
    const arrays = await gpu.scaledDotProductAttention(q, k, v, opts);
    const [qb, kb, vb] = [q, k, v].map((a) => buffer(device, a));
    const fromBuffers = await withErrorScopes(device, () => gpu.scaledDotProductAttention(qb, k, vb, opts));
    expect(Array.from(fromBuffers.output)).toEqual(Array.from(arrays.output));
    expect(Array.from(fromBuffers.attentionWeights!)).toEqual(Array.from(arrays.attentionWeights!));
    const out = await withErrorScopes(device, () => gpu.scaledDotProductAttention(qb, kb, vb, { ...opts, returnBuffer: true }));
    expect(Array.from(new Float32Array(await read(device, out.outputBuffer, q.byteLength)))).toEqual(Array.from(arrays.output));
    const probsBytes = B * H * Sq * Skv * 4;
    expect(Array.from(new Float32Array(await read(device, out.attentionWeightsBuffer!, probsBytes)))).toEqual(Array.from(arrays.attentionWeights!));
    out.outputBuffer.destroy();
    out.attentionWeightsBuffer!.destroy();
    for (const b of [qb, kb, vb]) b.destroy();
  });

  test("precision 'f16': buffers hold float16, and so does the returned output", async () => {
    const engine = await createGpuEngine({ precision: 'f16' });
    const device = engine.device!;
    const [qb, kb, vb] = [q, k, v].map((a) => buffer(device, toF16(a)));
    const { needWeights: _, ...noWeights } = opts;
    const out = await withErrorScopes(device, () => engine.scaledDotProductAttention(qb, kb, vb, { ...noWeights, returnBuffer: true }));
    const half = fromF16(new Uint16Array(await read(device, out.outputBuffer, (q.length * 2 + 3) & ~3)).subarray(0, q.length));
    const reference = (await engines.cpu.scaledDotProductAttention(q, k, v, noWeights)).output;
    expectClose(half, reference, f16Tolerance([Dh, Skv], maxAbsFinite(reference)), 'f16 output');
    out.outputBuffer.destroy();
    engine.dispose();
  });

  test('typed errors: a buffer too small, one from another device, GPU buffers on the CPU backend', async () => {
    const gpu = engines.gpu;
    const small = buffer(gpu.device!, new Float32Array(4));
    await expect(gpu.scaledDotProductAttention(small, k, v, opts)).rejects.toThrow(ShapeMismatchError);
    const other = await createAttentionEngine({ backend: 'webgpu', tuning: { mode: 'off' } });
    const foreign = buffer(other.device!, q);
    const error = await gpu.scaledDotProductAttention(foreign, k, v, opts).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toContain('a GPUBuffer input');
    other.dispose();
    await expect(engines.cpu.scaledDotProductAttention(q, k, v, { ...opts, returnBuffer: true })).rejects.toThrow(UnsupportedError);
    small.destroy();
  });
});
