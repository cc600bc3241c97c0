// `npm run test:firefox`: the engine in Firefox's WebGPU (wgpu, in Firefox's GPU process; lavapipe on a
// GPU-less machine), driven over WebDriver BiDi by puppeteer-core:
//   (a) the browser correctness suite's cases (e2e/cases.ts, the list e2e/correctness.spec.ts runs in
//       Chromium) on the harness page (e2e/harness.html): WebGPU against the engine's float64 CPU
//       backend, |gpu − ref| ≤ atol + rtol·|ref| (e2e/output-check.ts; a NaN fails), then one more
//       forward and the page's whole log and uncaptured WebGPU errors, which must be empty;
//   (b) the demo page's correctness panel (demo/index.html), as e2e/demo.spec.ts drives it: the default
//       shape, engine.warmup, then B=3 S=33 E=96 H=6 causal; PASS each time, a clean page;
//   (c) in (a)'s page, the 'wasm' backend (WASM_CASES, e2e/harness.ts runWasmCase) against the CPU
//       backend: Firefox runs relaxed SIMD, so the relaxed build ('auto') must be the one that ran.
// Firefox has no `subgroups` feature: the engine runs its subgroup-free variants there.
//
// It serves the repo and launches Firefox as scripts/firefox.ts does (Vite on 127.0.0.1, a fresh profile
// with WebGPU on, headless, lavapipe's ICD). One line per case, then a
// summary; exits 1 on any failure, on no adapter (saying what is missing), or when the whole run passes
// FIREFOX_TEST_TIMEOUT_S (default 300). Measured on this 2-core machine with an empty Mesa shader cache
// (2026-12-02, Firefox ESR 153.8): 88 s in all, 86 checks (87 since the background-work check): start 4 s, the 82 harness checks 29 s, the demo
// panel 55 s (52 of them engine.warmup compiling the default shape's final kernels).
//   node scripts/run-ts.mjs scripts/firefox-test.ts        (FIREFOX_PATH, default /usr/bin/firefox-esr)

import type { Browser, Page } from 'puppeteer-core';
import { CLOSING_CASE, correctnessCases } from '../e2e/cases.ts';
import type { AdapterReport, CaseParams, CaseResult, WasmCaseResult } from '../e2e/harness.ts';
import { checkOutput } from '../e2e/output-check.ts';
import { FIREFOX, type FirefoxSession, firefoxMissing, LVP_ICD, startFirefox } from './firefox.ts';

const TIMEOUT_S = Number(process.env.FIREFOX_TEST_TIMEOUT_S ?? 300);

/** The 'wasm' backend's cases: no WebGPU (e2e/harness.ts runWasmCase). */
const WASM_CASES: [string, CaseParams][] = [
  [
    'float weights, E=128 H=8 G=2 (a group of 4 heads), B=2 S=40 causal: prefill 36, 4 decode steps over an f16 cache',
    { embedDim: 128, numHeads: 8, numKvHeads: 2, batchSize: 2, seqLen: 40, isCausal: true, bias: true, seed: 41, decodeSteps: 4, cacheDtype: 'f16' },
  ],
  [
    'q4_0 weights, E=256 H=4 (one head a key/value head), B=1 S=80 causal: prefill 77, 3 decode steps over an f16 cache',
    { embedDim: 256, numHeads: 4, batchSize: 1, seqLen: 80, isCausal: true, bias: false, seed: 42, weights: 'q4_0', decodeSteps: 3, cacheDtype: 'f16' },
  ],
  [
    'q4_0 weights, E=256 H=8 G=2, B=2 S=70 causal, one forward',
    { embedDim: 256, numHeads: 8, numKvHeads: 2, batchSize: 2, seqLen: 70, isCausal: true, bias: true, seed: 43, weights: 'q4_0' },
  ],
];
const PORT = Number(process.env.FIREFOX_TEST_PORT ?? 5175); // Playwright's server is on 5174; the next free one is taken

const t0 = performance.now();
const seconds = () => ((performance.now() - t0) / 1000).toFixed(1);
let passed = 0;
let failed = 0;
let timedOut = false;

// Everything below is undone by cleanup(), on every way out (the timeout included).
let session: FirefoxSession | null = null;
let browser: Browser | null = null;
let firefoxStderr: string[] = []; // its last lines, for failure messages

async function cleanup(): Promise<void> {
  await session?.close();
}

function fail(lines: string[]): never {
  throw new FatalError(lines.join('\n'));
}
class FatalError extends Error {}

