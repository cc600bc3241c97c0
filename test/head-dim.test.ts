// config.headDim: heads of their own size, H·Dh ≠ E (Qwen3, Gemma 3, gpt-oss). in_proj_weight is
// [(H + 2G)·Dh, E] and out_proj.weight [E, H·Dh]. First the float64 reference itself against a layer
// computed by hand in this file; then a grid of layers (H·Dh above and below E, odd sizes that take the
// GPU's padding path, GQA and MQA, bias or not, cross-attention with kdim/vdim ≠ E from separate
// weights) on WebGPU and wasm against the reference: causal prefill and KV-cache decode, a varlen
// (cuSeqlens) batch, needWeights, GPU buffers in and out, split-KV decode, f16, Q8_0/Q4_0/nbits
// weights, the Qwen3-0.6B attention shape with QK-norm and rotary; and the refusals.

import { describe, expect, test } from 'vitest';
import {
  dequantize,
  InvalidArgumentError,
  type MultiHeadAttentionConfig,
  type QuantizedStateDict,
  quantizeWeights,
  ShapeMismatchError,
  type StateDict,
  UnsupportedError,
} from '../src/index.ts';
import { MAX_HEAD_DIM } from '../src/webgpu/backend.ts';
import { expectClose, f16Tolerance, f32Tolerance, maxAbsFinite } from '../src/util/tolerance.ts';
import { recordPipelines } from './helpers/dispatches.ts';
import { useEngines } from './helpers/engines.ts';
import { readBuffer, uploadBuffer } from './helpers/readback.ts';
import { createGpuEngine, withErrorScopes } from './helpers/gpu.ts';
import { mulberry32, uniform } from './helpers/random.ts';

const engines = useEngines('webgpu', 'wasm', 'cpu');
const BACKENDS = ['webgpu', 'wasm'] as const;

interface Case {
  name: string;
  E: number;
  H: number;
  G: number;
  Dh: number;
  bias: boolean;
  kdim?: number;
  vdim?: number;
}

const CASES: Case[] = [
  { name: 'H·Dh > E, GQA', E: 32, H: 4, G: 2, Dh: 16, bias: true },
  { name: 'H·Dh < E, MQA, no bias', E: 48, H: 4, G: 1, Dh: 8, bias: false },
  { name: 'odd E and Dh (padded on the GPU), H·Dh > E', E: 13, H: 3, G: 3, Dh: 7, bias: true },
  { name: 'odd Dh, H·Dh < E, MQA', E: 20, H: 2, G: 1, Dh: 5, bias: false },
  { name: 'Dh = 6 (padded heads), E aligned', E: 16, H: 2, G: 2, Dh: 6, bias: true },
  { name: 'cross-attention kdim 10, vdim 18, H·Dh > E', E: 24, H: 4, G: 2, Dh: 12, bias: true, kdim: 10, vdim: 18 },
  { name: 'cross-attention kdim 7, vdim 5, odd, H·Dh < E', E: 15, H: 2, G: 1, Dh: 3, bias: false, kdim: 7, vdim: 5 },
];

function configOf(c: Case): MultiHeadAttentionConfig {
  return { embedDim: c.E, numHeads: c.H, numKvHeads: c.G, headDim: c.Dh, bias: c.bias, ...(c.kdim ? { kdim: c.kdim, vdim: c.vdim } : {}) };
}

/** Seeded weights of a headDim layer: packed in_proj_weight for self-attention, q/k/v_proj_weight with kdim/vdim. */
function stateDictOf(c: Case, seed: number): StateDict {
  const r = mulberry32(seed);
  const { E, H, G, Dh } = c;
  const N = (H + 2 * G) * Dh;
  const sd: StateDict = {};
  if (c.kdim) {
    sd.q_proj_weight = uniform(H * Dh * E, 1 / Math.sqrt(E), r);
    sd.k_proj_weight = uniform(G * Dh * c.kdim, 1 / Math.sqrt(c.kdim), r);
    sd.v_proj_weight = uniform(G * Dh * (c.vdim ?? E), 1 / Math.sqrt(c.vdim ?? E), r);
  } else {
    sd.in_proj_weight = uniform(N * E, 1 / Math.sqrt(E), r);
  }
  sd['out_proj.weight'] = uniform(E * H * Dh, 1 / Math.sqrt(H * Dh), r);
  if (c.bias) {
    sd.in_proj_bias = uniform(N, 0.1, r);
    sd['out_proj.bias'] = uniform(E, 0.1, r);
  }
  return sd;
}

