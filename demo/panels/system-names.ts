// The benchmark's systems as the scaling panel names and colours them (demo/bench/registry.ts has
// the systems themselves).

/** Short names for the table's columns and the charts' legends (the full label is the tooltip). */
export const SHORT: Record<string, string> = {
  engine: 'this engine',
  naive: 'naive loop',
  tfjs: 'TF.js',
  ort: 'ORT',
  wasm: "'wasm' 1 thread",
  'wasm-threads': "'wasm' threads",
  'ort-wasm': 'ORT WASM',
  'tfjs-wasm': 'TF.js WASM',
  cpu: 'CPU backend',
};
export const COLOR: Record<string, string> = {
  engine: '#4e79a7',
  naive: '#76b7b2',
  tfjs: '#f28e2b',
  ort: '#59a14f',
  wasm: '#e15759',
  'wasm-threads': '#ff9d9a',
  'ort-wasm': '#8cd17d',
  'tfjs-wasm': '#ffbe7d',
  cpu: '#b07aa1',
};
/** Systems on the CPU in WebAssembly: not slowed down by a software GPU adapter. */
export const WASM_SYSTEMS = new Set(['wasm', 'wasm-threads', 'ort-wasm', 'tfjs-wasm']);
