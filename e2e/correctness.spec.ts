// The engine in a real browser: Chromium's WebGPU (SwiftShader on GPU-less machines) against the
// engine's own CPU backend (the float64 reference), over a grid of awkward shapes.
//
// All tests of this file share one page, and so one WebGPU engine: shader pipelines compile once
// per shape (slowly on SwiftShader, the head-size-256 attention kernel above all), and later cases
// run on the engine's pooled scratch buffers left by earlier, differently sized ones, as an
// application's would. Playwright's trace and failure screenshot cover this shared page too
// (test-results/).
// A WebGPU-less browser fails these tests with instructions; nothing here ever skips.

import { type Browser, type Page, test as base, expect } from '@playwright/test';
import { CLOSING_CASE, correctnessCases } from './cases.ts';
import type { AdapterReport, CaseParams, CaseResult } from './harness.ts';
import { expectNoPageProblems, expectOutputClose, LoggedPage, sharedPage, WEBGPU_CHECKLIST } from './helpers.ts';

/** The harness page (its event log in LoggedPage), the browser, and how it was launched. */
class Harness extends LoggedPage {
  constructor(
    page: Page,
    readonly browser: Browser,
    readonly launch: { executablePath?: string; args?: string[] },
  ) {
    super(page);
  }

  adapterInfo(): Promise<AdapterReport> {
    return this.page.evaluate(() => window.adapterInfo());
  }

  runCase(params: CaseParams): Promise<CaseResult> {
    return this.page.evaluate((p) => window.runCase(p), params);
  }

  uncapturedErrors(): Promise<string[]> {
    return this.page.evaluate(() => window.uncapturedErrors());
  }
}

const test = base.extend<object, { harness: Harness }>({
  harness: [
    sharedPage(
      (page, browser, { project }) => new Harness(page, browser, project.use.launchOptions ?? {}),
      (harness) =>
        harness.open('/e2e/harness.html', () => window.harnessReady === true, 30_000, 'e2e/harness.ts did not finish loading (a module failed to load or threw?)'),
    ),
    { scope: 'worker', timeout: 60_000 },
  ],
});

// ---------------------------------------------------------------------------------------------------
// (a) The adapter.

test('Chromium gives a WebGPU adapter and the engine runs on it (backend "webgpu")', async ({ harness }, testInfo) => {
  const mark = harness.mark();
  const report = await harness.adapterInfo();
  const version = harness.browser.version();
  testInfo.annotations.push({ type: 'browser', description: `Chromium ${version}` });
  testInfo.annotations.push({ type: 'adapter', description: JSON.stringify(report.adapterInfo) });
  if (report.backend !== 'webgpu') {
    throw new Error(
      [
        `No WebGPU engine in the browser: createAttentionEngine({ backend: 'webgpu' }) failed.`,
        `  engine error:      ${report.error ?? '(none)'}`,
        `  navigator.gpu:     ${report.hasNavigatorGpu ? 'present' : 'MISSING'}`,
        `  secure context:    ${report.isSecureContext} (WebGPU needs http://127.0.0.1 or localhost, or https)`,
        `  browser:           Chromium ${version}, ${report.userAgent}`,
        `  executablePath:    ${harness.launch.executablePath ?? '(Playwright default)'} (set CHROMIUM_PATH to change it)`,
        `  launch args:       ${JSON.stringify(harness.launch.args ?? [])}`,
        ...WEBGPU_CHECKLIST,
      ].join('\n'),
    );
  }
  expect(report.adapterInfo, 'engine.adapterInfo on the WebGPU backend').not.toBeNull();
  expectNoPageProblems(harness, mark);
});

// ---------------------------------------------------------------------------------------------------
// (b) GPU against the CPU reference over a grid of shapes.

// The grid (e2e/cases.ts, which the Firefox runner scripts/firefox-test.ts runs too): head sizes 4 …
// 256, grouped- and multi-query, a layer without biases; S = 1, 7, 33, 64, 100 with B varying.
for (const group of correctnessCases()) {
  test.describe(group.name, () => {
    for (const { name, params } of group.cases) {
      test(name, async ({ harness }, testInfo) => {
        const mark = harness.mark();
        const r = await harness.runCase(params);
        testInfo.annotations.push({ type: 'gpu forward', description: `${r.gpuMs.toFixed(1)} ms` });

        const gpuErrors = [
          r.thrown && `forward threw: ${r.thrown}`,
          r.validationError && `validation error scope: ${r.validationError}`,
          r.outOfMemoryError && `out-of-memory error scope: ${r.outOfMemoryError}`,
          ...r.uncapturedErrors.map((m) => `uncaptured error: ${m}`),
        ].filter(Boolean);
        expect(gpuErrors, `WebGPU errors for ${JSON.stringify(params)}:\n${gpuErrors.join('\n')}`).toEqual([]);

        const n = params.batchSize * params.seqLen * params.embedDim;
        expect(r.cpu.length, 'CPU output length').toBe(n);
        expect(r.gpu?.length, 'GPU output length').toBe(n);

        expectOutputClose(r.gpu!, r.cpu, params, ['gpu', 'cpu'], testInfo);

        expectNoPageProblems(harness, mark);
      });
    }
  });
}

// ---------------------------------------------------------------------------------------------------
// (b2) Quantized projection weights (quantizeWeights) in the browser: a causal prefill, then decode steps
// over a KV cache, whose B ≤ 8 rows run the packed weights' decode kernel of this adapter (on SwiftShader
// the 4×4 register GEMM, variants.ts withGemv), against the float64 reference with the same weights
// dequantized exactly.

test.describe('quantized weights: prefill, then decode steps on the packed decode kernel', () => {
  for (const weights of ['q4_0', 'q8_0', 'q4_k', 'nbits'] as const) {
    test(`${weights}, E=256 H=4 G=2, B=3 S=7 (5 prefill, 2 decode steps)`, async ({ harness }, testInfo) => {
      const mark = harness.mark();
      const params: CaseParams = { embedDim: 256, numHeads: 4, numKvHeads: 2, batchSize: 3, seqLen: 7, isCausal: true, bias: true, seed: 41, weights, decodeSteps: 2 };
      const r = await harness.runCase(params);
      const gpuErrors = [r.thrown, r.validationError, r.outOfMemoryError, ...r.uncapturedErrors].filter(Boolean);
      expect(gpuErrors, `WebGPU errors for ${JSON.stringify(params)}`).toEqual([]);
      expect(r.gpu?.length, 'GPU output length').toBe(3 * 7 * 256);
      expectOutputClose(r.gpu!, r.cpu, params, ['gpu', 'cpu'], testInfo);
      expectNoPageProblems(harness, mark);
    });
  }
});

// ---------------------------------------------------------------------------------------------------
// (c) The run as a whole was clean.

test('no console errors, page errors or uncaptured WebGPU errors over the run', async ({ harness }) => {
  // One more forward of a mid-sized layer, then the page's whole log (since this worker's page
  // loaded) and the device's uncaptured-error list must be empty.
  const r = await harness.runCase(CLOSING_CASE);
  expect(r.thrown).toBeNull();
  const uncaptured = await harness.uncapturedErrors();
  expect(uncaptured, `uncaptured WebGPU errors (device 'uncapturederror' events):\n${uncaptured.join('\n')}`).toEqual([]);
  expectNoPageProblems(harness, 0);
});