function toleranceOf(c: Case, keys: number): ReturnType<typeof f32Tolerance> {
  return f32Tolerance([Math.max(c.E, c.kdim ?? 0, c.vdim ?? 0), keys, c.H * c.Dh]);
}

describe('the float64 reference with H·Dh ≠ E, against a layer computed by hand', () => {
  test('E = 3, H = 2, G = 1, Dh = 2 (H·Dh = 4): q = x·W_qᵀ + b, softmax per head, concat, ·W_Oᵀ + b_O', async () => {
    const [E, H, G, Dh, S] = [3, 2, 1, 2, 3];
    const r = mulberry32(11);
    const Wq = uniform(H * Dh * E, 1, r);
    const Wk = uniform(G * Dh * E, 1, r);
    const Wv = uniform(G * Dh * E, 1, r);
    const bIn = uniform((H + 2 * G) * Dh, 0.5, r);
    const Wo = uniform(E * H * Dh, 1, r);
    const bO = uniform(E, 0.5, r);
    const x = uniform(S * E, 1, r);
    // Plain float64 loops, no engine code.
    const lin = (W: Float32Array, rowsOut: number, b0: number): number[][] =>
      Array.from({ length: S }, (_, s) =>
        Array.from({ length: rowsOut }, (_, n) => {
          let sum = bIn[b0 + n];
          for (let e = 0; e < E; e++) sum += x[s * E + e] * W[n * E + e];
          return sum;
        }),
      );
    const q = lin(Wq, H * Dh, 0);
    const k = lin(Wk, G * Dh, H * Dh);
    const v = lin(Wv, G * Dh, (H + G) * Dh);
    const concat = Array.from({ length: S }, () => new Array<number>(H * Dh).fill(0));
    for (let h = 0; h < H; h++) {
      const g = Math.floor(h / (H / G));
      for (let i = 0; i < S; i++) {
        const scores = Array.from({ length: S }, (_, j) => {
          let dot = 0;
          for (let d = 0; d < Dh; d++) dot += q[i][h * Dh + d] * k[j][g * Dh + d];
          return dot / Math.sqrt(Dh);
        });
        const max = Math.max(...scores);
        const exps = scores.map((s) => Math.exp(s - max));
        const total = exps.reduce((a, b) => a + b, 0);
        for (let d = 0; d < Dh; d++) {
          let sum = 0;
          for (let j = 0; j < S; j++) sum += (exps[j] / total) * v[j][g * Dh + d];
          concat[i][h * Dh + d] = sum;
        }
      }
    }
    const want = new Float64Array(S * E);
    for (let s = 0; s < S; s++) {
      for (let n = 0; n < E; n++) {
        let sum = bO[n];
        for (let c = 0; c < H * Dh; c++) sum += concat[s][c] * Wo[n * H * Dh + c];
        want[s * E + n] = sum;
      }
    }
    const config = { embedDim: E, numHeads: H, numKvHeads: G, headDim: Dh };
    const packed = new Float32Array((H + 2 * G) * Dh * E);
    packed.set(Wq, 0);
    packed.set(Wk, H * Dh * E);
    packed.set(Wv, (H + G) * Dh * E);
    const sd = { in_proj_weight: packed, in_proj_bias: bIn, 'out_proj.weight': Wo, 'out_proj.bias': bO };
    for (const backend of ['cpu', 'wasm', 'webgpu'] as const) {
      const mha = engines.of(backend).createMultiHeadAttention(config, sd);
      const got = await mha.forward(x, { batchSize: 1, seqLen: S });
      expectClose(got.output, want, backend === 'cpu' ? { atol: 1e-6, rtol: 1e-6 } : f32Tolerance([E, S, H * Dh]), `${backend} by hand`);
      mha.dispose();
    }
    // Separate q/k/v_proj_weight give the same layer.
    const separate = { q_proj_weight: Wq, k_proj_weight: Wk, v_proj_weight: Wv, in_proj_bias: bIn, 'out_proj.weight': Wo, 'out_proj.bias': bO };
    const got = await engines.cpu.createMultiHeadAttention(config, separate).forward(x, { batchSize: 1, seqLen: S });
    expectClose(got.output, want, { atol: 1e-6, rtol: 1e-6 }, 'cpu by hand, separate weights');
  });

  test('headDim = E / H given is the layer without it', async () => {
    const c: Case = { name: '', E: 12, H: 3, G: 3, Dh: 4, bias: true };
    const sd = stateDictOf(c, 5);
    const x = uniform(2 * 4 * 12, 1, mulberry32(6));
    const options = { batchSize: 2, seqLen: 4, isCausal: true };
    const a = await engines.cpu.createMultiHeadAttention({ embedDim: 12, numHeads: 3 }, sd).forward(x, options);
    const b = await engines.cpu.createMultiHeadAttention({ embedDim: 12, numHeads: 3, headDim: 4 }, sd).forward(x, options);
    expect(Array.from(b.output)).toEqual(Array.from(a.output));
  });
});

