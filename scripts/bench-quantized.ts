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
//     [--rounds 1]    (the decode steps measured in that many rounds of --runs, each round's medians and
//                      ratios to float32 listed: a shared machine's slow phases show as a spread, not one figure)
//     [--layers 1]    (a stack of that many layers of each type, each with its own weights and KV cache, stepped
//                      through one after another as a model decodes a token; a step's time is the stack's over
//                      the layers. One layer stepped over and over keeps its weights and cache in the CPU's
//                      caches where they fit (a q4_0 layer at E=2048 is 6 MB); in a model they come from memory
//                      at every step: --layers 8 or more shows that. Prefill: the first layer's; memory: the
//                      engine's peak over the layers, so a step's scratch is shared among them)
//   npm run bench:quantized -- --chromium [--types …] [--embed … --ctx … --runs …] [--no-ort] [--port 5183] [--projection gemv]
//     (the decode step on WebGPU in headless Chromium, tuning off, beside ONNX Runtime Web's MatMulNBits on
//     its WebGPU EP on the same adapter, which does not run in Node: demo/bench/quantized-page.ts; --projection
//     forces the packed layers' projection kernel)
//   npm run bench:quantized -- --llama [options of scripts/bench-llama.ts: --help]
//     (llama.cpp beside the engine on a GGUF the benchmark writes: native llama.cpp through node-llama-cpp's
//     prebuilt binary and wllama in headless Chromium, installed on first use into .cache/peers/)

import { writeFileSync } from 'node:fs';
import { createAttentionEngine, type ProjectionVariant } from '../src/index.ts';
import { mulberry32, uniform } from '../test/helpers/random.ts';
import { BENCH_TYPES, type BenchEntry, benchStateDict, ortProjectionWeights } from '../demo/bench/quantized-weights.ts';
import type { QuantizedRequest } from '../demo/bench/quantized-page.ts';
import { ortProjectionsModel } from '../demo/bench/systems/ort-matmulnbits.ts';
import { parseCli } from './cli.ts';
import { median } from '../src/util/stats.ts';

// --llama: scripts/bench-llama.ts, with its own options.
if (process.argv.includes('--llama')) {
  await import('./bench-llama.ts');
  process.exit(process.exitCode ?? 0);
}

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
  rounds: { type: 'string', default: '1' },
  layers: { type: 'string', default: '1' },
  'float-projection': { type: 'string' },
  chromium: { type: 'boolean', default: false },
  projection: { type: 'string' },
  port: { type: 'string', default: '5183' },
});
const E = Number(values.embed);
const H = Number(values.heads);
const G = Number(values['kv-heads']);
const ctx = Number(values.ctx);
const prefill = Number(values.prefill);
const runs = Number(values.runs);
const rounds = Number(values.rounds);
if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`--rounds: expected a whole number ≥ 1, got ${values.rounds}`);
const layers = Number(values.layers);
if (!Number.isInteger(layers) || layers < 1) throw new Error(`--layers: expected a whole number ≥ 1, got ${values.layers}`);
const Dh = E / H;
const config = { embedDim: E, numHeads: H, numKvHeads: G };
const TYPES = values.types.split(',');
for (const t of TYPES) if (!(BENCH_TYPES as readonly string[]).includes(t)) throw new Error(`--types: unknown ${t}; known: ${BENCH_TYPES.join(', ')}`);

const stateDict = (type: string) => benchStateDict(config, type);

interface Row {
  backend: string;
  type: string;
  decodeMs: number;
  decodeBestMs: number;
  projectionGpuMs: number | null;
  prefillMs: number | null;
  peakBytes: number;
  /** Each round's median decode step (--rounds). */
  roundMs: number[];
  /** The engine's precision in use: an f16 layer runs in f32 where the adapter lacks shader-f16. */
  precision: string;
  precisionNote: string | null;
}

