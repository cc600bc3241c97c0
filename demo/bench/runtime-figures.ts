// The figures of issue 26 ("Readback latency") and the Firefox targets, measured the same way in every
// runtime: the page demo/bench/runtime-figures.html in Firefox (scripts/bench-runtimes.ts, `npm run bench
// -- --firefox`) and test/deno/bench-figures.ts in Deno on the built dist/ (`--deno`). It takes the
// runtime's createAttentionEngine, so it imports nothing of the engine's but types and the seeded inputs.
//   (a) B=1 S=16 E=64 H=4, tuning { mode: 'off' }: 3 warm-ups, then ≥ 15 timed forwards;
//   (b) B=1 S=128 E=256 H=4, tuning off, the same;
//   (c) B=1 S=128 E=256 H=4 with the default tuning: forwards in a loop, each timed, until
//       engine.settled() resolves; then 15 more (the settled figures), and engine.tuning's timing,
//       background work and choices. On wgpu (Firefox, Deno) the default runs nothing in the background
//       (src/webgpu/tuning/scheduler.ts): the first forward compiles its final kernels, and settled()
//       resolves with it;
//   (d) the same with tuning { background: true }: tier 0, then compiles and sweeps in the background,
//       between the forwards (the default on Dawn).
// A forward's time is the wall time of `await layer.forward(x, call)` with a Float32Array in and out
// (upload, dispatch, readback). Every engine is WebGPU ({ backend: 'webgpu' } for (c), where an engine
// left to choose would answer on 'wasm' on a software adapter such as Deno's llvmpipe).

import type { AttentionEngine, TuningReport } from '../../src/index.ts';
import { randomLayerInputs } from '../../test/helpers/random.ts';
import { median } from '../../src/util/stats.ts';

type CreateEngine = (options?: { backend?: 'webgpu'; tuning?: { mode?: 'off'; background?: boolean } }) => Promise<AttentionEngine>;

export interface FigureShape {
  batchSize: number;
  seqLen: number;
  embedDim: number;
  numHeads: number;
}

export const SMALL: FigureShape = { batchSize: 1, seqLen: 16, embedDim: 64, numHeads: 4 };
export const MEDIUM: FigureShape = { batchSize: 1, seqLen: 128, embedDim: 256, numHeads: 4 };

/** Median and best of timed forwards. */
export interface FixedFigures {
  shape: FigureShape;
  warmupMs: number[];
  runsMs: number[];
  medianMs: number;
  bestMs: number;
  timing: TuningReport['timing'] | null;
  adapter: AttentionEngine['adapterInfo'];
}

export interface SettleFigures {
  shape: FigureShape;
  /** From the start of the first forward to engine.settled() resolving. */
  settleMs: number;
  /** Each forward run while settled() had not resolved, in order (the first compiles tier 0). */
  duringSettleMs: number[];
  longestDuringSettleMs: number;
  /** How many of those after the first took over 2× the settled median (the first compiles the kernels it runs: tier 0, or on wgpu the final ones). */
  overTwiceSettled: number;
  /** engine.tuning.background: whether compiles and sweeps ran in the background, and why. */
  background: TuningReport['background'] | null;
  /** engine.tuning.compiled: each kernel compiled in the background, and the ms it took to compile and run once. */
  compiled: { kernel: string; variant: string; ms: number }[];
  runsMs: number[];
  settledMedianMs: number;
  settledBestMs: number;
  timing: TuningReport['timing'] | null;
  choices: { kernel: string; shapeClass: string; variant: string; source: string; unusable?: string; steady?: boolean }[];
  unusableCount: number;
  failures: string[];
  /** Whether a remembered store was emptied first (Deno keeps localStorage between runs). */
  storeCleared: boolean;
}

export interface RuntimeFigures {
  userAgent: string;
  adapter: AttentionEngine['adapterInfo'];
  small: FixedFigures;
  medium: FixedFigures;
  settle: SettleFigures;
  /** (d): the settle with tuning { background: true }. */
  settleBackground: SettleFigures;
  totalMs: number;
}

export interface FigureOptions {
  warmup?: number;
  runs?: number;
  /** Called with a line of progress (per-forward times included). */
  log?: (line: string) => void;
  /** Longest the settle loop may run before giving up, ms (default 300 000). */
  settleLimitMs?: number;
}

const round = (ms: number) => Math.round(ms * 100) / 100;

function layerOf(engine: AttentionEngine, shape: FigureShape, seed: number) {
  const { stateDict, query } = randomLayerInputs({ embedDim: shape.embedDim, numHeads: shape.numHeads }, shape.batchSize * shape.seqLen, seed);
  const layer = engine.createMultiHeadAttention({ embedDim: shape.embedDim, numHeads: shape.numHeads }, stateDict);
  const call = { batchSize: shape.batchSize, seqLen: shape.seqLen };
  const forward = async (): Promise<number> => {
    const t0 = performance.now();
    const { output } = await layer.forward(query, call);
    const ms = performance.now() - t0;
    if (!(output instanceof Float32Array) || output.length !== query.length) throw new Error(`forward gave ${output?.length} values, expected ${query.length}`);
    return round(ms);
  };
  return { layer, forward };
}

