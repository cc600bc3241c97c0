// The benchmark: one shape, several systems, one after another. For each system: prepare (load the
// library, build the layer), a first run that must match the float64 CPU reference (the correctness
// gate: a wrong system is reported failed with its error, never timed), warm-ups, timed runs, dispose.
// Used by the demo page; nothing here touches the DOM.

import { type AdapterInfo, createAttentionEngine, referenceOutput, type StateDict } from 'webgpu-attention';
import { attentionFlops } from './flops.ts';
import { mulberry32, randomLayerInputs, uniform } from '../../test/helpers/random.ts';
import { compareArrays, f32Tolerance, type Tolerance } from '../../src/util/tolerance.ts';
import type { BenchProgress, BenchResult, BenchShape, BenchSystem, SystemResult } from './types.ts';
import { median } from '../../src/util/stats.ts';

export interface RunOptions {
  /** Untimed runs after the correctness gate. Default 2. */
  warmup?: number;
  /** Timed runs; the median is reported. Default 5. */
  runs?: number;
  /** Seeds the weights and the query. Default 1. */
  seed?: number;
  onProgress?: (progress: BenchProgress) => void;
  /** Run only these systems (by id); default all given. */
  systemIds?: string[];
}

/** BenchResult plus what is needed to replay it. */
export interface RunResult extends BenchResult {
  seed: number;
  /** The gate's tolerance for this engine (WebGPU and 'wasm') and the CPU backend; peers get PEER_TOLERANCE_FACTOR times it. */
  tolerance: Tolerance;
  peerToleranceFactor: number;
}

/**
 * Seeded weights (PyTorch init) and query (uniform ±1) for a shape: test/helpers/random.ts's randomLayerInputs;
 * with a KV cache (cacheLen), its past keys and values too (uniform ±1, [B, H, cacheLen, Dh] each).
 */
export function benchInputs(shape: BenchShape, seed: number): { stateDict: StateDict; query: Float32Array; past?: { key: Float32Array; value: Float32Array } } {
  const inputs = randomLayerInputs({ embedDim: shape.embedDim, numHeads: shape.numHeads }, shape.batchSize * shape.seqLen, seed);
  const cacheLen = shape.cacheLen ?? 0;
  if (cacheLen === 0) return inputs;
  const random = mulberry32((seed ^ 0x85ebca6b) >>> 0);
  const n = shape.batchSize * cacheLen * shape.embedDim; // B·H·cacheLen·Dh
  return { ...inputs, past: { key: uniform(n, 1, random), value: uniform(n, 1, random) } };
}

/** A decode step's reference: this library's float64 CPU backend, on a KV cache holding `past` (the float64 passes of referenceOutput, which takes no KV cache). */
async function referenceDecode(shape: BenchShape, stateDict: StateDict, query: Float32Array, past: { key: Float32Array; value: Float32Array }): Promise<Float32Array> {
  const engine = await createAttentionEngine({ backend: 'cpu' });
  try {
    const layer = engine.createMultiHeadAttention({ embedDim: shape.embedDim, numHeads: shape.numHeads }, stateDict);
    const { batchSize, seqLen, isCausal, cacheLen = 0 } = shape;
    const kvCache = layer.createKvCache({ batchSize, maxSeqLen: cacheLen + seqLen, key: past.key, value: past.value });
    return (await layer.forward(query, { batchSize, seqLen, isCausal, kvCache })).output;
  } finally {
    engine.dispose();
  }
}

/** The f32 rule of the test suite: the layer chains reductions of length E (QKV), Skv (scores, P·V) and E (W_O). */
export function engineTolerance(shape: BenchShape): Tolerance {
  return f32Tolerance([shape.embedDim, (shape.cacheLen ?? 0) + shape.seqLen, shape.embedDim]);
}

/**
 * Peers get 4× the engine's bound. They compose the layer from generic operators whose float32
 * reduction order we do not control (blocked GEMMs that may sum sequentially, n·ε worst case rather
 * than √n·ε; separate max/exp/sum softmax kernels; WGSL's and WASM's exp, accurate only to a few ulp
 * times |x|). 4× keeps a correct float32 implementation inside while a real bug (a wrong head
 * split, a missing scale or mask) is still off by orders of magnitude more.
 */
export const PEER_TOLERANCE_FACTOR = 4;
const OWN_SYSTEMS = new Set(['engine', 'wasm', 'wasm-threads', 'cpu']);

export function gateTolerance(shape: BenchShape, systemId: string): Tolerance {
  const t = engineTolerance(shape);
  const f = OWN_SYSTEMS.has(systemId) ? 1 : PEER_TOLERANCE_FACTOR;
  return { atol: t.atol * f, rtol: t.rtol * f };
}

