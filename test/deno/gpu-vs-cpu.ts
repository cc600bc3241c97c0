// The built package (dist/index.js) in Deno, on Deno's own WebGPU (wgpu; lavapipe on a GPU-less
// machine) against the engine's float64 CPU backend: the built-in kernel choice for the adapter once,
// then every kernel variant that runs without the `subgroups` feature (which wgpu does not offer),
// each forced once (tuning: { mode: 'off', kernels }), in f32 and, where the adapter has shader-f16, f16.
// Then quantized weights (q4_0, q8_0): a prefill into a KV cache and a decode step, the packed kernels.
// A forced choice pairs one attention body with two GEMM cores (QKV and output), so the 7 bodies and 5
// cores take 7 forwards per precision, each at one awkward shape (S one past a 32-row tile, Dh = 12,
// causal, B = 2). Time is lavapipe compiling (this 2-core machine, 2026-12-02): 48 s with an empty Mesa
// shader cache (as in npm test), about 1 s with every pipeline cached; at Dh = 20 it was 65 s cold.
//
// Run by scripts/deno-test.mjs (npm run test:deno), which builds dist/ first where it is missing:
//   VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.json deno run --unstable-webgpu -A test/deno/gpu-vs-cpu.ts
// Without an adapter it fails and says what is missing; it never skips. The comparison rule is the
// tests' own (src/util/tolerance.ts, which imports nothing, so Deno reads it as it is).

import type { AttentionEngine, AttentionVariant, ProjectionVariant, TuningOptions } from '../../src/index.ts';
import { randomLayerInputs } from '../helpers/random.ts';
import { compareArrays, f16Tolerance, f32Tolerance, maxAbsFinite } from '../../src/util/tolerance.ts';

declare const Deno: { version: { deno: string }; exit(code: number): never; args: string[] };

// Every variant, and whether it needs subgroups (a Record, so a variant added to the types and left
// out here fails the type check: src/webgpu/variants/ and software/ hold them).
const PROJECTIONS: Record<ProjectionVariant, { subgroups: boolean }> = {
  'register-4x4': { subgroups: false },
  'register-8x8': { subgroups: false },
  'workgroup-64': { subgroups: false },
  'workgroup-128': { subgroups: false },
  'subgroup-4x4': { subgroups: true },
  'subgroup-8x4': { subgroups: true },
  'subgroup-16x4': { subgroups: true },
  gemv: { subgroups: false },
  'gemv-rows': { subgroups: false },
  'gemv-rows-subgroup': { subgroups: true },
};
const ATTENTION: Record<AttentionVariant, { subgroups: boolean }> = {
  'rows32-keys32': { subgroups: false },
  'rows64-keys32': { subgroups: false },
  'rows32-keys32-loop': { subgroups: false },
  'rows32-keys32-r2': { subgroups: false },
  'rows32-keys32-r4': { subgroups: false },
  'rows64-keys32-r4': { subgroups: false },
  'rows16-keys32-sg': { subgroups: true },
  'rows32-keys4-r4-unrolled': { subgroups: false },
  'rows64-keys4-r2-shuffle': { subgroups: true },
  'rows128-keys4-r4-shuffle': { subgroups: true },
};

type Kernels = NonNullable<TuningOptions['kernels']>;

const LAYER = { embedDim: 24, numHeads: 2, bias: true }; // Dh = 12: not a power of two
const CALL = { batchSize: 2, seqLen: 33, isCausal: true }; // S one past the 32-row tiles

const LVP_ICD = '/usr/share/vulkan/icd.d/lvp_icd.json';

function fail(lines: string[]): never {
  console.error(lines.join('\n'));
  Deno.exit(1);
}

const t0 = performance.now();
const gpu = (navigator as Navigator & { gpu?: GPU }).gpu;
if (!gpu) fail(['deno gpu-vs-cpu: FAILED: no navigator.gpu. Deno has WebGPU only with --unstable-webgpu (scripts/deno-test.mjs passes it).']);
const adapter = await gpu.requestAdapter();
const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env ?? {};
if (!adapter) {
  fail([
    'deno gpu-vs-cpu: FAILED: navigator.gpu.requestAdapter() returned null: no WebGPU adapter.',
    `  VK_ICD_FILENAMES=${env.VK_ICD_FILENAMES ?? '(unset)'}, DENO_WEBGPU_BACKEND=${env.DENO_WEBGPU_BACKEND ?? '(unset)'}`,
    `  Without a GPU, Deno's wgpu needs Mesa's lavapipe (${LVP_ICD}): bash scripts/setup-system.sh lavapipe`,
  ]);
}

const distUrl = new URL('../../dist/index.js', import.meta.url).href;
const { createAttentionEngine, quantizeWeights, referenceMultiHeadAttention } = (await import(distUrl)) as typeof import('../../src/index.ts');

