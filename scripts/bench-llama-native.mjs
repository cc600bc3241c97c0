#!/usr/bin/env node
// llama.cpp's native CPU build through node-llama-cpp's prebuilt binary, for scripts/bench-llama.ts (which
// installs it into .cache/peers/ and runs this in a child process, so its threads and the engine's never
// share a process). Plain Node (not Vite's runner): node-llama-cpp loads a native addon.
//   node scripts/bench-llama-native.mjs '<json request>'
// request: { peers, model, threads, ctx, prefill, runs, prefillRuns, flashAttention? }. Prints one line of
// JSON: { decodeMs: [...], prefillMs: [...], flashAttention, system }.
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
const model = await llama.loadModel({ modelPath: request.model, gpuLayers: 0 });
const vocab = 259;
let seed = 12345;
const token = () => {
  seed = (seed * 1103515245 + 12345) >>> 0;
  return 3 + (seed % (vocab - 3));
};
const tokens = (n) => Array.from({ length: n }, token);
const context = await model.createContext({
  contextSize: Math.max(request.ctx + request.runs + 16, request.prefill + 16),
  batchSize: Math.max(request.prefill, 512),
  threads: request.threads,
  sequences: 1,
  ...(request.flashAttention === undefined ? {} : { flashAttention: request.flashAttention }),
});
const sequence = context.getSequence();
const now = () => Number(process.hrtime.bigint()) / 1e6;

// Decode: a cache of ctx, then single tokens.
await sequence.evaluateWithoutGeneratingNewTokens(tokens(request.ctx));
for (let i = 0; i < 2; i++) await sequence.evaluateWithoutGeneratingNewTokens(tokens(1));
const decodeMs = [];
for (let i = 0; i < request.runs; i++) {
  const t = tokens(1);
  const t0 = now();
  await sequence.evaluateWithoutGeneratingNewTokens(t);
  decodeMs.push(now() - t0);
}
// Prefill: `prefill` tokens into an emptied sequence.
const prefillMs = [];
for (let i = 0; i < request.prefillRuns + 1; i++) {
  await sequence.clearHistory();
  const t = tokens(request.prefill);
  const t0 = now();
  await sequence.evaluateWithoutGeneratingNewTokens(t);
  if (i > 0) prefillMs.push(now() - t0);
}
console.log(JSON.stringify({ decodeMs, prefillMs, flashAttention: context.flashAttention ?? null, system: llama.systemInfo ?? null }));
await context.dispose();
await model.dispose();
await llama.dispose();
