// The demo page as a site of its own: `vite --config vite.demo.config.ts` (dev) or
// `vite build --config vite.demo.config.ts` → dist-demo/ (what `npm start` builds and previews).
// ONNX Runtime Web's .wasm comes in through a `?url` import in demo/bench/systems/ort.ts, so Vite
// serves it in dev and copies it into the build by itself.

import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';
import { CROSS_ORIGIN_ISOLATED } from './scripts/vite-isolation.ts';
import { weightShards } from './scripts/vite-weight-shards.ts';

export default defineConfig({
  plugins: [weightShards()], // USE Lite's weight shards (demo/model/load.ts)
  root: fileURLToPath(new URL('./demo', import.meta.url)),
  resolve: {
    // Imported by its package name, as a user would (same as vite.config.ts).
    alias: { 'webgpu-attention': fileURLToPath(new URL('./src/index.ts', import.meta.url)) },
  },
  // Its own dependency cache: sharing node_modules/.vite with vite.config.ts (the e2e dev server) would
  // make each server re-optimize, and reload the other's pages, whenever the other one started.
  cacheDir: fileURLToPath(new URL('./node_modules/.vite-demo', import.meta.url)),
  // Cross-origin isolated, so the 'wasm' backend runs threads in the page (scripts/vite-isolation.ts).
  server: { host: '127.0.0.1', port: 5173, headers: CROSS_ORIGIN_ISOLATED },
  preview: { host: '127.0.0.1', port: 4173, headers: CROSS_ORIGIN_ISOLATED },
  build: {
    outDir: '../dist-demo',
    emptyOutDir: true,
    target: 'es2022',
    // TensorFlow.js and ONNX Runtime Web are large by nature; they load only when their system runs.
    chunkSizeWarningLimit: 4096,
  },
});
