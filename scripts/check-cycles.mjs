// Import cycles in src/, type-only ones included: `npm run check:cycles`. Reads every .ts file under
// src/, takes its static imports and re-exports (`import … from`, `import type … from`, `export … from`,
// `import '…'`, and `import('…')` with a literal specifier) of relative .ts paths, and walks the graph
// depth first: every edge back to a file still on the stack closes a cycle. Prints each cycle found
// (once per set of files, as a path back to its start) and exits 1; exits 0 when there are none.
// Breaking the cycles printed may reveal others hidden behind them: run it again until it passes.
// No dependencies: node's fs and path only.

import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const root = resolve(dirname(new URL(import.meta.url).pathname), '..');
const src = join(root, 'src');

/** Every .ts file under `dir`, absolute paths, sorted (so the output is the same on every machine). */
function tsFiles(dir) {
  const out = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...tsFiles(path));
    else if (entry.name.endsWith('.ts')) out.push(path);
  }
  return out.sort();
}

// Statements that name a module. The import clause is identifiers, braces, commas, `*`, `as` and
// `type` only, so a statement cannot run on into the next one; `\s` lets it span lines.
const STATIC = /^\s*(?:import|export)\s+(?:type\s+)?(?:[\w$*{}\s,]+?\s+from\s+)?['"]([^'"]+)['"]/gm;
const DYNAMIC = /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g;

/** The .ts files under src/ that `file` imports (relative specifiers only; packages and ?raw assets skipped). */
function importsOf(file) {
  // Comments out first, so an example in a comment is not an import. Line comments only where they
  // start a line: `//` inside a string (a URL) stays.
  const text = readFileSync(file, 'utf8')
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/^\s*\/\/.*$/gm, '');
  const found = new Set();
  for (const re of [STATIC, DYNAMIC]) {
    for (const m of text.matchAll(re)) {
      const spec = m[1];
      if (!spec.startsWith('.') || !spec.endsWith('.ts')) continue;
      found.add(resolve(dirname(file), spec));
    }
  }
  return [...found].sort();
}

const files = tsFiles(src);
const known = new Set(files);
const graph = new Map(files.map((f) => [f, importsOf(f).filter((d) => known.has(d))]));

// Depth-first search with three colours: a dependency that is still on the stack (grey) closes a cycle.
// Each cycle is reported once, keyed by its set of files.
const state = new Map(); // file → 'grey' (on the stack) | 'black' (done)
const stack = [];
const cycles = new Map();

function visit(file) {
  state.set(file, 'grey');
  stack.push(file);
  for (const dep of graph.get(file)) {
    const s = state.get(dep);
    if (s === 'grey') {
      const cycle = stack.slice(stack.indexOf(dep));
      const key = [...cycle].sort().join('\n');
      if (!cycles.has(key)) cycles.set(key, [...cycle, dep]);
    } else if (s === undefined) visit(dep);
  }
  stack.pop();
  state.set(file, 'black');
}

for (const f of files) if (!state.has(f)) visit(f);

const name = (f) => relative(root, f);
if (cycles.size === 0) {
  console.log(`check-cycles: no import cycles among ${files.length} files in src/`);
} else {
  for (const cycle of cycles.values()) console.log(`cycle: ${cycle.map(name).join(' → ')}`);
  console.log(`check-cycles: ${cycles.size} import cycle(s) among ${files.length} files in src/ (type-only imports count)`);
  process.exit(1);
}
