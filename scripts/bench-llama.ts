// llama.cpp beside the engine (issue 41): the same llama-architecture GGUF (E 2048, H 16, G 4, head 128,
// written by scripts/llama-gguf.ts: Q4_0 or F32 projections, a tiny FFN and vocabulary) run by
//   - the engine's 'wasm' backend: each block's attention layer read from the file (attentionLayerFromGguf:
//     the same Q4_0 blocks, llama's rope), its KV cache in f16 (createKvCache({ dtype: 'f16' }), as
//     llama.cpp's default cache is F16), an --layers stack stepped through one after another as a model
//     decodes a token; per layer: the stack's step / --layers. Prefill: the first layer's call of --prefill
//     tokens. With config `activations` 'f32' and, on the Q4_0 file, 'q8' (llama.cpp's 8-bit activations;
//     where the engine refuses it on wasm, the row says why and shows '-'); an activation written
//     'q8:simd128' (or 'f32:relaxed') runs that build of the kernels (options.wasmSimd; else 'auto': the
//     relaxed build where the platform has relaxed SIMD, which scripts/run-ts.mjs turns on in Node 20);
//     one written 'q8@chromium' (or 'f32:simd128@chromium', …) runs the same measurement (measureEngine)
//     in headless Chromium, the engine's sources served by Vite as for the browser tests (cross-origin
//     isolated: threads), the file fetched there: the engine where its users run it, beside wllama;
//   - llama.cpp's native CPU build (node-llama-cpp's prebuilt binary, gpu: false, build: 'never',
//     scripts/bench-llama-native.mjs in a child process);
//   - wllama (llama.cpp compiled to WebAssembly) in headless Chromium, its single-thread build at 1 thread
//     and its multi-thread build (the page cross-origin isolated) at 2.
// llama.cpp runs a whole model step (embedding, RMSNorm, FFN, output head, sampling's logits); its per-layer
// time cancels the rest: (t(L layers) − t(1 layer)) / (L − 1), from an L-layer and a 1-layer file loaded
// together and measured in alternation (a slow moment of a shared machine falls on both). What it
// keeps beyond the engine's attention layer: per block two RMSNorms, the residual adds and the FFN
// (n_ff 32: 3·E·32 multiply-adds against the projections' E·(E + 2·G·Dh + E), ~1.9%).
// Decode: one token over a cache of --ctx (evaluated first), median of --runs; prefill of --prefill tokens,
// median of --prefill-runs, after a warm-up each. Threads 1 and 2 (--threads).
//
// node-llama-cpp and wllama are not dependencies of the project: on first use they are installed into
// .cache/peers/ (gitignored) with `npm install --prefix .cache/peers --ignore-scripts --no-save` at the
// pinned versions below (no build from source, no download of binaries: the prebuilt @node-llama-cpp/linux-x64
// package carries them). The GGUF files are written once into .cache/llama-bench/.
//
//   npm run bench:quantized -- --llama [--types q4_0,f32] [--threads 1,2] [--activations f32,q8,q8@chromium (the default)]
//     [--ctx 1024 --prefill 512 --runs 10 --prefill-runs 3 --layers 8] [--no-engine] [--no-native] [--no-wllama]
//     [--flash-attention auto|on|off]   (native llama.cpp's flash attention; default node-llama-cpp's 'auto')
//     [--port 5184] [--json out.json]
//   (or: node scripts/run-ts.mjs scripts/bench-llama.ts [the same options])

import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type KvCache, type MultiHeadAttention, type MultiHeadAttentionConfig, attentionLayerFromGguf, createAttentionEngine, parseGguf } from '../src/index.ts';
import { median } from '../src/util/stats.ts';
import { mulberry32, uniform } from '../test/helpers/random.ts';
import { parseCli } from './cli.ts';
import { LLAMA_GGUF_VOCAB, llamaGguf } from './llama-gguf.ts';

export const PEERS = { 'node-llama-cpp': '3.22.1', '@node-llama-cpp/linux-x64': '3.22.1', '@wllama/wllama': '2.3.7' } as const;

const { values } = parseCli(import.meta.url, {
  llama: { type: 'boolean', default: false }, // how bench-quantized.ts hands over
  types: { type: 'string', default: 'q4_0,f32' },
  threads: { type: 'string', default: '1,2' },
  activations: { type: 'string', default: 'f32,q8,q8@chromium' },
  ctx: { type: 'string', default: '1024' },
  prefill: { type: 'string', default: '512' },
  runs: { type: 'string', default: '10' },
  'prefill-runs': { type: 'string', default: '3' },
  layers: { type: 'string', default: '8' },
  'no-engine': { type: 'boolean', default: false },
  'no-native': { type: 'boolean', default: false },
  'no-wllama': { type: 'boolean', default: false },
  'flash-attention': { type: 'string', default: 'auto' },
  port: { type: 'string', default: '5184' },
  json: { type: 'string' },
});

