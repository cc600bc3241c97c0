// `npm run bench -- --options`: what the attention options of today's models cost, in Node on Dawn
// (lavapipe here), in one run. Two measurements, each with the kernels fixed (tuning off: the same
// variants for every case, so only the option differs) and timestamp queries for kernel times:
//
//   1. B=1 S=2048 E=512 H=8: the attention kernel (and the head transform, for rotary) with softcap,
//      sinks, ALiBi and rotary, each against plain softmax attention; rounds interleave the cases so
//      drift on a shared machine hits them alike. Goal: softcap, sinks, ALiBi each < 1.10× plain.
//   2. B=1 S=8192 E=512 H=8: linear attention (config.attention 'linear') against softmax attention,
//      the attention kernels and the whole layer (wall clock, read back included). Goal: ≥ 4× faster.
//
// Prints a table and the goals, met or missed, and writes the figures to JSON.

import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { createAttentionEngine, type ForwardOptions, type MultiHeadAttentionConfig } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';
import { median } from '../src/util/stats.ts';

interface Case {
  name: string;
  config: Partial<MultiHeadAttentionConfig>;
  options: Partial<ForwardOptions>;
}

async function measure(S: number, cases: Case[], rounds: number, log: (line: string) => void) {
  const [E, H] = [512, 8];
  const engine = await createAttentionEngine({ backend: 'webgpu', profile: true, tuning: { mode: 'off' } });
  if (!engine.profiling) throw new Error('this adapter has no timestamp-query: kernel times cannot be measured');
  const stateDict = randomStateDict({ embedDim: E, numHeads: H }, 1);
  const x = uniform(S * E, 1, mulberry32(2));
  const layers = cases.map((c) => ({ c, mha: engine.createMultiHeadAttention({ embedDim: E, numHeads: H, ...c.config }, stateDict) }));
  const kernel: Record<string, number[]> = Object.fromEntries(cases.map((c) => [c.name, []]));
  const wall: Record<string, number[]> = Object.fromEntries(cases.map((c) => [c.name, []]));
  const run = async (c: Case, mha: (typeof layers)[number]['mha']) => {
    const t0 = performance.now();
    const { timings } = await mha.forward(x, { batchSize: 1, seqLen: S, ...c.options } as ForwardOptions);
    const ms = performance.now() - t0;
    const t = timings ?? {};
    return { ms, attention: (t.flash_attention ?? 0) + (t.linear_attention ?? 0) + (t.head_transform ?? 0) };
  };
  for (const { c, mha } of layers) {
    await run(c, mha); // compiles
    log(`  S=${S} ${c.name}: compiled`);
  }
  for (let r = 0; r < rounds; r++) {
    for (const { c, mha } of layers) {
      const { ms, attention } = await run(c, mha);
      kernel[c.name].push(attention);
      wall[c.name].push(ms);
    }
    log(`  S=${S} round ${r + 1} of ${rounds}`);
  }
  engine.dispose();
  return Object.fromEntries(
    cases.map((c) => [c.name, { kernelMs: median(kernel[c.name]), wallMs: median(wall[c.name]), kernelRuns: kernel[c.name], wallRuns: wall[c.name] }]),
  );
}

export async function benchOptions(out: string): Promise<void> {
  const log = (line: string) => console.error(line);
  const H = 8;
  const scoreCases: Case[] = [
    { name: 'plain', config: {}, options: {} },
    { name: 'softcap', config: {}, options: { softcap: 30 } },
    { name: 'sinks', config: {}, options: { sinks: Float32Array.from({ length: H }, (_, h) => Math.sin(h + 1)) } },
    { name: 'alibi', config: {}, options: { alibiSlopes: Float32Array.from({ length: H }, (_, h) => 2 ** -(h + 1)) } },
    { name: 'rotary', config: { rotary: {} }, options: {} },
  ];
  log('Attention options at B=1 S=2048 E=512 H=8 (kernel time, timestamp queries; rounds interleaved):');
  const score = await measure(2048, scoreCases, 7, log);
  const linearCases: Case[] = [
    { name: 'softmax', config: {}, options: {} },
    { name: 'linear', config: { attention: 'linear' }, options: {} },
  ];
  log('Linear against softmax attention at B=1 S=8192 E=512 H=8:');
  const linear = await measure(8192, linearCases, 3, log);

  const plain = score.plain.kernelMs;
  console.log('\nAttention options, B=1 S=2048 E=512 H=8 (median attention kernel time, ms; rotary includes its head transform)');
  console.log('| option | kernel ms | × plain |');
  console.log('|---|---:|---:|');
  for (const c of scoreCases) console.log(`| ${c.name} | ${score[c.name].kernelMs.toFixed(1)} | ${(score[c.name].kernelMs / plain).toFixed(3)} |`);
  const speedKernel = linear.softmax.kernelMs / linear.linear.kernelMs;
  const speedWall = linear.softmax.wallMs / linear.linear.wallMs;
  console.log('\nLinear against softmax attention, B=1 S=8192 E=512 H=8 (median)');
  console.log('| attention | attention kernels ms | whole layer ms |');
  console.log('|---|---:|---:|');
  for (const c of linearCases) console.log(`| ${c.name} | ${linear[c.name].kernelMs.toFixed(1)} | ${linear[c.name].wallMs.toFixed(0)} |`);
  console.log(`| linear is faster by | ${speedKernel.toFixed(1)}× | ${speedWall.toFixed(1)}× |`);

  const goals = [
    ...['softcap', 'sinks', 'alibi'].map((n) => ({
      goal: `${n} costs < 10% over plain attention (kernel time)`,
      value: score[n].kernelMs / plain,
      met: score[n].kernelMs / plain < 1.1,
    })),
    { goal: 'linear attention ≥ 4× faster than softmax at S=8192 (whole layer)', value: speedWall, met: speedWall >= 4 },
  ];
  console.log('\nPerformance goals of this project:');
  for (const g of goals) console.log(`  ${g.met ? 'met   ' : 'MISSED'} ${g.goal}: ${g.value.toFixed(3)}`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify({ when: new Date().toISOString(), score, linear, goals }, null, 2)}\n`);
  console.log(`\nwrote ${out}`);
}
