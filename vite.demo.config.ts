// The demo page as a site of its own: `vite --config vite.demo.config.ts` (dev) or
// `vite build --config vite.demo.config.ts` → dist-demo/ (what `npm start` builds and previews).
//
// ONNX Runtime Web's WebAssembly files (node_modules/onnxruntime-web/dist/ort-wasm-simd-threaded*.wasm
// and .mjs) are served at /ort/ in dev and copied to dist-demo/ort/ in the build, so a page can set
// `ort.env.wasm.wasmPaths = '/ort/'`. The ortAssets() plugin does both; vite.config.ts (the repo-root
// dev server of the e2e tests) can use it too.

import { createReadStream, readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Plugin, defineConfig } from 'vite';

const ORT_DIST = fileURLToPath(new URL('./node_modules/onnxruntime-web/dist/', import.meta.url));
const ORT_FILE = /^ort-wasm-simd-threaded(\.[a-z]+)?\.(wasm|mjs)$/;
const ORT_URL = '/ort/';

function ortFiles(): string[] {
  try {
    return readdirSync(ORT_DIST).filter((f) => ORT_FILE.test(f));
  } catch {
    return [];
  }
}

/** Serves ONNX Runtime Web's .wasm/.mjs at /ort/ (dev and preview) and emits them to ort/ in the build. */
export function ortAssets(): Plugin {
  const serve = (req: { url?: string }, res: import('node:http').ServerResponse, next: () => void) => {
    const name = decodeURIComponent((req.url ?? '').split('?')[0].replace(/^\//, ''));
    if (!ORT_FILE.test(name)) return next();
    const file = join(ORT_DIST, name);
    let size: number;
    try {
      size = statSync(file).size;
    } catch {
      return next();
    }
    res.setHeader('Content-Type', name.endsWith('.wasm') ? 'application/wasm' : 'text/javascript');
    res.setHeader('Content-Length', size);
    res.setHeader('Cache-Control', 'no-cache');
    createReadStream(file).pipe(res);
  };
  return {
    name: 'ort-assets',
    configureServer(server) {
      // Registered directly (not returned), so it runs before Vite's transform middleware touches the .mjs.
      server.middlewares.use(ORT_URL, serve);
    },
    configurePreviewServer(server) {
      // The build already has them under ort/; this only matters when previewing a build made without this plugin.
      server.middlewares.use(ORT_URL, serve);
    },
    generateBundle() {
      const files = ortFiles();
      if (files.length === 0) this.warn(`no ONNX Runtime Web files in ${ORT_DIST}: is onnxruntime-web installed?`);
      for (const f of files) this.emitFile({ type: 'asset', fileName: `ort/${f}`, source: readFileSync(join(ORT_DIST, f)) });
    },
  };
}

export default defineConfig({
  root: fileURLToPath(new URL('./demo', import.meta.url)),
  resolve: {
    // Imported by its package name, as a user would (same as vite.config.ts).
    alias: { 'webgpu-attention': fileURLToPath(new URL('./src/index.ts', import.meta.url)) },
  },
  plugins: [ortAssets()],
  // Its own dependency cache: sharing node_modules/.vite with vite.config.ts (the e2e dev server) would
  // make each server re-optimize, and reload the other's pages, whenever the other one started.
  cacheDir: fileURLToPath(new URL('./node_modules/.vite-demo', import.meta.url)),
  server: { host: '127.0.0.1', port: 5173 },
  preview: { host: '127.0.0.1', port: 4173 },
  build: {
    outDir: '../dist-demo',
    emptyOutDir: true,
    target: 'es2022',
    // TensorFlow.js and ONNX Runtime Web are large by nature; they load only when their system runs.
    chunkSizeWarningLimit: 4096,
  },
});
