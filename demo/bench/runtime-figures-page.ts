// The page `npm run bench -- --firefox` drives (demo/bench/runtime-figures.html): the figures of
// demo/bench/runtime-figures.ts on the engine's sources, served by Vite. Progress lines go to the
// console (the driver prints them). `?engine=/some/index.js` measures another build of the engine
// instead (a path the server serves, e.g. a copy of dist/: BENCH_FIREFOX_ENGINE in scripts/bench-runtimes.ts).

import { createAttentionEngine } from 'webgpu-attention';
import { type FigureOptions, type RuntimeFigures, runtimeFigures } from './runtime-figures.ts';

declare global {
  interface Window {
    runFigures(options: Omit<FigureOptions, 'log'>): Promise<RuntimeFigures>;
    figuresReady: boolean;
  }
}

window.runFigures = async (options) => {
  const other = new URLSearchParams(location.search).get('engine');
  const create = other
    ? ((await import(/* @vite-ignore */ other)) as { createAttentionEngine: typeof createAttentionEngine }).createAttentionEngine
    : createAttentionEngine;
  if (other) console.log(`figures: the engine of ${other}`);
  return runtimeFigures(create, { ...options, log: (line) => console.log(`figures: ${line}`) });
};
window.figuresReady = true;
