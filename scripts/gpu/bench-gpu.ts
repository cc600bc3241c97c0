// The engine's throughput on a real GPU, in Node with Dawn (the `webgpu` package): made for one run
// on an NVIDIA H200 through the device tool (scripts/gpu/README.md), and testable anywhere with
// small shapes (lavapipe here).
//
//   node scripts/run-ts.mjs scripts/gpu/bench-gpu.ts [--shapes 4x4096x1024x16,...] [--out file.json]
//        [--precisions f32,f16] [--causal both|on|off] [--modes gpu,e2e] [--warmup 2] [--runs 10]
//        [--min-runs 3] [--budget-s 30] [--time-limit-s 420] [--gate-shape 1x64x1024x16] [--no-gate]
//        [--force] [--kernel-timings] [--expect-adapter nvidia] [--dawn-flag F ...] [--seed 1]
//   node scripts/run-ts.mjs scripts/gpu/bench-gpu.ts --probe          (adapter, features, limits; exit)
//   node scripts/run-ts.mjs scripts/gpu/bench-gpu.ts --summarize file.json   (table of a written file)
//
// A shape is BxSxExH (batch, sequence, embedding width, heads). For each shape, precision (f32, f16:
// createAttentionEngine({ backend: 'webgpu', precision })) and causal setting it measures
//   gpu: forward(GPUBuffer query, { returnBuffer: true }), the query uploaded once (float16 bits when
//        the engine runs in f16); the clock stops at `await device.queue.onSubmittedWorkDone()`, so it
//        is the GPU's time for the three kernels plus one submit, without upload or readback (where
//        one call of the whole batch exceeds the device's binding limits, which the engine does not
//        split for GPU buffers, the batch is uploaded as pieces and a run is one call per piece);
//   e2e: forward(Float32Array) → Float32Array: conversion, upload, the kernels and the readback.
// Each is warmed up (--warmup), then timed up to --runs times within --budget-s seconds (at least
// --min-runs if the whole-run --time-limit-s allows); the median gives TFLOP/s from
// demo/bench/flops.ts (8·B·S·E² + 4·B·S²·E, causal halves the S² term).
//
// Before any of it, a correctness gate per precision on --gate-shape (default B=1 S=64 E=1024 H=16),
// causal and not, through both paths (Float32Array, and GPUBuffer in and out), against the engine's
// CPU backend (float64) with the tests' tolerances (src/util/tolerance.ts). A precision whose gate
// fails is not benchmarked (unless --force). At each benchmark shape the causal output's first 64
// rows of the first and last sequence are checked against the CPU backend on that prefix (causal
// rows see only earlier positions, so the prefix alone gives them exactly), and the GPU-resident
// output is compared with the Float32Array path's.
//
// --kernel-timings: after each configuration, 1 + 3 forwards on a second engine made with
// profile: true (timestamp queries, one compute pass per kernel), the median GPU time of each kernel.
//
// JSON (--out, rewritten after every configuration so a run cut short still leaves its results):
// adapter (info, features, limits), versions, date, options, gates, every run with its times.
// Exit status: 0 all passed, 1 a gate or a check failed or a run errored, 2 bad arguments,
// 3 no adapter or not the one --expect-adapter names.

import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { createAttentionEngine, DeviceLimitError, referenceMultiHeadAttention } from '../../src/index.ts';
import type { AttentionEngine, MultiHeadAttention, StateDict, TuningReport } from '../../src/index.ts';
import { attentionFlops } from '../../demo/bench/flops.ts';
import { randomLayerInputs } from '../../test/helpers/random.ts';
import { fromF16, toF16 } from '../../src/util/f16.ts';
import { compareArrays, f16Tolerance, maxAbsFinite, outputTolerance, type Tolerance } from '../../src/util/tolerance.ts';
import { readBuffer } from '../../test/helpers/readback.ts';
import { parseArgsOrExit } from '../cli.ts';
import { median } from '../../src/util/stats.ts';

const T_START = performance.now();
const elapsed = () => (performance.now() - T_START) / 1000;
const log = (message: string) => console.log(`[${elapsed().toFixed(1).padStart(6)} s] ${message}`);

// ---------------------------------------------------------------------------------------------
// Arguments

