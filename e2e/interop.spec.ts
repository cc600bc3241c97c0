// Interop in Chromium: this engine between two layers of ONNX Runtime Web (WebGPU EP), then of
// TensorFlow.js (WebGPU backend), on the library's own GPUDevice, GPU buffers passed both ways
// without a readback (e2e/interop.ts). Each chain's output against the same chain in float64.

import { test as base, expect } from '@playwright/test';
import { compareArrays, f32Tolerance } from '../src/util/tolerance.ts';
import { expectNoPageProblems, LoggedPage, sharedPage, WEBGPU_CHECKLIST } from './helpers.ts';
import type { InteropResult } from './interop.ts';

const test = base.extend<object, { interop: LoggedPage }>({
  interop: [
    sharedPage(
      (page) => new LoggedPage(page),
      (p) => p.open('/e2e/interop.html', () => window.interopReady === true, 60_000, 'e2e/interop.html did not load'),
    ),
    { scope: 'worker', timeout: 90_000 },
  ],
});

const S = 12;
const E = 64;

function check(r: InteropResult, testInfo: { annotations: { type: string; description?: string }[] }): void {
  expect(r.sameDevice, 'the engine runs on the library’s device').toBe(true);
  expect(r.gpuErrors, 'validation / out-of-memory errors on the shared device').toEqual([]);
  expect(r.output.length).toBe(S * E);
  // Two dense layers (reductions of E) around the attention layer (E, S, E).
  const tol = f32Tolerance([E, E, S, E, E]);
  const cmp = compareArrays(r.output, r.reference, tol);
  testInfo.annotations.push({ type: 'max error', description: `${r.label}: abs ${cmp.maxAbs.toExponential(2)} (atol = rtol = ${tol.atol.toExponential(2)})` });
  expect(cmp.ok, `${cmp.count} of ${S * E} outside the tolerance; first: ${JSON.stringify(cmp.mismatches)}`).toBe(true);
}

test('ONNX Runtime Web (WebGPU EP) → engine → ONNX Runtime Web on ORT’s device, GPU buffers both ways', async ({ interop }, testInfo) => {
  test.setTimeout(120_000);
  const mark = interop.mark();
  const has = await interop.page.evaluate(async () => !!(await navigator.gpu?.requestAdapter()));
  expect(has, ['no WebGPU adapter in this browser', ...WEBGPU_CHECKLIST].join('\n')).toBe(true);
  const r = await interop.page.evaluate(() => window.runOrtInterop());
  expect(r.firstLocation).toBe('gpu-buffer');
  check(r, testInfo);
  expectNoPageProblems(interop, mark);
});

// A page of its own: ORT takes a device only before its first session.
test('ONNX Runtime Web on the engine’s device (WebGPU EP option device), GPU buffers both ways', async ({ page }, testInfo) => {
  test.setTimeout(120_000);
  const logged = new LoggedPage(page);
  await logged.open('/e2e/interop.html', () => window.interopReady === true, 60_000, 'e2e/interop.html did not load');
  const r = await page.evaluate(() => window.runOrtInterop('engine'));
  expect(r.firstLocation).toBe('gpu-buffer');
  check(r, testInfo);
  expectNoPageProblems(logged, 0);
});

test('TensorFlow.js (WebGPU backend) → engine → TensorFlow.js on its device, GPU buffers both ways', async ({ interop }, testInfo) => {
  test.setTimeout(120_000);
  const mark = interop.mark();
  const r = await interop.page.evaluate(() => window.runTfjsInterop());
  expect(r.firstLocation).toBe('gpu');
  check(r, testInfo);
  expectNoPageProblems(interop, mark);
});

// A page of its own: this replaces TF.js's 'webgpu' backend in the page.
test('TensorFlow.js on the engine’s device (new WebGPUBackend(engine.device)), GPU buffers both ways', async ({ page }, testInfo) => {
  test.setTimeout(120_000);
  const logged = new LoggedPage(page);
  await logged.open('/e2e/interop.html', () => window.interopReady === true, 60_000, 'e2e/interop.html did not load');
  const r = await page.evaluate(() => window.runTfjsInterop('engine'));
  expect(r.firstLocation).toBe('gpu');
  check(r, testInfo);
  expectNoPageProblems(logged, 0);
});