describe.each(CASES)('$name: E=$E H=$H G=$G Dh=$Dh', (c) => {
  const config = configOf(c);
  const cross = c.kdim !== undefined;

  test.each(BACKENDS)('%s: forward with needWeights against the reference', async (backend) => {
    const sd = stateDictOf(c, 10 + c.E);
    const r = mulberry32(20 + c.E);
    const [B, Sq, Skv] = [2, 5, cross ? 4 : 5];
    const query = uniform(B * Sq * c.E, 1, r);
    const options = cross
      ? { batchSize: B, seqLen: Sq, kvSeqLen: Skv, key: uniform(B * Skv * c.kdim!, 1, r), value: uniform(B * Skv * c.vdim!, 1, r), needWeights: true as const }
      : { batchSize: B, seqLen: Sq, isCausal: true, needWeights: true as const };
    const want = await engines.cpu.createMultiHeadAttention(config, sd).forward(query, options);
    const mha = engines.of(backend).createMultiHeadAttention(config, sd);
    const run = () => mha.forward(query, options);
    const got = backend === 'webgpu' ? await withErrorScopes(engines.gpu.device!, run) : await run();
    expect(got.output.length).toBe(B * Sq * c.E);
    expectClose(got.output, want.output, toleranceOf(c, Skv), `${backend} output`);
    expect(got.attentionWeights!.length).toBe(B * c.H * Sq * Skv);
    expectClose(got.attentionWeights!, want.attentionWeights!, f32Tolerance([c.E, c.Dh, Skv]), `${backend} attention weights`);
    mha.dispose();
  });

  // Cross-attention layers (keys of their own) have no KV cache or varlen call: these two run on self-attention layers.
  test.each(cross ? [] : BACKENDS)('%s: causal prefill, then KV-cache decode steps', async (backend) => {
    const sd = stateDictOf(c, 30 + c.E);
    const r = mulberry32(40 + c.E);
    const [B, P, steps] = [2, 4, 2];
    const x = uniform(B * (P + steps) * c.E, 1, r);
    const prompt = x.subarray(0, B * P * c.E);
    const results: Float32Array[][] = [];
    for (const engine of [engines.cpu, engines.of(backend)]) {
      const mha = engine.createMultiHeadAttention(config, sd);
      const cache = mha.createKvCache({ batchSize: B, maxSeqLen: P + steps });
      // Batch-first prompt rows: batch b's P tokens, then the next batch's.
      const outs = [(await mha.forward(prompt, { batchSize: B, seqLen: P, isCausal: true, kvCache: cache })).output];
      for (let t = 0; t < steps; t++) {
        const step = uniform(B * c.E, 1, mulberry32(50 + t));
        outs.push((await mha.forward(step, { batchSize: B, seqLen: 1, kvCache: cache })).output);
      }
      const contents = await cache.read();
      expect(contents.key.length).toBe(B * c.G * (P + steps) * c.Dh);
      outs.push(contents.key, contents.value);
      results.push(outs);
      mha.dispose();
    }
    const [want, got] = results;
    const names = ['prefill', 'step 1', 'step 2', 'cached keys', 'cached values'];
    for (const [i, w] of want.entries()) expectClose(got[i], w, toleranceOf(c, P + steps), `${backend} ${names[i]}`);
  });

  test.each(cross ? [] : BACKENDS)('%s: a varlen batch (cuSeqlens), causal', async (backend) => {
    const sd = stateDictOf(c, 60 + c.E);
    const cu = Int32Array.from([0, 3, 8]);
    const x = uniform(8 * c.E, 1, mulberry32(70 + c.E));
    const options = { cuSeqlens: cu, isCausal: true };
    const want = await engines.cpu.createMultiHeadAttention(config, sd).forward(x, options);
    const mha = engines.of(backend).createMultiHeadAttention(config, sd);
    const got = await mha.forward(x, options);
    expect(got.output.length).toBe(8 * c.E);
    expectClose(got.output, want.output, toleranceOf(c, 5), `${backend} varlen`);
    mha.dispose();
  });

  test('webgpu: GPU buffers in, returnBuffer out', async () => {
    const sd = stateDictOf(c, 80 + c.E);
    const r = mulberry32(90 + c.E);
    const [B, Sq, Skv] = [2, 3, cross ? 4 : 3];
    const query = uniform(B * Sq * c.E, 1, r);
    const key = cross ? uniform(B * Skv * c.kdim!, 1, r) : undefined;
    const value = cross ? uniform(B * Skv * c.vdim!, 1, r) : undefined;
    const options = cross ? { batchSize: B, seqLen: Sq, kvSeqLen: Skv, key, value } : { batchSize: B, seqLen: Sq, isCausal: true };
    const want = await engines.cpu.createMultiHeadAttention(config, sd).forward(query, options as never);
    const device = engines.gpu.device!;
    const gpu = engines.gpu.createMultiHeadAttention(config, sd);
    const [qb, kb, vb] = [query, key, value].map((a) => (a ? uploadBuffer(device, a) : undefined));
    const run = () => gpu.forward(qb!, { ...options, ...(cross ? { key: kb, value: vb } : {}), returnBuffer: true } as never);
    const out = (await withErrorScopes(device, run)) as unknown as { outputBuffer: GPUBuffer };
    const got = new Float32Array(await readBuffer(device, out.outputBuffer, B * Sq * c.E * 4));
    expectClose(got, want.output, toleranceOf(c, Skv), 'GPU buffers');
    for (const b of [qb, kb, vb, out.outputBuffer]) b?.destroy();
    gpu.dispose();
  });
});