function result(ok: boolean, name: string, detail: string): void {
  if (ok) passed++;
  else failed++;
  console.log(`${ok ? 'ok  ' : 'FAIL'}  ${name}${detail ? (ok ? `  (${detail})` : `\n${detail.replace(/^/gm, '      ')}`) : ''}`);
}

/** A page with its console errors, uncaught errors and crashes logged (they must stay empty). */
async function loggedPage(): Promise<{ page: Page; problems: string[] }> {
  const page = await browser!.newPage();
  const problems: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console.error: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`));
  page.on('error', (e) => problems.push(`page crashed: ${e.message}`));
  return { page, problems };
}

/** What to check when Firefox gives no adapter. */
function noAdapter(what: string, report: Partial<AdapterReport> & { features?: string[] | null }): never {
  fail([
    `No WebGPU engine in Firefox: ${what}`,
    `  engine error:    ${report.error ?? '(none)'}`,
    `  navigator.gpu:   ${report.hasNavigatorGpu ? 'present' : 'MISSING (the pref dom.webgpu.enabled, or not a secure context)'}`,
    `  secure context:  ${report.isSecureContext} (served from http://127.0.0.1)`,
    `  browser:         ${report.userAgent ?? '?'} at ${FIREFOX}`,
    `  What to check: firefox-esr (bash scripts/setup-system.sh firefox, or FIREFOX_PATH); the profile's prefs`,
    `  dom.webgpu.enabled and gfx.webgpu.ignore-blocklist (set here; without the second requestAdapter() is null:`,
    `  "WebGPU is disabled by blocklist"); a Vulkan driver for Firefox's GPU process: lavapipe at ${LVP_ICD}`,
    `  (bash scripts/setup-system.sh lavapipe), VK_ICD_FILENAMES=${process.env.VK_ICD_FILENAMES ?? LVP_ICD}.`,
    `  Firefox's last stderr lines:\n${firefoxStderr.slice(-15).join('\n') || '    (none)'}`,
  ]);
}

