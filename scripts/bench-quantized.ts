// Quantized projection weights against float ones, on one backend at a time, in one run: a KV-cache
// decode step (one token over a cache of --ctx positions) and a prefill of --prefill tokens, for float32,
// f16 (WebGPU: precision 'f16') and each quantized type; what the GPU holds (weights + KV cache + a
// step's scratch: engine.stats().peakBytes) and, on WebGPU with timestamp queries, the projections' GPU
// time of a step (profile: true). Beside them, ONNX Runtime Web's MatMulNBits on its WASM EP (one
// thread): the four projections of a decode step alone (q, k, v, o as four MatMulNBits nodes, no
// attention), a lower bound for its whole step.
//
// Weights are random blocks of each type with small scales (a real model's magnitudes; the speed does
// not depend on the values). Medians of --runs steps after warm-ups and engine.settled(), the types
// interleaved step by step so that a slow moment of the machine falls on all of them.
//
//   npm run bench:quantized -- [--backends webgpu,wasm] [--types f32,f16,q4_0,q4_k,q8_0,nbits4]
//     [--embed 2048 --heads 16 --kv-heads 4 --ctx 1024 --prefill 512 --runs 15] [--tuning off] [--no-ort] [--json out.json]
//     [--float-projection gemv-rows-subgroup]   (WebGPU: the float layers' projections forced to that variant, tuning off)
//     [--threads 1]   (the 'wasm' backend's threads: 1 beside ORT's one thread; the engine's default is the number of cores)

import { writeFileSync } from 'node:fs';
import { type AttentionEngine, createAttentionEngine, type KvCache, type MultiHeadAttention, type ProjectionVariant, type QuantizedStateDict } from '../src/index.ts';
import { GGUF_BLOCKS } from '../src/quant/pack.ts';
import type { NBitsTensor, QuantizedTensor } from '../src/quant/types.ts';
import { mulberry32, randomStateDict, uniform } from '../src/util/random.ts';
import { ortProjectionsModel } from './ort-matmulnbits.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  backends: { type: 'string', default: 'webgpu,wasm' },
  types: { type: 'string', default: 'f32,f16,q4_0,q4_k,q8_0,nbits4' },
  embed: { type: 'string', default: '2048' },
  heads: { type: 'string', default: '16' },
  'kv-heads': { type: 'string', default: '4' },
  ctx: { type: 'string', default: '1024' },
  prefill: { type: 'string', default: '512' },
  runs: { type: 'string', default: '15' },
  'no-ort': { type: 'boolean', default: false },
  // 'off': the adapter's built-in kernels, no background sweep (a sweep at E=2048 on lavapipe takes many minutes)
  tuning: { type: 'string', default: 'auto' },
  json: { type: 'string' },
  threads: { type: 'string', default: '1' },
  'float-projection': { type: 'string' },
});
const E = Number(values.embed);
const H = Number(values.heads);
const G = Number(values['kv-heads']);
const ctx = Number(values.ctx);
const prefill = Number(values.prefill);
const runs = Number(values.runs);
const Dh = E / H;
const config = { embedDim: E, numHeads: H, numKvHeads: G };
const N = (H + 2 * G) * Dh;
const TYPES = values.types.split(',');
const KNOWN = ['f32', 'f16', 'q4_0', 'q4_k', 'q8_0', 'q6_k', 'nbits4', 'nbits8'];
for (const t of TYPES) if (!KNOWN.includes(t)) throw new Error(`--types: unknown ${t}; known: ${KNOWN.join(', ')}`);

/** Random blocks of a GGUF type for [rows, K], with f16 scales of about `scale`. */
function ggufBlocks(dtype: keyof typeof GGUF_BLOCKS, rows: number, K: number, rng: () => number): QuantizedTensor {
  const { bytes, weights } = GGUF_BLOCKS[dtype];
  const blocks = (rows * K) / weights;
  const data = new Uint8Array(blocks * bytes);
  for (let i = 0; i < data.length; i++) data[i] = Math.floor(rng() * 256);
  const at = { q4_0: [0], q8_0: [0], q4_k: [0, 2], q6_k: [208] }[dtype];
  // f16 bits of ±2⁻¹⁰…2⁻⁹: weights of a few hundredths, as in real layers
  for (let b = 0; b < blocks; b++)
    for (const o of at) new DataView(data.buffer).setUint16(b * bytes + o, (rng() < 0.5 ? 0x8000 : 0) | (0x15 << 10) | Math.floor(rng() * 1024), true);
  return { dtype, shape: [rows, K], data };
}