describe('headDim with the other paths', () => {
  test("webgpu precision 'f16': H·Dh > E, padded and aligned", async () => {
    const engine = await createGpuEngine({ precision: 'f16' });
    for (const c of [CASES[0], CASES[2]]) {
      const config = configOf(c);
      const sd = stateDictOf(c, 100 + c.E);
      const x = uniform(2 * 6 * c.E, 1, mulberry32(110 + c.E));
      const options = { batchSize: 2, seqLen: 6, isCausal: true };
      const want = await engines.cpu.createMultiHeadAttention(config, sd).forward(x, options);
      const mha = engine.createMultiHeadAttention(config, sd);
      const got = await withErrorScopes(engine.device!, () => mha.forward(x, options));
      expectClose(got.output, want.output, f16Tolerance([c.E, 6, c.H * c.Dh], maxAbsFinite(want.output)), `f16 ${c.name}`);
      mha.dispose();
    }
    engine.dispose();
  });

  test('webgpu: split-KV decode (520 cached keys) with H·Dh > E', async () => {
    const c: Case = { name: '', E: 24, H: 4, G: 2, Dh: 12, bias: true };
    const config = configOf(c);
    const sd = stateDictOf(c, 120);
    const P = 520;
    const x = uniform((P + 1) * c.E, 1, mulberry32(121));
    const outs: Float32Array[] = [];
    let pipelines: string[] = [];
    for (const engine of [engines.cpu, engines.gpu]) {
      const mha = engine.createMultiHeadAttention(config, sd);
      const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: P + 1 });
      await mha.forward(x.subarray(0, P * c.E), { batchSize: 1, seqLen: P, isCausal: true, kvCache: cache });
      const step = () => mha.forward(x.subarray(P * c.E), { batchSize: 1, seqLen: 1, kvCache: cache });
      if (engine === engines.gpu) {
        const recorded = await recordPipelines(engines.gpu.device!, step);
        outs.push(recorded.result.output);
        pipelines = recorded.pipelines;
      } else {
        outs.push((await step()).output);
      }
      mha.dispose();
    }
    expect(pipelines.some((p) => /decode.?merge/i.test(p))).toBe(true);
    expectClose(outs[1], outs[0], toleranceOf(c, P + 1), 'split-KV decode');
  });

  describe.each([
    ['q8_0', { dtype: 'q8_0' }],
    ['q4_0', { dtype: 'q4_0' }],
    ['nbits 4, blockSize 16', { dtype: 'nbits', bits: 4, blockSize: 16 }],
  ] as const)('%s weights, E = 64, H = 4, G = 2, Dh = 32 (the out-projection’s K is H·Dh = 128)', (_name, format) => {
    const c: Case = { name: '', E: 64, H: 4, G: 2, Dh: 32, bias: true };
    const config = configOf(c);
    let sd: QuantizedStateDict | undefined;
    const quantized = () => {
      sd ??= quantizeWeights(stateDictOf(c, 130), { ...format, config } as never);
      return sd;
    };
    test.each(['cpu', ...BACKENDS] as const)('%s against the reference on the dequantized weights', async (backend) => {
      const q = quantized();
      expect((q['out_proj.weight'] as unknown as { shape: number[] }).shape).toEqual([64, 128]);
      const plain = Object.fromEntries(Object.entries(q).map(([k, v]) => [k, v instanceof Float32Array ? v : dequantize(v)])) as StateDict;
      const x = uniform(2 * 3 * c.E, 1, mulberry32(131));
      const options = { batchSize: 2, seqLen: 3, isCausal: true };
      const want = await engines.cpu.createMultiHeadAttention(config, plain).forward(x, options);
      const mha = engines.of(backend).createMultiHeadAttention(config, q);
      const cache = mha.createKvCache({ batchSize: 2, maxSeqLen: 4 });
      const got = await mha.forward(x, { ...options, kvCache: cache });
      expectClose(got.output, want.output, toleranceOf(c, 3), `${backend} ${_name}`);
      const step = uniform(2 * c.E, 1, mulberry32(132));
      const decoded = await mha.forward(step, { batchSize: 2, seqLen: 1, kvCache: cache });
      const ref = engines.cpu.createMultiHeadAttention(config, plain);
      const refCache = ref.createKvCache({ batchSize: 2, maxSeqLen: 4 });
      await ref.forward(x, { ...options, kvCache: refCache });
      expectClose(decoded.output, (await ref.forward(step, { batchSize: 2, seqLen: 1, kvCache: refCache })).output, toleranceOf(c, 4), `${backend} ${_name} decode`);
      mha.dispose();
    });
  });

  test.each(BACKENDS)('%s: the Qwen3-0.6B attention shape (E 1024, H 16, G 8, Dh 128, QK-norm, rotary base 1e6)', async (backend) => {
    const c: Case = { name: '', E: 1024, H: 16, G: 8, Dh: 128, bias: false };
    const r = mulberry32(140);
    const config = {
      ...configOf(c),
      qkNorm: { query: uniform(128, 0.5, r).map((w) => 1 + w), key: uniform(128, 0.5, r).map((w) => 1 + w) },
      rotary: { base: 1_000_000 },
    };
    const sd = stateDictOf(c, 141);
    expect(sd.in_proj_weight.length).toBe(4096 * 1024);
    expect(sd['out_proj.weight'].length).toBe(1024 * 2048);
    const S = 3;
    const x = uniform((S + 1) * c.E, 1, r);
    const outs: Float32Array[][] = [];
    for (const engine of [engines.cpu, engines.of(backend)]) {
      const mha = engine.createMultiHeadAttention(config, sd);
      const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: S + 1 });
      const prefill = await mha.forward(x.subarray(0, S * c.E), { batchSize: 1, seqLen: S, isCausal: true, kvCache: cache });
      const step = await mha.forward(x.subarray(S * c.E), { batchSize: 1, seqLen: 1, kvCache: cache });
      outs.push([prefill.output, step.output]);
      mha.dispose();
    }
    expectClose(outs[1][0], outs[0][0], toleranceOf(c, S), `${backend} Qwen3 prefill`);
    expectClose(outs[1][1], outs[0][1], toleranceOf(c, S + 1), `${backend} Qwen3 decode`);
  });
});

