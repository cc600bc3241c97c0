// `npm run bench -- --roofline`: how far each kernel is from what this adapter can do, in Node on Dawn
// (lavapipe here, the real GPU elsewhere). Three measurements in one run:
//
//   1. The arithmetic ceiling: a kernel of independent vec4 fused multiply-adds on registers (CHAINS
//      chains per invocation, written out, a loop count the compiler cannot see), swept over workgroup
//      sizes and chain counts; the best GFLOP/s (an FMA is 2 FLOPs).
//   2. The memory ceiling: a vec4 copy of 32 MiB, swept over workgroup sizes and vec4s per invocation;
//      the best GB/s (bytes read + bytes written); and the price of one vec4 load in FMAs (loadCost).
//   3. The engine's kernels at each shape (default: B=1 S=128 E=256 H=4 and B=1 S=512 E=512 H=8),
//      every candidate variant of each kernel on this adapter forced in turn (subgroup ones included
//      where the device has the feature), timed by timestamp queries (profile: true): ms, GFLOP/s
//      (demo/bench/flops.ts's terms: QKV 6·B·S·E², attention 4·B·S²·E, output 2·B·S·E²) and % of (1).
//
// Ceilings are best-of over a sweep, on a shared machine: an upper figure for what a kernel of this
// kind reaches here, not the hardware's peak. Prints tables and writes the figures to JSON.

import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { type AttentionEngine, createAttentionEngine } from '../src/index.ts';
import { mulberry32, randomStateDict, uniform } from '../test/helpers/random.ts';
import { defineBindings } from '../src/webgpu/bindings.ts';
import { Usage } from '../src/webgpu/buffers.ts';
import { adapterKind, candidates, defaultChoice, type KernelName } from '../src/webgpu/variants.ts';
import type { BenchShape } from '../demo/bench/types.ts';
import { median } from '../src/util/stats.ts';

/** Wall milliseconds of `repeat` dispatches in one submission, best of `rounds` (after one untimed run). */
async function timeDispatches(device: GPUDevice, pipeline: GPUComputePipeline, group: GPUBindGroup, workgroups: number, repeat: number, rounds = 5): Promise<number> {
  const run = async () => {
    const encoder = device.createCommandEncoder({ label: 'Roofline.encoder' });
    const pass = encoder.beginComputePass({ label: 'Roofline.pass' });
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, group);
    for (let r = 0; r < repeat; r++) pass.dispatchWorkgroups(workgroups);
    pass.end();
    const t0 = performance.now();
    device.queue.submit([encoder.finish()]);
    await device.queue.onSubmittedWorkDone();
    return performance.now() - t0;
  };
  await run();
  let best = Infinity;
  for (let i = 0; i < rounds; i++) best = Math.min(best, await run());
  return best;
}

// Each shader's bindings, declared once: the WGSL lines and the explicit layouts come from these lists
// (no layout inferred from a shader: the load kernel without loads leaves `src` unused, and an
// inferred layout would drop it and refuse the bind group that names it).
const FMA_BINDINGS = defineBindings('Roofline.fma', [
  ['out', 'storage', 'array<vec4<f32>>'],
  ['loops', 'uniform', 'vec4<u32>', 'x: the loop count, hidden from the compiler'],
]);
const COPY_BINDINGS = defineBindings('Roofline.copy', [
  ['src', 'read-only-storage', 'array<vec4<f32>>'],
  ['dst', 'storage', 'array<vec4<f32>>'],
]);
const LOAD_BINDINGS = defineBindings('Roofline.load', [...FMA_BINDINGS.decls, ['src', 'read-only-storage', 'array<vec4<f32>>', 'read only by the variant with loads']]);

function fmaShader(chains: number): string {
  const ids = Array.from({ length: chains }, (_, c) => c);
  return [
    'override WG: u32 = 64u;',
    FMA_BINDINGS.wgsl,
    '@compute @workgroup_size(WG)',
    'fn main(@builtin(global_invocation_id) gid: vec3u) {',
    '  let seed = f32(gid.x) * 1e-7;',
    ...ids.map((c) => `  var a${c} = vec4<f32>(seed + ${c}.0, seed + ${c}.25, seed + ${c}.5, seed + ${c}.75);`),
    '  let m = vec4<f32>(0.999);',
    '  let k = vec4<f32>(1e-3);',
    '  for (var i = 0u; i < loops.x; i++) {',
    ...ids.map((c) => `    a${c} = fma(a${c}, m, k);`),
    '  }',
    `  out[gid.x] = ${ids.map((c) => `a${c}`).join(' + ')};`,
    '}',
  ].join('\n');
}

