// How much faster quantized weights can make the 'wasm' backend's decode step on this CPU: the step
// at E=2048 H=16 G=4 over a KV cache of 1024 (one thread), float32 against q4_0 and q8_0, beside the
// projections' kernels alone on the same shapes (x · Wᵀ for one row: gemm for float32, qgemv for the
// packed weights; QKV N=3072 and output N=2048, K=2048, as the step runs them). What the step spends
// outside the projections (attention over the cache, the cache append, the host) is the same for every
// weight type, so it bounds the speed-up: float32 step / (step − float32 projections) even if the
// packed projections cost nothing. Medians of `--runs`, the types interleaved run by run.
//   node scripts/run-ts.mjs scripts/wasm-decode-ceiling.ts [--runs 40] [--rounds 3]

import { createAttentionEngine } from '../src/index.ts';
import { quantizeWeights } from '../src/quant/quantize.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';
import { compileKernels, WasmKernels } from '../src/wasm/kernels.ts';
import { createProjection, kernelBits } from '../src/wasm/projection.ts';
import { parseCli } from './cli.ts';
import { median } from '../src/util/stats.ts';

const { values } = parseCli(import.meta.url, { runs: { type: 'string', default: '40' }, rounds: { type: 'string', default: '3' } });
const runs = Number(values.runs);
const rounds = Number(values.rounds);
const [E, H, G, ctx] = [2048, 16, 4, 1024];
const Dh = E / H;
const config = { embedDim: E, numHeads: H, numKvHeads: G };
const TYPES = ['f32', 'q4_0', 'q8_0'] as const;
const float = randomStateDict(config, 1);
const stateDicts = Object.fromEntries(TYPES.map((t) => [t, t === 'f32' ? float : quantizeWeights(float, { dtype: t, config })]));

// The projections alone: the step's weights (in_proj [3072, 2048], out_proj [2048, 2048]) on one kernels instance.
const kernels = new WasmKernels(await compileKernels('single'));
const xPtr = kernels.put(uniform(E, 1, mulberry32(3)));
const scratch = kernels.alloc(8 * E);
const yPtr = kernels.alloc(4 * E);
const projections = Object.fromEntries(
  TYPES.map((t) => {
    const sd = stateDicts[t] as Record<string, unknown>;
    const N = (H + 2 * G) * Dh;
    return [t, [createProjection(kernels, sd.in_proj_weight as never, N, E, null, 0), createProjection(kernels, sd['out_proj.weight'] as never, E, E, null, 0)]];
  }),
);
const k = kernels.k as unknown as Record<string, (...args: number[]) => void>;
function projectOnce(t: (typeof TYPES)[number]): number {
  const t0 = performance.now();
  for (const p of projections[t]) {
    if (p.kind === 'float') k.gemm(xPtr, E, 1, E, p.w, p.N, p.bias, yPtr, p.N);
    else k.qgemv(xPtr, E, 1, E, p.wq, p.so, p.N, p.bias, yPtr, p.N, kernelBits(p), p.group, scratch);
  }
  return performance.now() - t0;
}

// The whole step, as npm run bench:quantized runs it on 'wasm' (one thread).
const engine = await createAttentionEngine({ backend: 'wasm', threads: 1 });
const x = uniform(E, 1, mulberry32(3));
const layers = Object.fromEntries(
  TYPES.map((t) => {
    const mha = engine.createMultiHeadAttention(config, stateDicts[t]);
    const r = mulberry32(ctx);
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: ctx + rounds * runs + 8, key: uniform(G * ctx * Dh, 1, r), value: uniform(G * ctx * Dh, 1, r) });
    return [t, { mha, cache }];
  }),
);
async function stepOnce(t: (typeof TYPES)[number]): Promise<number> {
  const { mha, cache } = layers[t];
  const t0 = performance.now();
  await mha.forward(x, { batchSize: 1, seqLen: 1, isCausal: true, kvCache: cache });
  return performance.now() - t0;
}

console.log(`E=${E} H=${H} G=${G}, cache ${ctx}, 'wasm' backend, 1 thread; medians of ${runs}`);
for (const t of TYPES) {
  for (let i = 0; i < 3; i++) {
    projectOnce(t);
    await stepOnce(t);
  }
}
for (let round = 1; round <= rounds; round++) {
  const proj: Record<string, number[]> = Object.fromEntries(TYPES.map((t) => [t, []]));
  const step: Record<string, number[]> = Object.fromEntries(TYPES.map((t) => [t, []]));
  for (let i = 0; i < runs; i++) {
    for (const t of TYPES) {
      proj[t].push(projectOnce(t));
      step[t].push(await stepOnce(t));
    }
  }
  const p = Object.fromEntries(TYPES.map((t) => [t, median(proj[t])]));
  const s = Object.fromEntries(TYPES.map((t) => [t, median(step[t])]));
  const rest = s.f32 - p.f32;
  const gb = (((H + 2 * G) * Dh + E) * E * 4) / (p.f32 * 1e6); // float32 weights read per step, GB/s
  console.log(
    `round ${round}: step f32 ${s.f32.toFixed(2)}, q4_0 ${s.q4_0.toFixed(2)} (${(s.f32 / s.q4_0).toFixed(2)}×), q8_0 ${s.q8_0.toFixed(2)} ms; ` +
      `projections alone f32 ${p.f32.toFixed(2)} (${gb.toFixed(0)} GB/s of weights), q4_0 ${p.q4_0.toFixed(2)}, q8_0 ${p.q8_0.toFixed(2)} ms; ` +
      `the rest of the f32 step ${rest.toFixed(2)} ms: q4_0 could be at most ${(s.f32 / rest).toFixed(2)}× faster with projections costing nothing`,
  );
}
for (const { mha, cache } of Object.values(layers)) {
  cache.dispose();
  mha.dispose();
}
engine.dispose();