const whole = (name: string, v: string, min: number) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name}: expected a whole number ≥ ${min}, got ${v}`);
  return n;
};
const ctx = whole('ctx', values.ctx, 1);
const prefill = whole('prefill', values.prefill, 1);
const runs = whole('runs', values.runs, 1);
const prefillRuns = whole('prefill-runs', values['prefill-runs'], 1);
const L = whole('layers', values.layers, 2);
const TYPES = values.types.split(',') as ('q4_0' | 'f32')[];
for (const t of TYPES) if (t !== 'q4_0' && t !== 'f32') throw new Error(`--types: expected q4_0 and/or f32, got ${t}`);
const THREADS = values.threads.split(',').map((t) => whole('threads', t, 1));
const ACTIVATIONS = values.activations.split(',');
for (const a of ACTIVATIONS) {
  if (!/^(f32|q8)(:(auto|relaxed|simd128))?(@chromium)?$/.test(a)) {
    throw new Error(`--activations: expected f32 and/or q8, each with :auto, :relaxed or :simd128 or not, and @chromium or not, got ${a}`);
  }
}
const flash = { auto: undefined, on: true, off: false }[values['flash-attention']];
if (!['auto', 'on', 'off'].includes(values['flash-attention'])) throw new Error(`--flash-attention: expected auto, on or off, got ${values['flash-attention']}`);

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const peers = join(repo, '.cache/peers');
const models = join(repo, '.cache/llama-bench');
const E = 2048;
const H = 16;
const G = 4;
const Dh = E / H;

/** node-llama-cpp and wllama at the pinned versions in .cache/peers (installed there on first use). */
function ensurePeers(): void {
  const version = (name: string) => {
    const at = join(peers, 'node_modules', name, 'package.json');
    return existsSync(at) ? (JSON.parse(readFileSync(at, 'utf8')) as { version: string }).version : null;
  };
  const missing = Object.entries(PEERS).filter(([name, v]) => version(name) !== v);
  if (!missing.length) return;
  console.log(`installing ${missing.map(([n, v]) => `${n}@${v}`).join(' ')} into .cache/peers (--ignore-scripts: no build, no download)`);
  mkdirSync(peers, { recursive: true });
  const specs = Object.entries(PEERS).map(([n, v]) => `${n}@${v}`);
  execFileSync('npm', ['install', '--prefix', peers, '--ignore-scripts', '--no-save', '--no-audit', '--no-fund', ...specs], { stdio: 'inherit' });
}

/** The GGUF of `type` with `layers` blocks, written once. */
function modelPath(type: string, layers: number): string {
  const path = join(models, `llama-E${E}-H${H}-G${G}-${type}-${layers}l.gguf`);
  if (!existsSync(path)) {
    mkdirSync(models, { recursive: true });
    writeFileSync(path, llamaGguf({ layers, type: type as 'q4_0' | 'f32', embed: E, heads: H, kvHeads: G, context: Math.max(4096, ctx + prefill + runs + 64) }));
  }
  return path;
}

interface Times {
  decodeMs: number[];
  prefillMs: number[];
}

/** One system's per-layer figures (ms) at a type and thread count. */
interface Row {
  system: string;
  type: string;
  threads: number;
  decodeMs: number | null;
  prefillMs: number | null;
  /** The same from the fastest runs (min instead of median): less sensitive to a loaded machine. */
  decodeBestMs?: number | null;
  prefillBestMs?: number | null;
  note?: string;
}

const rows: Row[] = [];
const log = (r: Row) => {
  rows.push(r);
  console.log(
    `  ${r.system} ${r.type} ${r.threads}t: decode ${r.decodeMs?.toFixed(3) ?? '-'} ms/layer, prefill ${r.prefillMs?.toFixed(1) ?? '-'} ms/layer${r.note ? ` (${r.note})` : ''}`,
  );
};

/** What measureEngine needs of the engine's module and the test helpers (imported in Node, or in the page). */
interface EngineApi {
  attentionLayerFromGguf: typeof attentionLayerFromGguf;
  createAttentionEngine: typeof createAttentionEngine;
  parseGguf: typeof parseGguf;
  mulberry32: typeof mulberry32;
  uniform: typeof uniform;
}

/** One engine measurement: the L-layer file's bytes and the sizes, threads, activations and build. */
interface EngineRequest {
  bytes: Uint8Array;
  threads: number;
  activations: string;
  wasmSimd: 'auto' | 'relaxed' | 'simd128';
  layers: number;
  ctx: number;
  runs: number;
  prefill: number;
  prefillRuns: number;
  E: number;
  G: number;
  Dh: number;
}

interface EngineTimes extends Partial<Times> {
  refused?: string;
  wasmSimd?: string | null;
  threadsNote?: string | null;
}

/**
 * The engine: an L-layer stack from the L-layer file, wasm, `threads`, config.activations; decode steps
 * through the stack (per layer: the step / L), then the first layer's prefill. Self-contained (no module
 * scope: `api` brings the imports) so that a page runs the same source (engineInChromium).
 */
async function measureEngine(api: EngineApi, req: EngineRequest): Promise<EngineTimes> {
  const { layers: L, ctx, runs, prefill, prefillRuns, E, G, Dh } = req;
  const file = api.parseGguf(req.bytes);
  const engine = await api.createAttentionEngine({ backend: 'wasm', threads: req.threads, wasmSimd: req.wasmSimd });
  try {
    const r = api.mulberry32(ctx);
    const past = { key: api.uniform(G * ctx * Dh, 1, r), value: api.uniform(G * ctx * Dh, 1, r) };
    const stack: { mha: MultiHeadAttention; cache: KvCache; forward: Awaited<ReturnType<typeof attentionLayerFromGguf>>['forward'] }[] = [];
    for (let l = 0; l < L; l++) {
      const layer = await api.attentionLayerFromGguf(file, { layer: l });
      const config = (req.activations === 'f32' ? layer.config : { ...layer.config, activations: req.activations }) as MultiHeadAttentionConfig;
      let mha: MultiHeadAttention;
      try {
        mha = engine.createMultiHeadAttention(config, layer.stateDict);
      } catch (e) {
        if (req.activations === 'f32') throw e;
        const m = (e as Error).message;
        return { refused: /activations must be one of the known options/.test(m) ? 'this engine has no config.activations yet' : m.split('\n')[0] };
      }
      const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: ctx + runs + 8, dtype: 'f16', ...past });
      stack.push({ mha, cache, forward: layer.forward });
    }
    const x = api.uniform(E, 1, api.mulberry32(3));
    const step = async () => {
      for (const l of stack) await l.mha.forward(x, { ...l.forward, batchSize: 1, seqLen: 1, kvCache: l.cache });
    };
    await step();
    await engine.settled();
    await step();
    const decodeMs: number[] = [];
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      await step();
      decodeMs.push((performance.now() - t0) / L);
    }
    for (const l of stack.slice(1)) {
      l.cache.dispose();
      l.mha.dispose();
    }
    stack[0].cache.dispose();
    const xs = api.uniform(prefill * E, 1, api.mulberry32(5));
    const call = () => stack[0].mha.forward(xs, { ...stack[0].forward, batchSize: 1, seqLen: prefill });
    await call();
    const prefillMs: number[] = [];
    for (let i = 0; i < prefillRuns; i++) {
      const t0 = performance.now();
      await call();
      prefillMs.push(performance.now() - t0);
    }
    stack[0].mha.dispose();
    return { decodeMs, prefillMs, wasmSimd: engine.wasmSimd, threadsNote: engine.threadsNote };
  } finally {
    engine.dispose();
  }
}

/** The engine row for `asked` (activations, `:build`, `@chromium`) at a type and thread count. */
async function engineRun(type: string, threads: number, asked: string): Promise<Row> {
  const system = `engine act ${asked}`;
  const [spec, where] = asked.split('@');
  const [activations, wasmSimd = 'auto'] = spec.split(':') as [string, 'auto' | 'relaxed' | 'simd128' | undefined];
  const request = { threads, activations, wasmSimd, layers: L, ctx, runs, prefill, prefillRuns, E, G, Dh };
  let t: EngineTimes;
  try {
    t =
      where === 'chromium'
        ? await engineInChromium(modelPath(type, L), request)
        : await measureEngine({ attentionLayerFromGguf, createAttentionEngine, parseGguf, mulberry32, uniform }, { ...request, bytes: readFileSync(modelPath(type, L)) });
  } catch (e) {
    if (where !== 'chromium') throw e;
    return { system, type, threads, decodeMs: null, prefillMs: null, note: `failed: ${(e as Error).message.split('\n')[0]}` };
  }
  if (t.refused || !t.decodeMs || !t.prefillMs) return { system, type, threads, decodeMs: null, prefillMs: null, note: `not run: ${t.refused ?? 'no times'}` };
  return {
    system,
    type,
    threads,
    decodeMs: median(t.decodeMs),
    prefillMs: median(t.prefillMs),
    decodeBestMs: Math.min(...t.decodeMs),
    prefillBestMs: Math.min(...t.prefillMs),
    note: [`kernels ${t.wasmSimd}`, where === 'chromium' ? 'in Chromium' : '', t.threadsNote].filter(Boolean).join('; '),
  };
}

// ---- the engine in headless Chromium ----

/** Chromium and Vite's dev server (the sources as the browser tests get them, cross-origin isolated), started on first use. */
let chromiumEngine: { page: import('@playwright/test').Page; close: () => Promise<void> } | null = null;

async function closeChromiumEngine(): Promise<void> {
  await chromiumEngine?.close();
  chromiumEngine = null;
}

/** measureEngine in a page of headless Chromium, the engine's sources served by Vite (scripts/e2e-server.mjs's setup), the file fetched there. */
async function engineInChromium(path: string, request: Omit<EngineRequest, 'bytes'>): Promise<EngineTimes> {
  if (!chromiumEngine) {
    const { createServer: viteServer } = await import('vite');
    const { chromium } = await import('@playwright/test');
    const port = Number(values.port) + 1;
    const server = await viteServer({
      root: repo,
      configFile: join(repo, 'vite.config.ts'),
      clearScreen: false,
      logLevel: 'error',
      server: { host: '127.0.0.1', port, strictPort: true, hmr: false },
    });
    await server.listen();
    const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', headless: true });
    const page = await browser.newPage();
    page.on('pageerror', (e) => console.error(`  page error: ${e.message}`));
    await page.goto(`http://127.0.0.1:${port}/e2e/harness.html`);
    chromiumEngine = {
      page,
      close: async () => {
        await browser.close();
        await server.close();
      },
    };
  }
  const model = `/${path.slice(repo.length + 1)}`;
  return chromiumEngine.page.evaluate(`(async () => {
    const api = { ...(await import('/src/index.ts')), ...(await import('/test/helpers/random.ts')) };
    const bytes = new Uint8Array(await (await fetch(${JSON.stringify(model)})).arrayBuffer());
    return (${measureEngine.toString()})(api, { ...${JSON.stringify(request)}, bytes });
  })()`) as Promise<EngineTimes>;
}

