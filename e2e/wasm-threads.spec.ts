// The 'wasm' backend's threads in Chromium: Web Workers on a shared WebAssembly memory where the page
// is cross-origin isolated (the project's servers send COOP and COEP: scripts/vite-isolation.ts), one
// thread with a threadsNote that says why where it is not, or where workers cannot start.
// The threaded engine must equal the 1-thread one bit for bit (a thread computes whole GEMM rows or
// column panels and whole heads, as one thread would), and the float64 'cpu' backend within the
// shared tolerance rule; the workers must have run kernels (ThreadPool.run's lists 1 …).

import { type Page, test as base, expect } from '@playwright/test';
import { expectClose } from '../src/util/tolerance.ts';
import { DOT_ADD_TRIAL_PASSES } from '../src/wasm/dot-add.ts';
import { expectNoPageProblems, expectOutputClose, LoggedPage, sharedPage } from './helpers.ts';

const PAGE = '/e2e/wasm-threads.html';
const ready = () => window.wasmThreadsReady === true;

const test = base.extend<object, { threadsPage: LoggedPage }>({
  threadsPage: [
    sharedPage(
      (page) => new LoggedPage(page),
      (logged) => logged.open(PAGE, ready, 30_000, 'e2e/wasm-threads.ts did not finish loading'),
    ),
    { scope: 'worker', timeout: 60_000 },
  ],
});

test('cross-origin isolated, threads: 2: two threads, workers run kernels, = 1 thread bit for bit, = float64 within tolerance', async ({ threadsPage }, testInfo) => {
  const mark = threadsPage.mark();
  const report = await threadsPage.page.evaluate(() => window.wasmThreads(2));
  expect(report.crossOriginIsolated).toBe(true);
  expect([report.threads, report.threadsNote]).toEqual([2, null]);
  const onWorkers: Record<string, string[]> = {};
  for (const c of report.cases) {
    expect(c.threaded, `${c.name}: 2 threads vs 1`).toEqual(c.single);
    expect(c.runsAgree, `${c.name}: each of ${c.runs} threaded runs = the first, bit for bit`).toBe(true);
    expectOutputClose(c.threaded, c.cpu, { batchSize: c.B, seqLen: c.S, embedDim: c.E }, ['wasm (2 threads)', 'cpu'], testInfo);
    onWorkers[c.name] = c.onWorkers.filter((k) => k === 'gemm' || k === 'attend');
  }
  // The threads claim a pass's lists as they come free (src/wasm/threads.ts): in the long case the worker
  // runs lists of both passes; in the short one (a prefill of 30, attention lists of ~50 µs) the calling
  // thread may claim every attention list before the worker wakes, so only its projections are certain.
  // Which lists the worker claims is a race the OS's scheduler can lose for a whole pass: the page runs a
  // case again (up to 6 times) until its worker has run these (e2e/wasm-threads.ts MAX_RUNS).
  const [long, short] = report.cases;
  expect(onWorkers[long.name], `kernels the worker ran, S=300, over ${long.runs} runs`).toEqual(['attend', 'gemm']);
  expect(onWorkers[short.name], `kernels the worker ran, prefill 30 + decode, over ${short.runs} runs`).toContain('gemm');
  // The decode steps' passes follow each other closely: the worker, waiting in memory after one, takes
  // the next offer (the caller spinning on the main thread for its DONE, where Atomics.wait is not allowed).
  const decode = report.cases[1].handoffs;
  expect(decode.taken, `the decode case's passes, by way: ${JSON.stringify(decode)}`).toBeGreaterThanOrEqual(1);
  expectNoPageProblems(threadsPage, mark);
});

test("relaxed SIMD in Chromium: 'auto' takes the relaxed build, whose 4-bit 'q8' layer agrees with the simd128 build's (1 and 2 threads)", async ({ threadsPage }) => {
  // The projections' products give the same bits in both builds; the relaxed build fuses the float
  // multiply-adds (F.madd), so an attention output on a rounding boundary of W_O's q8 input may round the
  // other way: the project's rule, as test/wasm-simd.test.ts in Node.
  for (const threads of [1, 2]) {
    const r = await threadsPage.page.evaluate((t) => window.relaxedQ8(t), threads);
    expect(r.auto, 'engine.wasmSimd with wasmSimd left to auto (Chromium has relaxed SIMD since 114)').toBe('relaxed');
    expect(r.relaxed.every(Number.isFinite)).toBe(true);
    expectClose(r.relaxed, r.simd128, { atol: 2e-4, rtol: 2e-3 }, `${threads} thread(s): relaxed against simd128`);
  }
});

