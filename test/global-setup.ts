// Runs once per `vitest run`, before any test file (vite.config.ts test.globalSetup): one Mesa shader
// cache for the whole run. Each test file runs in a process of its own with a WebGPU device of its own,
// so without this every file compiled every kernel it uses from cold (lavapipe: LLVM, seconds a pipeline);
// with it, a kernel the same as one an earlier file compiled (same WGSL, same head size) is read back
// from the cache. The cache starts empty in every run and is deleted after it: nothing carries over
// between runs, so a run on a fresh machine and one on a warm machine do the same work.
// A caller's own MESA_SHADER_CACHE_DIR or MESA_SHADER_CACHE_DISABLE (scripts/bench-cold.ts) is left alone.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export default function setup(): (() => void) | undefined {
  // lavapipe compiles every kernel through LLVM; without its optimisation passes a compile takes about
  // half as long (measured: the slowest attention body at head size 64, 32 s against 16 s cold) and the
  // tests' small shapes run about as fast. Same WGSL, same driver, same checks: only the benchmarks
  // (which never read this) measure optimised code. A caller's own GALLIVM_PERF is kept.
  process.env.GALLIVM_PERF ??= 'nopt';
  if (process.env.MESA_SHADER_CACHE_DIR || process.env.MESA_SHADER_CACHE_DISABLE) return undefined;
  const dir = mkdtempSync(join(tmpdir(), 'webgpu-attention-test-mesa-'));
  process.env.MESA_SHADER_CACHE_DIR = dir; // inherited by the test processes, which are started after this
  return () => {
    rmSync(dir, { recursive: true, force: true });
    delete process.env.MESA_SHADER_CACHE_DIR;
  };
}
