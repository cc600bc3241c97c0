// One cold first-call measurement in Node (a process of its own, started by scripts/bench-cold.ts
// with fresh shader caches): `node scripts/run-ts.mjs scripts/cold-child.ts engine|tfjs B,S,E,H[,causal] [weights]`
// (weights: f32, the default, or a GGUF type the engine's layer is quantized to: demo/bench/cold.ts).
// Prints one line: COLD <json>.

import { type ColdWeights, coldFirstCall } from '../demo/bench/cold.ts';

const [system, dims, weights = 'f32'] = process.argv.slice(2);
const [batchSize, seqLen, embedDim, numHeads, causal] = (dims ?? '').split(',');
// Dawn's GPU as navigator.gpu (and its GPUBufferUsage & co. as globals) before anything loads, as
// scripts/bench.ts --node does; for the engine it is found the same way (navigator.gpu first).
const { create, globals } = (await import('webgpu')) as { create: (flags: string[]) => GPU; globals: Record<string, unknown> };
for (const [k, v] of Object.entries(globals)) if (!(k in globalThis)) Object.defineProperty(globalThis, k, { value: v, configurable: true, writable: true });
Object.defineProperty(globalThis, 'navigator', { value: { gpu: create([]), userAgent: `Node ${process.version}` }, configurable: true, writable: true });
const result = await coldFirstCall(
  system as 'engine' | 'tfjs',
  {
    batchSize: Number(batchSize),
    seqLen: Number(seqLen),
    embedDim: Number(embedDim),
    numHeads: Number(numHeads),
    isCausal: causal === 'causal',
  },
  5,
  weights as ColdWeights,
);
console.log(`COLD ${JSON.stringify(result)}`);