const owner = await createAttentionEngine({ backend: 'webgpu', tuning: { mode: 'off', store: null } });
const cpu = await createAttentionEngine({ backend: 'cpu' });
const device = owner.device!;
// The device has what the adapter offers of these (webgpu/device.ts asks for them where offered).
const features = [...device.features].sort();
const hasF16 = device.features.has('shader-f16');
const hasSubgroups = device.features.has('subgroups');
const uncaptured: string[] = [];
device.addEventListener('uncapturederror', (ev) => uncaptured.push((ev as GPUUncapturedErrorEvent).error.message));
console.log(`deno ${Deno.version.deno}; adapter ${JSON.stringify(owner.adapterInfo)}; features ${features.join(', ')}`);
console.log(`built-in choice (tuning 'off'): ${JSON.stringify(owner.tuning!.defaults)}`);

// Each attention body once, the GEMM cores taking turns as QKV and output projection.
const projections = (Object.keys(PROJECTIONS) as ProjectionVariant[]).filter((v) => hasSubgroups || !PROJECTIONS[v].subgroups);
const bodies = (Object.keys(ATTENTION) as AttentionVariant[]).filter((v) => hasSubgroups || !ATTENTION[v].subgroups);
const forced: Kernels[] = Array.from({ length: Math.max(projections.length, bodies.length) }, (_, i) => ({
  qkv_projection: projections[i % projections.length],
  flash_attention: bodies[i % bodies.length],
  output_projection: projections[(i + 1) % projections.length],
}));
const choices: (Kernels | null)[] = [null, ...forced]; // null: the built-in choice

const { stateDict, query } = randomLayerInputs(LAYER, CALL.batchSize * CALL.seqLen, 26);
const cpuLayer = cpu.createMultiHeadAttention(LAYER, stateDict);
const reference = (await cpuLayer.forward(query, CALL)).output; // [B, S, E]: float64, rounded to f32
cpuLayer.dispose();
// f16's tolerance grows with the largest logit (float16 Q and K): the reference's scaled scores.
const maxAbsLogit = maxAbsFinite(referenceMultiHeadAttention(LAYER, stateDict, query, CALL).scores ?? []);
const E = LAYER.embedDim;
const reductions = [E, CALL.seqLen, E];