const { values } = parseArgsOrExit('bench-gpu.ts', {
  options: {
    shapes: { type: 'string', default: '4x4096x1024x16' },
    precisions: { type: 'string', default: 'f32,f16' },
    causal: { type: 'string', default: 'both' },
    modes: { type: 'string', default: 'gpu,e2e' },
    warmup: { type: 'string', default: '2' },
    runs: { type: 'string', default: '10' },
    'min-runs': { type: 'string', default: '3' },
    'budget-s': { type: 'string', default: '30' },
    'time-limit-s': { type: 'string', default: '420' },
    'gate-shape': { type: 'string', default: '1x64x1024x16' },
    'no-gate': { type: 'boolean', default: false },
    force: { type: 'boolean', default: false },
    'kernel-timings': { type: 'boolean', default: false },
    'expect-adapter': { type: 'string' },
    'dawn-flag': { type: 'string', multiple: true, default: [] },
    seed: { type: 'string', default: '1' },
    out: { type: 'string' },
    probe: { type: 'boolean', default: false },
    summarize: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});

function usage(code: number): never {
  console.log(`usage: node scripts/run-ts.mjs scripts/gpu/bench-gpu.ts [options]
  --shapes BxSxExH[,…]     benchmark shapes (default 4x4096x1024x16)
  --precisions f32,f16     engine precisions to run (default both)
  --causal both|on|off     causal settings (default both)
  --modes gpu,e2e          gpu: GPU-resident query, returnBuffer, onSubmittedWorkDone; e2e: Float32Array in and out
  --warmup N               warm-up forwards per configuration (default 2)
  --runs N                 timed forwards per configuration at most (default 10); the median is reported
  --min-runs N             timed forwards at least, unless the time limit is near (default 3)
  --budget-s X             seconds per configuration and mode, warm-ups included (default 30)
  --time-limit-s X         whole run; later configurations are skipped past it (default 420)
  --gate-shape BxSxExH     correctness gate against the CPU backend (default 1x64x1024x16)
  --no-gate                skip the gate;  --force  benchmark a precision even if its gate failed
  --kernel-timings         also a few profiled forwards (createAttentionEngine({ profile: true })) per configuration
  --expect-adapter TEXT    exit 3 unless the adapter's vendor/architecture/description contains TEXT
  --dawn-flag F            passed to Dawn's create() (repeatable), e.g. enable-dawn-features=disable_robustness
  --seed N --out file.json --probe --summarize file.json`);
  process.exit(code);
}
if (values.help) usage(0);

function fail(message: string): never {
  console.error(`bench-gpu: ${message}`);
  process.exit(2);
}

interface Shape {
  B: number;
  S: number;
  E: number;
  H: number;
}
const describeShape = (s: Shape) => `B=${s.B} S=${s.S} E=${s.E} H=${s.H}`;
function parseShape(text: string): Shape {
  const parts = text.trim().toLowerCase().split('x').map(Number);
  if (parts.length !== 4 || parts.some((n) => !Number.isInteger(n) || n < 1)) fail(`a shape is BxSxExH of positive integers, e.g. 1x128x256x4; got "${text}"`);
  const [B, S, E, H] = parts;
  if (E % H) fail(`shape ${text}: E (${E}) must be divisible by H (${H})`);
  return { B, S, E, H };
}
const int = (name: string, text: string, min: number) => {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min) fail(`--${name} must be an integer ≥ ${min}; got ${text}`);
  return n;
};
const seconds = (name: string, text: string) => {
  const n = Number(text);
  if (!Number.isFinite(n) || n <= 0) fail(`--${name} must be a positive number of seconds; got ${text}`);
  return n;
};

// ---------------------------------------------------------------------------------------------
// --summarize: the table of a JSON file this script wrote (run-on-device.sh prints it at the end).

interface RunRecord {
  shape: Shape;
  isCausal: boolean;
  precisionAsked: 'f32' | 'f16';
  precision: string;
  mode: 'gpu' | 'e2e';
  status: 'ok' | 'skipped' | 'failed';
  reason?: string;
  gflop: number;
  warmup: number;
  runs: number;
  timesMs: number[];
  medianMs?: number;
  minMs?: number;
  meanMs?: number;
  tflops?: number;
  tflopsBest?: number;
  submitMedianMs?: number;
  /** GPU-resident runs: forwards per run (1, or more when the whole batch exceeds the device's binding limits). */
  pieces?: number;
}

/** TFLOP/s with two decimals, or three significant digits below 1 (small shapes, software adapters). */
const tf = (x: number) => (x >= 1 ? x.toFixed(2) : x.toPrecision(3));

