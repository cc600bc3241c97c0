// Does a pipeline compile in Firefox (wgpu, in its GPU process) hold up other device work? (issue 26: the
// forwards that wait during a settle). In a fresh headless Firefox (scripts/firefox.ts), a 16-byte readback
// (nudged by empty submits, as src/webgpu/completion.ts does) alone, then started right after
// createComputePipelineAsync. `node scripts/run-ts.mjs scripts/firefox-compile-lag.ts`
import { startFirefox } from '../scripts/firefox.ts';
const s = await startFirefox(5199, { fastCompiles: false });
try {
  const page = await s.browser.newPage();
  page.on('console', (m) => console.log('page:', m.text()));
  await page.goto(`${s.base}/demo/bench/cold.html`);
  const out = await page.evaluate(async () => {
    const adapter = await navigator.gpu.requestAdapter();
    const device = await adapter!.requestDevice();
    const small = device.createShaderModule({
      code: '@group(0) @binding(0) var<storage, read_write> d: array<u32>; @compute @workgroup_size(1) fn main() { d[0] += 1u; }',
    });
    // One storage buffer at binding 0 in both shaders; the layout is written out, not inferred (the code
    // runs inside the page, so it cannot import src/webgpu/bindings.ts).
    const groupLayout = device.createBindGroupLayout({ entries: [{ binding: 0, visibility: GPUShaderStage.COMPUTE, buffer: { type: 'storage' } }] });
    const layout = device.createPipelineLayout({ bindGroupLayouts: [groupLayout] });
    const sp = device.createComputePipeline({ layout, compute: { module: small, entryPoint: 'main' } });
    const buf = device.createBuffer({ size: 16, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
    const bg = device.createBindGroup({ layout: groupLayout, entries: [{ binding: 0, resource: { buffer: buf } }] });
    async function readback(): Promise<number> {
      const rb = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      const enc = device.createCommandEncoder();
      const pass = enc.beginComputePass();
      pass.setPipeline(sp);
      pass.setBindGroup(0, bg);
      pass.dispatchWorkgroups(1);
      pass.end();
      enc.copyBufferToBuffer(buf, 0, rb, 0, 16);
      const t0 = performance.now();
      device.queue.submit([enc.finish()]);
      const p = rb.mapAsync(GPUMapMode.READ);
      let done = false;
      p.then(() => {
        done = true;
      });
      while (!done) {
        await new Promise((r) => setTimeout(r, 1));
        device.queue.submit([]);
      }
      await p;
      rb.destroy();
      return performance.now() - t0;
    }
    const lines: string[] = [];
    for (let i = 0; i < 3; i++) lines.push(`readback alone ${(await readback()).toFixed(1)} ms`);
    const body = Array.from({ length: 300 }, (_, i) => `acc = fma(acc, vec4f(${(i % 7) + 1}.0), data[(i + ${i}u) % n]);`).join('\n');
    for (let rep = 0; rep < 3; rep++) {
      const code = `@group(0) @binding(0) var<storage, read_write> data: array<vec4f>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3u) {
  let n = arrayLength(&data); var acc = vec4f(${rep + 10}.0);
  for (var i = g.x; i < n; i += 4096u) { ${body} }
  data[g.x % n] = acc; }`;
      const module = device.createShaderModule({ code });
      const t0 = performance.now();
      const p = device.createComputePipelineAsync({ layout, compute: { module, entryPoint: 'main' } }).then(() => performance.now() - t0);
      const call = performance.now() - t0;
      const r = await readback();
      const c = await p;
      lines.push(`compile ${c.toFixed(0)} ms (call ${call.toFixed(0)} ms); a readback started right after it: ${r.toFixed(1)} ms`);
    }
    return lines;
  });
  console.log(out.join('\n'));
} finally {
  await s.close();
}
process.exit(0);
