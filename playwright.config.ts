// Browser tests: the engine in Chromium's WebGPU against its own CPU (float64 reference) backend.
// Run with `PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npx playwright test` (or `npm run test:e2e`).
//
// Playwright's own browser download cannot be reached here, so the system Chromium is launched
// (CHROMIUM_PATH, default Debian's /usr/bin/chromium). Without a GPU its WebGPU adapter is
// SwiftShader (vendor "google", architecture "swiftshader"); with one, the same flags give the hardware adapter.

import { defineConfig } from '@playwright/test';

const PORT = Number(process.env.E2E_PORT ?? 5174);
const HOST = '127.0.0.1';

export default defineConfig({
  testDir: 'e2e',
  outputDir: 'test-results',
  // Two workers (E2E_WORKERS to change it), each with one page (and one engine, so shader pipelines
  // compile once per worker) shared by its spec files' tests. Measured (clean clone, quiet machine, 2026-12-02): 267 s
  // for the suite, demo-layout's long test 96 s beside the other worker (54 s alone: benchmark 14 s,
  // scaling 14 s, decode 25 s): the second browser mostly shares the same 2 cores.
  workers: Number(process.env.E2E_WORKERS ?? 2),
  fullyParallel: false,
  forbidOnly: !!process.env.CI,
  retries: 0,
  // Per test. SwiftShader compiles the head-size-256 attention kernel in about 4 s on two cores;
  // one case's forward is milliseconds to a few seconds.
  timeout: 60_000,
  expect: { timeout: 10_000 },
  globalTimeout: 10 * 60_000,
  reporter: process.env.CI ? [['list'], ['html', { open: 'never' }]] : [['list']],
  use: {
    baseURL: `http://${HOST}:${PORT}`,
    headless: true,
    // Artifacts of failed tests land in test-results/<test>/ (trace.zip, a screenshot).
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure',
    video: 'off',
    actionTimeout: 15_000,
    navigationTimeout: 30_000,
  },
  projects: [
    {
      name: 'chromium-webgpu',
      use: {
        browserName: 'chromium',
        launchOptions: {
          executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
          // Measured with Chromium 156 on a GPU-less Debian 12 machine, as root:
          //  --enable-unsafe-webgpu  REQUIRED. Without it navigator.gpu exists but requestAdapter()
          //                          resolves null ("No available adapters.") on Linux.
          // Left out on purpose:
          //  --no-sandbox, --disable-background-networking, --disable-component-update,
          //  --disable-sync, --no-first-run: Playwright already passes every one of them to Chromium
          //  (--no-sandbox unless `chromiumSandbox: true`), so repeating them changes nothing.
          //  --enable-features=Vulkan: no effect on the adapter (still SwiftShader here), and a second
          //  --enable-features switch would replace the one Playwright passes itself.
          //  (Playwright also passes --enable-unsafe-swiftshader; WebGPU's SwiftShader adapter does not
          //  need it: requestAdapter() still succeeds with ignoreDefaultArgs removing it.)
          args: ['--enable-unsafe-webgpu'],
        },
      },
    },
  ],
  webServer: {
    command: `node scripts/e2e-server.mjs ${PORT}`, // Vite's dev server, HMR off (see the script)
    url: `http://${HOST}:${PORT}/e2e/harness.html`,
    reuseExistingServer: !process.env.CI,
    timeout: 60_000,
    stdout: 'ignore',
    stderr: 'pipe',
  },
});
