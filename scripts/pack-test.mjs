#!/usr/bin/env node
// The package as a user gets it: build, `npm pack`, install the tarball into throwaway consumers in
// a temp dir, and run a forward pass in each against the CPU backend.
//
//   1. `npm run build`, then `npm pack`; the tarball must hold dist/ (JS, .d.ts) and no sources.
//   2. test/pack/ is copied to a temp dir; `npm install <tarball>` in node/ with npm's default flags
//      must leave node_modules at MAX_INSTALL_MB or less and without `webgpu` (Dawn, an optional peer
//      dependency of 132 MB); then `npm install webgpu@<the peer version>` there, as the README tells
//      a Node user. In vite/ `npm install <tarball> vite@<the repo's version>`, which must not bring
//      `webgpu` either.
//   3. Both consumers are type-checked with the repo's tsc (node/: nodenext, no DOM; vite/: bundler,
//      DOM, skipLibCheck off): the published .d.ts must work with no tsconfig `types` entry.
//   4. Node: node/forward.mjs runs createAttentionEngine() on real WebGPU (Dawn on lavapipe) and
//      compares with the CPU backend (test/pack/case.mjs).
//   5. Browser: `vite build` (the bundle must not contain the Node-only `webgpu` package), `vite
//      preview` on 127.0.0.1, Chromium through Playwright (--enable-unsafe-webgpu, CHROMIUM_PATH or
//      /usr/bin/chromium); the page runs the same check on navigator.gpu; no .wgsl may be fetched.
//
//   node scripts/pack-test.mjs [--no-build] [--keep] [--dev] [--no-browser]
//     --no-build   pack the dist/ already there (npm pack runs no scripts here)
//     --no-browser steps 1–4 only: no Vite build, no Chromium (a check of the install and Node alone)
//     --keep       leave the temp dir for inspection (also PACK_TEST_KEEP=1)
//     --dev        also open the app on Vite's dev server, which runs without the `webgpu` package
//                  (as every browser app's install is; also PACK_TEST_DEV=1). Vite pre-bundles
//                  the package, and its bundler folds `const name = 'webgpu'; import(name)` into
//                  `import("webgpu")`, which the dev server then fails to resolve: this passes once
//                  src/webgpu/device.ts passes the specifier through a function parameter.
//   env: CHROMIUM_PATH, PACK_TEST_TIMEOUT_S (whole run, default 180), npm's own settings (cache, registry).
//
// Packages come from npm's cache when it has them (--prefer-offline), else from the registry.
// Exits 0 when every step passed; otherwise 1, with the failing step, its output and what to do.
import { spawn } from 'node:child_process';
import { cpSync, existsSync, lstatSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const argv = new Set(process.argv.slice(2));
const KEEP = argv.has('--keep') || process.env.PACK_TEST_KEEP === '1';
const BUILD = !argv.has('--no-build');
const DEV = argv.has('--dev') || process.env.PACK_TEST_DEV === '1';
const BROWSER = !argv.has('--no-browser');
const TOTAL_S = Number(process.env.PACK_TEST_TIMEOUT_S ?? 180);
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
/** The most `npm install <tarball>` may put in an empty folder's node_modules, in MB (as `du -sm` counts). */
const MAX_INSTALL_MB = 20;
const t0 = performance.now();
const deadline = Date.now() + TOTAL_S * 1000;

class StepError extends Error {}
const children = new Set();
let tmp = null;
let browser = null;

const secs = () => ((performance.now() - t0) / 1000).toFixed(1);
const log = (msg) => console.log(`[pack-test ${secs().padStart(5)} s] ${msg}`);
const tail = (text, lines = 40) => text.trimEnd().split('\n').slice(-lines).join('\n');

/** Milliseconds a step may take: its own limit, never past the whole run's deadline. */
function budget(ms) {
  const left = deadline - Date.now();
  if (left <= 0) throw new StepError(`the whole run passed PACK_TEST_TIMEOUT_S=${TOTAL_S} s`);
  return Math.min(ms, left);
}

/** Runs a command in its own process group; resolves { code, out (stdout+stderr), stdout }; kills the group on timeout. */
function run(cmd, args, { cwd = root, timeoutMs = 60_000, env = {} } = {}) {
  const limit = budget(timeoutMs);
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd,
      env: { ...process.env, npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    children.add(child);
    let out = '';
    let stdout = '';
    child.stdout.on('data', (d) => {
      out += d;
      stdout += d;
    });
    child.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => {
      killGroup(child);
      const why = limit < timeoutMs ? ` (the end of the whole run, PACK_TEST_TIMEOUT_S=${TOTAL_S})` : '';
      reject(new StepError(`\`${cmd} ${args.join(' ')}\` (in ${cwd}) took over ${(limit / 1000).toFixed(0)} s${why}; killed.\n${tail(out)}`));
    }, limit);
    child.on('error', (e) => {
      clearTimeout(timer);
      children.delete(child);
      reject(new StepError(`could not start \`${cmd}\`: ${e.message}`));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      children.delete(child);
      resolve({ code: code ?? (signal ? 128 : 1), out, stdout });
    });
  });
}