const COPY_SHADER = `
override WG: u32 = 64u;
override PER: u32 = 1u;  // vec4s per invocation, WG·PER apart
${COPY_BINDINGS.wgsl}
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lix: u32) {
  let base = wid.x * WG * PER + lix;
  for (var p = 0u; p < PER; p++) {
    dst[base + p * WG] = src[base + p * WG];
  }
}`;

// The price of a load: LOADS vec4 loads from storage at addresses that differ per invocation, beside
// 16 independent vec4 FMA chains, against the same FMAs with values made from the loop counter instead.
// On GPUs a load costs little beside FMAs; on CPU drivers it can cost dozens (lavapipe gathers each
// lane's element one at a time), which bounds any kernel by its loads per FMA, not by the FMA ceiling.
const LOADS = 4;
function loadShader(load: boolean): string {
  const ids = Array.from({ length: 16 }, (_, c) => c);
  const value = (i: number) => (load ? `src[(i * ${LOADS}u + ${i}u + lix * 7u) & 4095u]` : `vec4<f32>(f32(i + ${i}u))`);
  return [
    LOAD_BINDINGS.wgsl,
    '@compute @workgroup_size(64)',
    'fn main(@builtin(global_invocation_id) gid: vec3u, @builtin(local_invocation_index) lix: u32) {',
    ...ids.map((c) => `  var a${c} = vec4<f32>(f32(gid.x) * 1e-7 + ${c}.0);`),
    '  let m = vec4<f32>(0.999);',
    '  for (var i = 0u; i < loops.x; i++) {',
    ...Array.from({ length: LOADS }, (_, i) => `    let v${i} = ${value(i)};`),
    ...ids.map((c) => `    a${c} = fma(a${c}, v${c % LOADS}, m);`),
    '  }',
    `  out[gid.x] = ${ids.map((c) => `a${c}`).join(' + ')};`,
    '}',
  ].join('\n');
}

/** Nanoseconds per invocation of one vec4 storage load (loop of LOADS loads beside 16 FMA chains, minus the FMAs alone). */
async function loadCost(device: GPUDevice): Promise<number> {
  const invocations = 64 * 256;
  const loops = 1024;
  const out = device.createBuffer({ label: 'Roofline.loadOut', size: invocations * 16, usage: Usage.STORAGE });
  const src = device.createBuffer({ label: 'Roofline.loadSrc', size: 4096 * 16, usage: Usage.STORAGE });
  const uniformBuffer = device.createBuffer({ label: 'Roofline.loops', size: 16, usage: Usage.UNIFORM | Usage.COPY_DST });
  device.queue.writeBuffer(uniformBuffer, 0, Uint32Array.from([loops, 0, 0, 0]));
  const ms: number[] = [];
  for (const load of [false, true]) {
    const module = device.createShaderModule({ label: `Roofline.load${load}`, code: loadShader(load) });
    const pipeline = await device.createComputePipelineAsync({
      label: 'Roofline.load',
      layout: LOAD_BINDINGS.pipelineLayout(device),
      compute: { module, entryPoint: 'main' },
    });
    const group = LOAD_BINDINGS.group(device, { out, loops: uniformBuffer, src });
    ms.push(await timeDispatches(device, pipeline, group, invocations / 64, 4));
  }
  for (const b of [out, src, uniformBuffer]) b.destroy();
  return Math.max(0, ((ms[1] - ms[0]) * 1e6) / (4 * invocations * loops * LOADS));
}

interface Ceiling {
  best: number;
  config: string;
  sweep: Record<string, number>;
}

