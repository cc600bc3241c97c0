#!/usr/bin/env node
// `npm run build`: the installable package in dist/.
//   0. scripts/build-wasm.mjs: the 'wasm' backend's kernels (wasm/*.ts) → src/wasm/module.ts.
//   1. Vite library mode (vite.lib.config.ts): src/index.ts → dist/index.js (+ .map), one ES module
//      for browsers and Node, the WGSL kernels inlined as strings.
//   2. tsc -p tsconfig.build.json: declarations only, dist/**/*.d.ts.
//   3. The .d.ts are made safe for consumers: relative `./x.ts` specifiers become `./x.js` (what
//      every TypeScript version and moduleResolution resolves to ./x.d.ts), and dist/index.d.ts
//      gets `/// <reference types="@webgpu/types" />`, so GPUDevice & co. resolve in a consumer's
//      program without any tsconfig change (@webgpu/types is a dependency of the package).
//   4. Checks of the result; any failure exits 1 with what is wrong.
//        node scripts/build.mjs
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');
const require = createRequire(import.meta.url);
const t0 = performance.now();

function fail(message) {
  console.error(`build: FAILED: ${message}`);
  process.exit(1);
}

function walk(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)]));
}

// 0. The WebAssembly kernels, inlined into the sources (committed too, so the sources run without this step).
const wasm = spawnSync(process.execPath, [join(root, 'scripts/build-wasm.mjs')], { cwd: root, stdio: 'inherit' });
if (wasm.status !== 0) fail('scripts/build-wasm.mjs (the WebAssembly kernels)');

// 1. JavaScript.
rmSync(dist, { recursive: true, force: true });
process.chdir(root);
const { build } = await import('vite');
try {
  await build({ configFile: join(root, 'vite.lib.config.ts'), mode: 'production' });
} catch (e) {
  fail(`vite build (vite.lib.config.ts): ${e?.message ?? e}`);
}

// 2. Declarations.
const tsc = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.build.json'], {
  cwd: root,
  stdio: 'inherit',
});
if (tsc.status !== 0) fail(`tsc -p tsconfig.build.json exited with ${tsc.status ?? tsc.signal}`);

// 3. Declarations made consumable.
const dtsFiles = walk(dist).filter((f) => f.endsWith('.d.ts'));
const relativeTsSpecifier = /(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(['"])(\.{1,2}\/[^'"]*?)\.ts\2/g;
for (const file of dtsFiles) {
  let text = readFileSync(file, 'utf8');
  text = text.replace(relativeTsSpecifier, (_m, lead, q, path) => `${lead}${q}${path}.js${q}`);
  if (file === join(dist, 'index.d.ts')) {
    text = `/// <reference types="@webgpu/types" />\n${text}`;
  }
  writeFileSync(file, text);
}

// 4. Checks.
const problems = [];
const js = join(dist, 'index.js');
if (!existsSync(js)) fail('dist/index.js was not written');
if (!existsSync(join(dist, 'index.d.ts'))) fail('dist/index.d.ts was not written');
const code = readFileSync(js, 'utf8');
const { parseAst } = await import('vite');
const imports = [];
(function visit(node) {
  if (!node || typeof node.type !== 'string') return;
  if (node.type === 'ImportDeclaration' || node.type === 'ExportAllDeclaration' || (node.type === 'ExportNamedDeclaration' && node.source)) {
    imports.push({ kind: 'static', literal: node.source.value });
  } else if (node.type === 'ImportExpression') {
    const src = node.source;
    const literal = src.type === 'Literal' ? src.value : src.type === 'TemplateLiteral' && src.expressions.length === 0 ? src.quasis[0].value.cooked : null;
    imports.push({ kind: 'dynamic', literal, code: code.slice(node.start, node.end).replace(/\s+/g, ' ') });
  }
  for (const value of Object.values(node)) {
    if (Array.isArray(value)) value.forEach(visit);
    else if (value && typeof value === 'object') visit(value);
  }
})(parseAst(code));
// No static imports: the package has no runtime dependency, and the shaders are inlined strings.
for (const i of imports.filter((i) => i.kind === 'static')) problems.push(`dist/index.js imports '${i.literal}' statically`);
// The Node-only `webgpu` package must stay behind a non-literal specifier, or consumers' bundlers
// would resolve it (and try to bundle Dawn's native addon into browser builds).
for (const i of imports.filter((i) => i.kind === 'dynamic' && i.literal !== null)) {
  problems.push(
    `dist/index.js has a dynamic import with a literal specifier, ${i.code}: consumers' bundlers would resolve it ` +
      '(keep the variable specifier: see treeshake/minify in vite.lib.config.ts)',
  );
}
if (!imports.some((i) => i.kind === 'dynamic' && i.literal === null)) {
  problems.push('dist/index.js has no `import(specifier)` with a variable specifier (the Node-only `webgpu` package)');
}
// Shaders inlined: every shaders/*.wgsl and shaders/software/*.wgsl as a string (found by its first
// line), and no .wgsl URL anywhere.
const shaderFiles = ['', 'software/'].flatMap((dir) =>
  readdirSync(join(root, 'shaders', dir))
    .filter((f) => f.endsWith('.wgsl'))
    .map((f) => `${dir}${f}`),
);
for (const file of shaderFiles) {
  const first = readFileSync(join(root, 'shaders', file), 'utf8').split('\n')[0];
  if (!code.includes(first) && !code.includes(JSON.stringify(first).slice(1, -1))) {
    problems.push(`dist/index.js does not hold shaders/${file} (its first line "${first.slice(0, 60)}" is not in it)`);
  }
}
if (/(new\s+URL|fetch)\s*\(\s*['"`][^'"`]*\.wgsl/.test(code)) problems.push('dist/index.js fetches a .wgsl file; shaders must be inlined');
// Declarations: only relative .js imports, and the one reference to @webgpu/types.
const ts = require('typescript');
for (const file of dtsFiles) {
  const rel = relative(root, file);
  const info = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
  for (const { fileName } of info.importedFiles) {
    if (!/^\.{1,2}\/.*\.js$/.test(fileName)) problems.push(`${rel} imports '${fileName}' (only relative .js specifiers may remain)`);
  }
  for (const { fileName } of [...info.typeReferenceDirectives, ...info.referencedFiles]) {
    if (fileName !== '@webgpu/types') problems.push(`${rel} references '${fileName}' (consumers may not have it)`);
  }
  if (/\bNodeJS\./.test(readFileSync(file, 'utf8'))) problems.push(`${rel} needs @types/node`);
}
// The test-only weights (test/helpers/random.ts) and the benchmark's FLOP count (demo/bench/flops.ts)
// live outside src/; should src/ ever import them, they would ship: refuse that.
if (/randomStateDict|randomLayerInputs|attentionFlops/.test(code))
  problems.push('dist/index.js contains test or benchmark helpers (test/helpers/random.ts, demo/bench/flops.ts)');
if (problems.length) fail(`dist/ is not right:\n  - ${problems.join('\n  - ')}`);

const files = walk(dist)
  .map((f) => relative(root, f))
  .sort();
const bytes = files.reduce((n, f) => n + statSync(join(root, f)).size, 0);
console.log(
  `build: dist/ ready in ${((performance.now() - t0) / 1000).toFixed(1)} s: ${files.length} files, ${(bytes / 1024).toFixed(0)} KiB ` +
    `(index.js ${(code.length / 1024).toFixed(0)} KiB with ${shaderFiles.length} inlined shaders, ${dtsFiles.length} .d.ts)`,
);
