// shaders/copy_rows.wgsl: a caller's GPU buffer whose rows are not a multiple of 4 wide copied into a
// call's padded scratch rows (zeros after each row), and a padded result cropped back into a buffer the
// caller owns (returnBuffer). It runs only for GPU-resident tensors of such sizes (src/webgpu/padding.ts;
// aligned ones use copy_tensor.wgsl or are read in place). Driven through the public API against the
// float64 CPU backend on arrays: a layer's query (E = 30, 1 row and 2·37 rows: one workgroup of 256
// elements, several, never a whole number of them), cross-attention keys and values of their own odd
// widths (kdim 7, vdim 5), and scaledDotProductAttention's Q, K, V at head sizes 3 and 6, each padded
// into its place in the Q ++ K ++ V buffer (the copy's destination offset), with the output cropped.
// Each case proves copy_rows ran (recordPipelines); an aligned GPU buffer runs none.

import { describe, expect, test } from 'vitest';
import type { AttentionEngine, ForwardOptions } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance } from '../src/util/tolerance.ts';
import { recordPipelines } from './helpers/dispatches.ts';
import { FAST_COMPILING, useEngines } from './helpers/engines.ts';
import { withErrorScopes } from './helpers/gpu.ts';

const engines = useEngines({ webgpu: FAST_COMPILING }); // the kernels around the copies: the quickest to compile
const COPY_ROWS = /copy.?rows/i;
const STORAGE = 0x80;
const COPY_SRC = 0x04;
const COPY_DST = 0x08;
const MAP_READ = 0x01;

function upload(device: GPUDevice, data: Float32Array): GPUBuffer {
  const buffer = device.createBuffer({ label: 'copy-rows.test.input', size: data.byteLength, usage: STORAGE | COPY_DST | COPY_SRC });
  device.queue.writeBuffer(buffer, 0, data.buffer as ArrayBuffer, data.byteOffset, data.byteLength);
  return buffer;
}