/** Per layer from an L-layer and a 1-layer run: (t(L) − t(1)) / (L − 1), of the medians and of the fastest runs. */
const perLayer = (many: Times, one: Times) => ({
  decodeMs: (median(many.decodeMs) - median(one.decodeMs)) / (L - 1),
  prefillMs: (median(many.prefillMs) - median(one.prefillMs)) / (L - 1),
  decodeBestMs: (Math.min(...many.decodeMs) - Math.min(...one.decodeMs)) / (L - 1),
  prefillBestMs: (Math.min(...many.prefillMs) - Math.min(...one.prefillMs)) / (L - 1),
});

let nativeFlash: string | null = null;
let nativeSystem: string | null = null;

/** Native llama.cpp on the L-layer and the 1-layer file, measured in alternation in one child process. */
function nativeTimes(type: string, threads: number): Promise<[Times, Times]> {
  const request = { peers, models: [modelPath(type, L), modelPath(type, 1)], threads, ctx, prefill, runs, prefillRuns, vocab: LLAMA_GGUF_VOCAB, flashAttention: flash };
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [join(repo, 'scripts/bench-llama-native.mjs'), JSON.stringify(request)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      err += d;
    });
    child.on('close', (code) => {
      const line = out.trim().split('\n').pop() ?? '';
      if (code !== 0 || !line.startsWith('{')) return fail(new Error(`native llama.cpp (${type}, ${threads} threads) exited ${code}: ${err.slice(-800)}`));
      const r = JSON.parse(line) as { decodeMs: number[][]; prefillMs: number[][]; flashAttention: unknown; system: string | null };
      nativeFlash = String(r.flashAttention);
      nativeSystem = r.system;
      done([0, 1].map((k) => ({ decodeMs: r.decodeMs[k], prefillMs: r.prefillMs[k] })) as [Times, Times]);
    });
  });
}