async function harnessSuite(base: string): Promise<void> {
  const { page, problems } = await loggedPage();
  await page.goto(`${base}/e2e/harness.html`);
  await page
    .waitForFunction(() => window.harnessReady === true, { timeout: 60_000 })
    .catch(() => {
      fail([`e2e/harness.html did not become ready in 60 s (a module failed to load or threw?)`, ...problems]);
    });
  const report = await page.evaluate(() => window.adapterInfo());
  const features = await page.evaluate(async () => {
    const adapter = await navigator.gpu?.requestAdapter();
    return adapter ? [...adapter.features].sort() : null;
  });
  if (report.backend !== 'webgpu') noAdapter(`createAttentionEngine({ backend: 'webgpu' }) failed`, { ...report, features });
  console.log(`Firefox ${await browser!.version()}: adapter ${JSON.stringify(report.adapterInfo)}, features ${features?.join(', ')}`);
  result(true, 'Firefox gives a WebGPU adapter and the engine runs on it (backend "webgpu")', '');

  const run = async (p: CaseParams): Promise<CaseResult> => JSON.parse(await page.evaluate(async (q) => JSON.stringify(await window.runCase(q)), p));
  for (const group of correctnessCases()) {
    for (const { name, params } of group.cases) {
      const mark = problems.length;
      const r = await run(params);
      const errors = [
        r.thrown && `forward threw: ${r.thrown}`,
        r.validationError && `validation error scope: ${r.validationError}`,
        r.outOfMemoryError && `out-of-memory error scope: ${r.outOfMemoryError}`,
        ...r.uncapturedErrors.map((m) => `uncaptured error: ${m}`),
        ...problems.slice(mark),
      ].filter(Boolean) as string[];
      const n = params.batchSize * params.seqLen * params.embedDim;
      if (!errors.length && (r.cpu.length !== n || r.gpu?.length !== n)) errors.push(`output lengths: gpu ${r.gpu?.length}, cpu ${r.cpu.length}, expected ${n}`);
      const check = errors.length ? null : checkOutput(r.gpu!, r.cpu, params, ['gpu', 'cpu']);
      const ok = check?.ok === true;
      result(ok, `${group.name} › ${name}`, check ? (ok ? `gpu ${r.gpuMs.toFixed(0)} ms, ${check.summary}` : check.failure) : errors.join('\n'));
    }
  }

  // wgpu compiles on the thread that serves the device: the default tuning runs nothing in the background
  // there (src/webgpu/tuning/scheduler.ts), so after all those calls nothing was compiled ahead or swept.
  const work = await page.evaluate(() => window.backgroundWork());
  result(
    !!work && !work.enabled && work.why.includes('wgpu (Firefox') && work.pending === 0 && work.compiled === 0 && work.swept === 0,
    'default tuning: nothing in the background on wgpu (engine.tuning.background off, nothing compiled ahead or swept)',
    JSON.stringify(work),
  );
  // Firefox's adapter info names nothing; its isFallbackAdapter says lavapipe is a CPU, whose in-line
  // built-in choice is tier 0's variants (variants.ts inLineChoice: the built-in ones take seconds to compile).
  result(!!work?.defaultsAreTier0, "default tuning on a fallback adapter: engine.tuning.defaults are tier 0's variants", JSON.stringify(work));

  // The 'wasm' backend here: 'auto' takes the relaxed build where src/wasm/kernels.ts' probe finds relaxed
  // SIMD right, as Firefox ESR 153 does (checked 2026-12-05), so these run its fused multiply-adds and an
  // f16 cache's halves widened in place (by a GQA group of 4 rows, by a lone head), against the CPU backend.
  const runWasm = async (p: CaseParams): Promise<WasmCaseResult> => JSON.parse(await page.evaluate(async (q) => JSON.stringify(await window.runWasmCase(q)), p));
  for (const [name, params] of WASM_CASES) {
    const mark = problems.length;
    const w = await runWasm(params);
    const errors = [w.thrown && `forward threw: ${w.thrown}`, ...problems.slice(mark)].filter(Boolean) as string[];
    const n = params.batchSize * params.seqLen * params.embedDim;
    if (!errors.length && (w.cpu.length !== n || w.wasm?.length !== n)) errors.push(`output lengths: wasm ${w.wasm?.length}, cpu ${w.cpu.length}, expected ${n}`);
    if (w.wasmSimd !== 'relaxed')
      errors.push(`engine.wasmSimd is ${JSON.stringify(w.wasmSimd)}: Firefox ESR 153 runs relaxed SIMD, so 'auto' must take the relaxed build`);
    const check = errors.length ? null : checkOutput(w.wasm!, w.cpu, params, ['wasm', 'cpu']);
    const ok = check?.ok === true;
    result(ok, `wasm (${w.wasmSimd}) › ${name}`, check ? (ok ? check.summary : check.failure) : errors.join('\n'));
  }

  const r = await run(CLOSING_CASE);
  const uncaptured = await page.evaluate(() => window.uncapturedErrors());
  const closing = [r.thrown && `forward threw: ${r.thrown}`, ...uncaptured.map((m) => `uncaptured WebGPU error: ${m}`), ...problems].filter(Boolean) as string[];
  result(!closing.length, 'no console errors, page errors or uncaptured WebGPU errors over the run', closing.join('\n'));
  await page.close();
}

