#!/usr/bin/env node
// Bundles scripts/gpu/bench-gpu.ts with the engine's sources (TypeScript, WGSL inlined by `?raw`)
// into one ES module for plain Node, so the GPU machine needs no Vite, no TypeScript and no
// node_modules beyond the `webgpu` package (left external, imported at run time).
// Called by scripts/gpu/prepare.sh:
//   node scripts/gpu/bundle.mjs <outDir>
// writes <outDir>/bench-gpu.mjs and <outDir>/sources.sha256: the sha256 of every source file that
// went into the bundle, paths relative to the repo root, for `sha256sum -c` on the GPU machine
// (run-on-device.sh refuses a bundle older than the sources it would be measuring).
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'vite';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const outDir = resolve(process.argv[2] ?? join(root, 'scripts/gpu/carry'));
const entry = join(root, 'scripts/gpu/bench-gpu.ts');

const result = await build({
  configFile: false,
  root,
  publicDir: false,
  envDir: false,
  logLevel: 'warn',
  build: {
    ssr: entry,
    outDir,
    emptyOutDir: false,
    target: 'node20',
    minify: false,
    sourcemap: false,
    copyPublicDir: false,
    reportCompressedSize: false,
    rolldownOptions: {
      external: ['webgpu', /^node:/],
      output: { format: 'es', entryFileNames: 'bench-gpu.mjs', codeSplitting: false },
    },
  },
  // Bundle everything the script imports (the engine's sources); only Dawn and Node's own modules stay outside.
  ssr: { noExternal: true, external: ['webgpu'] },
});

const outputs = (Array.isArray(result) ? result : [result]).flatMap((r) => r.output ?? []);
const chunks = outputs.filter((o) => o.type === 'chunk');
if (chunks.length !== 1 || chunks[0].fileName !== 'bench-gpu.mjs') {
  console.error(`bundle: expected one chunk bench-gpu.mjs; got ${chunks.map((c) => c.fileName).join(', ') || 'none'}`);
  process.exit(1);
}
const files = new Set();
for (const id of chunks[0].moduleIds ?? Object.keys(chunks[0].modules ?? {})) {
  const path = id.replace(/^\0/, '').replace(/\?.*$/, '');
  if (!isAbsolute(path) || !existsSync(path)) continue;
  const rel = relative(root, path);
  if (rel.startsWith('..') || rel.startsWith('node_modules')) continue;
  files.add(rel);
}
if (![...files].some((f) => f.startsWith('shaders/'))) {
  console.error('bundle: no shaders/*.wgsl among the bundled modules; the WGSL kernels were not inlined');
  process.exit(1);
}
const lines = [...files].sort().map(
  (f) =>
    `${createHash('sha256')
      .update(readFileSync(join(root, f)))
      .digest('hex')}  ${f}`,
);
writeFileSync(join(outDir, 'sources.sha256'), `${lines.join('\n')}\n`);
const code = readFileSync(join(outDir, 'bench-gpu.mjs'), 'utf8');
if (/\bimport\s*\(\s*["']\.\.?\//.test(code)) {
  console.error('bundle: bench-gpu.mjs still imports a relative module at run time');
  process.exit(1);
}
console.log(`bundle: ${relative(root, join(outDir, 'bench-gpu.mjs'))} (${(code.length / 1024).toFixed(0)} KiB) from ${files.size} source files`);