async function mustRun(what, cmd, args, opts) {
  const r = await run(cmd, args, opts);
  if (r.code !== 0) throw new StepError(`${what} failed (exit ${r.code}): \`${cmd} ${args.join(' ')}\`\n${tail(r.out)}`);
  return r;
}

function killGroup(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    try {
      child.kill('SIGKILL');
    } catch {
      /* gone */
    }
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

async function cleanup() {
  try {
    await browser?.close();
  } catch {
    /* already gone */
  }
  for (const child of children) killGroup(child);
  if (tmp) {
    if (KEEP) log(`kept ${tmp}`);
    else rmSync(tmp, { recursive: true, force: true });
  }
}

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, async () => {
    console.error(`[pack-test] ${sig}: cleaning up`);
    await cleanup();
    process.exit(130);
  });
}

// ── 0. Preflight: the manifest must publish dist/, and Chromium must be there.
function checkManifest() {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  const problems = [];
  const rootExport = pkg.exports?.['.'] ?? pkg.exports;
  const flat = JSON.stringify(rootExport ?? null);
  if (!pkg.exports) problems.push('no "exports"');
  else if (!flat.includes('./dist/index.js') || !flat.includes('./dist/index.d.ts'))
    problems.push(`"exports"["."] must map to ./dist/index.js and ./dist/index.d.ts; it is ${flat}`);
  if (!Array.isArray(pkg.files) || !pkg.files.some((f) => /^(\.\/)?dist\/?$/.test(f))) problems.push('"files" must list "dist"');
  if (pkg.types && !pkg.types.includes('dist/')) problems.push(`"types" is ${pkg.types}, not ./dist/index.d.ts`);
  if (pkg.main && !pkg.main.includes('dist/')) problems.push(`"main" is ${pkg.main}, not ./dist/index.js`);
  if (!pkg.scripts?.build && BUILD) problems.push('no "build" script (expected "node scripts/build.mjs")');
  if (!pkg.peerDependencies?.webgpu || pkg.peerDependenciesMeta?.webgpu?.optional !== true)
    problems.push('"webgpu" must be a peerDependency marked optional in peerDependenciesMeta (browser apps must not download Dawn)');
  if (pkg.dependencies?.webgpu || pkg.optionalDependencies?.webgpu) problems.push('"webgpu" must not be a dependency or optionalDependency: npm installs those');
  if (BROWSER && !existsSync(CHROMIUM)) problems.push(`no Chromium at ${CHROMIUM}: set CHROMIUM_PATH or run scripts/setup-system.sh chromium`);
  if (problems.length) {
    throw new StepError(`cannot start:\n  - ${problems.join('\n  - ')}\n(package.json must publish dist/: see the exports, files, types and scripts.build it needs)`);
  }
  return pkg;
}

