// `npm run bench`: the demo's benchmark, headless. Serves the repo with Vite, opens the benchmark
// page in Chromium (WebGPU: SwiftShader on GPU-less machines, the real adapter elsewhere), runs each
// preset with every system one after another on that one adapter, shows progress (redrawn in place
// on a terminal; elsewhere a line per system measured), prints a table per shape and the project's
// performance goals (scripts/bench-report.ts) and writes everything to JSON.
//
//   npm run bench -- [--preset tiny,s128-e256 | --preset all] [--batch B --seq S --embed E --heads H [--causal]]
//                    [--systems engine,naive,tfjs,ort,wasm,wasm-threads,ort-wasm,tfjs-wasm,cpu] [--warmup 2] [--runs 5] [--seed 1] [--out bench-results/x.json]
//                    [--node] [--cold] [--options] [--roofline] [--firefox] [--deno]
//
// `--preset all` runs every preset but those marked `inAll: false` (s8192-e512: name it to run it, best
// with --systems engine; the peers and the float64 reference take many minutes there, or run out of memory).
// The decode presets (decode-1024, decode-4096: one token over a KV cache) run this engine's backends
// only (engine, wasm, wasm-threads, cpu); the peers take no KV cache and are listed as not run.
//
// --cold measures a new user's first call instead (scripts/bench-cold.ts): this engine and TensorFlow.js, each
// in a fresh process or browser profile with empty shader caches, then the steady state once settled.
//
// --roofline measures this adapter's ceilings in Node on Dawn (scripts/bench-roofline.ts): the best GFLOP/s of
// independent FMAs on registers and GB/s of a vec4 copy, beside every candidate kernel variant's figure.
//
// The WASM systems run on the CPU wherever the page (or Node) runs: this engine's 'wasm' backend on 1 thread
// ('wasm') and on its default threads ('wasm-threads': the cores in Node; 1 in a browser for now, its label
// says why), ONNX Runtime Web's WASM EP and TensorFlow.js's WASM backend on 1 thread ('ort-wasm', 'tfjs-wasm').
// The goals of issue 14 compare them at s128-e256 and s512-e512. (`npm run bench:wasm` is a separate,
// Node-only quick comparison: scripts/bench-wasm.ts.)
//
// --firefox and --deno (either, or both for the comparison) measure the figures of issue 26 ("Readback
// latency") and the Firefox targets instead (scripts/bench-runtimes.ts): this engine alone at B=1 S=16 E=64
// H=4 and B=1 S=128 E=256 H=4 with tuning off, then the default tuning's settle, in firefox-esr headless
// (the engine's sources) and in Deno (the built dist/), one after the other.
//
// --node runs the same runner and systems in Node instead, on Dawn (the `webgpu` package: lavapipe here,
// the real GPU elsewhere), with navigator.gpu set to Dawn's GPU. ONNX Runtime Web's WebGPU EP does not
// run on Dawn in Node (its writeBuffer from a SharedArrayBuffer view fails), so it reports as failed.

import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { chromium } from '@playwright/test';
import { baselineGoal, compareWithBaseline, comparisonText, defaultBaselinePath, saveBaseline } from './bench-baseline.ts';
import { createServer } from 'vite';
import type { ColdWeights } from '../demo/bench/cold.ts';
import type { HeadlessReport, HeadlessRequest } from '../demo/bench/headless.ts';
import { PRESETS } from '../demo/bench/presets.ts';
import type { BenchProgress, BenchShape } from '../demo/bench/types.ts';
import { describeShape, goalTable, goalsText, table } from './bench-report.ts';

const ALL_SYSTEMS = ['engine', 'naive', 'tfjs', 'ort', 'wasm', 'wasm-threads', 'ort-wasm', 'tfjs-wasm', 'cpu'];

function fail(message: string): never {
  console.error(`bench: ${message}`);
  process.exit(2);
}