/** One type's layers: the first as the page's BenchEntry, the other --layers − 1 in `more`. */
type Entry = BenchEntry & { more: { mha: BenchEntry['mha']; cache: BenchEntry['cache'] }[] };

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
    const sd = stateDict(type);
    const r = mulberry32(ctx);
    const past = { key: uniform(G * ctx * Dh, 1, r), value: uniform(G * ctx * Dh, 1, r) };
    const stack = Array.from({ length: layers }, () => {
      const mha = engine.createMultiHeadAttention(config, sd); // each layer packs its own copy of the weights
      return { mha, cache: mha.createKvCache({ batchSize: 1, maxSeqLen: ctx + rounds * runs + 8, ...past }) };
    });
    entries.push({ type, engine, ...stack[0], more: stack.slice(1), steps: [], projection: [] });
  }
  const x = uniform(E, 1, mulberry32(3));
  const forward = (l: { mha: Entry['mha']; cache: Entry['cache'] }) => l.mha.forward(x, { batchSize: 1, seqLen: 1, isCausal: true, kvCache: l.cache });
  /** One token through the type's stack: the first layer's result (its timings) once the others have run. */
  const step = async (e: Entry) => {
    const first = await forward(e);
    for (const l of e.more) await forward(l);
    return first;
  };
  // Warm-ups: tier 0, then the final kernels (compiled and swept in the background).
  for (const e of entries) {
    await step(e);
    await e.engine.settled();
    await step(e);
    await step(e);
  }
  const roundMs = entries.map(() => [] as number[]);
  for (let round = 0; round < rounds; round++) {
    const from = entries.map((e) => e.steps.length);
    for (let i = 0; i < runs; i++) {
      for (const e of entries) {
        const t0 = performance.now();
        const { timings } = (await step(e)) as { timings?: Record<string, number> };
        e.steps.push((performance.now() - t0) / layers);
        if (timings) e.projection.push((timings.qkv_projection ?? 0) + (timings.output_projection ?? 0));
      }
    }
    for (const [k, e] of entries.entries()) roundMs[k].push(median(e.steps.slice(from[k])));
  }
  const rows: Row[] = [];
  for (const [k, e] of entries.entries()) {
    const peakBytes = e.engine.stats().peakBytes / layers;
    e.cache.dispose();
    for (const l of e.more) {
      l.cache.dispose();
      l.mha.dispose();
    }
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
      roundMs: roundMs[k],
      precision: e.engine.precision,
      precisionNote: e.engine.precisionNote,
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
  const model = await ortProjectionsModel(E, ortProjectionWeights(E, H, G));
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

if (values.chromium) {
  await runChromium();
  process.exit(0);
}

/** The --chromium run: demo/bench/quantized.html in headless Chromium, served by Vite. */
async function runChromium(): Promise<void> {
  const { chromium } = await import('@playwright/test');
  const { createServer } = await import('vite');
  const port = Number(values.port);
  const server = await createServer({ logLevel: 'error', server: { host: '127.0.0.1', port, strictPort: true, hmr: false } });
  await server.listen();
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', args: ['--enable-unsafe-webgpu'], headless: true });
  try {
    const page = await browser.newPage();
    page.on('pageerror', (e) => console.error(`  page error: ${e.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error') console.error(`  console.error: ${m.text()}`);
      else if (m.text().startsWith('quantized: ')) console.log(`  ${m.text().slice(11)}`);
    });
    await page.goto(`http://127.0.0.1:${port}/demo/bench/quantized.html`);
    await page.waitForFunction(() => window.quantizedReady === true, undefined, { timeout: 120_000 });
    const request: QuantizedRequest = {
      embed: E,
      heads: H,
      kvHeads: G,
      ctx,
      runs,
      types: TYPES.filter((t) => t !== 'q6_k' || E % 256 === 0),
      ort: !values['no-ort'],
      projection: values.projection,
    };
    const report = await page.evaluate((r) => window.runQuantized(r), request);
    console.log(`Chromium WebGPU on ${report.adapter}: E=${E} H=${H} G=${G}, decode step over a cache of ${ctx}; medians of ${runs} steps; tuning off`);
    console.log('type     decode ms (best)   projections GPU ms   peak MB   against f32: decode speed-up / projections speed-up / GPU memory');
    const f32 = report.rows.find((x) => x.type === 'f32');
    const ratio = (a: number | null | undefined, b: number | null | undefined) => (a && b ? `${(a / b).toFixed(2)}x` : '-');
    for (const r of report.rows) {
      console.log(
        `${r.type.padEnd(8)} ${r.decodeMs.toFixed(2).padStart(8)} (${r.decodeBestMs.toFixed(2)})   ${(r.projectionGpuMs?.toFixed(2) ?? '-').padStart(10)}        ${(r.peakBytes / 2 ** 20).toFixed(1).padStart(7)}   ` +
          `${ratio(f32?.decodeMs, r.decodeMs)} / ${ratio(f32?.projectionGpuMs, r.projectionGpuMs)} / ${ratio(r.peakBytes, f32?.peakBytes)}`,
      );
    }
    for (const r of report.rows) if (r.type === 'f16' && r.precision !== 'f16') console.log(`f16: ran in ${r.precision} (${r.precisionNote ?? 'no note'})`);
    if (report.ort && 'error' in report.ort) console.log(`ONNX Runtime Web WebGPU EP, MatMulNBits 4-bit: could not run (${report.ort.error})`);
    else if (report.ort)
      console.log(
        `ONNX Runtime Web WebGPU EP, MatMulNBits 4-bit: the four projections of a step alone ${report.ort.projectionsMs.toFixed(2)} ms (best ${report.ort.bestMs.toFixed(2)})`,
      );
    if (values.json) writeFileSync(values.json, JSON.stringify({ runtime: 'chromium', E, H, G, ctx, runs, ...report }, null, 2));
  } finally {
    await browser.close();
    await server.close();
  }
}

const rows: Row[] = [];
for (const backend of values.backends.split(',') as ('webgpu' | 'wasm')[]) {
  const done = await runBackend(backend);
  rows.push(...done);
  // As each backend finishes (a long WebGPU run on a software adapter should not hide the wasm figures).
  for (const r of done) console.log(`  ${r.backend} ${r.type}: decode ${r.decodeMs.toFixed(2)} ms, prefill ${r.prefillMs?.toFixed(1) ?? '-'} ms`);
}
const ortMs = values['no-ort'] ? null : await ortProjections();

console.log(
  `E=${E} H=${H} G=${G}: decode step over a cache of ${ctx}, prefill of ${prefill}; medians of ${runs} steps` +
    `${layers > 1 ? `, each through a stack of ${layers} layers (a layer's share)` : ''}; wasm: ${values.threads} thread(s)`,
);
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
if (rounds > 1) {
  console.log(`decode step, each round's median of ${runs} (ms; against float32 of the same round):`);
  for (const r of rows) {
    const f32 = rows.find((x) => x.backend === r.backend && x.type === 'f32');
    const each = r.roundMs.map((ms, i) => (f32 && r !== f32 ? `${ms.toFixed(2)} (${(f32.roundMs[i] / ms).toFixed(2)}x)` : ms.toFixed(2)));
    const ratios = f32 && r !== f32 ? r.roundMs.map((ms, i) => f32.roundMs[i] / ms).sort((a, b) => a - b) : [];
    const spread = ratios.length ? `; ratio ${ratios[0].toFixed(2)}–${ratios[ratios.length - 1].toFixed(2)}x, median ${median(ratios).toFixed(2)}x` : '';
    console.log(`  ${r.backend} ${r.type.padEnd(7)} ${each.join('  ')}${spread}`);
  }
}
for (const r of rows) if (r.type === 'f16' && r.precision !== 'f16') console.log(`${r.backend} f16: ran in ${r.precision} (${r.precisionNote ?? 'no note'})`);
if (ortMs !== null) console.log(`ONNX Runtime Web WASM (1 thread), MatMulNBits 4-bit: the four projections of a step alone ${ortMs.toFixed(2)} ms`);
if (values.json)
  writeFileSync(values.json, JSON.stringify({ E, H, G, ctx, prefill, runs, layers, wasmThreads: Number(values.threads), rows, ortProjectionsMs: ortMs }, null, 2));