async function fmaCeiling(device: GPUDevice, log: (line: string) => void): Promise<Ceiling> {
  const invocations = 64 * 1024;
  const loops = 64;
  const out = device.createBuffer({ label: 'Roofline.fmaOut', size: invocations * 16, usage: Usage.STORAGE });
  const uniformBuffer = device.createBuffer({ label: 'Roofline.loops', size: 16, usage: Usage.UNIFORM | Usage.COPY_DST });
  device.queue.writeBuffer(uniformBuffer, 0, Uint32Array.from([loops, 0, 0, 0]));
  const sweep: Record<string, number> = {};
  for (const chains of [4, 8, 16]) {
    const module = device.createShaderModule({ label: `Roofline.fma${chains}`, code: fmaShader(chains) });
    for (const wg of [64, 256]) {
      const pipeline = await device.createComputePipelineAsync({
        label: 'Roofline.fma',
        layout: FMA_BINDINGS.pipelineLayout(device),
        compute: { module, entryPoint: 'main', constants: { WG: wg } },
      });
      const group = FMA_BINDINGS.group(device, { out, loops: uniformBuffer });
      const ms = await timeDispatches(device, pipeline, group, invocations / wg, 4);
      const gflops = (4 * invocations * loops * chains * 4 * 2) / (ms * 1e6);
      sweep[`chains ${chains}, workgroup ${wg}`] = gflops;
      log(`  FMA chains ${chains} workgroup ${wg}: ${gflops.toFixed(1)} GFLOP/s`);
    }
  }
  out.destroy();
  uniformBuffer.destroy();
  const [config, best] = Object.entries(sweep).sort((a, b) => b[1] - a[1])[0];
  return { best, config, sweep };
}

async function copyCeiling(device: GPUDevice, log: (line: string) => void): Promise<Ceiling> {
  const bytes = 32 * 1024 * 1024;
  const usage = Usage.STORAGE;
  const src = device.createBuffer({ label: 'Roofline.copySrc', size: bytes, usage });
  const dst = device.createBuffer({ label: 'Roofline.copyDst', size: bytes, usage });
  const module = device.createShaderModule({ label: 'Roofline.copy', code: COPY_SHADER });
  const sweep: Record<string, number> = {};
  for (const per of [1, 4]) {
    for (const wg of [64, 256]) {
      const pipeline = await device.createComputePipelineAsync({
        label: 'Roofline.copy',
        layout: COPY_BINDINGS.pipelineLayout(device),
        compute: { module, entryPoint: 'main', constants: { WG: wg, PER: per } },
      });
      const group = COPY_BINDINGS.group(device, { src, dst });
      const ms = await timeDispatches(device, pipeline, group, bytes / 16 / (wg * per), 2);
      const gbs = (2 * 2 * bytes) / (ms * 1e6);
      sweep[`${per} vec4 per invocation, workgroup ${wg}`] = gbs;
      log(`  copy ${per} vec4/invocation workgroup ${wg}: ${gbs.toFixed(1)} GB/s`);
    }
  }
  src.destroy();
  dst.destroy();
  const [config, best] = Object.entries(sweep).sort((a, b) => b[1] - a[1])[0];
  return { best, config, sweep };
}

interface KernelFigure {
  shape: string;
  kernel: KernelName;
  variant: string;
  builtIn: boolean;
  ms: number;
  gflops: number;
  ofCeiling: number;
}

function kernelFlops(kernel: KernelName, { batchSize: B, seqLen: S, embedDim: E, isCausal }: BenchShape): number {
  if (kernel === 'qkv_projection') return 6 * B * S * E * E;
  if (kernel === 'output_projection') return 2 * B * S * E * E;
  return (4 * B * S * S * E) / (isCausal ? 2 : 1);
}

/** Median kernel ms of `engine` at `shape` (timestamp queries), after one untimed forward (compiles). */
async function kernelTimes(engine: AttentionEngine, shape: BenchShape, runs: number): Promise<Record<string, number>> {
  const layer = { embedDim: shape.embedDim, numHeads: shape.numHeads };
  const mha = engine.createMultiHeadAttention(layer, randomStateDict(layer, 1));
  const x = uniform(shape.batchSize * shape.seqLen * shape.embedDim, 1, mulberry32(2));
  const options = { batchSize: shape.batchSize, seqLen: shape.seqLen, isCausal: shape.isCausal };
  await mha.forward(x, options);
  const samples: Record<string, number[]> = {};
  for (let r = 0; r < runs; r++) {
    const { timings } = await mha.forward(x, options);
    for (const [k, ms] of Object.entries(timings ?? {})) samples[k] = [...(samples[k] ?? []), ms];
  }
  mha.dispose();
  return Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, median(v)]));
}