// ---- wllama in headless Chromium ----

const PAGE = `<!doctype html><meta charset="utf-8"><title>wllama bench</title>
<script type="module">
import { Wllama } from '/wllama/index.js';
// req.models: the L-layer and the 1-layer file, loaded together and measured in alternation.
window.runWllama = async (req) => {
  let seed = 12345;
  const tokens = (n) => Array.from({ length: n }, () => { seed = (seed * 1103515245 + 12345) >>> 0; return 3 + (seed % (req.vocab - 3)); });
  const runs = [];
  for (const model of req.models) {
    const w = new Wllama({ 'single-thread/wllama.wasm': '/wllama/single-thread/wllama.wasm', 'multi-thread/wllama.wasm': '/wllama/multi-thread/wllama.wasm' },
      { suppressNativeLog: true });
    const blob = await (await fetch(model)).blob();
    await w.loadModel([blob], { n_ctx: Math.max(req.ctx + req.runs + 16, req.prefill + 16), n_batch: 512, n_threads: req.threads });
    runs.push({ w, decodeMs: [], prefillMs: [] });
  }
  const each = async (n, keep, key, options) => {
    for (const r of runs) {
      const t = tokens(n);
      const t0 = performance.now();
      await r.w.decode(t, options);
      if (keep) r[key].push(performance.now() - t0);
    }
  };
  await each(req.ctx, false, '', { skipLogits: true });
  for (let i = 0; i < 2; i++) await each(1, false, '', {});
  for (let i = 0; i < req.runs; i++) await each(1, true, 'decodeMs', {});
  for (let i = 0; i < req.prefillRuns + 1; i++) {
    for (const r of runs) await r.w.kvClear();
    await each(req.prefill, i > 0, 'prefillMs', { skipLogits: true });
  }
  const multi = runs[0].w.isMultithread();
  const threads = runs[0].w.getNumThreads();
  for (const r of runs) await r.w.exit();
  return { runs: runs.map((r) => ({ decodeMs: r.decodeMs, prefillMs: r.prefillMs })), multi, threads, isolated: self.crossOriginIsolated };
};
window.wllamaReady = true;
</script>`;