function summaryTable(report: {
  adapter?: { info?: Record<string, unknown> };
  runs: RunRecord[];
  gates?: GateRecord[];
  checks?: CheckRecord[];
  kernelTimings?: KernelTimingRecord[];
}): string {
  const lines: string[] = [];
  const info = report.adapter?.info ?? {};
  lines.push(`adapter: ${[info.vendor, info.architecture, info.description || info.device].filter(Boolean).join(' ')}`);
  for (const g of report.gates ?? []) if (!g.pass) lines.push(`GATE FAILED: ${g.precisionAsked} ${g.path} causal=${g.isCausal}: ${g.detail}`);
  for (const c of report.checks ?? []) if (!c.pass) lines.push(`CHECK FAILED: ${c.what}: ${c.detail}`);
  const header = ['shape', 'causal', 'precision', 'mode', 'median ms', 'TFLOP/s', 'best TFLOP/s', 'runs', 'note'];
  const rows = report.runs.map((r) => [
    describeShape(r.shape),
    r.isCausal ? 'yes' : 'no',
    r.precision === r.precisionAsked ? r.precision : `${r.precisionAsked}→${r.precision}`,
    r.mode === 'gpu' ? 'GPU-resident' : 'end-to-end',
    r.medianMs !== undefined ? r.medianMs.toFixed(2) : '',
    r.tflops !== undefined ? tf(r.tflops) : '',
    r.tflopsBest !== undefined ? tf(r.tflopsBest) : '',
    String(r.runs),
    r.status === 'ok'
      ? (r.pieces ?? 1) > 1
        ? `${r.pieces} calls of B=${r.shape.B / r.pieces!} (device limits)`
        : ''
      : `${r.status}: ${(r.reason ?? '').split('\n')[0].slice(0, 80)}`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const fmt = (r: string[]) =>
    r
      .map((c, i) => (i >= 4 && i <= 7 ? c.padStart(widths[i]) : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  lines.push(fmt(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(fmt));
  for (const k of report.kernelTimings ?? []) {
    if (k.status !== 'ok') continue;
    const parts = Object.entries(k.medianMs).map(([name, ms]) => `${name} ${ms.toFixed(2)} ms`);
    lines.push(`kernels ${describeShape(k.shape)}${k.isCausal ? ' causal' : ''} ${k.precision}: ${parts.join(', ')}`);
  }
  return lines.join('\n');
}

if (values.summarize) {
  if (!existsSync(values.summarize)) fail(`--summarize: no file ${values.summarize}`);
  console.log(summaryTable(JSON.parse(readFileSync(values.summarize, 'utf8'))));
  process.exit(0);
}

const shapes = values.shapes.split(',').filter(Boolean).map(parseShape);
const precisions = values.precisions
  .split(',')
  .filter(Boolean)
  .map((p) => {
    if (p !== 'f32' && p !== 'f16') fail(`--precisions takes f32 and/or f16; got "${p}"`);
    return p;
  }) as ('f32' | 'f16')[];
const causalSettings =
  ({ both: [false, true], on: [true], off: [false], true: [true], false: [false] } as Record<string, boolean[]>)[values.causal] ??
  fail(`--causal must be both, on or off; got "${values.causal}"`);
const modes = values.modes
  .split(',')
  .filter(Boolean)
  .map((m) => {
    if (m !== 'gpu' && m !== 'e2e') fail(`--modes takes gpu and/or e2e; got "${m}"`);
    return m;
  }) as ('gpu' | 'e2e')[];
const warmup = int('warmup', values.warmup, 0);
const maxRuns = int('runs', values.runs, 1);
const minRuns = Math.min(maxRuns, int('min-runs', values['min-runs'], 1));
const budgetS = seconds('budget-s', values['budget-s']);
const timeLimitS = seconds('time-limit-s', values['time-limit-s']);
const gateShape = parseShape(values['gate-shape']);
const seed = int('seed', values.seed, 0);
const dawnFlags = values['dawn-flag'] ?? [];
const out = values.out ?? `bench-results/bench-gpu-${new Date().toISOString().replace(/[:.]/g, '-')}.json`;

// ---------------------------------------------------------------------------------------------
// Dawn as navigator.gpu (and its GPUBufferUsage & co. as globals), so the engine and this script
// share one instance (and the --dawn-flag flags).

let webgpuModule: { create: (flags: string[]) => GPU; globals: Record<string, unknown> };
try {
  webgpuModule = (await import('webgpu')) as unknown as typeof webgpuModule;
} catch (e) {
  console.error(`bench-gpu: the "webgpu" package (Dawn) could not be loaded: ${(e as Error).message}`);
  process.exit(3);
}
for (const [k, v] of Object.entries(webgpuModule.globals)) {
  if (!(k in globalThis)) Object.defineProperty(globalThis, k, { value: v, configurable: true, writable: true });
}
const gpu = webgpuModule.create(dawnFlags);
Object.defineProperty(globalThis, 'navigator', {
  value: { gpu, userAgent: `Node ${process.version} (Dawn, the webgpu package)` },
  configurable: true,
  writable: true,
});

const INFO_KEYS = ['vendor', 'architecture', 'device', 'description', 'subgroupMinSize', 'subgroupMaxSize', 'isFallbackAdapter'];
function adapterReport(adapter: GPUAdapter) {
  const info: Record<string, unknown> = {};
  for (const k of INFO_KEYS) {
    const v = (adapter.info as unknown as Record<string, unknown>)?.[k];
    if (v !== undefined) info[k] = v;
  }
  const limits: Record<string, number> = {};
  for (const k in adapter.limits) {
    const v = (adapter.limits as unknown as Record<string, unknown>)[k];
    if (typeof v === 'number') limits[k] = v;
  }
  return { info, features: [...adapter.features].sort(), limits };
}

function versions() {
  const v: Record<string, string> = { node: process.version, v8: process.versions.v8 };
  try {
    const require = createRequire(import.meta.url);
    const pkg = join(dirname(require.resolve('webgpu')), 'package.json');
    v.webgpu = JSON.parse(readFileSync(pkg, 'utf8')).version;
  } catch {
    v.webgpu = 'unknown';
  }
  const git = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' });
  if (git.status === 0) {
    v.git = git.stdout.trim();
    const dirty = spawnSync('git', ['status', '--porcelain', '--', 'src', 'shaders', 'scripts/gpu'], { encoding: 'utf8' });
    if (dirty.status === 0 && dirty.stdout.trim()) v.git += ' (src, shaders or scripts/gpu modified)';
  }
  // The bundle made by scripts/gpu/prepare.sh records what it was built from.
  const buildInfo = process.env.BENCH_BUILD_INFO;
  if (buildInfo && existsSync(buildInfo)) {
    try {
      const b = JSON.parse(readFileSync(buildInfo, 'utf8'));
      v.bundleGit = String(b.git ?? '');
      v.bundleBuilt = String(b.date ?? '');
    } catch {
      /* recorded as missing */
    }
  }
  const smi = spawnSync('nvidia-smi', ['--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm', '--format=csv,noheader'], { encoding: 'utf8' });
  if (smi.status === 0) v.nvidiaSmi = smi.stdout.trim();
  return v;
}

const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
if (!adapter) {
  console.error(
    'bench-gpu: no WebGPU adapter: Dawn found no usable Vulkan driver (is libvulkan.so.1 there, and an ICD for the GPU? run with VK_LOADER_DEBUG=error,warn,driver to see what the loader tried)',
  );
  process.exit(3);
}
const adapterInfo = adapterReport(adapter);
const adapterText = [adapterInfo.info.vendor, adapterInfo.info.architecture, adapterInfo.info.device, adapterInfo.info.description].filter(Boolean).join(' ');

if (values.probe) {
  console.log(JSON.stringify({ adapter: adapterInfo, versions: versions(), dawnFlags }, null, 2));
  const expect = values['expect-adapter'];
  if (expect && !adapterText.toLowerCase().includes(expect.toLowerCase())) {
    console.error(`bench-gpu: the adapter is "${adapterText}", not one matching "${expect}"`);
    process.exit(3);
  }
  process.exit(0);
}

log(`adapter: ${adapterText}; features: ${adapterInfo.features.join(', ')}`);
if (values['expect-adapter'] && !adapterText.toLowerCase().includes(values['expect-adapter'].toLowerCase())) {
  console.error(
    `bench-gpu: the adapter is "${adapterText}", not one matching --expect-adapter "${values['expect-adapter']}"; not benchmarking a software or wrong adapter`,
  );
  process.exit(3);
}

// ---------------------------------------------------------------------------------------------
// The record, written after every step.

interface GateRecord {
  shape: Shape;
  isCausal: boolean;
  precisionAsked: 'f32' | 'f16';
  precision: string;
  path: 'float32array' | 'gpu-buffer';
  pass: boolean;
  maxAbsErr: number;
  maxAbsRef: number;
  worstRatio: number;
  tolerance: Tolerance;
  detail: string;
}
interface CheckRecord {
  what: string;
  pass: boolean;
  maxAbsErr?: number;
  worstRatio?: number;
  detail: string;
}
interface KernelTimingRecord {
  shape: Shape;
  isCausal: boolean;
  precision: string;
  status: 'ok' | 'unsupported' | 'failed';
  runs: number;
  medianMs: Record<string, number>;
  reason?: string;
}

const report = {
  benchmark: 'webgpu-attention multi-head self-attention forward on a GPU (scripts/gpu/bench-gpu.ts)',
  runtime: `node ${process.version} + Dawn (the webgpu package)`,
  date: new Date().toISOString(),
  host: { hostname: os.hostname(), platform: `${os.platform()} ${os.release()} ${os.arch()}`, cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model ?? '' },
  adapter: adapterInfo,
  versions: versions(),
  dawnFlags,
  env: Object.fromEntries(['VK_DRIVER_FILES', 'VK_ICD_FILENAMES', 'LD_LIBRARY_PATH'].filter((k) => process.env[k]).map((k) => [k, process.env[k]])),
  timing: {
    gpu: 'forward(GPUBuffer query, { returnBuffer: true }) then await device.queue.onSubmittedWorkDone(); the query uploaded once, output buffer destroyed after each run; no upload, no readback',
    e2e: 'forward(Float32Array) resolving to a Float32Array: f16 conversion where used, upload, kernels, readback',
    statistic: 'median (and best) of the timed runs after the warm-ups; TFLOP/s = FLOPs / median time',
  },
  flopFormula: '8·B·S·E² + 4·B·S²·E (causal: half the S² term); demo/bench/flops.ts',
  options: {
    shapes,
    precisions,
    causal: causalSettings,
    modes,
    warmup,
    maxRuns,
    minRuns,
    budgetS,
    timeLimitS,
    gateShape: values['no-gate'] ? null : gateShape,
    seed,
    kernelTimings: values['kernel-timings'],
  },
  engines: [] as { precisionAsked: string; precision: string; precisionNote: string | null; deviceFeatures: string[]; tuning?: TuningReport | null }[],
  gates: [] as GateRecord[],
  checks: [] as CheckRecord[],
  runs: [] as RunRecord[],
  kernelTimings: [] as KernelTimingRecord[],
  errors: [] as string[],
  finished: false,
  wallSeconds: 0,
};
let exitCode = 0;

function save(): void {
  report.wallSeconds = Number(elapsed().toFixed(1));
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify(report, null, 2));
}
save();
log(`writing ${out}`);

// ---------------------------------------------------------------------------------------------
// Helpers

/** The tests' rule (src/util/tolerance.ts compareArrays), with what the report records: max |a − b| and the worst |a − b| / (atol + rtol·|b|). */
function compare(actual: Float32Array, expected: Float32Array, tol: Tolerance) {
  if (actual.length !== expected.length) {
    return { pass: false, maxAbsErr: Infinity, worstRatio: Infinity, detail: `${actual.length} values, want ${expected.length}` };
  }
  const c = compareArrays(actual, expected, tol, 0);
  const i = c.worstIndex;
  const detail =
    `max |err| ${c.maxAbs.toExponential(2)}, worst err/tolerance ${c.worstRatio.toFixed(3)}` +
    (c.count ? `, ${c.count} values outside it` : '') +
    (i >= 0 ? ` (at ${i}: got ${actual[i]}, want ${expected[i]})` : '');
  return { pass: c.ok, maxAbsErr: c.maxAbs, worstRatio: c.worstRatio, detail };
}

function toleranceFor(precision: string, seqLen: number, E: number, maxAbsRef: number, maxAbsLogit: number): Tolerance {
  return precision === 'f16' ? f16Tolerance([E, seqLen, E], maxAbsRef, maxAbsLogit) : outputTolerance([E, seqLen, E], maxAbsLogit, maxAbsRef);
}

/** A STORAGE buffer on the engine's device holding `data` at the engine's precision. */
function uploadQuery(device: GPUDevice, data: Float32Array, precision: string): GPUBuffer {
  const stored = precision === 'f16' ? toF16(data) : data;
  const buffer = device.createBuffer({
    label: 'bench-gpu.query',
    size: Math.max(16, Math.ceil(stored.byteLength / 4) * 4),
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST,
  });
  device.queue.writeBuffer(buffer, 0, stored.buffer, stored.byteOffset, stored.byteLength);
  return buffer;
}

/** Reads `count` elements of a buffer at the engine's precision back as float32. */
async function readOutput(device: GPUDevice, buffer: GPUBuffer, count: number, precision: string): Promise<Float32Array> {
  const raw = await readBuffer(device, buffer, count * (precision === 'f16' ? 2 : 4), 'bench-gpu.staging');
  return precision === 'f16' ? fromF16(new Uint16Array(raw)) : new Float32Array(raw);
}

// ---------------------------------------------------------------------------------------------
// The correctness gate: small shape, both causal settings, both paths, against the CPU backend.

const cpu = await createAttentionEngine({ backend: 'cpu' });

async function gate(engine: AttentionEngine, precisionAsked: 'f32' | 'f16'): Promise<boolean> {
  const { B, S, E, H } = gateShape;
  const config = { embedDim: E, numHeads: H };
  const { stateDict: sd, query } = randomLayerInputs(config, B * S, seed + 100);
  // The largest logit (for the tolerance), from the float64 reference without a mask (an upper bound).
  const ref = referenceMultiHeadAttention(config, sd, query, { batchSize: B, seqLen: S });
  const maxAbsLogit = maxAbsFinite(ref.scores ?? []);
  const cpuLayer = cpu.createMultiHeadAttention(config, sd);
  const gpuLayer = engine.createMultiHeadAttention(config, sd);
  const device = engine.device!;
  let ok = true;
  try {
    for (const isCausal of [false, true]) {
      const options = { batchSize: B, seqLen: S, isCausal };
      const expected = (await cpuLayer.forward(query, options)).output;
      const maxAbsRef = maxAbsFinite(expected);
      const tol = toleranceFor(engine.precision, S, E, maxAbsRef, maxAbsLogit);
      const viaArray = (await gpuLayer.forward(query, options)).output;
      const qBuf = uploadQuery(device, query, engine.precision);
      const { outputBuffer } = await gpuLayer.forward(qBuf, { ...options, returnBuffer: true });
      const viaBuffer = await readOutput(device, outputBuffer, B * S * E, engine.precision);
      outputBuffer.destroy();
      qBuf.destroy();
      for (const [path, actual] of [
        ['float32array', viaArray],
        ['gpu-buffer', viaBuffer],
      ] as const) {
        const c = compare(actual, expected, tol);
        report.gates.push({
          shape: gateShape,
          isCausal,
          precisionAsked,
          precision: engine.precision,
          path,
          pass: c.pass,
          maxAbsErr: c.maxAbsErr,
          maxAbsRef,
          worstRatio: c.worstRatio,
          tolerance: tol,
          detail: c.detail,
        });
        log(`gate ${engine.precision} ${describeShape(gateShape)}${isCausal ? ' causal' : ''} ${path}: ${c.pass ? 'pass' : 'FAIL'} (${c.detail})`);
        ok &&= c.pass;
      }
    }
  } finally {
    gpuLayer.dispose();
    cpuLayer.dispose();
  }
  return ok;
}

// ---------------------------------------------------------------------------------------------
// Timing

const deadline = timeLimitS;
interface Timed {
  times: number[];
  submits: number[];
  reason?: string;
}

/**
 * Warm-ups, then timed runs until maxRuns, or until the configuration's budget is spent (after at
 * least minRuns), or the whole run's deadline comes near.
 */
async function timeRuns(run: () => Promise<{ ms: number; submitMs?: number }>): Promise<Timed> {
  const start = elapsed();
  let slowest = 0;
  for (let i = 0; i < warmup; i++) {
    const t0 = performance.now();
    await run();
    slowest = Math.max(slowest, (performance.now() - t0) / 1000);
    if (elapsed() + slowest > deadline) return { times: [], submits: [], reason: `time limit (${deadline} s) reached during warm-up` };
  }
  const times: number[] = [];
  const submits: number[] = [];
  while (times.length < maxRuns) {
    const last = times.length ? times[times.length - 1] / 1000 : slowest;
    const spent = elapsed() - start;
    if (elapsed() + last * 1.5 > deadline)
      return { times, submits, reason: times.length < minRuns ? `time limit (${deadline} s) reached after ${times.length} runs` : undefined };
    if (times.length >= minRuns && spent + last > budgetS) break;
    const r = await run();
    times.push(r.ms);
    if (r.submitMs !== undefined) submits.push(r.submitMs);
  }
  return { times, submits };
}

type RunBase = Omit<RunRecord, 'status' | 'timesMs' | 'runs' | 'warmup' | 'gflop'>;

function record(base: RunBase, flops: number, t: Timed | null, error?: string): RunRecord {
  const r: RunRecord = { ...base, status: 'ok', gflop: flops / 1e9, warmup, runs: 0, timesMs: [] };
  if (error !== undefined) {
    r.status = 'failed';
    r.reason = error;
  } else if (!t || t.times.length === 0) {
    r.status = 'skipped';
    r.reason = t?.reason ?? 'time limit';
  } else {
    r.timesMs = t.times.map((x) => Number(x.toFixed(3)));
    r.runs = t.times.length;
    r.medianMs = median(t.times);
    r.minMs = Math.min(...t.times);
    r.meanMs = t.times.reduce((a, b) => a + b, 0) / t.times.length;
    r.tflops = flops / (r.medianMs / 1e3) / 1e12;
    r.tflopsBest = flops / (r.minMs / 1e3) / 1e12;
    if (t.submits.length) r.submitMedianMs = median(t.submits);
    if (t.reason) r.reason = t.reason;
  }
  report.runs.push(r);
  save();
  return r;
}

// ---------------------------------------------------------------------------------------------
// The benchmark

async function benchShape(engine: AttentionEngine, precisionAsked: 'f32' | 'f16', shape: Shape): Promise<void> {
  const { B, S, E, H } = shape;
  const config = { embedDim: E, numHeads: H };
  const { stateDict: sd, query } = randomLayerInputs(config, B * S, seed);
  const device = engine.device!;
  const precision = engine.precision;
  let mha: MultiHeadAttention;
  try {
    mha = engine.createMultiHeadAttention(config, sd);
  } catch (e) {
    const message = `${describeShape(shape)} ${precision}: createMultiHeadAttention failed: ${(e as Error).message}`;
    log(message);
    report.errors.push(message);
    exitCode = 1;
    return;
  }
  const layer = mha;
  // The query on the GPU, uploaded once: one buffer [B, S, E], or, where a call that size exceeds
  // the device's limits (GPU-resident calls are not split by the engine), B/p-sequence pieces.
  let pieces: GPUBuffer[] = [];
  const piecesFor = async (isCausal: boolean): Promise<GPUBuffer[]> => {
    for (let p = pieces.length || 1; p <= B; p++) {
      if (B % p) continue;
      if (pieces.length !== p) {
        for (const b of pieces) b.destroy();
        const n = (B / p) * S * E;
        pieces = Array.from({ length: p }, (_, i) => uploadQuery(device, query.subarray(i * n, (i + 1) * n), precision));
      }
      try {
        const { outputBuffer } = await layer.forward(pieces[0], { batchSize: B / p, seqLen: S, isCausal, returnBuffer: true });
        outputBuffer.destroy();
        if (p > 1)
          log(
            `${describeShape(shape)} ${precision}: GPU-resident calls run as ${p} forwards of ${B / p} sequence(s) each (one call of B=${B} exceeds the device's limits)`,
          );
        return pieces;
      } catch (e) {
        if (!(e instanceof DeviceLimitError)) throw e;
      }
    }
    throw new Error(`${describeShape(shape)}: even one sequence exceeds the device's limits for a GPU-resident call`);
  };
  try {
    for (const isCausal of causalSettings) {
      const flops = attentionFlops(B, S, E, isCausal);
      const options = { batchSize: B, seqLen: S, isCausal };
      const label = `${describeShape(shape)}${isCausal ? ' causal' : ''} ${precision}`;
      let gpuOutput: Float32Array | null = null;
      let e2eOutput: Float32Array | null = null;
      let slowestMedianMs = 0;
      for (const mode of modes) {
        const base: RunBase = { shape, isCausal, precisionAsked, precision, mode };
        if (elapsed() > deadline) {
          record(base, flops, null);
          log(`${label} ${mode}: skipped (time limit ${deadline} s)`);
          continue;
        }
        log(`${label} ${mode}: ${(flops / 1e9).toFixed(1)} GFLOP a forward; ${warmup} warm-up(s), up to ${maxRuns} runs within ${budgetS} s`);
        try {
          let t: Timed;
          if (mode === 'gpu') {
            const bufs = await piecesFor(isCausal);
            const pieceOptions = { ...options, batchSize: B / bufs.length, returnBuffer: true as const };
            base.pieces = bufs.length;
            t = await timeRuns(async () => {
              await device.queue.onSubmittedWorkDone();
              const t0 = performance.now();
              const outs: GPUBuffer[] = [];
              for (const b of bufs) outs.push((await layer.forward(b, pieceOptions)).outputBuffer);
              const t1 = performance.now();
              await device.queue.onSubmittedWorkDone();
              const ms = performance.now() - t0;
              for (const o of outs) o.destroy();
              return { ms, submitMs: t1 - t0 };
            });
            // One more for the comparison with the Float32Array path (outside the timing).
            gpuOutput = new Float32Array(B * S * E);
            const n = (B / bufs.length) * S * E;
            for (const [i, b] of bufs.entries()) {
              const { outputBuffer } = await layer.forward(b, pieceOptions);
              gpuOutput.set(await readOutput(device, outputBuffer, n, precision), i * n);
              outputBuffer.destroy();
            }
          } else {
            t = await timeRuns(async () => {
              const t0 = performance.now();
              e2eOutput = (await layer.forward(query, options)).output;
              return { ms: performance.now() - t0 };
            });
            if (!e2eOutput) e2eOutput = (await layer.forward(query, options)).output;
          }
          const r = record(base, flops, t);
          slowestMedianMs = Math.max(slowestMedianMs, r.medianMs ?? 0);
          log(
            r.status === 'ok'
              ? `${label} ${mode}: median ${r.medianMs!.toFixed(2)} ms (best ${r.minMs!.toFixed(2)}, ${r.runs} runs) = ${tf(r.tflops!)} TFLOP/s (best ${tf(r.tflopsBest!)})${r.submitMedianMs !== undefined ? `; forward() resolved after ${r.submitMedianMs.toFixed(2)} ms` : ''}`
              : `${label} ${mode}: ${r.status} (${r.reason})`,
          );
        } catch (e) {
          const message = (e as Error).stack ?? String(e);
          record(base, flops, null, message);
          report.errors.push(`${label} ${mode}: ${message}`);
          log(`${label} ${mode}: FAILED: ${(e as Error).message}`);
          exitCode = 1;
        }
      }
      await checkOutputs(shape, precision, isCausal, sd, query, gpuOutput, e2eOutput);
      // Four profiled forwards on a second engine: only where they fit the configuration's budget and the time left.
      if (values['kernel-timings']) {
        const needS = (4 * slowestMedianMs) / 1000 + 2;
        if (needS < budgetS && elapsed() + needS < deadline) await kernelTimings(precisionAsked, shape, isCausal, sd, query);
        else log(`kernel timings ${label}: skipped (about ${needS.toFixed(0)} s needed; budget ${budgetS} s, ${(deadline - elapsed()).toFixed(0)} s left)`);
      }
    }
  } finally {
    layer.dispose();
    for (const b of pieces) b.destroy();
  }
}

/** Checks at the benchmark shape: finite outputs, both paths agree, and (causal) prefixes against the CPU backend. */
async function checkOutputs(
  shape: Shape,
  precision: string,
  isCausal: boolean,
  sd: StateDict,
  query: Float32Array,
  gpuOutput: Float32Array | null,
  e2eOutput: Float32Array | null,
): Promise<void> {
  const { B, S, E, H } = shape;
  const label = `${describeShape(shape)}${isCausal ? ' causal' : ''} ${precision}`;
  const add = (what: string, pass: boolean, detail: string, extra: Partial<CheckRecord> = {}) => {
    report.checks.push({ what: `${label}: ${what}`, pass, detail, ...extra });
    log(`check ${label}: ${what}: ${pass ? 'pass' : 'FAIL'} (${detail})`);
    if (!pass) exitCode = 1;
    save();
  };
  for (const [name, o] of [
    ['GPU-resident output', gpuOutput],
    ['end-to-end output', e2eOutput],
  ] as const) {
    if (!o) continue;
    let bad = 0;
    for (let i = 0; i < o.length; i++) if (!Number.isFinite(o[i])) bad++;
    add(`${name} finite`, bad === 0, bad ? `${bad} non-finite values` : `${o.length} values`);
  }
  if (gpuOutput && e2eOutput) {
    // The same kernels on the same input: equal up to the engine's storage rounding.
    const c = compare(gpuOutput, e2eOutput, precision === 'f16' ? { atol: 2 ** -10, rtol: 2 ** -10 } : { atol: 1e-6, rtol: 1e-6 });
    add('GPU-resident output equals the Float32Array path', c.pass, c.detail, { maxAbsErr: c.maxAbsErr, worstRatio: c.worstRatio });
  }
  const output = e2eOutput ?? gpuOutput;
  if (!isCausal || !output) return;
  const P = Math.min(64, S);
  const cpuLayer = cpu.createMultiHeadAttention({ embedDim: E, numHeads: H }, sd);
  try {
    for (const b of [...new Set([0, B - 1])]) {
      const prefix = query.slice(b * S * E, (b * S + P) * E);
      const ref = referenceMultiHeadAttention({ embedDim: E, numHeads: H }, sd, prefix, { batchSize: 1, seqLen: P });
      const expected = (await cpuLayer.forward(prefix, { batchSize: 1, seqLen: P, isCausal: true })).output;
      const tol = toleranceFor(precision, P, E, maxAbsFinite(expected), maxAbsFinite(ref.scores ?? []));
      const c = compare(output.subarray(b * S * E, (b * S + P) * E), expected, tol);
      add(`rows 0…${P - 1} of sequence ${b} against the CPU backend`, c.pass, c.detail, { maxAbsErr: c.maxAbsErr, worstRatio: c.worstRatio });
    }
  } finally {
    cpuLayer.dispose();
  }
}

/** A few forwards on an engine with profile: true; the median of each kernel's GPU time. */
async function kernelTimings(precisionAsked: 'f32' | 'f16', shape: Shape, isCausal: boolean, sd: StateDict, query: Float32Array): Promise<void> {
  const { B, S, E, H } = shape;
  let engine: AttentionEngine | null = null;
  const rec: KernelTimingRecord = { shape, isCausal, precision: precisionAsked, status: 'ok', runs: 0, medianMs: {} };
  try {
    engine = await createAttentionEngine({ backend: 'webgpu', precision: precisionAsked, profile: true });
    rec.precision = engine.precision;
    if (!engine.profiling) {
      rec.status = 'unsupported';
      rec.reason = 'engine.profiling is false (no timestamp-query on this device)';
    } else {
      const mha = engine.createMultiHeadAttention({ embedDim: E, numHeads: H }, sd);
      const samples: Record<string, number[]> = {};
      const options = { batchSize: B, seqLen: S, isCausal };
      await mha.forward(query, options);
      for (let i = 0; i < 3; i++) {
        const t0 = performance.now();
        const { timings } = await mha.forward(query, options);
        for (const [k, v] of Object.entries(timings ?? {})) {
          samples[k] ??= [];
          samples[k].push(v);
        }
        rec.runs++;
        if (elapsed() + (performance.now() - t0) / 1000 > deadline - 5) break;
      }
      for (const [k, v] of Object.entries(samples)) rec.medianMs[k] = Number(median(v).toFixed(3));
      if (!Object.keys(samples).length) {
        rec.status = 'unsupported';
        rec.reason = 'forward returned no timings';
      }
      mha.dispose();
    }
  } catch (e) {
    rec.status = 'failed';
    rec.reason = (e as Error).message;
  } finally {
    engine?.dispose();
  }
  report.kernelTimings.push(rec);
  save();
  log(
    `kernel timings ${describeShape(shape)}${isCausal ? ' causal' : ''} ${rec.precision}: ${
      rec.status === 'ok'
        ? Object.entries(rec.medianMs)
            .map(([k, v]) => `${k} ${v.toFixed(2)} ms`)
            .join(', ')
        : `${rec.status} (${rec.reason})`
    }`,
  );
}

// ---------------------------------------------------------------------------------------------
// Main: per precision, one engine; the gate; every shape.

for (const precisionAsked of precisions) {
  let engine: AttentionEngine;
  try {
    engine = await createAttentionEngine({ backend: 'webgpu', precision: precisionAsked });
  } catch (e) {
    const message = `precision ${precisionAsked}: createAttentionEngine failed: ${(e as Error).message}`;
    log(message);
    report.errors.push(message);
    exitCode = 1;
    save();
    continue;
  }
  const device = engine.device!;
  void device.lost.then((info) => {
    if (info.reason !== 'destroyed') {
      const message = `device lost (${precisionAsked}): ${info.reason}: ${info.message}`;
      log(message);
      report.errors.push(message);
      exitCode = 1;
      save();
    }
  });
  const engineRecord: (typeof report.engines)[number] = {
    precisionAsked,
    precision: engine.precision,
    precisionNote: engine.precisionNote,
    deviceFeatures: [...device.features].sort(),
  };
  report.engines.push(engineRecord);
  log(`engine: precision asked ${precisionAsked}, in use ${engine.precision}${engine.precisionNote ? ` (${engine.precisionNote})` : ''}`);
  save();
  try {
    if (!values['no-gate']) {
      let passed = false;
      try {
        passed = await gate(engine, precisionAsked);
      } catch (e) {
        const message = `gate ${precisionAsked}: ${(e as Error).stack ?? e}`;
        log(message);
        report.errors.push(message);
      }
      save();
      if (!passed) {
        exitCode = 1;
        if (!values.force) {
          log(`gate failed for ${precisionAsked}: not benchmarking it (--force to benchmark anyway)`);
          continue;
        }
      }
    }
    for (const shape of shapes) {
      if (elapsed() > deadline) {
        log(`${describeShape(shape)} ${precisionAsked}: skipped (time limit ${deadline} s)`);
        for (const isCausal of causalSettings) {
          for (const mode of modes)
            record({ shape, isCausal, precisionAsked, precision: engine.precision, mode }, attentionFlops(shape.B, shape.S, shape.E, isCausal), null);
        }
        continue;
      }
      await benchShape(engine, precisionAsked, shape);
      engineRecord.tuning = engine.tuning; // the kernel variants the tuner chose (and each one's sweep time)
      save();
    }
  } finally {
    engine.dispose();
  }
}
cpu.dispose();

report.finished = true;
save();
const skipped = report.runs.filter((r) => r.status === 'skipped').length;
if (skipped) log(`${skipped} configuration(s) skipped by the time limit (--time-limit-s ${timeLimitS}); see the table`);
console.log(`\n${summaryTable(report)}`);
log(`wrote ${out}`);
process.exit(exitCode);
