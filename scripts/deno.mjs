// Deno with WebGPU on the built package, for scripts/deno-test.mjs (npm run test:deno) and
// scripts/bench-runtimes.ts (npm run bench -- --deno). Deno is the devDependency `deno` (its platform
// package, for Linux x64 @deno/linux-x64-glibc, ships the binary); DENO_PATH picks another. Without a
// GPU, wgpu runs on Mesa's lavapipe: VK_ICD_FILENAMES defaults to its ICD, DENO_WEBGPU_BACKEND to vulkan.
// Types: scripts/deno.d.mts.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const LVP_ICD = '/usr/share/vulkan/icd.d/lvp_icd.json';
export const deno = process.env.DENO_PATH ?? join(root, 'node_modules', '.bin', process.platform === 'win32' ? 'deno.cmd' : 'deno');
export const icd = process.env.VK_ICD_FILENAMES ?? LVP_ICD;

/** Why Deno cannot run here (no binary, no Vulkan driver), or null. */
export function denoMissing() {
  if (!existsSync(deno)) return `no Deno at ${deno}: run npm ci (the devDependency deno installs @deno/linux-x64-glibc, which ships it), or set DENO_PATH`;
  if (!process.env.VK_ICD_FILENAMES && !existsSync(LVP_ICD)) {
    return `no lavapipe ICD at ${LVP_ICD} (Deno's WebGPU needs a Vulkan driver): bash scripts/setup-system.sh lavapipe, or set VK_ICD_FILENAMES to a driver's ICD`;
  }
  return null;
}

/**
 * The environment Deno runs in. `fastCompiles` (the tests'): lavapipe without LLVM's optimisation passes,
 * compiles about twice as fast (test/global-setup.ts); a benchmark leaves Mesa's default, what a user runs.
 */
export function denoEnv(fastCompiles = true) {
  const env = {
    ...process.env,
    VK_ICD_FILENAMES: icd,
    // Vulkan only: without a Vulkan driver wgpu would fall back to OpenGL (llvmpipe through EGL), which has
    // no shader-f16 and took minutes for what Vulkan does in seconds; no adapter is the clearer failure.
    DENO_WEBGPU_BACKEND: process.env.DENO_WEBGPU_BACKEND ?? 'vulkan',
    XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? '/tmp',
    DENO_NO_UPDATE_CHECK: '1', // no network
    DENO_NO_PROMPT: '1',
  };
  if (fastCompiles) env.GALLIVM_PERF = process.env.GALLIVM_PERF ?? 'nopt';
  return env;
}

// dist/ is stale when any input of the build is newer than dist/index.js.
function newest(path) {
  const s = statSync(path);
  if (!s.isDirectory()) return s.mtimeMs;
  return Math.max(s.mtimeMs, ...readdirSync(path).map((name) => newest(join(path, name))));
}

/**
 * Builds dist/ (npm run build) where it is missing or older than the sources. Returns null when dist/
 * is up to date or was built, else why the build failed. `log` gets a line saying why it builds.
 */
export function ensureDist(timeoutS, log) {
  const distEntry = join(root, 'dist', 'index.js');
  const inputs = ['src', 'shaders', 'wasm', 'package.json', 'vite.lib.config.ts', 'tsconfig.build.json'].map((p) => join(root, p)).filter(existsSync);
  const stale = !existsSync(distEntry) || Math.max(...inputs.map(newest)) > statSync(distEntry).mtimeMs;
  if (!stale) return null;
  log(`${existsSync(distEntry) ? 'dist/ is older than the sources' : 'no dist/'}: npm run build`);
  const build = spawnSync(process.execPath, [join(root, 'scripts', 'build.mjs')], { cwd: root, stdio: 'inherit', timeout: timeoutS * 1000 });
  return build.status === 0 ? null : `npm run build (scripts/build.mjs) exited with ${build.status ?? build.signal}`;
}