// The arguments come first: --help and a bad argument end the run before anything is installed.
const parse = () =>
  parseArgs({
    options: {
      preset: { type: 'string' },
      batch: { type: 'string' },
      seq: { type: 'string' },
      embed: { type: 'string' },
      heads: { type: 'string' },
      causal: { type: 'boolean', default: false },
      systems: { type: 'string', default: ALL_SYSTEMS.join(',') },
      warmup: { type: 'string', default: '2' },
      runs: { type: 'string', default: '5' },
      seed: { type: 'string', default: '1' },
      out: { type: 'string' },
      port: { type: 'string', default: '5181' },
      node: { type: 'boolean', default: false },
      cold: { type: 'boolean', default: false },
      weights: { type: 'string', default: 'f32' },
      options: { type: 'boolean', default: false },
      roofline: { type: 'boolean', default: false },
      firefox: { type: 'boolean', default: false },
      deno: { type: 'boolean', default: false },
      baseline: { type: 'string' },
      'save-baseline': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
let values: ReturnType<typeof parse>['values'];
try {
  ({ values } = parse());
} catch (e) {
  fail(`${(e as Error).message} (npm run bench -- --help lists them)`);
}
if (values.help) {
  console.log(`usage: npm run bench -- [--preset ${PRESETS.map((p) => p.id).join(',')} | all] [--batch B --seq S --embed E --heads H [--causal]]
       [--systems ${ALL_SYSTEMS.join(',')}] [--warmup N] [--runs N] [--seed N] [--out file.json] [--node] [--cold] [--options] [--roofline]
       [--baseline file.json] [--save-baseline] [--firefox] [--deno]
  --baseline: the saved medians to compare with (default bench/baselines/<chromium|node>-<adapter>.json, when it
          exists): each system's median beside the baseline's, and the goal "nothing slower" (±10% is noise)
  --save-baseline: write this run's medians into that file (presets and systems not run keep theirs)
  --options: what the attention options cost, in Node on Dawn: softcap, sinks, ALiBi and rotary against
          plain attention at B=1 S=2048 E=512 H=8 (kernel time), and linear against softmax attention
          at B=1 S=8192 E=512 H=8 (kernels and whole layer); a few minutes on a software adapter
  --roofline: this adapter's ceilings, in Node on Dawn: the best GFLOP/s of independent vec4 FMAs and GB/s
          of a vec4 copy, beside each kernel variant's ms, GFLOP/s and % of the FMA ceiling (default presets
          s128-e256,s512-e512; --runs timed forwards each)
  --cold: a new user's first call (fresh shader caches) beside TensorFlow.js's, then the steady state
  --weights f32|q4_0|q8_0|q4_k|q6_k: with --cold, the engine's layer quantized to that type (TF.js runs float32)
          once settled (default presets s128-e256,s512-e512; Chromium, or Node with --node)
  --firefox, --deno: the figures of issue 26 in Firefox (firefox-esr headless, the engine's sources served by
          Vite) and in Deno (the built dist/), one after the other: B=1 S=16 E=64 H=4 and B=1 S=128 E=256 H=4
          with tuning off (3 warm-ups, median and best of max(15, --runs) forwards), then the default tuning's
          settle at S=128 E=256; a table, the Firefox targets (the 1.3× one needs both flags), JSON to
          bench-results/runtimes-<date>.json (scripts/bench-runtimes.ts); takes no preset or shape, ignores --systems
  A run first checks the system packages it needs (scripts/setup-system.sh: lavapipe, and Chromium
  unless --node) and installs those missing on Debian 12 as root; elsewhere it names them and stops.
  decode-*: one decoder step over a KV cache of that many positions; this engine's backends only (the
          peers take no KV cache)
  all: every preset but ${PRESETS.filter((p) => p.inAll === false)
    .map((p) => p.id)
    .join(', ')} (name those to run them, e.g. with --systems engine)`);
  process.exit(0);
}
const int = (name: string, text: string | undefined, min = 1): number => {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min) fail(`--${name} must be an integer ≥ ${min}; got ${text}`);
  return n;
};

const shapes: { id: string; shape: BenchShape }[] = [];
if (values.seq || values.embed || values.heads || values.batch) {
  const shape = {
    batchSize: int('batch', values.batch ?? '1'),
    seqLen: int('seq', values.seq),
    embedDim: int('embed', values.embed),
    numHeads: int('heads', values.heads),
    isCausal: values.causal,
  };
  if (shape.embedDim % shape.numHeads) fail(`--embed (${shape.embedDim}) must be divisible by --heads (${shape.numHeads})`);
  shapes.push({ id: 'custom', shape });
} else {
  const preset = values.preset ?? (values.cold || values.roofline ? 's128-e256,s512-e512' : 'tiny,s128-e256');
  const ids = preset === 'all' ? PRESETS.filter((p) => p.inAll !== false).map((p) => p.id) : preset.split(',');
  for (const id of ids) {
    const p = PRESETS.find((q) => q.id === id) ?? fail(`unknown preset "${id}"; known: ${PRESETS.map((q) => q.id).join(', ')}, all`);
    const { batchSize, seqLen, embedDim, numHeads, isCausal, cacheLen } = p;
    shapes.push({ id, shape: { batchSize, seqLen, embedDim, numHeads, isCausal, ...(cacheLen ? { cacheLen } : {}) } });
  }
}
const decodeIds = shapes.filter((s) => s.shape.cacheLen).map((s) => s.id);
if ((values.cold || values.roofline) && decodeIds.length) {
  fail(`--${values.cold ? 'cold' : 'roofline'} measures calls over whole sequences; ${decodeIds.join(', ')} (a decode step on a KV cache) runs in the plain benchmark`);
}
const systemIds = values.systems.split(',');
for (const s of systemIds) if (!ALL_SYSTEMS.includes(s)) fail(`unknown system "${s}"; known: ${ALL_SYSTEMS.join(', ')}`);
const warmup = int('warmup', values.warmup, 0);
const runs = int('runs', values.runs);
const seed = int('seed', values.seed, 0);
const out = values.out ?? `bench-results/bench-${new Date().toISOString().replace(/[:.]/g, '-')}.json`;
const port = int('port', values.port);
const runtimes = values.firefox || values.deno;
if (runtimes) {
  const other = (['node', 'cold', 'options', 'roofline', 'save-baseline'] as const).find((k) => values[k]);
  if (other) fail(`--firefox and --deno measure their own figures; --${other} does not go with them`);
  const shaped = (['preset', 'batch', 'seq', 'embed', 'heads', 'baseline'] as const).find((k) => values[k] !== undefined);
  if (shaped) fail(`--firefox and --deno measure fixed shapes (scripts/bench-runtimes.ts); --${shaped} does not go with them`);
}

// The arguments are good: now the system packages this run needs (lavapipe for Dawn; Chromium, with
// SwiftShader, unless --node), installed by scripts/setup-system.sh on Debian 12 as root, else named.
const setup = spawnSync(
  'bash',
  [
    fileURLToPath(new URL('./setup-system.sh', import.meta.url)),
    'lavapipe',
    ...(runtimes ? (values.firefox ? ['firefox'] : []) : values.node || values.options || values.roofline ? [] : ['chromium']),
  ],
  {
    stdio: ['ignore', 2, 2],
  },
);
if (setup.status !== 0) fail(`scripts/setup-system.sh failed (${setup.error?.message ?? `exit ${setup.status ?? setup.signal}`}); see above`);

if (runtimes) {
  // Firefox and Deno: the figures of issue 26 (bench-runtimes.ts).
  const { benchRuntimes } = await import('./bench-runtimes.ts');
  process.exit(await benchRuntimes({ firefox: values.firefox, deno: values.deno, runs, port, out: values.out ?? out.replace(/bench-(?=[^/]*$)/, 'runtimes-') }));
}

if (values.options) {
  // The attention options' cost, in Node (bench-options.ts).
  const { benchOptions } = await import('./bench-options.ts');
  await benchOptions(values.out ?? out.replace(/bench-(?=[^/]*$)/, 'options-'));
  process.exit(0);
}

if (values.roofline) {
  // The adapter's ceilings beside each kernel variant's figure, in Node (bench-roofline.ts).
  const { benchRoofline } = await import('./bench-roofline.ts');
  await benchRoofline({ shapes, runs, out: values.out ?? out.replace(/bench-(?=[^/]*$)/, 'roofline-') });
  process.exit(0);
}

const COLD_WEIGHTS: readonly ColdWeights[] = ['f32', 'q4_0', 'q8_0', 'q4_k', 'q6_k'];
if (values.weights !== 'f32' && !values.cold) fail('--weights goes with --cold (the quantized decode and prefill figures: npm run bench:quantized)');
if (values.cold) {
  // A new user's first call against TensorFlow.js's, each in a fresh process or browser profile (bench-cold.ts).
  const { benchCold } = await import('./bench-cold.ts');
  const weights = values.weights as ColdWeights;
  if (!COLD_WEIGHTS.includes(weights)) fail(`--weights: expected one of ${COLD_WEIGHTS.join(', ')}; got ${values.weights}`);
  await benchCold({ shapes, node: values.node, weights, port, out: values.out ?? out.replace(/bench-(?=[^/]*$)/, 'cold-') });
  process.exit(0);
}

function progressLine(p: BenchProgress, label: string): void {
  const width = 30;
  const filled = Math.round(p.fraction * width);
  const line = `  [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(p.fraction * 100).toFixed(0).padStart(3)}% ${label}: ${p.message}`;
  if (process.stdout.isTTY) process.stdout.write(`\r${line.slice(0, process.stdout.columns - 1).padEnd(process.stdout.columns - 1)}`);
  else if (p.phase === 'done') console.log(`  ${label}: ${p.message}`); // a pipe or a log: one plain line per system measured
}

const reports: (HeadlessReport & { id: string })[] = [];
let exitCode = 0;

function report(i: number, id: string, r: HeadlessReport): void {
  if (process.stdout.isTTY) process.stdout.write('\n');
  if (i === 0) {
    const a = r.adapter;
    console.log(`adapter: ${a ? `${a.vendor} ${a.architecture} ${a.description}`.trim() : `none (${r.fallbackReason})`}; backend ${r.backend}; ${r.userAgent}`);
  }
  console.log(table(r));
  reports.push({ id, ...r });
  if (r.result.systems.some((s) => s.id === 'engine' && s.status !== 'ok')) exitCode = 1;
}

if (values.node) {
  // Node: Dawn's GPU as navigator.gpu (and its GPUBufferUsage & co. as globals) before any system loads.
  const { create, globals } = (await import('webgpu')) as { create: (flags: string[]) => GPU; globals: Record<string, unknown> };
  for (const [k, v] of Object.entries(globals)) if (!(k in globalThis)) Object.defineProperty(globalThis, k, { value: v, configurable: true, writable: true });
  Object.defineProperty(globalThis, 'navigator', {
    value: { gpu: create([]), userAgent: `Node ${process.version} (Dawn, the webgpu package)`, hardwareConcurrency: 2 },
    configurable: true,
    writable: true,
  });
  const { benchSystems } = await import('../demo/bench/registry.ts');
  const { runBenchmark } = await import('../demo/bench/runner.ts');
  const { sharedEngine } = await import('../demo/bench/systems/engine.ts');
  const engine = await sharedEngine();
  const gpuAdapter = await navigator.gpu.requestAdapter();
  for (const [i, { id, shape }] of shapes.entries()) {
    const label = `${i + 1}/${shapes.length} ${id}`;
    console.log(`\n${id}: ${describeShape(shape)}, ${warmup} warm-up(s), median of ${runs}`);
    const result = await runBenchmark(shape, await benchSystems(), { warmup, runs, seed, systemIds, onProgress: (p) => progressLine(p, label) });
    report(i, id, {
      result,
      adapter: engine.adapterInfo,
      backend: engine.backend,
      fallbackReason: engine.fallbackReason,
      features: gpuAdapter ? [...gpuAdapter.features].sort() : [],
      userAgent: navigator.userAgent,
    });
  }
} else {
  const server = await createServer({ logLevel: 'error', server: { host: '127.0.0.1', port, strictPort: true, hmr: false } });
  await server.listen();
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    args: ['--enable-unsafe-webgpu'],
    headless: true,
  });
  try {
    const page = await browser.newPage();
    page.on('pageerror', (e) => console.error(`\n  page error: ${e.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error') console.error(`\n  console.error: ${m.text()}`);
    });
    let label = '';
    await page.exposeFunction('__benchProgress', (p: BenchProgress) => progressLine(p, label));
    await page.goto(`http://127.0.0.1:${port}/demo/bench/headless.html`);
    await page.waitForFunction(() => typeof window.runBench === 'function', undefined, { timeout: 120_000 });
    for (const [i, { id, shape }] of shapes.entries()) {
      label = `${i + 1}/${shapes.length} ${id}`;
      console.log(`\n${id}: ${describeShape(shape)}, ${warmup} warm-up(s), median of ${runs}`);
      const request: HeadlessRequest = { shape, warmup, runs, seed, systemIds };
      report(i, id, await page.evaluate((r) => window.runBench(r), request));
    }
  } finally {
    await browser.close();
    await server.close();
  }
}

const runtime = values.node ? 'node' : 'chromium';
const baselineFile = values.baseline ?? defaultBaselinePath(runtime, reports[0]?.adapter ?? null);
const comparison = compareWithBaseline(baselineFile, reports);
if (comparison) console.log(`\n${comparisonText(comparison)}`);
const goals = [...goalTable(reports), baselineGoal(comparison, baselineFile)];
console.log(`\n${goalsText(goals, values.node ? 'Node, Dawn' : 'Chromium')}`);
if (values['save-baseline']) {
  const commit = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).stdout.trim() || 'unknown commit';
  const how = `npm run bench${values.node ? ' -- --node' : ''}, ${runs} runs after ${warmup} warm-ups`;
  console.log(`\nsaved the baseline ${saveBaseline(baselineFile, runtime, reports, `commit ${commit}, ${how}`)}`);
}

mkdirSync(dirname(out), { recursive: true });
writeFileSync(
  out,
  JSON.stringify(
    {
      benchmark: 'webgpu-attention multi-head self-attention forward (npm run bench)',
      runtime: values.node ? 'node (Dawn)' : 'chromium',
      date: new Date().toISOString(),
      timing:
        'wall time of one forward with a Float32Array in and out (upload, dispatch, readback), median of the timed runs after warm-ups; every system on the same adapter in the same page',
      flopFormula: '8·B·S·E² + 4·B·S²·E (causal: half the S² term)',
      options: { warmup, runs, seed, systems: systemIds },
      goals,
      baseline: comparison ? { file: comparison.file, source: comparison.baseline.source, rows: comparison.rows } : null,
      shapes: reports,
    },
    null,
    2,
  ),
);
console.log(`\nwrote ${out}`);
process.exit(exitCode);