describe('headDim with linear attention', () => {
  test.each(BACKENDS)("%s: attention 'linear', H·Dh > E, causal, and a KV-cache decode step", async (backend) => {
    const c: Case = { name: '', E: 12, H: 3, G: 1, Dh: 6, bias: true };
    const config = { ...configOf(c), attention: 'linear' as const };
    const sd = stateDictOf(c, 170);
    const x = uniform(2 * 6 * c.E, 1, mulberry32(171));
    const outs: Float32Array[][] = [];
    for (const engine of [engines.cpu, engines.of(backend)]) {
      const mha = engine.createMultiHeadAttention(config, sd);
      const cache = mha.createKvCache({ batchSize: 2, maxSeqLen: 6 });
      const whole = await mha.forward(x, { batchSize: 2, seqLen: 6, isCausal: true });
      await mha.forward(x.subarray(0, 2 * 5 * c.E), { batchSize: 2, seqLen: 5, isCausal: true, kvCache: cache });
      const step = await mha.forward(x.subarray(2 * 5 * c.E), { batchSize: 2, seqLen: 1, kvCache: cache });
      outs.push([whole.output, step.output]);
      mha.dispose();
    }
    expectClose(outs[1][0], outs[0][0], toleranceOf(c, 6), `${backend} linear`);
    expectClose(outs[1][1], outs[0][1], toleranceOf(c, 6), `${backend} linear decode`);
  });
});

