// The page `npm run bench:quantized -- --chromium` drives (demo/bench/quantized.html): the quantized-
// weights benchmark on WebGPU in Chromium, where ONNX Runtime Web's WebGPU EP runs (it does not in
// Node on Dawn: ../shared/WEBGPU-HEADLESS.md). On one adapter, in one page: the engine's KV-cache
// decode step (one token over a cache of `ctx`) for each weight type, the types interleaved step by
// step, and beside it ONNX Runtime Web's MatMulNBits on its WebGPU EP (every node on WebGPU: no CPU
// fallback): a decode step's four projections alone (q, k, v, o as four 4-bit MatMulNBits nodes,
// blocks of 32, no attention), a lower bound for its whole step. Tuning off: the adapter's built-in
// kernels (a sweep at E=2048 on a software adapter takes many minutes).

import { createAttentionEngine, type ProjectionVariant } from 'webgpu-attention';
import { mulberry32, uniform } from '../../test/helpers/random.ts';
import { type BenchEntry, benchStateDict, ortProjectionWeights } from './quantized-weights.ts';
import { loadOrt } from './systems/ort.ts';
import { ortProjectionsModel } from './systems/ort-matmulnbits.ts';
import { median } from '../../src/util/stats.ts';

export interface QuantizedRequest {
  embed: number;
  heads: number;
  kvHeads: number;
  ctx: number;
  runs: number;
  /** f32, f16 (precision 'f16') and the packed types of demo/bench/quantized-weights.ts. */
  types: string[];
  ort: boolean;
  /** The packed layers' projection kernel, forced (tuning stays off); default: the adapter's built-in one. */
  projection?: string;
}

export interface QuantizedReport {
  adapter: string;
  /** precision: the engine's precision in use ('f16' only where the adapter has shader-f16), precisionNote why not. */
  rows: { type: string; decodeMs: number; decodeBestMs: number; projectionGpuMs: number | null; peakBytes: number; precision: string; precisionNote: string | null }[];
  /** ORT's four projections: median and best ms, or why it could not run; null when not asked for. */
  ort: { projectionsMs: number; bestMs: number } | { error: string } | null;
}

declare global {
  interface Window {
    runQuantized(request: QuantizedRequest): Promise<QuantizedReport>;
    quantizedReady: boolean;
  }
}

type Entry = BenchEntry;

async function engineRows(r: QuantizedRequest): Promise<{ adapter: string; rows: QuantizedReport['rows'] }> {
  const { embed: E, heads: H, kvHeads: G, ctx } = r;
  const Dh = E / H;
  const config = { embedDim: E, numHeads: H, numKvHeads: G };
  const entries: Entry[] = [];
  let adapter = '';
  try {
    for (const type of r.types) {
      const packed = type !== 'f32' && type !== 'f16';
      const kernels = r.projection && packed ? { qkv_projection: r.projection, output_projection: r.projection } : {};
      const engine = await createAttentionEngine({
        backend: 'webgpu',
        profile: true,
        tuning: { mode: 'off', kernels: kernels as Record<string, ProjectionVariant> },
        ...(type === 'f16' ? { precision: 'f16' as const } : {}),
      });
      const info = engine.adapterInfo;
      adapter = info ? [info.vendor, info.architecture, info.device, info.description].filter(Boolean).join(' ') : 'unknown';
      const mha = engine.createMultiHeadAttention(config, benchStateDict(config, type));
      const rng = mulberry32(ctx);
      const past = { key: uniform(G * ctx * Dh, 1, rng), value: uniform(G * ctx * Dh, 1, rng) };
      const cache = mha.createKvCache({ batchSize: 1, maxSeqLen: ctx + r.runs + 8, ...past });
      entries.push({ type, engine, mha, cache, steps: [], projection: [] });
      console.log(`quantized: ${type} layer made`);
    }
    const x = uniform(E, 1, mulberry32(3));
    const step = (e: Entry) => e.mha.forward(x, { batchSize: 1, seqLen: 1, isCausal: true, kvCache: e.cache });
    for (const e of entries) {
      for (let i = 0; i < 3; i++) await step(e); // compiles its kernels, then two warm steps
      console.log(`quantized: ${e.type} warmed up`);
    }
    for (let i = 0; i < r.runs; i++) {
      for (const e of entries) {
        const t0 = performance.now();
        const { timings } = (await step(e)) as { timings?: Record<string, number> };
        e.steps.push(performance.now() - t0);
        if (timings) e.projection.push((timings.qkv_projection ?? 0) + (timings.output_projection ?? 0));
      }
    }
    const rows = entries.map((e) => ({
      type: e.type,
      decodeMs: median(e.steps),
      decodeBestMs: Math.min(...e.steps),
      projectionGpuMs: e.projection.length ? median(e.projection) : null,
      peakBytes: e.engine.stats().peakBytes,
      precision: e.engine.precision,
      precisionNote: e.engine.precisionNote,
    }));
    return { adapter, rows };
  } finally {
    for (const e of entries) {
      e.cache.dispose();
      e.mha.dispose();
      e.engine.dispose();
    }
  }
}

/** ONNX Runtime Web's MatMulNBits on its WebGPU EP: a decode step's four projections, 4 bits, blocks of 32. */
async function ortRow(r: QuantizedRequest): Promise<{ projectionsMs: number; bestMs: number }> {
  const ort = await loadOrt();
  const model = await ortProjectionsModel(r.embed, ortProjectionWeights(r.embed, r.heads, r.kvHeads));
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['webgpu'],
    extra: { session: { disable_cpu_ep_fallback: '1' } },
  });
  try {
    const x = new ort.Tensor('float32', uniform(r.embed, 1, mulberry32(3)), [1, r.embed]);
    for (let i = 0; i < 3; i++) await session.run({ A: x });
    const times: number[] = [];
    for (let i = 0; i < r.runs; i++) {
      const t0 = performance.now();
      const out = await session.run({ A: x });
      times.push(performance.now() - t0);
      const y = out.Y_o.data as Float32Array;
      if (!y.every(Number.isFinite)) throw new Error('ONNX Runtime Web WebGPU MatMulNBits gave a non-finite output');
    }
    return { projectionsMs: median(times), bestMs: Math.min(...times) };
  } finally {
    await session.release();
  }
}

window.runQuantized = async (r) => {
  const { adapter, rows } = await engineRows(r);
  let ort: QuantizedReport['ort'] = null;
  if (r.ort) {
    try {
      ort = await ortRow(r);
    } catch (e) {
      ort = { error: String((e as Error).message ?? e) };
    }
  }
  return { adapter, rows, ort };
};
window.quantizedReady = true;
