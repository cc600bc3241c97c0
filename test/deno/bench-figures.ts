// The benchmark figures of issue 26 (demo/bench/runtime-figures.ts) in Deno, on Deno's WebGPU (wgpu;
// lavapipe on a GPU-less machine), with the built package (dist/index.js). Run by scripts/bench-runtimes.ts
// (`npm run bench -- --deno`), which builds dist/ first where it is stale and sets the Vulkan environment:
//   deno run --unstable-webgpu -A test/deno/bench-figures.ts OUT.json [RUNS]
// Progress lines go to stdout; the figures as JSON to OUT.json. Exits 1, saying why, on no adapter or an error.
// BENCH_DENO_ENGINE=path/index.js (relative to the working directory) measures that build instead of dist/
// (e.g. an edited copy of it).

import type { createAttentionEngine as Create } from '../../src/index.ts';
import { runtimeFigures } from '../../demo/bench/runtime-figures.ts';

declare const Deno: {
  version: { deno: string };
  exit(code: number): never;
  args: string[];
  cwd(): string;
  env: { get(name: string): string | undefined };
  writeTextFileSync(path: string, text: string): void;
};

const [out, runs] = Deno.args;
if (!out) {
  console.error('usage: deno run --unstable-webgpu -A test/deno/bench-figures.ts OUT.json [RUNS]');
  Deno.exit(2);
}
if (!(await (navigator as Navigator & { gpu?: GPU }).gpu?.requestAdapter())) {
  console.error('deno bench-figures: no WebGPU adapter (--unstable-webgpu; VK_ICD_FILENAMES=lavapipe’s ICD, DENO_WEBGPU_BACKEND=vulkan)');
  Deno.exit(1);
}
const other = Deno.env.get('BENCH_DENO_ENGINE');
const engineUrl = other ? new URL(other, `file://${Deno.cwd()}/`).href : new URL('../../dist/index.js', import.meta.url).href;
if (other) console.log(`figures: the engine of ${engineUrl}`);
const { createAttentionEngine } = (await import(engineUrl)) as { createAttentionEngine: typeof Create };
try {
  const figures = await runtimeFigures(createAttentionEngine, { runs: runs ? Number(runs) : 15, log: (line) => console.log(`figures: ${line}`) });
  Deno.writeTextFileSync(out, JSON.stringify({ deno: Deno.version.deno, ...figures }));
} catch (e) {
  console.error(`deno bench-figures: ${(e as Error).stack ?? e}`);
  Deno.exit(1);
}
Deno.exit(0);