describe('tuning', () => {
  test('webgpu: the output projection swept on a layer with H·Dh = 2E (trials and the gate with K = H·Dh), then used', async () => {
    const c: Case = { name: '', E: 16, H: 4, G: 2, Dh: 8, bias: true };
    const config = configOf(c);
    const sd = stateDictOf(c, 160);
    const engine = await createGpuEngine({
      tuning: { mode: 'auto', store: null, kernels: { qkv_projection: 'register-4x4', flash_attention: 'rows32-keys32-loop' } },
    });
    const x = uniform(2 * 9 * c.E, 1, mulberry32(161));
    const options = { batchSize: 2, seqLen: 9, isCausal: true };
    const want = await engines.cpu.createMultiHeadAttention(config, sd).forward(x, options);
    const mha = engine.createMultiHeadAttention(config, sd);
    const first = await withErrorScopes(engine.device!, () => mha.forward(x, options));
    expectClose(first.output, want.output, toleranceOf(c, 9), 'before the sweep');
    await engine.settled();
    expect(engine.tuning!.failures).toEqual([]);
    const swept = engine.tuning!.choices.filter((ch) => ch.kernel === 'output_projection');
    expect(swept).toHaveLength(1);
    expect(swept[0].source).toBe('sweep');
    const second = await withErrorScopes(engine.device!, () => mha.forward(x, options));
    expectClose(second.output, want.output, toleranceOf(c, 9), `after the sweep (${swept[0].variant})`);
    mha.dispose();
    engine.dispose();
  });
});