let passed = 0;
let failed = 0;
/** Counts a check and prints its line: FAIL with the problem, else ok with `detail` (none printed here when it is null: the check printed its own). */
function record(name: string, problem: string, detail: string | null = ''): void {
  if (problem) {
    failed++;
    console.log(`FAIL  ${name}: ${problem}`);
    return;
  }
  passed++;
  if (detail !== null) console.log(`ok    ${name}${detail ? `  (${detail})` : ''}`);
}
for (const precision of hasF16 ? (['f32', 'f16'] as const) : (['f32'] as const)) {
  const tol = precision === 'f16' ? f16Tolerance(reductions, maxAbsFinite(reference), maxAbsLogit) : f32Tolerance(reductions);
  for (const kernels of choices) {
    const name = `${precision} ${kernels ? `qkv ${kernels.qkv_projection}, attention ${kernels.flash_attention}, output ${kernels.output_projection}` : 'built-in choice'}`;
    const c0 = performance.now();
    let engine: AttentionEngine | null = null;
    let problem = '';
    try {
      engine = await createAttentionEngine({ backend: 'webgpu', device, precision, tuning: { mode: 'off', store: null, ...(kernels ? { kernels } : {}) } });
      const layer = engine.createMultiHeadAttention(LAYER, stateDict);
      device.pushErrorScope('out-of-memory');
      device.pushErrorScope('validation');
      let output: Float32Array | null = null;
      try {
        output = (await layer.forward(query, CALL)).output;
      } catch (e) {
        problem = `forward threw ${(e as Error).name}: ${(e as Error).message}`;
      } finally {
        layer.dispose();
      }
      const validation = await device.popErrorScope();
      const oom = await device.popErrorScope();
      if (validation) problem ||= `validation error: ${validation.message}`;
      if (oom) problem ||= `out-of-memory error: ${oom.message}`;
      if (output && !problem) {
        const cmp = compareArrays(output, reference, tol);
        if (!cmp.ok) {
          const first = cmp.mismatches.map(
            (m) => `[${m.index}] got ${m.actual}, expected ${m.expected} (|err| ${m.error.toExponential(2)} > ${m.allowed.toExponential(2)})`,
          );
          problem = `${cmp.count} of ${output.length} elements outside atol ${tol.atol.toExponential(2)} + rtol ${tol.rtol.toExponential(2)}·|ref|: ${first.join('; ')}`;
        } else {
          const ms = (performance.now() - c0).toFixed(0);
          console.log(`ok    ${name}  (max abs ${cmp.maxAbs.toExponential(2)}, atol ${tol.atol.toExponential(2)}; ${ms} ms with compiling)`);
        }
      }
    } catch (e) {
      problem = `${(e as Error).name}: ${(e as Error).message}`;
    } finally {
      engine?.dispose();
    }
    record(name, problem, null);
  }
}
// The default tuning (mode 'auto') on wgpu: wgpu compiles on the thread that serves the device, so
// nothing runs in the background (scheduler.ts): the call runs the final kernels, compiled in line, and
// leaves nothing queued; engine.tuning says why.
{
  const name = 'f32 default tuning on wgpu: final kernels in line, nothing in the background';
  let problem = '';
  let engine: AttentionEngine | null = null;
  try {
    engine = await createAttentionEngine({ backend: 'webgpu', device, tuning: { store: null } });
    const bg = engine.tuning!.background;
    if (bg.enabled || !bg.why.includes('wgpu (Deno')) problem = `engine.tuning.background is ${JSON.stringify(bg)}; expected off, naming wgpu (Deno …)`;
    const layer = engine.createMultiHeadAttention(LAYER, stateDict);
    try {
      const cmp = compareArrays((await layer.forward(query, CALL)).output, reference, f32Tolerance(reductions));
      if (!cmp.ok) problem ||= `${cmp.count} elements outside the f32 rule`;
    } finally {
      layer.dispose();
    }
    const { pending, compiled, choices } = engine.tuning!;
    if (pending !== 0 || compiled.length || choices.length)
      problem ||= `background work after the call: pending ${pending}, compiled ${compiled.length}, swept ${choices.length}`;
  } catch (e) {
    problem = `${(e as Error).name}: ${(e as Error).message}`;
  } finally {
    engine?.dispose();
  }
  record(name, problem);
}
// Quantized weights (4 and 8 bits, as the GGUF types q4_0 and q8_0 store them), the built-in choice: a
// prefill of 5 tokens into a KV cache runs the packed GEMM cores, then one decode step of B = 2 tokens
// the packed decode GEMV (gemv-rows on a CPU adapter, gemv on a GPU), each against the CPU backend
// given the same quantized weights (it dequantizes them exactly, as ggml does). K = E = 64: the GGUF
// types need K a multiple of 32.
const QLAYER = { embedDim: 64, numHeads: 2, numKvHeads: 1, bias: true };
const QB = 2;
const QP = 5;
for (const dtype of ['q4_0', 'q8_0'] as const) {
  const name = `f32 ${dtype} weights, built-in choice: prefill ${QP} tokens, then a decode step`;
  const c0 = performance.now();
  let problem = '';
  const { stateDict: floats, query: qx } = randomLayerInputs(QLAYER, QB * (QP + 1), 27);
  const sd = quantizeWeights(floats, { dtype });
  const E = QLAYER.embedDim;
  const part = (s0: number, s1: number) => {
    const out = new Float32Array(QB * (s1 - s0) * E);
    for (let b = 0; b < QB; b++) out.set(qx.subarray((b * (QP + 1) + s0) * E, (b * (QP + 1) + s1) * E), b * (s1 - s0) * E);
    return out;
  };
  const steps = async (e: AttentionEngine) => {
    const layer = e.createMultiHeadAttention(QLAYER, sd);
    const cache = layer.createKvCache({ batchSize: QB, maxSeqLen: QP + 1 });
    try {
      const prefill = (await layer.forward(part(0, QP), { batchSize: QB, seqLen: QP, kvCache: cache, isCausal: true })).output;
      const decode = (await layer.forward(part(QP, QP + 1), { batchSize: QB, seqLen: 1, kvCache: cache, isCausal: true })).output;
      return [prefill, decode];
    } finally {
      cache.dispose();
      layer.dispose();
    }
  };
  try {
    const want = await steps(cpu);
    const got = await steps(owner);
    for (const [i, what] of ['prefill', 'decode step'].entries()) {
      const tol = f32Tolerance([E, QP + 1, E]);
      const cmp = compareArrays(got[i], want[i], tol);
      if (!cmp.ok) {
        const [m] = cmp.mismatches;
        problem ||= `${what}: ${cmp.count} of ${got[i].length} elements outside the f32 rule; [${m.index}] got ${m.actual}, expected ${m.expected}`;
      }
    }
  } catch (e) {
    problem = `${(e as Error).name}: ${(e as Error).message}`;
  }
  record(name, problem, `${(performance.now() - c0).toFixed(0)} ms with compiling`);
}
await new Promise((r) => setTimeout(r, 0)); // late uncaptured-error events land first
if (uncaptured.length) {
  failed++;
  console.log(`FAIL  uncaptured WebGPU errors over the run:\n  ${uncaptured.join('\n  ')}`);
}
owner.dispose();
cpu.dispose();
const skipped = hasF16 ? '' : ' (no shader-f16 on this adapter: f32 only)';
console.log(`deno gpu-vs-cpu: ${passed} passed, ${failed} failed${skipped}; ${((performance.now() - t0) / 1000).toFixed(1)} s`);
Deno.exit(failed ? 1 : 0);
