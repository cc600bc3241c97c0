// Firefox with WebGPU on, for scripts/firefox-test.ts (npm run test:firefox) and scripts/bench-runtimes.ts
// (npm run bench -- --firefox): the repo served by Vite on 127.0.0.1 (HMR off, as scripts/e2e-server.mjs
// serves it), a fresh profile whose user.js turns WebGPU on (dom.webgpu.enabled; gfx.webgpu.ignore-blocklist,
// without which requestAdapter() resolves null: "WebGPU is disabled by blocklist") and keeps Firefox quiet
// and offline (no updates, telemetry, first-run pages), and `firefox-esr --headless --no-remote --profile
// DIR` launched by puppeteer-core over WebDriver BiDi with MOZ_HEADLESS=1 and VK_ICD_FILENAMES=lavapipe's
// ICD (unless set). FIREFOX_PATH picks another Firefox (default /usr/bin/firefox-esr).

import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer, { type Browser } from 'puppeteer-core';
import { createServer, type ViteDevServer } from 'vite';

export const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const FIREFOX = process.env.FIREFOX_PATH ?? '/usr/bin/firefox-esr';
export const LVP_ICD = '/usr/share/vulkan/icd.d/lvp_icd.json';

// user.js. Puppeteer adds its own defaults for automation (no safe browsing, no default-browser check,
// blank start pages, no data reporting, …: @puppeteer/browsers' defaultProfilePreferences).
export const PREFS: Record<string, boolean | number | string> = {
  'dom.webgpu.enabled': true,
  'gfx.webgpu.ignore-blocklist': true, // without it, no adapter on lavapipe
  'app.update.auto': false,
  'app.update.enabled': false,
  'app.normandy.enabled': false,
  'app.shield.optoutstudies.enabled': false,
  'browser.aboutwelcome.enabled': false,
  'browser.discovery.enabled': false,
  'browser.newtabpage.activity-stream.feeds.telemetry': false,
  'browser.newtabpage.activity-stream.telemetry': false,
  'browser.ping-centre.telemetry': false,
  'browser.region.network.url': '',
  'browser.region.update.enabled': false,
  'datareporting.policy.dataSubmissionEnabled': false,
  'dom.push.connection.enabled': false,
  'extensions.getAddons.showPane': false,
  'extensions.systemAddon.update.enabled': false,
  'media.gmp-gmpopenh264.enabled': false,
  'network.captive-portal-service.enabled': false,
  'network.connectivity-service.enabled': false,
  'toolkit.telemetry.archive.enabled': false,
  'toolkit.telemetry.enabled': false,
  'toolkit.telemetry.reportingpolicy.firstRun': false,
  'toolkit.telemetry.unified': false,
  'trailhead.firstrun.didSeeAboutWelcome': true,
};

/** Why Firefox cannot run here (no Firefox, no Vulkan driver for its GPU process), or null. */
export function firefoxMissing(): string | null {
  if (!existsSync(FIREFOX)) return `No Firefox at ${FIREFOX}: bash scripts/setup-system.sh firefox (Debian's firefox-esr), or set FIREFOX_PATH.`;
  if (!process.env.VK_ICD_FILENAMES && !existsSync(LVP_ICD)) {
    return `No lavapipe ICD at ${LVP_ICD} (Firefox's WebGPU needs a Vulkan driver): bash scripts/setup-system.sh lavapipe, or set VK_ICD_FILENAMES.`;
  }
  return null;
}

export interface FirefoxSession {
  /** The server's base URL, no trailing slash. */
  base: string;
  browser: Browser;
  profile: string;
  /** The Vulkan ICD Firefox was given. */
  icd: string;
  /** Firefox's last stderr lines (up to 50), indented, for failure messages. */
  stderr: string[];
  /** Closes the browser (killed after 5 s), the server, and removes the profile; never rejects. */
  close(): Promise<void>;
}

/**
 * Serves the repo with Vite on 127.0.0.1 (`port`, or the next free one) and launches Firefox on a fresh
 * profile (`protocolTimeoutMs`: the longest one page.evaluate may take; `fastCompiles`, the tests': lavapipe
 * without LLVM's optimisation passes, GALLIVM_PERF=nopt, compiles about twice as fast (test/global-setup.ts),
 * where a benchmark leaves Mesa's default, what a user runs). Whatever was started is undone when a later step throws.
 */
export async function startFirefox(port: number, { protocolTimeoutMs = 180_000, fastCompiles = true } = {}): Promise<FirefoxSession> {
  const icd = process.env.VK_ICD_FILENAMES ?? LVP_ICD;
  let server: ViteDevServer | null = null;
  let browser: Browser | null = null;
  let profile: string | null = null;
  const stderr: string[] = [];
  const close = async (): Promise<void> => {
    const child = browser?.process();
    await Promise.race([browser?.close(), new Promise((r) => setTimeout(r, 5000))]).catch(() => {});
    if (child && child.exitCode === null) child.kill('SIGKILL');
    await server?.close().catch(() => {});
    if (profile) rmSync(profile, { recursive: true, force: true });
  };
  try {
    server = await createServer({
      root: repo,
      configFile: join(repo, 'vite.config.ts'),
      clearScreen: false,
      logLevel: 'warn',
      server: { host: '127.0.0.1', port, strictPort: false, hmr: false },
    });
    await server.listen();
    const base = (server.resolvedUrls?.local[0] ?? `http://127.0.0.1:${port}/`).replace(/\/$/, '');
    profile = mkdtempSync(join(tmpdir(), 'webgpu-attention-firefox-'));
    browser = await puppeteer.launch({
      browser: 'firefox',
      executablePath: FIREFOX,
      headless: true,
      userDataDir: profile, // puppeteer passes --profile DIR and writes user.js there
      args: ['--no-remote'],
      extraPrefsFirefox: PREFS,
      env: {
        ...process.env,
        MOZ_HEADLESS: '1',
        VK_ICD_FILENAMES: icd,
        XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? '/tmp',
        ...(fastCompiles ? { GALLIVM_PERF: process.env.GALLIVM_PERF ?? 'nopt' } : {}),
      },
      timeout: 60_000,
      protocolTimeout: protocolTimeoutMs,
    });
    browser.process()?.stderr?.on('data', (chunk: Buffer) => {
      stderr.push(
        ...chunk
          .toString()
          .split('\n')
          .filter(Boolean)
          .map((l) => `    ${l}`),
      );
      stderr.splice(0, Math.max(0, stderr.length - 50));
    });
    return { base, browser, profile, icd, stderr, close };
  } catch (e) {
    await close();
    throw e;
  }
}
