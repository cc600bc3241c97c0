// What a free head size costs (issue 39's target): a Qwen3-0.6B-shaped layer (E 1024, H 16, G 8,
// Dh 128: H·Dh = 2048 ≠ E) beside a layer whose heads are E/H (E 1536, H 12, G 4, Dh 128) with the
// same projection FLOPs per token. Their attention FLOPs differ (H·Dh 2048 against 1536), so each is
// read as time per FLOP: the ratio printed is (t_qwen3 / F_qwen3) / (t_plain / F_plain), with F the
// exact multiply-add count of the projections and the attention (causal prefill: the triangle).
// Prefill of S tokens and a decode step over a cache of L positions, median of `--runs` after
// 2 warm-ups, the two layers alternating call by call.
//
//   node scripts/run-ts.mjs scripts/bench-head-dim.ts [--backends wasm,webgpu] [--runs 9] [--prefill 128] [--cache 512]

import { createAttentionEngine, type MultiHeadAttentionConfig } from '../src/index.ts';
import { median } from '../src/util/stats.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  backends: { type: 'string', default: 'wasm,webgpu' },
  runs: { type: 'string', default: '9' },
  prefill: { type: 'string', default: '128' },
  cache: { type: 'string', default: '512' },
});
const runs = Number(values.runs);
const S = Number(values.prefill);
const L = Number(values.cache);

const LAYERS: [string, MultiHeadAttentionConfig][] = [
  ['qwen3 E1024 H16 G8 Dh128', { embedDim: 1024, numHeads: 16, numKvHeads: 8, headDim: 128, bias: false }],
  ['plain E1536 H12 G4 Dh128', { embedDim: 1536, numHeads: 12, numKvHeads: 4, bias: false }],
];

/** Multiply-adds of `tokens` new tokens over `past` cached positions (causal). */
function flops(c: MultiHeadAttentionConfig, tokens: number, past: number): number {
  const H = c.numHeads;
  const G = c.numKvHeads ?? H;
  const Dh = c.headDim ?? c.embedDim / H;
  const projection = tokens * (c.embedDim * (H + 2 * G) * Dh + H * Dh * c.embedDim);
  let keys = 0;
  for (let i = 0; i < tokens; i++) keys += past + i + 1;
  return projection + 2 * keys * H * Dh; // q·k and p·v
}

for (const backend of values.backends.split(',')) {
  const engine =
    backend === 'wasm' ? await createAttentionEngine({ backend: 'wasm', threads: 1 }) : await createAttentionEngine({ backend: 'webgpu', tuning: { mode: 'off' } });
  const where = backend === 'wasm' ? 'wasm, 1 thread' : `webgpu, ${engine.adapterInfo?.description || engine.adapterInfo?.vendor}`;
  const layers = LAYERS.map(([name, config]) => {
    const mha = engine.createMultiHeadAttention(config, randomStateDict(config, 1));
    const E = config.embedDim;
    const G = config.numKvHeads ?? config.numHeads;
    const Dh = config.headDim ?? E / config.numHeads;
    const r = mulberry32(2);
    const x = uniform(S * E, 1, r);
    const step = uniform(E, 1, r);
    const past = { key: uniform(G * L * Dh, 1, r), value: uniform(G * L * Dh, 1, r) };
    return { name, config, mha, x, step, past, prefill: [] as number[], decode: [] as number[] };
  });
  for (let i = 0; i < runs + 2; i++) {
    for (const l of layers) {
      let t0 = performance.now();
      await l.mha.forward(l.x, { batchSize: 1, seqLen: S, isCausal: true });
      if (i >= 2) l.prefill.push(performance.now() - t0);
      const cache = l.mha.createKvCache({ batchSize: 1, maxSeqLen: L + 1, ...l.past });
      t0 = performance.now();
      await l.mha.forward(l.step, { batchSize: 1, seqLen: 1, kvCache: cache, isCausal: true });
      if (i >= 2) l.decode.push(performance.now() - t0);
      cache.dispose();
    }
    if (i === 1) await engine.settled();
  }
  console.log(`\n${where}: median of ${runs}, prefill S=${S}, decode over ${L} cached positions`);
  for (const l of layers) {
    console.log(
      `  ${l.name}: prefill ${median(l.prefill).toFixed(2)} ms (${(flops(l.config, S, 0) / 1e6).toFixed(0)} M MACs), decode ${median(l.decode).toFixed(3)} ms (${(flops(l.config, 1, L) / 1e6).toFixed(2)} M MACs)`,
    );
  }
  const [a, b] = layers;
  const per = (l: (typeof layers)[number], kind: 'prefill' | 'decode') => median(l[kind]) / flops(l.config, kind === 'prefill' ? S : 1, kind === 'prefill' ? 0 : L);
  console.log(
    `  time per MAC, qwen3-shaped / plain: prefill ${(per(a, 'prefill') / per(b, 'prefill')).toFixed(3)}×, decode ${(per(a, 'decode') / per(b, 'decode')).toFixed(3)}× (target ≤ 1.15×)`,
  );
  for (const l of layers) l.mha.dispose();
  engine.dispose();
}