describe('refusals', () => {
  const c: Case = { name: '', E: 32, H: 4, G: 2, Dh: 16, bias: true };
  const config = configOf(c);
  const sd = stateDictOf(c, 150);

  test.each([0, -8, 2.5, '16', null])('headDim %s is not a positive integer', (headDim) => {
    expect(() => engines.cpu.createMultiHeadAttention({ ...config, headDim } as never, sd)).toThrow(InvalidArgumentError);
    expect(() => engines.cpu.createMultiHeadAttention({ ...config, headDim } as never, sd)).toThrow(/config\.headDim/);
  });

  test('embedDim not divisible by numHeads is taken once headDim is given, and refused without it', () => {
    const odd: Case = { name: '', E: 10, H: 4, G: 4, Dh: 3, bias: false };
    expect(() => engines.cpu.createMultiHeadAttention(configOf(odd), stateDictOf(odd, 1))).not.toThrow();
    expect(() => engines.cpu.createMultiHeadAttention({ embedDim: 10, numHeads: 4 }, stateDictOf(odd, 1))).toThrow(/config\.embedDim.*divisible by numHeads/s);
  });

  test(`webgpu: a headDim over MAX_HEAD_DIM (${MAX_HEAD_DIM}) is refused naming config.headDim; the cpu takes it`, () => {
    const big: Case = { name: '', E: 8, H: 1, G: 1, Dh: MAX_HEAD_DIM + 4, bias: false };
    expect(() => engines.gpu.createMultiHeadAttention(configOf(big), stateDictOf(big, 2))).toThrow(UnsupportedError);
    expect(() => engines.gpu.createMultiHeadAttention(configOf(big), stateDictOf(big, 2))).toThrow(/config\.headDim/);
    expect(() => engines.cpu.createMultiHeadAttention(configOf(big), stateDictOf(big, 2)).dispose()).not.toThrow();
  });

  test('an out_proj.weight of [E, E] names [E, H·Dh]', () => {
    const wrong = { ...sd, 'out_proj.weight': new Float32Array(32 * 32) };
    expect(() => engines.cpu.createMultiHeadAttention(config, wrong)).toThrow(ShapeMismatchError);
    expect(() => engines.cpu.createMultiHeadAttention(config, wrong)).toThrow('[E, H·Dh] = [32, 4·16]');
    expect(() => engines.wasm.createMultiHeadAttention(config, wrong)).toThrow(ShapeMismatchError);
    expect(() => engines.gpu.createMultiHeadAttention(config, wrong)).toThrow(ShapeMismatchError);
  });

  test('an in_proj_weight sized for E/H-sized heads names [(H + 2·G)·Dh, E]', () => {
    const wrong = { ...sd, in_proj_weight: new Float32Array((4 + 4) * 8 * 32) };
    expect(() => engines.cpu.createMultiHeadAttention(config, wrong)).toThrow(ShapeMismatchError);
    expect(() => engines.cpu.createMultiHeadAttention(config, wrong)).toThrow('[(H + 2·G)·Dh, E] = [(4 + 2·2)·16, 32]');
  });

  test('a quantized out_proj.weight of shape [E, E] names [E, H·Dh]', () => {
    const small: Case = { name: '', E: 64, H: 4, G: 2, Dh: 32, bias: false };
    const cfg = configOf(small);
    const q = quantizeWeights(stateDictOf(small, 151), { dtype: 'q8_0', config: cfg });
    const square = quantizeWeights({ 'out_proj.weight': new Float32Array(64 * 64) }, { dtype: 'q8_0' });
    const wrong = { ...q, 'out_proj.weight': square['out_proj.weight'] };
    expect(() => engines.cpu.createMultiHeadAttention(cfg, wrong)).toThrow(ShapeMismatchError);
    expect(() => engines.cpu.createMultiHeadAttention(cfg, wrong)).toThrow('[E, H·Dh] = [64, 4·32]');
  });
});