test("relaxed SIMD's i8 dot product with its sum (DOT_ADD, wasm/q8.ts) in Chromium: right, the i16 form's bits for every 4-bit kind and row count (decode and prefill), and in a layer (1 and 2 threads)", async ({
  threadsPage,
}) => {
  // Chromium computes i32x4.relaxed_dot_i8x16_i7x16_add_s as the specification says in both its
  // compilers (Node 20's baseline compiler does not: test/wasm-dot-add.test.ts); with AVX-VNNI it is one
  // instruction, and the engine takes it where its passes measure it faster (src/wasm/dot-add.ts).
  for (const threads of [1, 2]) {
    const r = await threadsPage.page.evaluate((t) => window.dotAdd(t), threads);
    expect(r.right, "checkDotAdd in Chromium: the instruction alone (simd.ts relaxedDotAddRight), qgemm8's and qgemv8's").toBe(true);
    expect(r.compared).toBe(3 * 7 * 12);
    expect(r.mismatches, 'qgemv8 and qgemm8 with DOT_ADD against without, bit for bit').toEqual([]);
    expect(r.layerForced[0].every(Number.isFinite)).toBe(true);
    expect(r.layerForced[0], `${threads} thread(s): a q4_0 'q8' layer with DOT_ADD forced = without, bit for bit`).toEqual(r.layerForced[1]);
    // 8 prefills of 2 passes each: the trial passes decide (the verdict depends on the CPU: VNNI or not).
    expect([r.passes, r.verdict === null], `${threads} thread(s): the choice measured and decided`).toEqual([DOT_ADD_TRIAL_PASSES, false]);
  }
});

test('cross-origin isolated, threads left out: navigator.hardwareConcurrency threads', async ({ threadsPage }) => {
  const r = await threadsPage.page.evaluate(() => window.engineThreads());
  expect(r.crossOriginIsolated).toBe(true);
  expect([r.threads, r.threadsNote, r.ran]).toEqual([Math.max(1, r.hardwareConcurrency), null, true]);
});

/** Opens the page in a new context of its own, its HTML's response headers changed by `headers`. */
async function pageWith(browser: import('@playwright/test').Browser, baseURL: string | undefined, headers: (h: Record<string, string>) => Record<string, string>) {
  const context = await browser.newContext({ baseURL });
  const page: Page = await context.newPage();
  await page.route(`**${PAGE}`, async (route) => {
    const response = await route.fetch();
    await route.fulfill({ response, headers: headers({ ...response.headers() }) });
  });
  const logged = new LoggedPage(page);
  await logged.open(PAGE, ready, 30_000, 'e2e/wasm-threads.ts did not finish loading');
  return { logged, close: () => context.close() };
}

/**
 * The page's problems but Vite's client failing to open its websocket: Chromium's Local Network
 * Access checks refuse it on a page whose HTML Playwright's route answered (HMR is off anyway).
 */
function problemsButViteSocket(logged: LoggedPage): string[] {
  return logged.problemsSince(0).filter((p) => !p.includes('ERR_BLOCKED_BY_LOCAL_NETWORK_ACCESS_CHECKS') && !p.includes('[vite] failed to connect to websocket'));
}

test('not cross-origin isolated (no COOP/COEP): one thread, and threadsNote names the headers', async ({ browser }, testInfo) => {
  const { logged, close } = await pageWith(browser, testInfo.project.use.baseURL, (h) => {
    delete h['cross-origin-opener-policy'];
    delete h['cross-origin-embedder-policy'];
    return h;
  });
  try {
    const r = await logged.page.evaluate(() => window.engineThreads(2));
    testInfo.annotations.push({ type: 'threadsNote', description: String(r.threadsNote) });
    expect([r.crossOriginIsolated, r.threads, r.ran]).toEqual([false, 1, true]);
    expect(r.threadsNote).toContain('not cross-origin isolated');
    expect(r.threadsNote).toContain('Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp');
    expect(problemsButViteSocket(logged)).toEqual([]);
  } finally {
    await close();
  }
});

test('isolated, but a Content-Security-Policy forbids blob: workers: one thread, and threadsNote says why', async ({ browser }, testInfo) => {
  const { logged, close } = await pageWith(browser, testInfo.project.use.baseURL, (h) => ({ ...h, 'content-security-policy': "worker-src 'self'" }));
  try {
    const r = await logged.page.evaluate(() => window.engineThreads(2));
    testInfo.annotations.push({ type: 'threadsNote', description: String(r.threadsNote) });
    expect([r.crossOriginIsolated, r.threads, r.ran]).toEqual([true, 1, true]);
    expect(r.threadsNote).toMatch(/^worker threads could not be started \(.+\).*worker-src blob:/);
    // The browser reports the refused worker itself (a CSP violation on the console); nothing else.
    expect(problemsButViteSocket(logged).filter((p) => !p.includes('Content Security Policy'))).toEqual([]);
  } finally {
    await close();
  }
});
