// The main job until the demo page exists: runs one layer on WebGPU and on the CPU reference,
// prints the adapter, the difference between the two, and the timings.
//   npm run compare -- --batch 1 --seq 128 --embed 256 --heads 4 [--causal] [--runs 5]

import { parseArgs } from 'node:util';
import { createAttentionEngine } from '../src/index.ts';
import { attentionFlops } from '../demo/bench/flops.ts';
import { mulberry32, randomLayerInputs, uniform } from '../test/helpers/random.ts';
import { median } from '../src/util/stats.ts';

const { values } = parseArgs({
  options: {
    batch: { type: 'string', default: '1' },
    seq: { type: 'string', default: '128' },
    embed: { type: 'string', default: '256' },
    heads: { type: 'string', default: '4' },
    'kv-heads': { type: 'string' },
    causal: { type: 'boolean', default: false },
    runs: { type: 'string', default: '5' },
    warmup: { type: 'string', default: '2' },
    seed: { type: 'string', default: '1' },
    lengths: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (values.help) {
  console.log('usage: npm run compare -- [--batch B] [--seq S] [--embed E] [--heads H] [--kv-heads G] [--causal] [--runs N] [--warmup W] [--seed N]');
  console.log('       npm run compare -- --lengths 5,300,17 [--embed E] [--heads H] [--causal]   (packed varlen batch vs each sequence alone vs padded)');
  process.exit(0);
}
const int = (name: keyof typeof values) => {
  const n = Number(values[name]);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer; got ${values[name]}`);
  return n;
};
const B = int('batch');
const S = int('seq');
const E = int('embed');
const H = int('heads');
const G = values['kv-heads'] === undefined ? H : int('kv-heads');
const runs = Math.max(1, int('runs'));
const warmup = int('warmup');
const isCausal = values.causal;

const config = { embedDim: E, numHeads: H, numKvHeads: G };
const { stateDict, query } = randomLayerInputs(config, B * S, int('seed'));
const options = { batchSize: B, seqLen: S, isCausal };

async function time(run: () => Promise<Float32Array>, n: number, w: number): Promise<{ ms: number; output: Float32Array }> {
  let output = await run();
  for (let i = 1; i < w; i++) output = await run();
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    output = await run();
    times.push(performance.now() - t0);
  }
  return { ms: median(times), output };
}

const gpu = await createAttentionEngine({ backend: 'webgpu' });

if (values.lengths) {
  // Packed variable-length batch: one call with cuSeqlens, against the sequences one by one and
  // against the padded batch [n, max, E] a framework without varlen would run.
  const lengths = values.lengths.split(',').map(Number);
  if (lengths.some((n) => !Number.isInteger(n) || n < 1)) throw new Error(`--lengths must be positive integers; got ${values.lengths}`);
  const cu = Int32Array.from([0, ...lengths.map((_, i) => lengths.slice(0, i + 1).reduce((a, b) => a + b, 0))]);
  const T = cu[cu.length - 1];
  const max = Math.max(...lengths);
  const mha = gpu.createMultiHeadAttention(config, stateDict);
  const x = uniform(T * E, 1, mulberry32(int('seed') + 2));
  const padded = new Float32Array(lengths.length * max * E);
  const pad = new Uint8Array(lengths.length * max).fill(1);
  lengths.forEach((n, i) => {
    padded.set(x.subarray(cu[i] * E, cu[i + 1] * E), i * max * E);
    pad.fill(0, i * max, i * max + n);
  });
  const packed = await time(async () => (await mha.forward(x, { cuSeqlens: cu, isCausal })).output, runs, Math.max(1, warmup));
  const alone = await time(
    async () => {
      for (const [i, n] of lengths.entries()) await mha.forward(x.subarray(cu[i] * E, cu[i + 1] * E), { batchSize: 1, seqLen: n, isCausal });
      return new Float32Array(0);
    },
    runs,
    Math.max(1, warmup),
  );
  const paddedRun = await time(
    async () => (await mha.forward(padded, { batchSize: lengths.length, seqLen: max, keyPaddingMask: pad, isCausal })).output,
    runs,
    Math.max(1, warmup),
  );
  console.log(`adapter  ${gpu.adapterInfo!.vendor} ${gpu.adapterInfo!.architecture}`);
  console.log(`packed batch of lengths [${lengths.join(', ')}] (T=${T}), E=${E} H=${H}${isCausal ? ' causal' : ''}, median of ${runs}:`);
  console.log(`  one packed call (cuSeqlens)      ${packed.ms.toFixed(2)} ms`);
  console.log(`  each sequence alone, summed      ${alone.ms.toFixed(2)} ms   (packed / alone = ${(packed.ms / alone.ms).toFixed(2)})`);
  console.log(
    `  padded batch [${lengths.length}, ${max}, E] + padding mask ${paddedRun.ms.toFixed(2)} ms   (packed / padded = ${(packed.ms / paddedRun.ms).toFixed(2)})`,
  );
  mha.dispose();
  gpu.dispose();
  process.exit(0);
}
const cpu = await createAttentionEngine({ backend: 'cpu' });
const a = gpu.adapterInfo!;
const flops = attentionFlops(B, S, E, isCausal);
console.log(`adapter  ${a.vendor} ${a.architecture} (${a.description || a.device})`);
console.log(`layer    B=${B} S=${S} E=${E} H=${H} G=${G} Dh=${E / H}${isCausal ? ' causal' : ''}: ${(flops / 1e9).toFixed(3)} GFLOP`);

const gpuLayer = gpu.createMultiHeadAttention(config, stateDict);
const cpuLayer = cpu.createMultiHeadAttention(config, stateDict);
const g = await time(async () => (await gpuLayer.forward(query, options)).output, runs, Math.max(1, warmup));
const c = await time(async () => (await cpuLayer.forward(query, options)).output, Math.min(runs, 3), 0);

let maxAbs = 0;
let maxRef = 0;
for (let i = 0; i < g.output.length; i++) {
  maxAbs = Math.max(maxAbs, Math.abs(g.output[i] - c.output[i]));
  maxRef = Math.max(maxRef, Math.abs(c.output[i]));
}
const gflops = (ms: number) => (flops / (ms / 1e3) / 1e9).toFixed(2);
console.log(`webgpu   median ${g.ms.toFixed(2)} ms over ${runs} runs after ${Math.max(1, warmup)} warm-up(s), ${gflops(g.ms)} GFLOP/s (upload and readback included)`);
console.log(`cpu      median ${c.ms.toFixed(2)} ms over ${Math.min(runs, 3)} runs (float64 reference), ${gflops(c.ms)} GFLOP/s`);
console.log(`speed-up ${(c.ms / g.ms).toFixed(1)}x`);
console.log(`max |webgpu − cpu| = ${maxAbs.toExponential(2)} (max |output| ${maxRef.toFixed(3)}; relative to it ${(maxAbs / maxRef).toExponential(2)})`);
gpuLayer.dispose();
cpuLayer.dispose();
gpu.dispose();
cpu.dispose();
