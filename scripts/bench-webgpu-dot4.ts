// Whether WGSL's integer dot product pays on this WebGPU adapter (issue 41: "integer dot products on
// 8-bit activations … on WebGPU where it pays: WGSL's dot4I8Packed"): one loop per way of multiplying
// 4 pairs and summing them, 8 independent accumulators in registers (nothing loaded, nothing else),
// every product reading an operand that moves each step, 64 workgroups of 64 invocations; G products
// a second, median of --runs after one warm dispatch:
//   dot4I8Packed(a, b)                 4 i8 products for 1 call (packed_4x8_integer_dot_product)
//   dot(unpack4xI8(a), unpack4xI8(b))  the same, as vec4<i32>
//   dot(vec4f, vec4f)                  4 f32 products (the float kernels' vec4 loads)
//   fma(vec4f, vec4f, vec4f)           4 f32 multiply-adds into a vec4 accumulator
// A 'q8' projection would take the first where it beats the float rows by more than its extra work
// (packing activations to i8, a scale per block of 32). The adapter is the engine's (acquireDevice:
// Node's Dawn, lavapipe or SwiftShader here).
//
//   node scripts/run-ts.mjs scripts/bench-webgpu-dot4.ts [--runs 5] [--iterations 4000]

import { Usage } from '../src/webgpu/buffers.ts';
import { acquireDevice } from '../src/webgpu/device.ts';
import { median } from '../src/util/stats.ts';
import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  runs: { type: 'string', default: '5' },
  iterations: { type: 'string', default: '4000' },
});
const runs = Number(values.runs);
const N = Number(values.iterations);
if (!(Number.isInteger(runs) && runs > 0) || !(Number.isInteger(N) && N > 0)) {
  console.error(`bench-webgpu-dot4: --runs and --iterations must be positive integers (given ${values.runs} and ${values.iterations})`);
  process.exit(2);
}
const [WG, GROUPS] = [64, 64];

/** A loop's body: its operands' declarations and 8 accumulators' types, its steps, how it moves the operands, and the sum written. */
interface Loop {
  name: string;
  setup: string;
  step: (acc: string, x: string, y: string) => string;
  move: string;
  sum: string;
}

const PAIRS = [
  ['a', 'b'],
  ['a', 'c'],
  ['a', 'd'],
  ['e', 'b'],
  ['e', 'c'],
  ['e', 'd'],
  ['a', 'a'],
  ['e', 'e'],
];

const INT_SETUP = (wrap: (s: string) => string) =>
  `var a = id.x * 2654435761u; var e = a ^ 0x9e3779b9u; let b = ${wrap('0x01020304u')}; let c = ${wrap('0x7f01fe03u')}; let d = ${wrap('0x11223344u')};`;
const FLOAT_SETUP =
  'var a = vec4f(f32(id.x) * 1e-3, 0.5, 0.25, 0.125); var e = a * 0.7; let b = vec4f(1.0, 1e-3, 2e-3, 3e-3); let c = vec4f(4e-3, 5e-3, 6e-3, 7e-3); let d = vec4f(8e-3, 9e-3, 1e-2, 1.1e-2);';

const LOOPS: Loop[] = [
  {
    name: 'dot4I8Packed(a, b)',
    setup: `${INT_SETUP((s) => s)} var s = array<i32, 8>();`,
    step: (acc, x, y) => `${acc} += dot4I8Packed(${x}, ${y});`,
    move: 'a += b; e += c;',
    sum: 'var t = 0; for (var k = 0; k < 8; k++) { t += s[k]; } out[id.x] = t;',
  },
  {
    name: 'dot(unpack4xI8(a), unpack4xI8(b))',
    setup: `${INT_SETUP((s) => `unpack4xI8(${s})`)} var s = array<i32, 8>();`,
    step: (acc, x, y) => `${acc} += dot(${x === 'a' || x === 'e' ? `unpack4xI8(${x})` : x}, ${y === 'a' || y === 'e' ? `unpack4xI8(${y})` : y});`,
    move: 'a += 0x01020304u; e += 0x7f01fe03u;',
    sum: 'var t = 0; for (var k = 0; k < 8; k++) { t += s[k]; } out[id.x] = t;',
  },
  {
    name: 'dot(vec4f, vec4f)',
    setup: `${FLOAT_SETUP} var s = array<f32, 8>();`,
    step: (acc, x, y) => `${acc} += dot(${x}, ${y});`,
    move: 'a += b; e += c;',
    sum: 'var t = 0.0; for (var k = 0; k < 8; k++) { t += s[k]; } out[id.x] = i32(t);',
  },
  {
    name: 'fma(vec4f, vec4f, vec4f)',
    setup: `${FLOAT_SETUP} var s = array<vec4f, 8>();`,
    step: (acc, x, y) => `${acc} = fma(${x}, ${y}, ${acc});`,
    move: 'a += b; e += c;',
    sum: 'var t = vec4f(0); for (var k = 0; k < 8; k++) { t += s[k]; } out[id.x] = i32(t.x + t.y + t.z + t.w);',
  },
];

function source(loop: Loop): string {
  return `@group(0) @binding(0) var<storage, read_write> out: array<i32>;
@compute @workgroup_size(${WG}) fn main(@builtin(global_invocation_id) id: vec3u) {
  ${loop.setup}
  for (var i = 0u; i < ${N}u; i++) {
    ${PAIRS.map(([x, y], k) => loop.step(`s[${k}]`, x, y)).join('\n    ')}
    ${loop.move}
  }
  ${loop.sum}
}`;
}

const { device, adapterInfo } = await acquireDevice();
try {
  console.log(`adapter ${adapterInfo.vendor} ${adapterInfo.architecture} ${adapterInfo.device}`);
  console.log(`G products a second, ${GROUPS}×${WG} invocations × ${N} steps × 8 accumulators, median of ${runs}`);
  const out = device.createBuffer({ size: WG * GROUPS * 4, usage: Usage.STORAGE });
  for (const loop of LOOPS) {
    const module = device.createShaderModule({ code: source(loop) });
    const errors = (await module.getCompilationInfo()).messages.filter((m) => m.type === 'error');
    if (errors.length > 0) {
      console.log(`  ${loop.name.padEnd(36)} does not compile here: ${errors.map((m) => m.message).join('; ')}`);
      continue;
    }
    const pipeline = await device.createComputePipelineAsync({ layout: 'auto', compute: { module, entryPoint: 'main' } });
    const bind = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: out } }] });
    const dispatch = async () => {
      const encoder = device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, bind);
      pass.dispatchWorkgroups(GROUPS);
      pass.end();
      const t0 = performance.now();
      device.queue.submit([encoder.finish()]);
      await device.queue.onSubmittedWorkDone();
      return performance.now() - t0;
    };
    await dispatch();
    const times: number[] = [];
    for (let r = 0; r < runs; r++) times.push(await dispatch());
    const ms = median(times);
    console.log(`  ${loop.name.padEnd(36)} ${ms.toFixed(1).padStart(8)} ms  ${((WG * GROUPS * N * 8 * 4) / ms / 1e6).toFixed(2).padStart(7)} G/s`);
  }
  out.destroy();
} finally {
  device.destroy();
}
