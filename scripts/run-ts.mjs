#!/usr/bin/env node
// Runs a TypeScript entry point in Node through Vite's module runner, so it can import the engine's
// sources as they are (TypeScript, WGSL as `?raw` strings) with no build step.
//   node scripts/run-ts.mjs scripts/compare.ts [args...]
import { createServer, createServerModuleRunner } from 'vite';
import { dirname, resolve } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { fileURLToPath, pathToFileURL } from 'node:url';

const [entry, ...args] = process.argv.slice(2);
if (!entry) {
  console.error('usage: node scripts/run-ts.mjs <file.ts> [args...]');
  process.exit(2);
}
process.argv = [process.argv[0], resolve(entry), ...args];
// WebAssembly relaxed SIMD, on in Chromium and Node ≥ 22 and behind this flag in Node 20: the scripts
// (benchmarks above all) run the 'wasm' backend as those platforms do (engine.wasmSimd; its probe,
// src/wasm/kernels.ts, still decides). A flag this Node does not know is ignored.
setFlagsFromString('--experimental-wasm-relaxed-simd');
process.env.XDG_RUNTIME_DIR ??= '/tmp'; // quiets Dawn's "XDG_RUNTIME_DIR is invalid or not set"

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const server = await createServer({
  configFile: false,
  root: process.cwd(),
  // The package name means the sources, as in vite.config.ts (not a dist/ that may be stale or absent).
  resolve: { alias: { 'webgpu-attention': resolve(repo, 'src/index.ts') } },
  logLevel: 'error',
  server: { middlewareMode: true, hmr: false, ws: false },
  appType: 'custom',
  optimizeDeps: { noDiscovery: true, include: [] },
});
const runner = createServerModuleRunner(server.environments.ssr, { hmr: false });
let code = 0;
try {
  await runner.import(pathToFileURL(resolve(entry)).href);
} catch (e) {
  console.error(e);
  code = 1;
} finally {
  await runner.close();
  await server.close();
}
process.exit(process.exitCode ?? code);