interface WllamaResult {
  runs: [Times, Times];
  multi: boolean;
  threads: number;
  isolated: boolean;
}

declare global {
  interface Window {
    wllamaReady: boolean;
    runWllama(request: Record<string, unknown>): Promise<WllamaResult>;
  }
}

/** A server for the page: wllama's ES module and wasm builds and the GGUF files, cross-origin isolated (COOP/COEP) for the multi-thread build. */
async function wllamaServer(port: number) {
  const wllama = join(peers, 'node_modules/@wllama/wllama/esm');
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const headers = { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp', 'Cross-Origin-Resource-Policy': 'same-origin' };
    const send = (type: string, body: Buffer | string) => {
      res.writeHead(200, { ...headers, 'Content-Type': type });
      res.end(body);
    };
    const p = url.pathname;
    if (p === '/') return send('text/html', PAGE);
    if (p === '/wllama/index.js') return send('text/javascript', readFileSync(join(wllama, 'index.js')));
    if (p === '/wllama/single-thread/wllama.wasm' || p === '/wllama/multi-thread/wllama.wasm')
      return send('application/wasm', readFileSync(join(wllama, p.slice('/wllama/'.length))));
    const model = /^\/models\/([\w.-]+\.gguf)$/.exec(p);
    if (model && existsSync(join(models, model[1]))) return send('application/octet-stream', readFileSync(join(models, model[1])));
    res.writeHead(404, headers);
    res.end();
  });
  await new Promise<void>((ok) => server.listen(port, '127.0.0.1', ok));
  return server;
}