async function fixed(create: CreateEngine, shape: FigureShape, warmup: number, runs: number, log: (l: string) => void): Promise<FixedFigures> {
  const engine = await create({ tuning: { mode: 'off' } });
  try {
    const { layer, forward } = layerOf(engine, shape, 7);
    const warmupMs: number[] = [];
    for (let i = 0; i < warmup; i++) warmupMs.push(await forward());
    const runsMs: number[] = [];
    for (let i = 0; i < runs; i++) runsMs.push(await forward());
    layer.dispose();
    log(`  S=${shape.seqLen} E=${shape.embedDim}, tuning off: warm-ups ${warmupMs.join(', ')} ms; runs ${runsMs.join(', ')} ms`);
    return { shape, warmupMs, runsMs, medianMs: round(median(runsMs)), bestMs: Math.min(...runsMs), timing: engine.tuning?.timing ?? null, adapter: engine.adapterInfo };
  } finally {
    engine.dispose();
  }
}

async function settling(create: CreateEngine, shape: FigureShape, runs: number, limitMs: number, log: (l: string) => void, background?: boolean): Promise<SettleFigures> {
  const storage = (globalThis as { localStorage?: Storage }).localStorage;
  const storeCleared = !!storage && storage.length > 0;
  storage?.clear(); // a first-time user's settle, not a remembered one
  const engine = await create(background === undefined ? { backend: 'webgpu' } : { backend: 'webgpu', tuning: { background } });
  try {
    const { layer, forward } = layerOf(engine, shape, 11);
    let settled = false;
    const t0 = performance.now();
    let settleMs = 0;
    const duringSettleMs: number[] = [];
    duringSettleMs.push(await forward()); // the first forward starts the background work settled() waits for
    const done = () => {
      settled = true;
      settleMs = performance.now() - t0;
    };
    void engine.settled().then(done, done);
    while (!settled) {
      if (performance.now() - t0 > limitMs) throw new Error(`engine.settled() had not resolved after ${limitMs / 1000} s (${duringSettleMs.length} forwards)`);
      duringSettleMs.push(await forward());
      // Let a settled() that resolved during that forward be seen before timing another.
      await new Promise((r) => setTimeout(r, 0));
    }
    log(
      `  ${background === undefined ? 'default tuning' : `tuning { background: ${background} }`}, settled after ${(settleMs / 1000).toFixed(1)} s; forwards meanwhile: ${duringSettleMs.join(', ')} ms`,
    );
    const runsMs: number[] = [];
    for (let i = 0; i < runs; i++) runsMs.push(await forward());
    log(`  settled runs ${runsMs.join(', ')} ms`);
    layer.dispose();
    const report = engine.tuning;
    const choices = (report?.choices ?? []).map(({ kernel, shapeClass, variant, source, unusable, steady }) => ({
      kernel,
      shapeClass,
      variant,
      source,
      unusable,
      steady,
    }));
    return {
      shape,
      settleMs: round(settleMs),
      duringSettleMs,
      longestDuringSettleMs: Math.max(...duringSettleMs),
      overTwiceSettled: duringSettleMs.slice(1).filter((x) => x > 2 * median(runsMs)).length,
      background: report?.background ?? null,
      compiled: (report?.compiled ?? []).map(({ kernel, variant, ms }) => ({ kernel, variant, ms: round(ms) })),
      runsMs,
      settledMedianMs: round(median(runsMs)),
      settledBestMs: Math.min(...runsMs),
      timing: report?.timing ?? null,
      choices,
      unusableCount: choices.filter((c) => c.unusable).length,
      failures: report?.failures ?? [],
      storeCleared,
    };
  } finally {
    engine.dispose();
  }
}

/** (a), (b), (c) and (d), one after another. */
export async function runtimeFigures(create: CreateEngine, options: FigureOptions = {}): Promise<RuntimeFigures> {
  const warmup = options.warmup ?? 3;
  const runs = Math.max(15, options.runs ?? 15);
  const log = options.log ?? (() => {});
  const t0 = performance.now();
  const small = await fixed(create, SMALL, warmup, runs, log);
  const medium = await fixed(create, MEDIUM, warmup, runs, log);
  const settle = await settling(create, MEDIUM, runs, options.settleLimitMs ?? 300_000, log);
  const settleBackground = await settling(create, MEDIUM, runs, options.settleLimitMs ?? 300_000, log, true);
  return { userAgent: navigator.userAgent, adapter: small.adapter, small, medium, settle, settleBackground, totalMs: round(performance.now() - t0) };
}