async function demoPanel(base: string): Promise<void> {
  const { page, problems } = await loggedPage();
  await page.setViewport({ width: 1200, height: 900 });
  await page.goto(`${base}/demo/index.html`);
  await page
    .waitForFunction(() => document.body.dataset.ready === 'true', { timeout: 120_000 })
    .catch(async () => {
      const boot = await page.evaluate(() => document.getElementById('boot-status')?.textContent ?? '').catch(() => '');
      fail([`demo/index.html did not become ready in 120 s. ${boot}`, ...problems]);
    });
  const backend = await page.evaluate(() => document.body.dataset.backend);
  if (backend !== 'webgpu') {
    noAdapter(`the demo runs on the "${backend}" backend`, { error: await page.evaluate(() => document.getElementById('backend-status')?.textContent ?? '') });
  }

  const runPanel = async (what: string, shape?: { b: number; s: number; e: number; h: number; causal: boolean }) => {
    const mark = problems.length;
    const state = await page.evaluate(async (sh) => {
      if (sh) {
        for (const [id, v] of Object.entries({ b: sh.b, s: sh.s, e: sh.e, h: sh.h })) {
          const input = document.getElementById(`cfg-${id}`) as HTMLInputElement;
          input.value = String(v);
          input.dispatchEvent(new Event('input', { bubbles: true }));
        }
        const causal = document.getElementById('cfg-causal') as HTMLInputElement;
        causal.checked = sh.causal;
        causal.dispatchEvent(new Event('input', { bubbles: true }));
        causal.dispatchEvent(new Event('change', { bubbles: true }));
      }
      const panel = document.getElementById('correctness')!;
      document.getElementById('correctness-run')!.click(); // sets data-state 'running' before it returns
      while (panel.dataset.state === 'running') await new Promise((r) => setTimeout(r, 50));
      return {
        state: panel.dataset.state,
        verdict: document.getElementById('correctness-verdict')?.textContent ?? null,
        maxAbs: Number(document.getElementById('correctness-max-abs')?.textContent),
        result: document.getElementById('correctness-result')?.textContent ?? '',
      };
    }, shape ?? null);
    const errors = [
      state.state !== 'done' && `panel state ${state.state}: ${state.result}`,
      state.state === 'done' && state.verdict !== 'PASS' && `verdict ${state.verdict}: ${state.result}`,
      !(state.maxAbs >= 0 && state.maxAbs < 1e-4) && `max abs error ${state.maxAbs} (want 0 ≤ it < 1e-4)`,
      shape && !state.result.includes(`[${shape.b}, ${shape.s}, ${shape.e}]`) && `result does not name [${shape.b}, ${shape.s}, ${shape.e}]: ${state.result}`,
      ...problems.slice(mark),
    ].filter(Boolean) as string[];
    result(!errors.length, `demo correctness panel: ${what}`, errors.length ? errors.join('\n') : `max abs ${state.maxAbs.toExponential(2)}`);
  };

  await runPanel('the default shape (run again from its button)');
  // engine.warmup with its progress bar: the final kernels of this shape.
  const mark = problems.length;
  const warm = await page.evaluate(async () => {
    const status = document.getElementById('correctness-warmup-status')!;
    document.getElementById('correctness-warmup')!.click();
    const start = performance.now();
    while (!status.dataset.state && performance.now() - start < 120_000) await new Promise((r) => setTimeout(r, 50));
    return {
      state: status.dataset.state ?? 'still compiling after 120 s',
      text: status.textContent,
      progress: (document.getElementById('correctness-warmup-progress') as HTMLProgressElement).value,
    };
  });
  const warmErrors = [
    warm.state !== 'done' && `warmup ${warm.state}: ${warm.text}`,
    warm.progress !== 1 && `progress ${warm.progress}, not 1`,
    ...problems.slice(mark),
  ].filter(Boolean) as string[];
  result(!warmErrors.length, 'demo correctness panel: engine.warmup compiles this shape’s final kernels', warmErrors.length ? warmErrors.join('\n') : (warm.text ?? ''));
  await runPanel('B=3 S=33 E=96 H=6 causal', { b: 3, s: 33, e: 96, h: 6, causal: true });

  const gpuErrors = await page.evaluate(() => Array.from(document.querySelectorAll('#gpu-error-list li'), (li) => li.textContent ?? ''));
  const all = [...gpuErrors.map((m) => `WebGPU error shown by the page: ${m}`), ...problems];
  result(!all.length, 'demo: no console errors, page errors or WebGPU errors over the session', all.join('\n'));
  await page.close();
}

async function main(): Promise<void> {
  const missing = firefoxMissing();
  if (missing) fail([missing]);
  session = await startFirefox(PORT);
  ({ browser, stderr: firefoxStderr } = session);
  const { base, profile, icd } = session;
  console.log(`firefox-test: ${base}, profile ${profile}, VK_ICD_FILENAMES=${icd} (${seconds()} s to start)`);

  const ta = performance.now();
  await harnessSuite(base);
  const tb = performance.now();
  await demoPanel(base);
  console.log(`firefox-test: harness cases ${((tb - ta) / 1000).toFixed(1)} s, demo panel ${((performance.now() - tb) / 1000).toFixed(1)} s`);
}

const timer = setTimeout(() => {
  timedOut = true; // what main() throws next is the browser going away
  console.error(`firefox-test: FAILED: timed out after ${TIMEOUT_S} s (FIREFOX_TEST_TIMEOUT_S); ${passed} passed, ${failed} failed so far`);
  void cleanup().finally(() => process.exit(1));
}, TIMEOUT_S * 1000);

try {
  await main();
} catch (e) {
  if (timedOut) await new Promise(() => {}); // the timer's cleanup exits
  failed++;
  console.error(`firefox-test: FAILED: ${e instanceof FatalError ? e.message : ((e as Error).stack ?? e)}`);
} finally {
  clearTimeout(timer);
  await cleanup();
}
console.log(`firefox-test: ${passed} passed, ${failed} failed in ${seconds()} s`);
process.exitCode = failed ? 1 : 0;
