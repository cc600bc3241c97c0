// Any head size on WebGPU (1 … 256), as on the CPU: sizes that are not multiples of 4 run padded
// inside the engine (src/webgpu/padding.ts). Each size against the float64 CPU backend: a layer
// (E = H·Dh often odd too), causal and not, with bias or not, GQA, KV-cache decode and the cache's
// contents in and out, QK-norm with rotary, kdim/vdim not multiples of 4, GPU-buffer inputs and
// returnBuffer outputs of odd widths; scaledDotProductAttention on arrays and on GPU buffers; f16.

import { describe, expect, test } from 'vitest';
import { UnsupportedError } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from './helpers/random.ts';
import { expectClose, f16Tolerance, f32Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';
import { fromF16, toF16 } from '../src/util/f16.ts';
import { useEngines } from './helpers/engines.ts';
import { readBuffer, uploadBuffer } from './helpers/readback.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';

const engines = useEngines();

/** The grid: 1, 2, 3, 5, 6, 7, 12, 20, 36, 80, 96, 100, 256, with a head count making E odd where it can. */
const SIZES: { Dh: number; H: number; G: number }[] = [
  { Dh: 1, H: 3, G: 3 },
  { Dh: 2, H: 3, G: 1 },
  { Dh: 3, H: 5, G: 5 },
  { Dh: 5, H: 3, G: 1 },
  { Dh: 6, H: 2, G: 2 },
  { Dh: 7, H: 3, G: 3 },
  { Dh: 12, H: 2, G: 1 },
  { Dh: 20, H: 3, G: 3 },
  { Dh: 36, H: 2, G: 2 },
  { Dh: 80, H: 2, G: 1 },
  { Dh: 96, H: 1, G: 1 },
  { Dh: 100, H: 3, G: 3 },
  { Dh: 256, H: 1, G: 1 },
];

describe.each(SIZES)('head size $Dh (H=$H, G=$G)', ({ Dh, H, G }) => {
  const E = H * Dh;
  const config = { embedDim: E, numHeads: H, numKvHeads: G };
  const tol = f32Tolerance([E, 33, E]);

  test.each([
    [1, 1, false],
    [2, 7, true],
    [1, 33, false],
  ] as const)('layer forward B=%i S=%i causal=%s: WebGPU = CPU', async (B, S, isCausal) => {
    const sd = randomStateDict(config, 100 + Dh);
    const x = uniform(B * S * E, 1, mulberry32(Dh + S));
    const gpu = engines.gpu.createMultiHeadAttention(config, sd);
    const cpu = engines.cpu.createMultiHeadAttention(config, sd);
    const options = { batchSize: B, seqLen: S, isCausal, needWeights: true as const };
    const got = await withErrorScopes(engines.gpu.device!, () => gpu.forward(x, options));
    const want = await cpu.forward(x, options);
    expect(got.output.length).toBe(B * S * E);
    expectClose(got.output, want.output, tol, `Dh=${Dh} output`);
    expectClose(got.attentionWeights!, want.attentionWeights!, f32Tolerance([Dh, S]), `Dh=${Dh} weights`);
    gpu.dispose();
  });

  test('KV-cache prefill and decode, the cache read back, and a cache started from given contents', async () => {
    const sd = randomStateDict({ ...config, bias: false }, 200 + Dh);
    const r = mulberry32(300 + Dh);
    const [B, P] = [2, 5];
    const prompt = uniform(B * P * E, 1, r);
    const step = uniform(B * E, 1, r);
    const results = [];
    for (const engine of [engines.gpu, engines.cpu]) {
      const mha = engine.createMultiHeadAttention({ ...config, bias: false }, sd);
      const cache = mha.createKvCache({ batchSize: B, maxSeqLen: 9 });
      await mha.forward(prompt, { batchSize: B, seqLen: P, isCausal: true, kvCache: cache });
      const decoded = await mha.forward(step, { batchSize: B, seqLen: 1, kvCache: cache });
      const contents = await cache.read();
      // A second cache from those contents decodes the same step to the same output.
      const again = mha.createKvCache({ batchSize: B, maxSeqLen: 9, key: contents.key, value: contents.value });
      const redecoded = await mha.forward(
        step.map((v) => -v),
        { batchSize: B, seqLen: 1, kvCache: again },
      );
      results.push({ decoded: decoded.output, contents, redecoded: redecoded.output });
      mha.dispose();
    }
    const [g, c] = results;
    expect(g.contents.key.length).toBe(B * G * (P + 1) * Dh);
    expectClose(g.decoded, c.decoded, tol, `Dh=${Dh} decode`);
    expectClose(g.contents.key, c.contents.key, f32Tolerance([E]), `Dh=${Dh} cached keys`);
    expectClose(g.contents.value, c.contents.value, f32Tolerance([E]), `Dh=${Dh} cached values`);
    expectClose(g.redecoded, c.redecoded, tol, `Dh=${Dh} decode from given contents`);
  });

  test('scaledDotProductAttention: arrays, GPU buffers in, returnBuffer out', async () => {
    const [B, Sq, Skv] = [2, 3, 6];
    const r = mulberry32(400 + Dh);
    const q = uniform(B * H * Sq * Dh, 1, r);
    const k = uniform(B * G * Skv * Dh, 1, r);
    const v = uniform(B * G * Skv * Dh, 1, r);
    const opts = { batchSize: B, numHeads: H, numKvHeads: G, seqLen: Sq, kvSeqLen: Skv, headDim: Dh, isCausal: true };
    const want = await engines.cpu.scaledDotProductAttention(q, k, v, opts);
    const gpu = engines.gpu;
    const device = gpu.device!;
    const arrays = await withErrorScopes(device, () => gpu.scaledDotProductAttention(q, k, v, opts));
    expectClose(arrays.output, want.output, f32Tolerance([Dh, Skv]), `Dh=${Dh} sdpa arrays`);
    const [qb, kb, vb] = [q, k, v].map((a) => uploadBuffer(device, a));
    const out = await withErrorScopes(device, () => gpu.scaledDotProductAttention(qb, kb, vb, { ...opts, returnBuffer: true }));
    expect(out.outputBuffer.size).toBeGreaterThanOrEqual(q.byteLength);
    const fromBuffers = new Float32Array(await readBuffer(device, out.outputBuffer, q.byteLength));
    expect(Array.from(fromBuffers)).toEqual(Array.from(arrays.output));
    for (const b of [qb, kb, vb, out.outputBuffer]) b.destroy();
  });
});

describe('odd sizes with the other options', () => {
  test('QK-norm and rotary (dim < Dh) on Dh = 7 and 10, with a KV cache', async () => {
    for (const [Dh, dim] of [
      [7, 4],
      [10, 10],
    ]) {
      const config = {
        embedDim: 3 * Dh,
        numHeads: 3,
        numKvHeads: 1,
        rotary: { dim },
        qkNorm: { query: uniform(Dh, 1, mulberry32(Dh)).map((w) => 1 + w / 2), key: uniform(Dh, 1, mulberry32(Dh + 1)).map((w) => 1 + w / 2) },
      };
      const sd = randomStateDict(config, 500 + Dh);
      const x = uniform(2 * 6 * config.embedDim, 1, mulberry32(600 + Dh));
      const outputs = [];
      for (const engine of [engines.gpu, engines.cpu]) {
        const mha = engine.createMultiHeadAttention(config, sd);
        const cache = mha.createKvCache({ batchSize: 2, maxSeqLen: 8 });
        await mha.forward(x.subarray(0, 2 * 5 * config.embedDim), { batchSize: 2, seqLen: 5, isCausal: true, kvCache: cache });
        const step = await mha.forward(x.subarray(2 * 5 * config.embedDim), { batchSize: 2, seqLen: 1, kvCache: cache });
        const whole = await mha.forward(x, { batchSize: 2, seqLen: 6, isCausal: true });
        outputs.push({ step: step.output, whole: whole.output, keys: (await cache.read()).key });
        mha.dispose();
      }
      const tol = f32Tolerance([config.embedDim, 6, config.embedDim]);
      expectClose(outputs[0].whole, outputs[1].whole, tol, `Dh=${Dh} rotary+qkNorm`);
      expectClose(outputs[0].step, outputs[1].step, tol, `Dh=${Dh} rotary+qkNorm decode`);
      expectClose(outputs[0].keys, outputs[1].keys, f32Tolerance([config.embedDim]), `Dh=${Dh} rotated keys in the cache`);
    }
  });

  test('cross-attention with kdim = 5, vdim = 7 (not multiples of 4), from GPU buffers, returnBuffer', async () => {
    const config = { embedDim: 6, numHeads: 2, kdim: 5, vdim: 7 };
    const sd = randomStateDict({ embedDim: 6, numHeads: 2 }, 7);
    const r = mulberry32(8);
    // Separate projections (kdim, vdim ≠ E): q/k/v_proj_weight.
    const stateDict = {
      q_proj_weight: uniform(6 * 6, 0.4, r),
      k_proj_weight: uniform(6 * 5, 0.4, r),
      v_proj_weight: uniform(6 * 7, 0.4, r),
      in_proj_bias: uniform(18, 0.1, r),
      'out_proj.weight': sd['out_proj.weight'],
      'out_proj.bias': sd['out_proj.bias'],
    };
    const [B, Sq, Skv] = [2, 3, 4];
    const query = uniform(B * Sq * 6, 1, r);
    const key = uniform(B * Skv * 5, 1, r);
    const value = uniform(B * Skv * 7, 1, r);
    const options = { batchSize: B, seqLen: Sq, kvSeqLen: Skv, key, value };
    const want = await engines.cpu.createMultiHeadAttention(config, stateDict).forward(query, options);
    const gpu = engines.gpu.createMultiHeadAttention(config, stateDict);
    const device = engines.gpu.device!;
    const arrays = await withErrorScopes(device, () => gpu.forward(query, options));
    expectClose(arrays.output, want.output, f32Tolerance([7, Skv, 6]), 'kdim 5, vdim 7');
    const [qb, kb, vb] = [query, key, value].map((a) => uploadBuffer(device, a));
    const out = await withErrorScopes(device, () => gpu.forward(qb, { ...options, key: kb as never, value: vb as never, returnBuffer: true }));
    const fromBuffers = new Float32Array(await readBuffer(device, out.outputBuffer, B * Sq * 6 * 4));
    expect(Array.from(fromBuffers)).toEqual(Array.from(arrays.output));
    for (const b of [qb, kb, vb, out.outputBuffer]) b.destroy();
    gpu.dispose();
  });

  test("precision 'f16': Dh = 5 and 3, a layer and scaledDotProductAttention on f16 buffers", async () => {
    const engine = await createGpuEngine({ precision: 'f16' });
    const device = engine.device!;
    for (const Dh of [5, 3]) {
      const config = { embedDim: 3 * Dh, numHeads: 3 };
      const sd = randomStateDict(config, 900 + Dh);
      const x = uniform(2 * 7 * config.embedDim, 1, mulberry32(Dh));
      const want = await engines.cpu.createMultiHeadAttention(config, sd).forward(x, { batchSize: 2, seqLen: 7, isCausal: true });
      const mha = engine.createMultiHeadAttention(config, sd);
      const got = await withErrorScopes(device, () => mha.forward(x, { batchSize: 2, seqLen: 7, isCausal: true }));
      expectClose(got.output, want.output, f16Tolerance([config.embedDim, 7, config.embedDim], maxAbsFinite(want.output)), `f16 layer Dh=${Dh}`);
      mha.dispose();
      const [B, S] = [1, 5];
      const r = mulberry32(Dh + 1);
      const [q, k, v] = [0, 1, 2].map(() => uniform(B * 3 * S * Dh, 1, r));
      const opts = { batchSize: B, numHeads: 3, seqLen: S, headDim: Dh };
      const ref = (await engines.cpu.scaledDotProductAttention(q, k, v, opts)).output;
      const [qb, kb, vb] = [q, k, v].map((a) => uploadBuffer(device, toF16(a)));
      const out = await withErrorScopes(device, () => engine.scaledDotProductAttention(qb, kb, vb, { ...opts, returnBuffer: true }));
      const half = fromF16(new Uint16Array(await readBuffer(device, out.outputBuffer, q.length * 2)));
      expectClose(half, ref, f16Tolerance([Dh, S], maxAbsFinite(ref)), `f16 sdpa Dh=${Dh}`);
      for (const b of [qb, kb, vb, out.outputBuffer]) b.destroy();
    }
    engine.dispose();
  });

  test('above 256 is still refused, saying the limit', async () => {
    const big = { embedDim: 260, numHeads: 1 };
    expect(() => engines.gpu.createMultiHeadAttention(big, randomStateDict(big, 1))).toThrow(UnsupportedError);
    expect(() => engines.gpu.createMultiHeadAttention(big, randomStateDict(big, 1))).toThrow(/at most 256/);
  });
});