/** The first `count` floats of `buffer`. */
async function download(device: GPUDevice, buffer: GPUBuffer, count: number): Promise<Float32Array> {
  const staging = device.createBuffer({ label: 'copy-rows.test.staging', size: buffer.size, usage: MAP_READ | COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, staging, 0, buffer.size);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(MAP_READ);
  const out = new Float32Array(staging.getMappedRange().slice(0, count * 4));
  staging.destroy();
  return out;
}

const copiesIn = (pipelines: string[]) => pipelines.filter((p) => COPY_ROWS.test(p)).length;

describe('a layer with rows of 30 (padded to the kernels vec4s)', () => {
  const layer = { embedDim: 30, numHeads: 5 }; // Dh 6
  const sd = randomStateDict(layer, 30);

  test.each([
    [1, 1],
    [2, 37],
  ])('B=%i S=%i: a GPU-buffer query is padded in, the returned output cropped out', async (B, S) => {
    const device = engines.gpu.device!;
    const x = uniform(B * S * 30, 1, mulberry32(S));
    const options: ForwardOptions = { batchSize: B, seqLen: S, isCausal: true };
    const gpu = engines.gpu.createMultiHeadAttention(layer, sd);
    const xb = upload(device, x);
    const { result, pipelines } = await recordPipelines(device, () => withErrorScopes(device, () => gpu.forward(xb, { ...options, returnBuffer: true })));
    expect(copiesIn(pipelines), `pipelines run: ${pipelines.join(', ')}`).toBe(2); // the query in, Y out
    expect(result.outputBuffer.size).toBeGreaterThanOrEqual(B * S * 30 * 4);
    const got = await download(device, result.outputBuffer, B * S * 30);
    const cpu = engines.cpu.createMultiHeadAttention(layer, sd);
    expectClose(got, (await cpu.forward(x, options)).output, f32Tolerance([30, S, 30]), 'output');
    for (const b of [xb, result.outputBuffer]) b.destroy();
    gpu.dispose();
    cpu.dispose();
  });

  test('cross-attention: GPU-buffer keys and values of widths 7 and 5 are padded in, each to its own width', async () => {
    const device = engines.gpu.device!;
    const cross = { ...layer, kdim: 7, vdim: 5 };
    const r = mulberry32(31);
    const csd = {
      q_proj_weight: uniform(30 * 30, 0.3, r),
      k_proj_weight: uniform(30 * 7, 0.3, r),
      v_proj_weight: uniform(30 * 5, 0.3, r),
      in_proj_bias: uniform(90, 0.1, r),
      'out_proj.weight': uniform(30 * 30, 0.2, r),
      'out_proj.bias': uniform(30, 0.1, r),
    };
    const [B, Sq, Skv] = [2, 3, 41];
    const [x, k, v] = [uniform(B * Sq * 30, 1, r), uniform(B * Skv * 7, 1, r), uniform(B * Skv * 5, 1, r)];
    const gpu = engines.gpu.createMultiHeadAttention(cross, csd);
    const [xb, kb, vb] = [x, k, v].map((a) => upload(device, a));
    const { result, pipelines } = await recordPipelines(device, () =>
      // key and value are typed as arrays (types.ts) but taken as GPUBuffers at run time (test/gpu-resident.test.ts).
      withErrorScopes(device, () => gpu.forward(xb, { batchSize: B, seqLen: Sq, kvSeqLen: Skv, key: kb as never, value: vb as never })),
    );
    expect(copiesIn(pipelines), `pipelines run: ${pipelines.join(', ')}`).toBe(3);
    const cpu = engines.cpu.createMultiHeadAttention(cross, csd);
    const want = await cpu.forward(x, { batchSize: B, seqLen: Sq, kvSeqLen: Skv, key: k, value: v });
    expectClose(result.output, want.output, f32Tolerance([30, Skv, 30]), 'output');
    for (const b of [xb, kb, vb]) b.destroy();
    gpu.dispose();
    cpu.dispose();
  });
});

async function sdpa(engine: AttentionEngine, B: number, H: number, Sq: number, Skv: number, Dh: number) {
  const device = engines.gpu.device!;
  const r = mulberry32(Dh * 100 + Skv);
  const [q, k, v] = [uniform(B * H * Sq * Dh, 1, r), uniform(B * H * Skv * Dh, 1, r), uniform(B * H * Skv * Dh, 1, r)];
  const options = { batchSize: B, numHeads: H, seqLen: Sq, kvSeqLen: Skv, headDim: Dh };
  const want = (await engines.cpu.scaledDotProductAttention(q, k, v, options)).output;
  const [qb, kb, vb] = [q, k, v].map((a) => upload(device, a));
  const { result, pipelines } = await recordPipelines(device, () =>
    withErrorScopes(device, () => engine.scaledDotProductAttention(qb, kb, vb, { ...options, returnBuffer: true })),
  );
  const got = await download(device, result.outputBuffer, B * H * Sq * Dh);
  for (const b of [qb, kb, vb, result.outputBuffer]) b.destroy();
  return { want, got, pipelines };
}

describe('scaledDotProductAttention on GPU buffers with odd head sizes', () => {
  test.each([
    [1, 1, 1, 1, 3],
    [2, 3, 5, 29, 3],
    [1, 2, 33, 17, 6],
  ])('B=%i H=%i Sq=%i Skv=%i Dh=%i: Q, K and V padded into Q ++ K ++ V, the output cropped', async (B, H, Sq, Skv, Dh) => {
    const { want, got, pipelines } = await sdpa(engines.gpu, B, H, Sq, Skv, Dh);
    expect(copiesIn(pipelines), `pipelines run: ${pipelines.join(', ')}`).toBe(4); // Q, K, V in; O out
    expectClose(got, want, f32Tolerance([Dh, Skv]), 'output');
  });

  test('a head size of 8 needs no padding: no copy_rows', async () => {
    const { want, got, pipelines } = await sdpa(engines.gpu, 1, 2, 5, 9, 8);
    expect(pipelines.length).toBeGreaterThan(0);
    expect(copiesIn(pipelines)).toBe(0);
    expectClose(got, want, f32Tolerance([8, 9]), 'output');
  });
});
