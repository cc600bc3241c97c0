// Does Deno's (wgpu's) createComputePipelineAsync block the JavaScript thread while it compiles? (issue 26:
// the forwards that wait during a settle). Prints, per compile, how long the call itself took, how long an
// onSubmittedWorkDone issued right after it took, and the longest gap of a 1 ms interval timer meanwhile.
//   VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.json DENO_WEBGPU_BACKEND=vulkan MESA_SHADER_CACHE_DISABLE=true \
//     node_modules/.bin/deno run --unstable-webgpu -A scripts/deno-compile-lag.ts
import { defineBindings } from '../src/webgpu/bindings.ts';

// The shader's one binding, declared once: its WGSL line and the explicit layout (never inferred).
const bindings = defineBindings('DenoCompileLag', [['data', 'storage', 'array<vec4f>']]);
const adapter = await navigator.gpu.requestAdapter();
const device = await adapter!.requestDevice();
const body = Array.from({ length: 300 }, (_, i) => `acc = fma(acc, vec4f(${(i % 7) + 1}.0), data[(i + ${i}u) % n]);`).join('\n');
for (let rep = 0; rep < 3; rep++) {
  const code = `${bindings.wgsl}
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3u) {
  let n = arrayLength(&data); var acc = vec4f(${rep}.0);
  for (var i = g.x; i < n; i += 4096u) { ${body} }
  data[g.x % n] = acc; }`;
  const module = device.createShaderModule({ code });
  let maxLag = 0,
    last = performance.now(),
    ticks = 0;
  const iv = setInterval(() => {
    const t = performance.now();
    maxLag = Math.max(maxLag, t - last);
    last = t;
    ticks++;
  }, 1);
  const t0 = performance.now();
  const p = device.createComputePipelineAsync({ layout: bindings.pipelineLayout(device), compute: { module, entryPoint: 'main' } });
  const tCall = performance.now() - t0;
  // a queue op issued right after the compile started
  const q0 = performance.now();
  const done = device.queue.onSubmittedWorkDone().then(() => performance.now() - q0);
  await p;
  const tCompile = performance.now() - t0;
  const qMs = await done;
  clearInterval(iv);
  console.log(
    `compile ${tCompile.toFixed(0)} ms (call returned after ${tCall.toFixed(0)} ms); onSubmittedWorkDone issued during it: ${qMs.toFixed(0)} ms; max event-loop gap ${maxLag.toFixed(0)} ms over ${ticks} ticks`,
  );
}
