// A batched decode step on a PagedKvCache against the same step as separate calls (issue 40's target):
// --sequences sequences (default 8) with contexts 100, 200, … (--ctx-step) each add one token, E 256, H 8,
// G 2: ONE paged forward (x [8, E], sequences [{ id, length: 1 }, …]) against 8 forwards, one per plain
// KvCache (batchSize 1), issued together and awaited together. Medians of --runs (9) after --warmup (2),
// the two ways alternating which goes first; after each step every sequence is truncated back to its
// context, so every run measures the same step. The outputs of the two ways are compared (max |Δ|).
// Targets: ≥ 1.5× on wasm, ≥ 2.5× on webgpu (lavapipe, tuning { mode: 'off' }).
//
//   node scripts/run-ts.mjs scripts/bench-paged.ts [--backend wasm|webgpu|cpu] [--threads N] (wasm; default 1)
//     [--embed 256 --heads 8 --kv-heads 2 --sequences 8 --ctx-step 100 --block-size 16 --runs 9 --warmup 2] [--json out.json]

import { writeFileSync } from 'node:fs';
import { type BackendKind, createAttentionEngine, type KvCache, type PagedKvCache, UnsupportedError } from '../src/index.ts';
import { median } from '../src/util/stats.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  backend: { type: 'string', default: 'wasm' },
  threads: { type: 'string', default: '1' },
  embed: { type: 'string', default: '256' },
  heads: { type: 'string', default: '8' },
  'kv-heads': { type: 'string', default: '2' },
  sequences: { type: 'string', default: '8' },
  'ctx-step': { type: 'string', default: '100' },
  'block-size': { type: 'string', default: '16' },
  runs: { type: 'string', default: '9' },
  warmup: { type: 'string', default: '2' },
  json: { type: 'string' },
});
const backend = values.backend as BackendKind;
if (!['wasm', 'webgpu', 'cpu'].includes(backend)) throw new Error(`--backend: wasm, webgpu or cpu, not ${backend}`);
const [E, H, G, N, ctxStep, blockSize, runs, warmup, threads] = [
  values.embed,
  values.heads,
  values['kv-heads'],
  values.sequences,
  values['ctx-step'],
  values['block-size'],
  values.runs,
  values.warmup,
  values.threads,
].map(Number);
const contexts = Array.from({ length: N }, (_, i) => (i + 1) * ctxStep);
const config = { embedDim: E, numHeads: H, numKvHeads: G };

const engine = await createAttentionEngine({
  backend,
  ...(backend === 'wasm' ? { threads } : {}),
  ...(backend === 'webgpu' ? { tuning: { mode: 'off' as const } } : {}),
});
const mha = engine.createMultiHeadAttention(config, randomStateDict(config, 1));
const rng = mulberry32(2);

// The contexts: each sequence's prefill, once on the paged cache (one call) and once on its own plain cache.
const maxBlocks = contexts.reduce((s, c) => s + Math.ceil((c + 1) / blockSize), 0);
let paged: PagedKvCache;
try {
  paged = mha.createPagedKvCache({ blockSize, maxBlocks });
} catch (e) {
  if (!(e instanceof UnsupportedError)) throw e;
  console.log(`${backend}: no paged KV cache on this backend yet (${e.message.split('\n')[0]})`);
  engine.dispose();
  process.exit(2);
}
const ids = contexts.map(() => paged.addSequence());
const caches: KvCache[] = contexts.map((c) => mha.createKvCache({ batchSize: 1, maxSeqLen: c + 1 }));
const prompt = uniform(contexts.reduce((a, b) => a + b, 0) * E, 1, rng);
await mha.forward(prompt, { kvCache: paged, sequences: ids.map((id, i) => ({ id, length: contexts[i] })) });
let row = 0;
for (const [i, c] of contexts.entries()) {
  await mha.forward(prompt.subarray(row * E, (row + c) * E), { batchSize: 1, seqLen: c, kvCache: caches[i], isCausal: true });
  row += c;
}

async function pagedStep(x: Float32Array): Promise<{ ms: number; output: Float32Array }> {
  const t0 = performance.now();
  const { output } = await mha.forward(x, { kvCache: paged, sequences: ids.map((id) => ({ id, length: 1 })) });
  const ms = performance.now() - t0;
  for (const [i, id] of ids.entries()) paged.truncate(id, contexts[i]);
  return { ms, output };
}

async function separateSteps(x: Float32Array): Promise<{ ms: number; output: Float32Array }> {
  const t0 = performance.now();
  const outs = await Promise.all(caches.map((cache, i) => mha.forward(x.subarray(i * E, (i + 1) * E), { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true })));
  const ms = performance.now() - t0;
  for (const [i, cache] of caches.entries()) cache.truncate(contexts[i]);
  const output = new Float32Array(N * E);
  for (const [i, o] of outs.entries()) output.set(o.output, i * E);
  return { ms, output };
}

const times = { paged: [] as number[], separate: [] as number[] };
let maxDiff = 0;
for (let r = 0; r < warmup + runs; r++) {
  const x = uniform(N * E, 1, rng);
  const order = r % 2 === 0 ? (['paged', 'separate'] as const) : (['separate', 'paged'] as const);
  const got: Partial<Record<'paged' | 'separate', { ms: number; output: Float32Array }>> = {};
  for (const way of order) got[way] = way === 'paged' ? await pagedStep(x) : await separateSteps(x);
  for (let i = 0; i < N * E; i++) maxDiff = Math.max(maxDiff, Math.abs(got.paged!.output[i] - got.separate!.output[i]));
  if (r >= warmup) {
    times.paged.push(got.paged!.ms);
    times.separate.push(got.separate!.ms);
  }
}

const result = {
  backend,
  device: engine.adapterInfo ? `${engine.adapterInfo.vendor} ${engine.adapterInfo.description}`.trim() : null,
  threads: backend === 'wasm' ? threads : null,
  config: { E, H, G, Dh: E / H, sequences: N, contexts, blockSize },
  runs,
  warmup,
  pagedMs: median(times.paged),
  separateMs: median(times.separate),
  speedup: median(times.separate) / median(times.paged),
  maxAbsDiff: maxDiff,
  pagedRuns: times.paged,
  separateRuns: times.separate,
};
const f = (ms: number) => `${ms.toFixed(3)} ms`;
console.log(
  `${backend}${result.threads ? ` (${threads} thread${threads > 1 ? 's' : ''})` : ''}${result.device ? ` on ${result.device}` : ''}: ` +
    `${N} sequences (contexts ${contexts[0]}…${contexts[N - 1]}) + 1 token each, E ${E}, H ${H}, G ${G}, blockSize ${blockSize}; medians of ${runs} after ${warmup} warm-ups, alternating`,
);
console.log(`  one paged call:      ${f(result.pagedMs)} (min ${f(Math.min(...times.paged))})   [${times.paged.map((t) => t.toFixed(2)).join(' ')}]`);
console.log(`  ${N} separate calls:   ${f(result.separateMs)} (min ${f(Math.min(...times.separate))})   [${times.separate.map((t) => t.toFixed(2)).join(' ')}]`);
console.log(`  speedup ${result.speedup.toFixed(2)}× (target ${backend === 'webgpu' ? '2.5' : '1.5'}×); outputs max |paged − separate| = ${maxDiff.toExponential(2)}`);
if (values.json) writeFileSync(values.json, `${JSON.stringify(result, null, 2)}\n`);
engine.dispose();
