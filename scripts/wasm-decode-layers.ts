// The 'wasm' backend's decode step (E=2048 H=16 G=4, cache 1024, one thread) in a stack of L layers
// stepped in turn, as a model decodes: one layer's weights (42 MB in float32, 8.5 MB in q4_0) stay in a
// big CPU cache between steps (this machine's L3: 480 MiB, shared), a model's do not. Each type in an
// engine of its own, one after the other; the median of every layer step after the first round.
//   L=16 STEPS=6 TYPES=f32,q4_0 node scripts/run-ts.mjs scripts/wasm-decode-layers.ts
import { createAttentionEngine } from '../src/index.ts';
import { quantizeWeights } from '../src/quant/quantize.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';
import { median } from '../src/util/stats.ts';
const [E, H, G, ctx] = [2048, 16, 4, 1024];
const Dh = E / H;
const config = { embedDim: E, numHeads: H, numKvHeads: G };
const L = Number(process.env.L ?? 16);
const steps = Number(process.env.STEPS ?? 8);
const out: Record<string, number> = {};
for (const t of (process.env.TYPES ?? 'f32,q4_0').split(',')) {
  const engine = await createAttentionEngine({ backend: 'wasm', threads: 1 });
  const layers = [];
  for (let l = 0; l < L; l++) {
    const float = randomStateDict(config, l + 1);
    const sd = t === 'f32' ? float : quantizeWeights(float, { dtype: t as 'q4_0', config });
    const mha = engine.createMultiHeadAttention(config, sd);
    const r = mulberry32(ctx + l);
    const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: ctx + steps + 8, key: uniform(G * ctx * Dh, 1, r), value: uniform(G * ctx * Dh, 1, r) });
    layers.push({ mha, cache });
  }
  const x = uniform(E, 1, mulberry32(3));
  const times: number[] = [];
  for (let s = 0; s < steps; s++) {
    for (const { mha, cache } of layers) {
      const t0 = performance.now();
      await mha.forward(x, { batchSize: 1, seqLen: 1, isCausal: true, kvCache: cache });
      if (s > 0) times.push(performance.now() - t0);
    }
  }
  out[t] = median(times);
  console.log(`${t}: ${L} layers, a layer's decode step median ${out[t].toFixed(2)} ms (of ${times.length})`);
  for (const { mha, cache } of layers) {
    cache.dispose();
    mha.dispose();
  }
  engine.dispose();
}
if (out.f32 && out.q4_0) console.log(`q4_0 against f32: ${(out.f32 / out.q4_0).toFixed(2)}×`);