function nbits(bits: 4 | 8, rows: number, K: number, rng: () => number): NBitsTensor {
  const blockSize = 32;
  const blocks = Math.ceil(K / blockSize);
  const data = new Uint8Array((rows * blocks * blockSize * bits) / 8);
  for (let i = 0; i < data.length; i++) data[i] = Math.floor(rng() * 256);
  const scales = Float32Array.from({ length: rows * blocks }, () => 0.002 + 0.001 * rng());
  const zeroPoints = new Uint8Array(rows * Math.ceil((blocks * bits) / 8)).fill(bits === 4 ? 0x88 : 128);
  return { dtype: 'nbits', bits, blockSize, shape: [rows, K], data, scales, zeroPoints };
}

function weightOf(type: string, rows: number, K: number, rng: () => number): QuantizedTensor {
  if (type === 'nbits4' || type === 'nbits8') return nbits(type === 'nbits4' ? 4 : 8, rows, K, rng);
  return ggufBlocks(type as keyof typeof GGUF_BLOCKS, rows, K, rng);
}

function stateDict(type: string): QuantizedStateDict {
  const float = randomStateDict(config, 1);
  if (type === 'f32' || type === 'f16') return float;
  const rng = mulberry32(7);
  return { ...float, in_proj_weight: weightOf(type, N, E, rng), 'out_proj.weight': weightOf(type, E, E, rng) };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

interface Row {
  backend: string;
  type: string;
  decodeMs: number;
  decodeBestMs: number;
  projectionGpuMs: number | null;
  prefillMs: number | null;
  peakBytes: number;
}

interface Entry {
  type: string;
  engine: AttentionEngine;
  mha: MultiHeadAttention;
  cache: KvCache;
  steps: number[];
  projection: number[];
}

const floatProjection = values['float-projection'] as ProjectionVariant | undefined;

async function runBackend(backend: 'webgpu' | 'wasm'): Promise<Row[]> {
  const types = TYPES.filter((t) => backend === 'webgpu' || t !== 'f16');
  const entries: Entry[] = [];
  for (const type of types) {
    const engine =
      backend === 'wasm'
        ? await createAttentionEngine({ backend: 'wasm', threads: Number(values.threads) })
        : await createAttentionEngine({
            backend: 'webgpu',
            profile: true,
            ...(values.tuning === 'off' ? { tuning: { mode: 'off' as const } } : {}),
            ...(floatProjection && (type === 'f32' || type === 'f16')
              ? { tuning: { mode: 'off' as const, kernels: { qkv_projection: floatProjection, output_projection: floatProjection } } }
              : {}),
            ...(type === 'f16' ? { precision: 'f16' as const } : {}),
          });
    const mha = engine.createMultiHeadAttention(config, stateDict(type));
    const r = mulberry32(ctx);
    const past = { key: uniform(G * ctx * Dh, 1, r), value: uniform(G * ctx * Dh, 1, r) };
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: ctx + runs + 8, ...past });
    entries.push({ type, engine, mha, cache, steps: [], projection: [] });
  }
  const x = uniform(E, 1, mulberry32(3));
  const step = (e: Entry) => e.mha.forward(x, { batchSize: 1, seqLen: 1, isCausal: true, kvCache: e.cache });
  // Warm-ups: tier 0, then the final kernels (compiled and swept in the background).
  for (const e of entries) {
    await step(e);
    await e.engine.settled();
    await step(e);
    await step(e);
  }
  for (let i = 0; i < runs; i++) {
    for (const e of entries) {
      const t0 = performance.now();
      const { timings } = (await step(e)) as { timings?: Record<string, number> };
      e.steps.push(performance.now() - t0);
      if (timings) e.projection.push((timings.qkv_projection ?? 0) + (timings.output_projection ?? 0));
    }
  }
  const rows: Row[] = [];
  for (const e of entries) {
    const peakBytes = e.engine.stats().peakBytes;
    e.cache.dispose();
    // Prefill: a fresh call of `prefill` tokens, median of 3 after one warm-up and settling.
    let prefillMs: number | null = null;
    if (prefill > 0) {
      const xs = uniform(prefill * E, 1, mulberry32(5));
      const call = () => e.mha.forward(xs, { batchSize: 1, seqLen: prefill, isCausal: true });
      await call();
      await e.engine.settled();
      const times: number[] = [];
      for (let i = 0; i < 3; i++) {
        const t0 = performance.now();
        await call();
        times.push(performance.now() - t0);
      }
      prefillMs = median(times);
    }
    rows.push({
      backend,
      type: e.type,
      decodeMs: median(e.steps),
      decodeBestMs: Math.min(...e.steps),
      projectionGpuMs: e.projection.length ? median(e.projection) : null,
      prefillMs,
      peakBytes,
    });
    e.mha.dispose();
    e.engine.dispose();
  }
  return rows;
}