// ── 1. Build and pack.
async function buildAndPack(pkg) {
  if (BUILD) {
    await mustRun('npm run build', npm, ['run', 'build'], { timeoutMs: 90_000 });
    log('built dist/');
  } else if (!existsSync(join(root, 'dist/index.js'))) {
    throw new StepError('--no-build, but dist/index.js does not exist: run `npm run build` first');
  }
  // --ignore-scripts: dist/ was just built; a prepack script would only build it again.
  const { stdout } = await mustRun('npm pack', npm, ['pack', '--ignore-scripts', '--json', '--pack-destination', tmp], { timeoutMs: 30_000 });
  let info;
  try {
    info = JSON.parse(stdout)[0];
  } catch {
    throw new StepError(`npm pack --json printed no JSON:\n${tail(stdout)}`);
  }
  const files = info.files.map((f) => f.path);
  const problems = [];
  for (const need of ['package.json', 'dist/index.js', 'dist/index.d.ts']) {
    if (!files.includes(need)) problems.push(`${need} is missing`);
  }
  const stray = files.filter((f) => !/^(dist\/|package\.json$|README(\.md)?$|LICEN[CS]E(\.\w+)?$|CHANGELOG(\.md)?$)/i.test(f));
  if (stray.length) problems.push(`files outside dist/: ${stray.slice(0, 10).join(', ')}${stray.length > 10 ? ' …' : ''}`);
  // src/util ships only what the library imports (the tuner's gate: tolerance.ts, seeded.ts; f16.ts, stats.ts); the test and
  // benchmark helpers live outside src/ (test/helpers/random.ts, demo/bench/flops.ts).
  const internal = files.filter((f) => /(^|\/)util\/(?!(tolerance|seeded|f16|stats)\.d\.ts$)|\.wgsl$|\.ts$(?<!\.d\.ts)/.test(f));
  if (internal.length) problems.push(`sources or internal modules packed: ${internal.join(', ')}`);
  if (problems.length) throw new StepError(`the tarball is wrong:\n  - ${problems.join('\n  - ')}\n(files: ${files.join(', ')})`);
  log(`packed ${info.filename}: ${files.length} files, ${(info.size / 1024).toFixed(0)} KiB (${(info.unpackedSize / 1024).toFixed(0)} KiB unpacked)`);
  return { tarball: join(tmp, info.filename), version: pkg.version };
}

// ── 2. Throwaway consumers.
/** Disk space under `dir` in MB, as `du -sm` counts it (allocated blocks; file sizes where there are none, as on Windows). */
function diskMB(dir) {
  const bytes = (path) => {
    const st = lstatSync(path);
    const own = st.blocks !== undefined ? st.blocks * 512 : st.size;
    return st.isDirectory() ? own + readdirSync(path).reduce((sum, name) => sum + bytes(join(path, name)), 0) : own;
  };
  return bytes(dir) / 2 ** 20;
}

async function installConsumers(tarball, pkg) {
  cpSync(join(root, 'test/pack'), join(tmp, 'pack'), { recursive: true });
  const viteVersion = JSON.parse(readFileSync(join(root, 'node_modules/vite/package.json'), 'utf8')).version;
  const flags = ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'];
  const nodeApp = join(tmp, 'pack/node');
  const dawn = `webgpu@${pkg.peerDependencies.webgpu}`;
  const installNode = async () => {
    await mustRun('npm install <tarball> (Node consumer)', npm, [...flags, tarball], { cwd: nodeApp, timeoutMs: 120_000 });
    // What every user downloads, a browser app's included: the package and its required dependencies only.
    const mb = diskMB(join(nodeApp, 'node_modules'));
    const installed = readdirSync(join(nodeApp, 'node_modules'));
    if (installed.includes('webgpu')) throw new StepError(`npm install <tarball> installed 'webgpu' (Dawn): it must stay an optional peer dependency`);
    if (mb > MAX_INSTALL_MB) {
      throw new StepError(`npm install <tarball> left ${mb.toFixed(1)} MB in an empty folder's node_modules, over ${MAX_INSTALL_MB} MB: ${installed.join(', ')}`);
    }
    log(`npm install <tarball> in an empty folder: node_modules ${mb.toFixed(1)} MB (limit ${MAX_INSTALL_MB} MB), no webgpu`);
    // Then what the README's Install tells a Node user to add.
    await mustRun(`npm install ${dawn} (Node consumer)`, npm, [...flags, dawn], { cwd: nodeApp, timeoutMs: 120_000 });
  };
  await Promise.all([
    installNode(),
    mustRun(`npm install <tarball> vite@${viteVersion} (Vite app)`, npm, [...flags, tarball, `vite@${viteVersion}`], { cwd: join(tmp, 'pack/vite'), timeoutMs: 120_000 }),
  ]);
  if (!existsSync(join(nodeApp, 'node_modules/webgpu/package.json'))) throw new StepError(`npm install ${dawn} did not install 'webgpu' in the Node consumer`);
  if (existsSync(join(tmp, 'pack/vite/node_modules/webgpu')))
    throw new StepError("the Vite app's install brought 'webgpu' (Dawn): it must stay an optional peer dependency");
  log(`installed the tarball into pack/node (then ${dawn}) and pack/vite (with vite@${viteVersion}, without webgpu)`);
}

