// Issue 40's paged target on WebGPU: 8 sequences with contexts 100, 200, … 800 each adding one token
// (E 256, H 8, G 2): one paged call for all 8 against 8 separate calls on 8 plain KvCaches, median of
// `--runs` after 2 warm-ups, the two alternating; every sequence truncated back to its context after
// each measured step, so every step sees the same lengths. `tuning: { mode: 'off' }` (the built-in
// variants of the adapter's kind). Prints both medians and their ratio (the target: ≥ 2.5×).
//
//   node scripts/run-ts.mjs scripts/bench-paged-webgpu.ts [--runs 9] [--block-size 16]

import { createAttentionEngine } from '../src/index.ts';
import { median } from '../src/util/stats.ts';
import { pagedPipelinesCompiled } from '../src/webgpu/kernels/paged-attention.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  runs: { type: 'string', default: '9' },
  'block-size': { type: 'string', default: '16' },
});
const runs = Number(values.runs);
const blockSize = Number(values['block-size']);

const config = { embedDim: 256, numHeads: 8, numKvHeads: 2 };
const E = config.embedDim;
const contexts = [100, 200, 300, 400, 500, 600, 700, 800];

const engine = await createAttentionEngine({ backend: 'webgpu', tuning: { mode: 'off' } });
const mha = engine.createMultiHeadAttention(config, randomStateDict(config, 1));
const rng = mulberry32(2);
const prompts = contexts.map((n) => uniform(n * E, 1, rng));
const steps = contexts.map(() => uniform(E, 1, rng));

// Paged: one table, the 8 prompts prefilled in one call.
const maxBlocks = contexts.reduce((n, c) => n + Math.ceil((c + 1) / blockSize), 0) + 8;
const paged = mha.createPagedKvCache({ blockSize, maxBlocks });
const ids = contexts.map(() => paged.addSequence());
const all = new Float32Array(contexts.reduce((n, c) => n + c, 0) * E);
let at = 0;
for (const p of prompts) {
  all.set(p, at);
  at += p.length;
}
await mha.forward(all, { kvCache: paged, sequences: ids.map((id, i) => ({ id, length: contexts[i] })) });
const stepX = new Float32Array(8 * E);
for (const [i, s] of steps.entries()) stepX.set(s, i * E);
const stepSequences = ids.map((id) => ({ id, length: 1 }));

// Plain: a cache per sequence, prefilled alone.
const caches = contexts.map((c) => mha.createKvCache({ batchSize: 1, maxSeqLen: c + 1 }));
for (const [i, c] of contexts.entries()) await mha.forward(prompts[i], { batchSize: 1, seqLen: c, kvCache: caches[i], isCausal: true });

const pagedTimes: number[] = [];
const separateTimes: number[] = [];
for (let r = 0; r < runs + 2; r++) {
  let t0 = performance.now();
  await mha.forward(stepX, { kvCache: paged, sequences: stepSequences });
  const tPaged = performance.now() - t0;
  for (const [i, id] of ids.entries()) paged.truncate(id, contexts[i]);

  t0 = performance.now();
  for (const [i, cache] of caches.entries()) await mha.forward(steps[i], { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
  const tSeparate = performance.now() - t0;
  for (const [i, cache] of caches.entries()) cache.truncate(contexts[i]);

  if (r >= 2) {
    pagedTimes.push(tPaged);
    separateTimes.push(tSeparate);
  }
}
const p = median(pagedTimes);
const s = median(separateTimes);
console.log(
  `webgpu, ${engine.adapterInfo?.description || engine.adapterInfo?.vendor}; E ${E} H 8 G 2; contexts ${contexts.join(', ')} + 1 token each; blockSize ${blockSize}`,
);
console.log(`one paged call:           median ${p.toFixed(2)} ms  (runs: ${pagedTimes.map((t) => t.toFixed(1)).join(' ')})`);
console.log(`8 calls on 8 KvCaches:    median ${s.toFixed(2)} ms  (runs: ${separateTimes.map((t) => t.toFixed(1)).join(' ')})`);
console.log(`speed-up: ${(s / p).toFixed(2)}× (target ≥ 2.5×)`);

// Beside it (not the target): the 8 prompts prefilled in one paged call against 8 plain prefills, median of 3 after 1 warm-up.
const prefillPaged: number[] = [];
const prefillSeparate: number[] = [];
await pagedPipelinesCompiled(engine.device!); // the rows body's unrolled pipeline (the prefill above started its compile)
for (let r = 0; r < 4; r++) {
  for (const id of ids) paged.truncate(id, 0);
  let t0 = performance.now();
  await mha.forward(all, { kvCache: paged, sequences: ids.map((id, i) => ({ id, length: contexts[i] })) });
  const tPaged = performance.now() - t0;
  t0 = performance.now();
  for (const [i, cache] of caches.entries()) {
    cache.truncate(0);
    await mha.forward(prompts[i], { batchSize: 1, seqLen: contexts[i], kvCache: cache, isCausal: true });
  }
  const tSeparate = performance.now() - t0;
  if (r >= 1) {
    prefillPaged.push(tPaged);
    prefillSeparate.push(tSeparate);
  }
}
console.log(`prefill of the 8 prompts (3600 tokens): one paged call ${median(prefillPaged).toFixed(1)} ms, 8 plain calls ${median(prefillSeparate).toFixed(1)} ms`);
paged.dispose();
for (const c of caches) c.dispose();
engine.dispose();