function errorText(e: unknown): string {
  if (e instanceof Error) return e.name && e.name !== 'Error' ? `${e.name}: ${e.message}` : e.message;
  return String(e);
}

/** Lets a browser paint (progress bar) between steps; a plain macrotask in Node or a hidden tab. */
function breathe(): Promise<void> {
  return new Promise((resolve) => {
    let done = false;
    const finish = () => {
      if (!done) {
        done = true;
        resolve();
      }
    };
    const raf = (globalThis as { requestAnimationFrame?: (cb: () => void) => number }).requestAnimationFrame;
    if (raf) raf(() => setTimeout(finish, 0));
    setTimeout(finish, raf ? 50 : 0);
  });
}

function where(index: number, shape: BenchShape): string {
  const E = shape.embedDim;
  return `(b ${Math.floor(index / (shape.seqLen * E))}, s ${Math.floor(index / E) % shape.seqLen}, e ${index % E})`;
}

export async function runBenchmark(shape: BenchShape, systems: BenchSystem[], options: RunOptions = {}): Promise<RunResult> {
  const warmup = options.warmup ?? 2;
  const runs = options.runs ?? 5;
  const seed = options.seed ?? 1;
  if (!Number.isInteger(warmup) || warmup < 0) throw new Error(`warmup must be an integer ≥ 0; got ${warmup}`);
  if (!Number.isInteger(runs) || runs < 1) throw new Error(`runs must be an integer ≥ 1; got ${runs}`);
  const asked = options.systemIds ? systems.filter((s) => options.systemIds!.includes(s.id)) : systems;
  // A decode step runs on the systems that take a KV cache (this engine's backends); the others are listed as not run.
  const decode = (shape.cacheLen ?? 0) > 0;
  const chosen = decode ? asked.filter((s) => s.kvCache) : asked;
  const notRun = asked
    .filter((s) => !chosen.includes(s))
    .map((s) => ({ id: s.id, label: s.label, reason: 'takes no KV cache: it runs a layer over whole sequences only' }));
  const flops = attentionFlops(shape.batchSize, shape.seqLen, shape.embedDim, shape.isCausal, shape.cacheLen);

  // Progress in units: 3 for the reference's passes, then per system 1 (prepare) + 1 (gate) + warm-ups + runs.
  const total = 3 + chosen.length * (2 + warmup + runs);
  let done = 0;
  const report = async (system: string, phase: BenchProgress['phase'], message: string, advance = 0) => {
    done += advance;
    options.onProgress?.({ system, phase, fraction: Math.min(1, done / total), message });
    await breathe();
  };

  const { stateDict, query, past } = benchInputs(shape, seed);
  const dims = `B=${shape.batchSize} S=${shape.seqLen} E=${shape.embedDim} H=${shape.numHeads}${shape.isCausal ? ' causal' : ''}${decode ? ` KV cache ${shape.cacheLen}` : ''}`;
  await report('reference', 'load', `CPU reference (float64) for ${dims}: pass 1 of 3, QKV projection…`);
  const passNames = ['', 'attention (softmax(QKᵀ/√Dh)·V)', 'output projection'];
  const reference = past
    ? await referenceDecode(shape, stateDict, query, past).then(async (out) => {
        await report('reference', 'load', 'CPU reference done', 3);
        return out;
      })
    : await referenceOutput(
        { embedDim: shape.embedDim, numHeads: shape.numHeads },
        stateDict,
        query,
        { batchSize: shape.batchSize, seqLen: shape.seqLen, isCausal: shape.isCausal },
        (pass) => report('reference', 'load', pass < 3 ? `CPU reference (float64): pass ${pass + 1} of 3, ${passNames[pass]}…` : 'CPU reference done', 1),
      );

  const results: SystemResult[] = [];
  for (const system of chosen) {
    const result: SystemResult = { id: system.id, label: system.label, status: 'failed' };
    results.push(result);
    const unitsLeft = 2 + warmup + runs;
    let used = 0;
    const step = async (phase: BenchProgress['phase'], message: string) => {
      used++;
      await report(system.id, phase, `${system.label}: ${message}`, 1);
    };
    await report(system.id, 'load', `${system.label}: loading and building the layer…`);
    let prepared: Awaited<ReturnType<BenchSystem['prepare']>> | null = null;
    try {
      prepared = await system.prepare({ shape, stateDict, past });
      result.label = system.label; // a system may name what it chose while preparing (ORT's graph, a version)
      await step('load', 'correctness check (first run against the CPU reference)…');
      const out = await prepared.run(query);
      const tol = gateTolerance(shape, system.id);
      const cmp = compareArrays(out, reference, tol, 1);
      result.maxAbsError = cmp.maxAbs;
      if (!cmp.ok) {
        const m = cmp.mismatches[0];
        throw new Error(
          `wrong output: ${cmp.count} of ${out.length} elements outside |err| ≤ ${tol.atol.toExponential(1)} + ${tol.rtol.toExponential(1)}·|ref|; ` +
            `first at ${where(m.index, shape)}: got ${m.actual}, expected ${m.expected.toPrecision(7)}; max |err| ${cmp.maxAbs.toExponential(2)}`,
        );
      }
      if (prepared.settled) {
        await report(system.id, 'warmup', `${system.label}: waiting for the background compiles and tuning (settled)…`);
        await prepared.settled();
      }
      await step('warmup', warmup > 0 ? `warm-up 1 of ${warmup}…` : `timed run 1 of ${runs}…`);
      for (let i = 0; i < warmup; i++) {
        await prepared.run(query);
        await step('warmup', i + 1 < warmup ? `warm-up ${i + 2} of ${warmup}…` : `timed run 1 of ${runs}…`);
      }
      const times: number[] = [];
      for (let i = 0; i < runs; i++) {
        const t0 = performance.now();
        await prepared.run(query);
        times.push(performance.now() - t0);
        await step('run', i + 1 < runs ? `timed run ${i + 2} of ${runs}…` : `done, median ${median(times).toFixed(2)} ms`);
      }
      result.status = 'ok';
      result.runsMs = times;
      result.medianMs = median(times);
      result.gflops = flops / (result.medianMs * 1e6);
      const memory = prepared.gpuMemory?.();
      if (memory) result.gpuMemory = memory;
      if (prepared.threads !== undefined) result.threads = prepared.threads;
      const variants = prepared.kernelVariants?.();
      if (variants) result.kernelVariants = variants;
      const kernels = await prepared.kernelTimings?.(query);
      if (kernels) result.kernelMs = kernels;
    } catch (e) {
      result.status = 'failed';
      result.error = errorText(e);
    } finally {
      try {
        await prepared?.dispose();
      } catch (e) {
        if (result.status === 'ok') {
          result.status = 'failed';
          result.error = `dispose() threw: ${errorText(e)}`;
        }
      }
    }
    done += unitsLeft - used; // a failed system skips its remaining steps
    await report(system.id, 'done', result.status === 'ok' ? `${system.label}: ${result.medianMs!.toFixed(2)} ms` : `${system.label}: failed`);
  }

  const engine = results.find((r) => r.id === 'engine' && r.status === 'ok');
  if (engine?.medianMs) {
    for (const r of results) if (r.status === 'ok' && r.medianMs !== undefined) r.ratioToEngine = r.medianMs / engine.medianMs;
  }
  return {
    shape,
    flops,
    warmup,
    runs,
    systems: results,
    ...(notRun.length ? { notRun } : {}),
    seed,
    tolerance: engineTolerance(shape),
    peerToleranceFactor: PEER_TOLERANCE_FACTOR,
  };
}

