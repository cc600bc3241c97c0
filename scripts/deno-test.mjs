#!/usr/bin/env node
// `npm run test:deno`: the built package in Deno, on Deno's WebGPU (wgpu) against the engine's float64
// CPU backend (test/deno/gpu-vs-cpu.ts: the built-in kernel choice, then every variant that runs without
// subgroups, f32 and f16). Deno is the devDependency `deno` (its platform package, for Linux x64
// @deno/linux-x64-glibc, ships the binary); DENO_PATH picks another. Builds dist/ first (npm run build)
// where it is missing or older than the sources. Without a GPU, wgpu runs on Mesa's lavapipe:
// VK_ICD_FILENAMES defaults to its ICD, and DENO_WEBGPU_BACKEND to vulkan. Fails, saying what is missing, when anything is; never skips.
// The whole run is bounded (DENO_TEST_TIMEOUT_S, default 240 s, the build included).
//   node scripts/deno-test.mjs
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const LVP_ICD = '/usr/share/vulkan/icd.d/lvp_icd.json';
const timeoutS = Number(process.env.DENO_TEST_TIMEOUT_S ?? 240);
const t0 = performance.now();
const seconds = () => ((performance.now() - t0) / 1000).toFixed(1);

function fail(message) {
  console.error(`deno-test: FAILED: ${message}`);
  process.exit(1);
}

const deno = process.env.DENO_PATH ?? join(root, 'node_modules', '.bin', process.platform === 'win32' ? 'deno.cmd' : 'deno');
if (!existsSync(deno)) fail(`no Deno at ${deno}: run npm ci (the devDependency deno installs @deno/linux-x64-glibc, which ships it), or set DENO_PATH`);
const icd = process.env.VK_ICD_FILENAMES ?? LVP_ICD;
if (!process.env.VK_ICD_FILENAMES && !existsSync(LVP_ICD)) {
  fail(`no lavapipe ICD at ${LVP_ICD} (Deno's WebGPU needs a Vulkan driver): bash scripts/setup-system.sh lavapipe, or set VK_ICD_FILENAMES to a driver's ICD`);
}

// dist/ is stale when any input of the build is newer than dist/index.js.
function newest(path) {
  const s = statSync(path);
  if (!s.isDirectory()) return s.mtimeMs;
  return Math.max(s.mtimeMs, ...readdirSync(path).map((name) => newest(join(path, name))));
}
const distEntry = join(root, 'dist', 'index.js');
const inputs = ['src', 'shaders', 'wasm', 'package.json', 'vite.lib.config.ts', 'tsconfig.build.json'].map((p) => join(root, p)).filter(existsSync);
const stale = !existsSync(distEntry) || Math.max(...inputs.map(newest)) > statSync(distEntry).mtimeMs;
if (stale) {
  console.log(`deno-test: ${existsSync(distEntry) ? 'dist/ is older than the sources' : 'no dist/'}: npm run build`);
  const build = spawnSync(process.execPath, [join(root, 'scripts', 'build.mjs')], { cwd: root, stdio: 'inherit', timeout: timeoutS * 1000 });
  if (build.status !== 0) fail(`npm run build (scripts/build.mjs) exited with ${build.status ?? build.signal}`);
  console.log(`deno-test: built in ${seconds()} s`);
}

const args = ['run', '--unstable-webgpu', '-A', join(root, 'test', 'deno', 'gpu-vs-cpu.ts')];
console.log(`deno-test: VK_ICD_FILENAMES=${icd} ${deno} ${args.join(' ')}`);
const child = spawn(deno, args, {
  cwd: root,
  stdio: 'inherit',
  env: {
    ...process.env,
    VK_ICD_FILENAMES: icd,
    // Vulkan only: without a Vulkan driver wgpu would fall back to OpenGL (llvmpipe through EGL), which has
    // no shader-f16 and took minutes for what Vulkan does in seconds; no adapter is the clearer failure.
    DENO_WEBGPU_BACKEND: process.env.DENO_WEBGPU_BACKEND ?? 'vulkan',
    XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? '/tmp',
    // lavapipe without LLVM's optimisation passes: compiles take about half as long (test/global-setup.ts).
    GALLIVM_PERF: process.env.GALLIVM_PERF ?? 'nopt',
    DENO_NO_UPDATE_CHECK: '1', // no network
    DENO_NO_PROMPT: '1',
  },
});
const left = Math.max(1, timeoutS - (performance.now() - t0) / 1000);
const timer = setTimeout(() => {
  console.error(`deno-test: FAILED: timed out after ${timeoutS} s (DENO_TEST_TIMEOUT_S); killing Deno`);
  child.kill('SIGKILL');
}, left * 1000);
child.on('exit', (code, signal) => {
  clearTimeout(timer);
  console.log(`deno-test: ${code === 0 ? 'passed' : 'FAILED'} in ${seconds()} s (Deno exited with ${code ?? signal})`);
  process.exit(code === 0 ? 0 : 1);
});
child.on('error', (e) => fail(`could not start ${deno}: ${e.message}`));
