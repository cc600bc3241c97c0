#!/usr/bin/env node
// `npm run test:deno`: the built package in Deno, on Deno's WebGPU (wgpu) against the engine's float64
// CPU backend (test/deno/gpu-vs-cpu.ts: the built-in kernel choice, then every variant that runs without
// subgroups, f32 and f16). Deno is the devDependency `deno` (its platform package, for Linux x64
// @deno/linux-x64-glibc, ships the binary); DENO_PATH picks another. Builds dist/ first (npm run build)
// where it is missing or older than the sources. Without a GPU, wgpu runs on Mesa's lavapipe:
// VK_ICD_FILENAMES defaults to its ICD, and DENO_WEBGPU_BACKEND to vulkan. Fails, saying what is missing, when anything is; never skips.
// The whole run is bounded (DENO_TEST_TIMEOUT_S, default 240 s, the build included).
//   node scripts/deno-test.mjs
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { deno, denoEnv, denoMissing, ensureDist, icd, root } from './deno.mjs';

const timeoutS = Number(process.env.DENO_TEST_TIMEOUT_S ?? 240);
const t0 = performance.now();
const seconds = () => ((performance.now() - t0) / 1000).toFixed(1);

function fail(message) {
  console.error(`deno-test: FAILED: ${message}`);
  process.exit(1);
}

const missing = denoMissing();
if (missing) fail(missing);
let built = false;
const buildFailure = ensureDist(timeoutS, (line) => {
  built = true;
  console.log(`deno-test: ${line}`);
});
if (buildFailure) fail(buildFailure);
if (built) console.log(`deno-test: built in ${seconds()} s`);

const args = ['run', '--unstable-webgpu', '-A', join(root, 'test', 'deno', 'gpu-vs-cpu.ts')];
console.log(`deno-test: VK_ICD_FILENAMES=${icd} ${deno} ${args.join(' ')}`);
const child = spawn(deno, args, {
  cwd: root,
  stdio: 'inherit',
  env: denoEnv(),
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