export async function benchRoofline(options: { shapes: { id: string; shape: BenchShape }[]; runs: number; out: string }): Promise<void> {
  const log = (line: string) => console.error(line);
  const owner = await createAttentionEngine({ backend: 'webgpu', profile: true, tuning: { mode: 'off' } });
  if (!owner.profiling) throw new Error('this adapter has no timestamp-query: kernel times cannot be measured');
  const device = owner.device!;
  const info = owner.adapterInfo!;
  const kind = adapterKind(info);
  const subgroups = device.features.has('subgroups');
  const sizes = device.adapterInfo as GPUAdapterInfo & { subgroupMinSize?: number; subgroupMaxSize?: number };
  const adapter = `${info.vendor} ${info.architecture} ${info.description}`.trim();
  const subgroupText = subgroups ? `subgroups ${sizes.subgroupMinSize ?? '?'}…${sizes.subgroupMaxSize ?? '?'} lanes` : 'no subgroups';
  log(`adapter: ${adapter} (${kind}; ${subgroupText})`);
  log('Arithmetic ceiling (independent vec4 FMA chains):');
  const fma = await fmaCeiling(device, log);
  log('Memory ceiling (vec4 copy, 32 MiB):');
  const copy = await copyCeiling(device, log);
  const loadNs = await loadCost(device);
  // A vec4 FMA is 8 FLOPs: its time per invocation at the arithmetic ceiling.
  const loadInFmas = loadNs / (8 / fma.best);
  log(`Load cost: a vec4 storage load ${loadNs.toFixed(3)} ns per invocation, ${loadInFmas.toFixed(1)} vec4 FMAs at the ceiling`);

  const figures: KernelFigure[] = [];
  const builtIn = defaultChoice(kind, subgroups);
  for (const { id, shape } of options.shapes) {
    const forcedSets = [...new Set([builtIn.qkv_projection, ...candidates(kind, 'qkv_projection', subgroups)].map((v) => v as string))].map((v) => ({
      kernels: { qkv_projection: v, output_projection: v },
      measures: ['qkv_projection', 'output_projection'] as KernelName[],
    }));
    for (const v of new Set([builtIn.flash_attention, ...candidates(kind, 'flash_attention', subgroups)])) {
      forcedSets.push({ kernels: { flash_attention: v } as never, measures: ['flash_attention'] });
    }
    for (const { kernels, measures } of forcedSets) {
      const engine = await createAttentionEngine({ backend: 'webgpu', device, profile: true, tuning: { mode: 'off', kernels: kernels as never } });
      const times = await kernelTimes(engine, shape, options.runs);
      engine.dispose();
      for (const kernel of measures) {
        const variant = (kernels as Record<string, string>)[kernel];
        const gflops = kernelFlops(kernel, shape) / (times[kernel] * 1e6);
        figures.push({ shape: id, kernel, variant, builtIn: builtIn[kernel] === variant, ms: times[kernel], gflops, ofCeiling: gflops / fma.best });
        log(`  ${id} ${kernel} ${variant}: ${times[kernel].toFixed(2)} ms, ${gflops.toFixed(2)} GFLOP/s`);
      }
    }
  }
  owner.dispose();

  console.log(`\nRoofline on ${adapter} (${kind}; ${subgroupText}), Node on Dawn`);
  console.log(`  arithmetic ceiling: ${fma.best.toFixed(1)} GFLOP/s (vec4 FMA, ${fma.config})`);
  console.log(`  memory ceiling:     ${copy.best.toFixed(1)} GB/s (vec4 copy, ${copy.config})`);
  console.log(`  a vec4 load:        ${loadNs.toFixed(3)} ns per invocation = ${loadInFmas.toFixed(1)} vec4 FMAs at that ceiling (per-invocation addresses)`);
  console.log('\n| shape | kernel | variant | ms | GFLOP/s | % of FMA ceiling |');
  console.log('|---|---|---|---:|---:|---:|');
  for (const f of figures) {
    const name = f.builtIn ? `${f.variant} (built-in)` : f.variant;
    console.log(`| ${f.shape} | ${f.kernel} | ${name} | ${f.ms.toFixed(2)} | ${f.gflops.toFixed(2)} | ${(100 * f.ofCeiling).toFixed(1)} |`);
  }
  mkdirSync(dirname(options.out), { recursive: true });
  const shapes = Object.fromEntries(options.shapes.map(({ id, shape }) => [id, shape]));
  writeFileSync(
    options.out,
    `${JSON.stringify({ when: new Date().toISOString(), adapter, kind, subgroups, fma, copy, loadNs, loadInFmas, shapes, figures }, null, 2)}\n`,
  );
  console.log(`\nwrote ${options.out}`);
}
