#!/usr/bin/env node
// llama.cpp's native CPU build through node-llama-cpp's prebuilt binary, for scripts/bench-llama.ts (which
// installs it into .cache/peers/ and runs this in a child process, so its threads and the engine's never
// share a process). Plain Node (not Vite's runner): node-llama-cpp loads a native addon.
//   node scripts/bench-llama-native.mjs '<json request>'
// request: { peers, models: [path, …], threads, ctx, prefill, runs, prefillRuns, vocab, flashAttention? }.
// Prints one line of JSON: { decodeMs: [[…] per model], prefillMs: [[…] per model], flashAttention, system }.
// The models (an L-layer and a 1-layer file) are loaded together and measured in alternation, step by
// step, so that a slow moment of a shared machine falls on both and cancels in their difference.
//   decode: `ctx` random tokens evaluated, then `runs` single tokens timed one by one (after 2 warm-ups);
//   prefill: `prefill` tokens into an emptied sequence, `prefillRuns` times (after 1 warm-up).
// gpu: false, build: 'never', skipDownload: never builds nor downloads; fails if the prebuilt binary is absent.

import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const request = JSON.parse(process.argv[2]);
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(join(request.peers, 'node_modules/node-llama-cpp/dist/index.js')).href);
const llama = await getLlama({
  gpu: false,
  build: 'never',
  skipDownload: true,
  usePrebuiltBinaries: true,
  progressLogs: false,
  maxThreads: 0,
  logLevel: LlamaLogLevel.error,
});
let seed = 12345;
const token = () => {
  seed = (seed * 1103515245 + 12345) >>> 0;
  return 3 + (seed % (request.vocab - 3));
};
const tokens = (n) => Array.from({ length: n }, token);
const now = () => Number(process.hrtime.bigint()) / 1e6;

const runs = [];
for (const modelPath of request.models) {
  const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
  const context = await model.createContext({
    contextSize: Math.max(request.ctx + request.runs + 16, request.prefill + 16),
    batchSize: Math.max(request.prefill, 512),
    threads: request.threads,
    sequences: 1,
    ...(request.flashAttention === undefined ? {} : { flashAttention: request.flashAttention }),
  });
  runs.push({ model, context, sequence: context.getSequence(), decodeMs: [], prefillMs: [] });
}
/** One evaluation of `n` tokens on each model in turn, timed when `keep`. */
const each = async (n, keep, key) => {
  for (const r of runs) {
    const t = tokens(n);
    const t0 = now();
    await r.sequence.evaluateWithoutGeneratingNewTokens(t);
    if (keep) r[key].push(now() - t0);
  }
};
// Decode: a cache of ctx, then single tokens.
await each(request.ctx, false);
for (let i = 0; i < 2; i++) await each(1, false);
for (let i = 0; i < request.runs; i++) await each(1, true, 'decodeMs');
// Prefill: `prefill` tokens into an emptied sequence.
for (let i = 0; i < request.prefillRuns + 1; i++) {
  for (const r of runs) await r.sequence.clearHistory();
  await each(request.prefill, i > 0, 'prefillMs');
}
console.log(
  JSON.stringify({
    decodeMs: runs.map((r) => r.decodeMs),
    prefillMs: runs.map((r) => r.prefillMs),
    flashAttention: runs[0].context.flashAttention ?? null,
    system: llama.systemInfo ?? null,
  }),
);
for (const r of runs) {
  await r.context.dispose();
  await r.model.dispose();
}
await llama.dispose();
