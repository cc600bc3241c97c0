import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { CROSS_ORIGIN_ISOLATED } from './scripts/vite-isolation.ts';
import { weightShards } from './scripts/vite-weight-shards.ts';
import { CompileFirstSequencer } from './test/sequencer.ts';

// One config for the demo page (Vite), the unit tests (vitest in Node) and the e2e harness.
// WGSL files are imported as strings with `?raw`, so no build step is needed to run the engine.
// Pages are served cross-origin isolated (scripts/vite-isolation.ts): the 'wasm' backend runs threads there.

export default defineConfig({
  plugins: [weightShards()], // USE Lite's weight shards (demo/model/load.ts)
  server: { host: '127.0.0.1', headers: CROSS_ORIGIN_ISOLATED },
  preview: { headers: CROSS_ORIGIN_ISOLATED },
  resolve: {
    // The demo and the browser tests import the engine by its package name, as a user would.
    alias: { 'webgpu-attention': fileURLToPath(new URL('./src/index.ts', import.meta.url)) },
  },
  // The benchmark's peers, bundled when the server starts rather than discovered mid-page (which
  // makes Vite reload the page).
  optimizeDeps: {
    include: [
      '@tensorflow/tfjs-core',
      '@tensorflow/tfjs-backend-webgpu',
      '@tensorflow/tfjs-backend-wasm',
      'onnxruntime-web/webgpu',
      'onnxruntime-web/wasm',
      'protobufjs',
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    setupFiles: ['test/setup.ts'],
    // One Mesa shader cache per run, shared by the test files (each compiled its kernels from cold before).
    globalSetup: ['test/global-setup.ts'],
    // The two kernel-variant files first (they compile every variant: later files read them from that
    // cache), then the other long ones, then by name (test/sequencer.ts).
    sequence: { sequencer: CompileFirstSequencer },
    environment: 'node',
    // One WebGPU device per test file; the software drivers are slow, so give GPU tests room.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Two files at a time, each with its own device. Both cores do work now: Dawn's poll no longer
    // spins a core per process (test/helpers/dawn-poll.ts), and lavapipe compiles without LLVM's
    // optimisation passes (test/global-setup.ts). Measured (clean clone, quiet machine, 2026-12-02):
    // vitest 297 s for 545 s of file time, where it took 1299 s before both (docs/TESTING.md).
    fileParallelism: true,
    maxWorkers: 2,
    // Relaxed SIMD, which Chromium and Node ≥ 22 have on and Node 20 keeps behind a flag, so that the
    // 'wasm' backend takes its relaxed build by default here as it does there (src/wasm/kernels.ts
    // resolveWasmSimd; the tests that ask for 'simd128' check the other).
    execArgv: ['--experimental-wasm-relaxed-simd'],
  },
});