export interface ResultsMeta {
  /** engine.adapterInfo (null on the CPU backend). */
  adapter?: AdapterInfo | null;
  /** engine.backend. */
  backend?: string;
  fallbackReason?: string | null;
  /** Default navigator.userAgent where there is one. */
  userAgent?: string;
  /** ISO date; default now. */
  date?: string;
}

/** Versions declared in package.json (Vite inlines it at build time; omitted where that is not possible). */
function packageVersions(): Record<string, string> {
  try {
    const pkg = Object.values(
      import.meta.glob<{ version?: string; devDependencies?: Record<string, string> }>('../../package.json', { eager: true, import: 'default' }),
    )[0];
    if (!pkg) return {};
    const out: Record<string, string> = {};
    if (pkg.version) out['webgpu-attention'] = pkg.version;
    for (const name of ['@tensorflow/tfjs-core', '@tensorflow/tfjs-backend-webgpu', '@tensorflow/tfjs-backend-wasm', 'onnxruntime-web']) {
      const v = pkg.devDependencies?.[name];
      if (v) out[name] = v;
    }
    return out;
  } catch {
    return {};
  }
}

/** The results as pretty-printed JSON, with where and when they were measured. */
export function resultsToJson(result: BenchResult | RunResult, meta: ResultsMeta = {}): string {
  const nav = (globalThis as { navigator?: { userAgent?: string } }).navigator;
  return JSON.stringify(
    {
      benchmark: 'webgpu-attention multi-head self-attention forward',
      date: meta.date ?? new Date().toISOString(),
      userAgent: meta.userAgent ?? nav?.userAgent ?? (typeof process !== 'undefined' ? `node ${process.version}` : 'unknown'),
      backend: meta.backend ?? null,
      fallbackReason: meta.fallbackReason ?? null,
      adapter: meta.adapter ?? null,
      versions: packageVersions(),
      timing: 'wall time of await run(query): upload, dispatch and readback of the output included; median of the timed runs',
      ...result,
    },
    null,
    2,
  );
}
