// A new user's first call, measured the way a new user meets it: in a fresh process (or browser
// profile) whose shader caches are empty, from the first line of the user's code to the first output.
// `npm run bench -- --cold` (scripts/bench-cold.ts) runs this once per system and shape, each in a
// process of its own, and prints the comparison. Runs in Node (navigator.gpu = Dawn's GPU) and in a page.
//
//   engine  from createAttentionEngine({ backend: 'webgpu' }) to the first output, layer creation
//           included, default options; then later calls, engine.settled(), the steady state, and the
//           steady state of the built-in kernels (tuning off) on the same device, interleaved (15
//           runs each; fastest against fastest), to check that what the tuner chose is not slower
//   tfjs    TensorFlow.js's WebGPU backend, from its import to the first output; then its steady state
//
// `weights`: the engine's layer with its projection weights quantized (quantizeWeights, before the clock
// starts, as a user would load them quantized from a file); TF.js always runs float32.

import { createAttentionEngine, quantizeWeights } from 'webgpu-attention';
import { randomLayerInputs } from '../../test/helpers/random.ts';
import { tfjsSystem } from './systems/tfjs.ts';
import type { BenchShape } from './types.ts';
import { median } from '../../src/util/stats.ts';

export interface ColdResult {
  system: 'engine' | 'tfjs';
  /** The engine's projection weights (TF.js: always f32). */
  weights?: ColdWeights;
  /** Milliseconds from the first line to the first output. */
  firstMs: number;
  /** The next few calls right after, in order (the engine may still be compiling in the background). */
  nextMs: number[];
  /** engine: how long settled() took after those calls. */
  settledMs?: number;
  /** Median of the timed runs once settled (engine) or warm (tfjs). */
  steadyMs: number;
  /** engine: the median of the built-in kernels (tuning off) on the same device, interleaved with steadyMs's runs. */
  builtInSteadyMs?: number;
  /** engine: fastest run of the tuned kernels over fastest run of the built-in ones (interleaved runs; noise only adds time). */
  tunedOverBuiltIn?: number;
  /** engine: whether the tuner kept the built-in choice for every kernel (then tunedOverBuiltIn only shows noise). */
  sameAsBuiltIn?: boolean;
  /** engine: the variants it runs once settled, and how each was chosen. */
  choices?: { kernel: string; variant: string; source: string; note?: string }[];
  /** engine: what it compiled in the background and how long each took. */
  compiled?: { kernel: string; variant: string; ms: number }[];
  adapter?: string;
}

const round = (x: number) => Math.round(x * 10) / 10;

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const t0 = performance.now();
  const value = await fn();
  return [value, performance.now() - t0];
}

/** The weights a cold run gives the engine: float32, or quantized to one of quantizeWeights' GGUF types. */
export type ColdWeights = 'f32' | 'q4_0' | 'q8_0' | 'q4_k' | 'q6_k';

export async function coldFirstCall(system: 'engine' | 'tfjs', shape: BenchShape, runs = 5, weights: ColdWeights = 'f32'): Promise<ColdResult> {
  const config = { embedDim: shape.embedDim, numHeads: shape.numHeads };
  const { stateDict: floats, query } = randomLayerInputs(config, shape.batchSize * shape.seqLen, 1);
  const stateDict = system === 'engine' && weights !== 'f32' ? quantizeWeights(floats, { dtype: weights }) : floats;
  const options = { batchSize: shape.batchSize, seqLen: shape.seqLen, isCausal: shape.isCausal };
  if (system === 'tfjs') {
    const t0 = performance.now();
    const prepared = await tfjsSystem.prepare({ shape, stateDict: floats });
    await prepared.run(query);
    const firstMs = performance.now() - t0;
    const nextMs: number[] = [];
    for (let i = 0; i < 3; i++) nextMs.push(round((await timed(() => prepared.run(query)))[1]));
    const times: number[] = [];
    for (let i = 0; i < runs; i++) times.push((await timed(() => prepared.run(query)))[1]);
    await prepared.dispose();
    return { system, weights: 'f32', firstMs: round(firstMs), nextMs, steadyMs: round(median(times)) };
  }
  const t0 = performance.now();
  const engine = await createAttentionEngine({ backend: 'webgpu' });
  const layer = engine.createMultiHeadAttention(config, stateDict);
  await layer.forward(query, options);
  const firstMs = performance.now() - t0;
  const nextMs: number[] = [];
  for (let i = 0; i < 3; i++) nextMs.push(round((await timed(() => layer.forward(query, options)))[1]));
  const [, settledMs] = await timed(() => engine.settled());
  const builtIn = await createAttentionEngine({ device: engine.device!, tuning: { mode: 'off' } });
  const reference = builtIn.createMultiHeadAttention(config, stateDict);
  await reference.forward(query, options); // compiles the built-in kernels (the tuner may have run them already)
  await layer.forward(query, options);
  const tuned: number[] = [];
  const plain: number[] = [];
  for (let i = 0; i < 3 * runs; i++) {
    tuned.push((await timed(() => layer.forward(query, options)))[1]);
    plain.push((await timed(() => reference.forward(query, options)))[1]);
  }
  const report = engine.tuning!;
  const info = engine.adapterInfo;
  const result: ColdResult = {
    system,
    weights,
    firstMs: round(firstMs),
    nextMs,
    settledMs: round(settledMs),
    steadyMs: round(median(tuned)),
    builtInSteadyMs: round(median(plain)),
    tunedOverBuiltIn: Math.round((Math.min(...tuned) / Math.min(...plain)) * 100) / 100,
    sameAsBuiltIn: report.choices.every((c) => c.variant === report.defaults[c.kernel]),
    choices: report.choices.map((c) => ({ kernel: c.kernel, variant: c.variant, source: c.source, ...(c.note ? { note: c.note } : {}) })),
    compiled: report.compiled,
    adapter: info ? `${info.vendor} ${info.architecture} ${info.description}`.trim() : undefined,
  };
  builtIn.dispose();
  engine.dispose();
  return result;
}