// ── 3. Consumers' type checks.
async function typecheckConsumers() {
  const tsc = join(root, 'node_modules/typescript/bin/tsc');
  await Promise.all(
    ['node', 'vite'].map((dir) =>
      mustRun(`type check of the ${dir} consumer against the published .d.ts`, process.execPath, [tsc, '-p', join(tmp, 'pack', dir, 'tsconfig.json')], {
        timeoutMs: 60_000,
      }),
    ),
  );
  log('consumers type-check against the published .d.ts (nodenext without DOM; bundler with DOM, skipLibCheck off)');
}

function parseResult(out) {
  const line = out.split('\n').find((l) => l.startsWith('PACK_TEST_RESULT '));
  return line ? JSON.parse(line.slice('PACK_TEST_RESULT '.length)) : null;
}

function summarise(where, result) {
  const adapter = result.adapterInfo
    ? `${result.adapterInfo.vendor}/${result.adapterInfo.architecture} ${result.adapterInfo.description || result.adapterInfo.device}`.trim()
    : 'none';
  const cases = result.cases.map((c) => `${c.name}: max |gpu−cpu| ${c.maxAbs.toExponential(2)} (tol ${c.tol.toExponential(2)}, ${c.gpuMs} ms)`).join('; ');
  return `${where}: backend ${result.backend} (${adapter}), createAttentionEngine() ran on ${result.defaultRanOn}; ${cases}`;
}

// ── 4. Node.
async function runNode() {
  const r = await run(process.execPath, ['forward.mjs'], {
    cwd: join(tmp, 'pack/node'),
    timeoutMs: 90_000,
    env: { XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? '/tmp' },
  });
  const result = parseResult(r.out);
  if (r.code !== 0 || !result?.ok) {
    const why = result ? result.problems.join('\n  - ') : 'no result line';
    throw new StepError(
      `Node consumer (createAttentionEngine() on Dawn) failed (exit ${r.code}):\n  - ${why}\n${tail(r.out, 20)}\n` +
        'Without a Vulkan driver Dawn has no adapter: run scripts/setup-system.sh lavapipe.',
    );
  }
  log(summarise('Node', result));
}