/** ONNX Runtime Web's MatMulNBits (WASM EP, one thread): a decode step's four projections, nbits 4, block 32. */
async function ortProjections(): Promise<number> {
  const ort = await import('onnxruntime-web');
  ort.env.wasm.numThreads = 1;
  ort.env.logLevel = 'error';
  const rng = mulberry32(9);
  const model = await ortProjectionsModel(E, [
    ['q', nbits(4, H * Dh, E, rng)],
    ['k', nbits(4, G * Dh, E, rng)],
    ['v', nbits(4, G * Dh, E, rng)],
    ['o', nbits(4, E, E, rng)],
  ]);
  const session = await ort.InferenceSession.create(model, { executionProviders: ['wasm'] });
  const x = new ort.Tensor('float32', uniform(E, 1, mulberry32(3)), [1, E]);
  for (let i = 0; i < 3; i++) await session.run({ A: x });
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await session.run({ A: x });
    times.push(performance.now() - t0);
  }
  await session.release();
  return median(times);
}

const rows: Row[] = [];
for (const backend of values.backends.split(',') as ('webgpu' | 'wasm')[]) {
  const done = await runBackend(backend);
  rows.push(...done);
  // As each backend finishes (a long WebGPU run on a software adapter should not hide the wasm figures).
  for (const r of done) console.log(`  ${r.backend} ${r.type}: decode ${r.decodeMs.toFixed(2)} ms, prefill ${r.prefillMs?.toFixed(1) ?? '-'} ms`);
}
const ortMs = values['no-ort'] ? null : await ortProjections();

console.log(`E=${E} H=${H} G=${G}: decode step over a cache of ${ctx}, prefill of ${prefill}; medians of ${runs} steps; wasm: ${values.threads} thread(s)`);
console.log(
  'backend  type     decode ms (best)   projections GPU ms   prefill ms   peak MB   against f32: decode speed-up / projections speed-up / prefill time / GPU memory',
);
for (const r of rows) {
  const f32 = rows.find((x) => x.backend === r.backend && x.type === 'f32');
  const ratio = (a: number | null | undefined, b: number | null | undefined) => (a && b ? `${(a / b).toFixed(2)}x` : '-');
  console.log(
    `${r.backend.padEnd(8)} ${r.type.padEnd(8)} ${r.decodeMs.toFixed(2).padStart(8)} (${r.decodeBestMs.toFixed(2)})   ${(r.projectionGpuMs?.toFixed(2) ?? '-').padStart(10)}        ${(r.prefillMs?.toFixed(1) ?? '-').padStart(8)}   ${(r.peakBytes / 2 ** 20).toFixed(1).padStart(7)}   ` +
      `${ratio(f32?.decodeMs, r.decodeMs)} / ${ratio(f32?.projectionGpuMs, r.projectionGpuMs)} / ${ratio(r.prefillMs, f32?.prefillMs)} / ${ratio(r.peakBytes, f32?.peakBytes)}`,
  );
}
if (ortMs !== null) console.log(`ONNX Runtime Web WASM (1 thread), MatMulNBits 4-bit: the four projections of a step alone ${ortMs.toFixed(2)} ms`);
if (values.json) writeFileSync(values.json, JSON.stringify({ E, H, G, ctx, prefill, runs, wasmThreads: Number(values.threads), rows, ortProjectionsMs: ortMs }, null, 2));
