// The 'wasm' backend against ONNX Runtime Web's WASM execution provider (and this engine's float64
// 'cpu' backend), in Node, at the shapes of issue 14: B=1 S=128 E=256 H=4 and B=1 S=512 E=512 H=8.
// Every system is first checked against the float64 reference (the shared tolerance rule), then
// timed: `--runs` steady-state runs after one warm-up, best and median printed. Until the demo's
// benchmark has WASM peers, this is where their figures come from.
//
//   node scripts/run-ts.mjs scripts/bench-wasm.ts [--runs 15] [--threads 2] [--seq 512 --embed 512 --heads 8] [--causal]

import { availableParallelism } from 'node:os';
import { buildAttentionModel } from '../demo/bench/systems/onnx-model.ts';
import { createAttentionEngine } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';
import { median } from '../src/util/stats.ts';
import { compareArrays, f32Tolerance } from '../src/util/tolerance.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  runs: { type: 'string', default: '15' },
  threads: { type: 'string', default: String(availableParallelism()) },
  seq: { type: 'string' },
  embed: { type: 'string' },
  heads: { type: 'string' },
  causal: { type: 'boolean', default: false },
});
const runs = Number(values.runs);
const threads = Number(values.threads);
const shapes: [number, number, number][] = values.seq
  ? [[Number(values.seq), Number(values.embed ?? 512), Number(values.heads ?? 8)]]
  : [
      [128, 256, 4],
      [512, 512, 8],
    ];
const isCausal = values.causal;

const ort = await import('onnxruntime-web');
ort.env.wasm.numThreads = 1;
ort.env.logLevel = 'error';
const reference = await createAttentionEngine({ backend: 'cpu' });
const engines = { 'wasm, 1 thread': await createAttentionEngine({ backend: 'wasm', threads: 1 }) } as Record<string, Awaited<ReturnType<typeof createAttentionEngine>>>;
if (threads > 1) engines[`wasm, ${threads} threads`] = await createAttentionEngine({ backend: 'wasm', threads });

for (const [S, E, H] of shapes) {
  const config = { embedDim: E, numHeads: H };
  const stateDict = randomStateDict(config, 1);
  const query = uniform(S * E, 1, mulberry32(2));
  const options = { batchSize: 1, seqLen: S, isCausal };
  const session = await ort.InferenceSession.create(await buildAttentionModel({ shape: { batchSize: 1, seqLen: S, embedDim: E, numHeads: H, isCausal }, stateDict }), {
    executionProviders: ['wasm'],
  });
  const systems: [string, () => Promise<Float32Array>][] = [
    ['ONNX Runtime Web WASM EP, 1 thread', async () => (await session.run({ query: new ort.Tensor('float32', query, [1, S, E]) })).output.data as Float32Array],
  ];
  for (const [name, engine] of Object.entries(engines)) {
    const layer = engine.createMultiHeadAttention(config, stateDict);
    systems.push([name, async () => (await layer.forward(query, options)).output]);
  }
  const refLayer = reference.createMultiHeadAttention(config, stateDict);
  systems.push(['cpu (float64 JS)', async () => (await refLayer.forward(query, options)).output]);
  const expected = (await refLayer.forward(query, options)).output;
  const tolerance = f32Tolerance([E, S, E]);
  console.log(`B=1 S=${S} E=${E} H=${H}${isCausal ? ' causal' : ''}: best / median of ${runs} runs (one core each unless said)`);
  for (const [name, run] of systems) {
    const check = compareArrays(await run(), expected, tolerance);
    if (!check.ok) {
      console.log(`  ${name.padEnd(36)} WRONG: ${check.count} elements outside the float32 tolerance`);
      continue;
    }
    const n = name.startsWith('cpu') ? Math.min(3, runs) : runs;
    const times: number[] = [];
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      await run();
      times.push(performance.now() - t);
    }
    console.log(
      `  ${name.padEnd(36)} ${Math.min(...times)
        .toFixed(1)
        .padStart(8)} / ${median(times).toFixed(1).padStart(8)} ms`,
    );
  }
  await session.release();
}
for (const engine of [reference, ...Object.values(engines)]) engine.dispose();