// ── 5. Browser.
/** Starts `vite <args>` in the app on a free 127.0.0.1 port; resolves its URL once it answers. */
async function startVite(app, label, args) {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/`;
  const proc = spawn(process.execPath, [join(app, 'node_modules/vite/bin/vite.js'), ...args, '--host', '127.0.0.1', '--port', String(port), '--strictPort'], {
    cwd: app,
    env: process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  children.add(proc);
  let out = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (out += d));
  proc.on('close', () => children.delete(proc));
  const readyBy = Date.now() + budget(20_000);
  for (;;) {
    if (proc.exitCode !== null) throw new StepError(`${label} exited (${proc.exitCode}):\n${tail(out)}`);
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
      if (res.ok) return { url, proc, output: () => out };
    } catch {
      /* not listening yet */
    }
    if (Date.now() > readyBy) throw new StepError(`${label} did not answer on ${url} within 20 s:\n${tail(out)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Opens the app in Chromium and returns the page's check (test/pack/case.mjs), with what the page loaded wrong. */
async function checkPage(url, label) {
  if (!browser) {
    if (!existsSync(CHROMIUM)) throw new StepError(`no Chromium at ${CHROMIUM}: set CHROMIUM_PATH or run scripts/setup-system.sh chromium`);
    let chromium;
    try {
      ({ chromium } = await import('@playwright/test'));
    } catch {
      ({ chromium } = await import('playwright-core'));
    }
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--enable-unsafe-webgpu'], timeout: budget(30_000) });
  }
  const page = await browser.newPage();
  const wgslRequests = [];
  const pageErrors = [];
  page.on('request', (req) => {
    if (/\.wgsl(\?|$)/.test(req.url())) wgslRequests.push(req.url());
  });
  page.on('pageerror', (e) => pageErrors.push(e.message));
  // Failed loads are reported with their URL below; Chromium's console line for them has none.
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) pageErrors.push(`console: ${m.text()}`);
  });
  page.on('response', (res) => {
    if (res.status() >= 400) pageErrors.push(`HTTP ${res.status()} for ${res.url()}`);
  });
  page.on('requestfailed', (req) => pageErrors.push(`request failed: ${req.url()} (${req.failure()?.errorText})`));
  try {
    await page.goto(url, { waitUntil: 'load', timeout: budget(30_000) });
    // The module sets window.packTest as it starts; a page whose module failed to load never will,
    // so stop waiting a second after the first load error.
    const startBy = Date.now() + budget(15_000);
    let started = false;
    let firstErrorAt = 0;
    while (!started && Date.now() < startBy) {
      started = await page.evaluate(() => 'packTest' in window);
      if (pageErrors.length && !firstErrorAt) firstErrorAt = Date.now();
      if (started || (firstErrorAt && Date.now() - firstErrorAt > 1000)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    if (!started) {
      throw new StepError(`${label}: the page never started its check (window.packTest unset); page errors: ${pageErrors.join(' | ') || 'none'}`);
    }
    let timer;
    const result = await Promise.race([
      page.evaluate(() => window.packTest),
      new Promise((_, reject) => {
        const ms = budget(90_000);
        timer = setTimeout(() => reject(new StepError(`${label}: the page did not finish its forward within ${ms / 1000} s`)), ms);
      }),
    ]).finally(() => clearTimeout(timer));
    if (wgslRequests.length) result.problems.push(`the page fetched .wgsl files: ${wgslRequests.join(', ')}`);
    if (pageErrors.length) result.problems.push(`page errors: ${pageErrors.join(' | ')}`);
    if (!result.ok || result.problems.length) {
      throw new StepError(
        `${label} failed:\n  - ${result.problems.join('\n  - ')}\n` +
          'Chromium needs --enable-unsafe-webgpu and a 127.0.0.1/https origin for WebGPU (see playwright.config.ts).',
      );
    }
    return result;
  } finally {
    await page.close().catch(() => {});
  }
}

async function runBrowser() {
  const app = join(tmp, 'pack/vite');
  const { out: buildOut } = await mustRun('vite build of the consumer app', process.execPath, [join(app, 'node_modules/vite/bin/vite.js'), 'build'], {
    cwd: app,
    timeoutMs: 60_000,
  });
  const assets = readdirSync(join(app, 'dist/assets'));
  const js = assets
    .filter((f) => f.endsWith('.js'))
    .map((f) => readFileSync(join(app, 'dist/assets', f), 'utf8'))
    .join('\n');
  const problems = [];
  if (/dawn\.node|createRequire|node:module/.test(js) || assets.some((f) => /\.node$/.test(f)))
    problems.push("the app bundle contains the Node-only 'webgpu' package (Dawn)");
  if (!/@compute\s*@workgroup_size/.test(js)) problems.push('the app bundle has no inlined WGSL');
  if (/UNRESOLVED_IMPORT|Could not resolve/i.test(buildOut)) problems.push(`vite build reported unresolved imports:\n${tail(buildOut, 15)}`);
  if (problems.length) throw new StepError(`consumer app build is wrong:\n  - ${problems.join('\n  - ')}`);
  log(`vite build: ${assets.length} assets, ${(js.length / 1024).toFixed(0)} KiB of JS`);

  const preview = await startVite(app, 'vite preview', ['preview']);
  const result = await checkPage(preview.url, 'browser consumer (vite build + vite preview, Chromium)');
  killGroup(preview.proc);
  log(summarise('Chromium', result));

  if (DEV) {
    // A browser-only app has no `webgpu` package (an optional peer dependency, never installed for it):
    // Vite's dev server pre-bundles the package and must not need the Node-only module.
    const dev = await startVite(app, 'vite (dev server)', ['--force']);
    try {
      const devResult = await checkPage(dev.url, 'browser consumer (vite dev server without the webgpu package, Chromium)');
      log(summarise('Chromium, vite dev without webgpu', devResult));
    } catch (e) {
      if (e instanceof StepError) e.message += `\nvite dev server output:\n${tail(dev.output(), 15)}`;
      throw e;
    } finally {
      killGroup(dev.proc);
    }
  }
}

let exitCode = 0;
try {
  const pkg = checkManifest();
  tmp = mkdtempSync(join(tmpdir(), 'webgpu-attention-pack-'));
  log(`temp dir ${tmp}`);
  const { tarball } = await buildAndPack(pkg);
  await installConsumers(tarball, pkg);
  // The type checks and the Node forward each use one core; the browser then has both.
  await Promise.all([typecheckConsumers(), runNode()]);
  if (BROWSER) await runBrowser();
  log(`PASS: the packed tarball installs and runs in Node (Dawn)${BROWSER ? ' and in a Vite app in Chromium' : '; browser not tested (--no-browser)'}`);
} catch (e) {
  exitCode = 1;
  const msg = e instanceof StepError ? e.message : `unexpected error: ${e?.stack ?? e}`;
  console.error(`\n[pack-test ${secs()} s] FAIL: ${msg}`);
} finally {
  await cleanup();
}
process.exit(exitCode);