async function wllamaRuns(todo: { type: string; threads: number }[]): Promise<void> {
  const { chromium } = await import('@playwright/test');
  const port = Number(values.port);
  const server = await wllamaServer(port);
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', headless: true });
  try {
    const times = async (type: string, threads: number) => {
      const page = await browser.newPage();
      try {
        page.on('pageerror', (e) => console.error(`  page error: ${e.message}`));
        await page.goto(`http://127.0.0.1:${port}/`);
        await page.waitForFunction(() => window.wllamaReady === true, undefined, { timeout: 60_000 });
        const name = (layers: number) => modelPath(type, layers).split('/').pop();
        const request = { models: [`/models/${name(L)}`, `/models/${name(1)}`], threads, ctx, prefill, runs, prefillRuns, vocab: LLAMA_GGUF_VOCAB };
        return await page.evaluate((r) => window.runWllama(r), request);
      } finally {
        await page.close();
      }
    };
    for (const { type, threads } of todo) {
      try {
        const r = await times(type, threads);
        const build = `${r.multi ? 'multi' : 'single'}-thread build, ${r.threads} thread(s)${r.isolated ? '' : ', not cross-origin isolated'}`;
        log({ system: 'wllama', type, threads, ...perLayer(...r.runs), note: build });
      } catch (e) {
        log({ system: 'wllama', type, threads, decodeMs: null, prefillMs: null, note: `failed: ${(e as Error).message.split('\n')[0]}` });
      }
    }
  } finally {
    await browser.close();
    server.close();
  }
}

// ---- the run ----

if (!values['no-native'] || !values['no-wllama']) ensurePeers();
console.log(
  `llama-architecture GGUF, E=${E} H=${H} G=${G} head ${Dh}, ${L}-layer and 1-layer files; decode of one token over a cache of ${ctx} ` +
    `(median of ${runs}), prefill of ${prefill} (median of ${prefillRuns}); per-layer ms`,
);
for (const type of TYPES) {
  for (const threads of THREADS) {
    // activations 'q8' is for packed weights (refused on float layers)
    if (!values['no-engine']) for (const a of ACTIVATIONS) if (type !== 'f32' || /^f32\b/.test(a)) log(await engineRun(type, threads, a));
    if (!values['no-native']) {
      try {
        const [many, one] = await nativeTimes(type, threads);
        log({ system: 'llama.cpp native', type, threads, ...perLayer(many, one) });
      } catch (e) {
        log({ system: 'llama.cpp native', type, threads, decodeMs: null, prefillMs: null, note: `failed: ${(e as Error).message.slice(0, 300)}` });
      }
    }
  }
}
await closeChromiumEngine();
if (!values['no-wllama']) await wllamaRuns(TYPES.flatMap((type) => THREADS.map((threads) => ({ type, threads }))));

// The table: per-layer ms, and the engine against native llama.cpp and wllama against the engine.
const fmt = (v: number | null | undefined, d: number) => (v == null ? '-' : v.toFixed(d));
const ratio = (a: number | null | undefined, b: number | null | undefined) => (a != null && b != null && b > 0 ? `${(a / b).toFixed(2)}x` : '-');
const find = (system: string, type: string, threads: number) => rows.find((r) => r.system === system && r.type === type && r.threads === threads);
console.log('');
console.log(`native llama.cpp: flash attention ${nativeFlash ?? '-'} (${values['flash-attention']} asked); ${nativeSystem ?? ''}`);
const engines = ACTIVATIONS.map((a) => `engine act ${a}`);
const table = (best: boolean) => {
  console.log(
    `| phase | type | threads | ${engines.join(' | ')} | llama.cpp native | wllama | ${engines.map((e) => `${e.replace('engine ', '')} / native`).join(' | ')} | wllama / engine act f32 |`,
  );
  console.log(`|${'---|'.repeat(5 + 2 * engines.length + 1)}`);
  for (const phase of ['decode', 'prefill'] as const) {
    const key = `${phase}${best ? 'Best' : ''}Ms` as 'decodeMs' | 'prefillMs' | 'decodeBestMs' | 'prefillBestMs';
    const d = phase === 'decode' ? 3 : 1;
    for (const type of TYPES)
      for (const threads of THREADS) {
        const native = find('llama.cpp native', type, threads)?.[key];
        const wl = find('wllama', type, threads)?.[key];
        const eng = engines.map((e) => find(e, type, threads)?.[key]);
        console.log(
          `| ${phase} | ${type} | ${threads} | ${eng.map((v) => fmt(v, d)).join(' | ')} | ${fmt(native, d)} | ${fmt(wl, d)} | ${eng.map((v) => ratio(v, native)).join(' | ')} | ${ratio(wl, eng[0])} |`,
        );
      }
  }
};
console.log('Per-layer ms, from medians:');
table(false);
console.log('');
console.log('Per-layer ms, from the fastest runs (min):');
table(true);
for (const r of rows) if (r.note && r.system !== 'wllama') console.log(`${r.system} ${r.type} ${r.threads}t: ${r.note}`);
if (values.json) writeFileSync(values.json, JSON.stringify({ E, H, G, ctx, prefill, runs, prefillRuns, layers: L, nativeFlash, nativeSystem, rows }, null, 2));
