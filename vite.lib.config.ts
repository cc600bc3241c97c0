// Library build (`npm run build` → scripts/build.mjs): src/index.ts → dist/index.js, one ES module
// for browsers and Node alike. The repo's vite.config.ts (demo, vitest, e2e) is left alone.
//
// - WGSL kernels are imported with `?raw`, so Vite inlines each as a string constant: the built
//   package never fetches a .wgsl file.
// - `webgpu` (Dawn, Node only) is loaded by src/webgpu/device.ts with `import(name)`, a variable
//   specifier, so bundlers do not follow it. Rolldown folds single-use constants both when it tree
//   shakes and in its default 'dce-only' minify pass, turning that into `import("webgpu")`, which
//   every consumer's bundler would then resolve and try to bundle (Dawn's native addon) for the
//   browser; either pass alone folds it, so this build turns both off. It is
//   also marked external in case a later edit makes the specifier static. scripts/build.mjs
//   fails the build if dist/index.js has a dynamic import with a literal specifier.
// - Types come from `tsc -p tsconfig.build.json` (declarations only), run by scripts/build.mjs.
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const root = fileURLToPath(new URL('.', import.meta.url));

export default defineConfig({
  root,
  // No public/ copy, no .env loading into the library, no index.html.
  publicDir: false,
  envDir: false,
  logLevel: 'warn',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    minify: false,
    sourcemap: true,
    copyPublicDir: false,
    reportCompressedSize: false,
    lib: {
      entry: fileURLToPath(new URL('./src/index.ts', import.meta.url)),
      formats: ['es'],
      fileName: () => 'index.js',
    },
    rolldownOptions: {
      external: ['webgpu', /^node:/],
      // Every module index.ts reaches is public API or used by it, so there is little to shake;
      // consumers' bundlers still tree-shake the package (sideEffects: false).
      treeshake: false,
      optimization: { inlineConst: false },
      output: {
        // Vite turns build.minify false into Rolldown's 'dce-only', which still folds constants.
        minify: false,
        // Keeps `/* @vite-ignore */` on the Dawn import (Vite's dev server would warn without it).
        comments: { annotation: true, jsdoc: true, legal: true },
      },
    },
  },
});
