// The check both throwaway consumers of the packed tarball run (test/pack/node/forward.mjs in Node,
// test/pack/vite/main.ts in Chromium; scripts/pack-test.mjs drives them). It takes the package's
// module namespace, exactly as a consumer imports it, and runs small layers on the default engine
// (which must be WebGPU) and on the CPU (float64 reference) backend, compares them, and checks the
// public surface: error classes, and no internal helpers exported. Returns plain JSON.

/** mulberry32: seeded floats in [0, 1) (the package keeps its own generator internal). */
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function uniform(length, bound, rng) {
  const out = new Float32Array(length);
  for (let i = 0; i < length; i++) out[i] = (2 * rng() - 1) * bound;
  return out;
}

/** Two layers with the same head size (Dh = 8), so the shaders compile once: odd S, causal; grouped-query, S past a tile. */
export const CASES = [
  { name: 'E32 H4 B2 S7 causal', embedDim: 32, numHeads: 4, batchSize: 2, seqLen: 7, isCausal: true, seed: 1 },
  { name: 'E32 H4 G2 B1 S33', embedDim: 32, numHeads: 4, numKvHeads: 2, batchSize: 1, seqLen: 33, isCausal: false, seed: 2 },
];

const REQUIRED_EXPORTS = [
  'createAttentionEngine',
  'AttentionEngine',
  'MultiHeadAttention',
  'referenceMultiHeadAttention',
  'AttentionError',
  'ArgumentError',
  'InvalidArgumentError',
  'ShapeMismatchError',
  'MissingWeightError',
  'UnsupportedError',
  'DeviceLimitError',
  'DisposedError',
  'WebGPUUnavailableError',
];
const INTERNAL_NAMES = ['mulberry32', 'uniform', 'randomStateDict', 'attentionFlops', 'acquireDevice', 'BufferPool'];

function stateDict(c) {
  const rng = mulberry32(c.seed);
  const E = c.embedDim;
  const G = c.numKvHeads ?? c.numHeads;
  const N = ((c.numHeads + 2 * G) * E) / c.numHeads;
  return {
    in_proj_weight: uniform(N * E, Math.sqrt(6 / (E + N)), rng),
    in_proj_bias: uniform(N, 0.1, rng),
    'out_proj.weight': uniform(E * E, 1 / Math.sqrt(E), rng),
    'out_proj.bias': uniform(E, 0.1, rng),
  };
}

/** |gpu − cpu| ≤ tol + tol·|cpu| elementwise, tol = 16·√n·2⁻²³ for the reductions (E, Skv, Skv, E) of a layer. */
function compare(gpu, cpu, c) {
  const n = 2 * c.embedDim + 2 * c.seqLen;
  const tol = 16 * Math.sqrt(n) * 2 ** -23;
  let bad = 0;
  let maxAbs = 0;
  const firstBad = [];
  if (gpu.length !== cpu.length) return { ok: false, tol, maxAbs: NaN, bad: -1, firstBad: [`length ${gpu.length} vs ${cpu.length}`] };
  for (let i = 0; i < gpu.length; i++) {
    const err = Math.abs(gpu[i] - cpu[i]);
    if (!(err <= tol + tol * Math.abs(cpu[i]))) {
      bad++;
      if (firstBad.length < 5) firstBad.push(`[${i}] gpu ${gpu[i]} cpu ${cpu[i]}`);
    }
    if (Number.isFinite(err)) maxAbs = Math.max(maxAbs, err);
  }
  return { ok: bad === 0, tol, maxAbs, bad, firstBad };
}

const describe = (e) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e));

export async function runPackCase(lib) {
  const problems = [];
  const result = { ok: false, backend: null, adapterInfo: null, fallbackReason: null, cases: [], problems };

  const exported = Object.keys(lib);
  const missing = REQUIRED_EXPORTS.filter((name) => !exported.includes(name));
  if (missing.length) problems.push(`exports missing: ${missing.join(', ')}`);
  const leaked = INTERNAL_NAMES.filter((name) => exported.includes(name));
  if (leaked.length) problems.push(`internal helpers exported: ${leaked.join(', ')}`);

  let gpu = null;
  let cpu = null;
  const uncaptured = [];
  try {
    // What a user writes: WebGPU on a GPU; on a software adapter (lavapipe, SwiftShader) an engine that
    // chooses between WebGPU and the 'wasm' backend per call shape (tuning.backends), 'wasm' first.
    const auto = await lib.createAttentionEngine();
    try {
      result.defaultBackend = auto.backend;
      const chooses = auto.tuning?.backends !== undefined;
      if (auto.device === null || !(auto.backend === 'webgpu' || (chooses && auto.backend === 'wasm'))) {
        problems.push(`createAttentionEngine() chose '${auto.backend}' (device ${auto.device ? 'yes' : 'none'}): ${auto.fallbackReason}`);
      }
      // The inlined WebAssembly module loads from the package: one case on the default engine.
      const c = CASES[0];
      const layer = auto.createMultiHeadAttention({ embedDim: c.embedDim, numHeads: c.numHeads }, stateDict(c));
      const query = uniform(c.batchSize * c.seqLen * c.embedDim, 1, mulberry32(c.seed));
      const out = (await layer.forward(query, { batchSize: c.batchSize, seqLen: c.seqLen, isCausal: c.isCausal })).output;
      result.defaultRanOn = auto.backend;
      if (!out.every(Number.isFinite)) problems.push(`createAttentionEngine()'s forward on '${auto.backend}' gave non-finite outputs`);
      layer.dispose();
    } finally {
      auto.dispose();
    }
    gpu = await lib.createAttentionEngine({ backend: 'webgpu' });
    result.backend = gpu.backend;
    result.adapterInfo = gpu.adapterInfo;
    result.fallbackReason = gpu.fallbackReason;
    gpu.device.addEventListener('uncapturederror', (ev) => uncaptured.push(ev.error.message));
    cpu = await lib.createAttentionEngine({ backend: 'cpu' });

    for (const c of CASES) {
      const config = { embedDim: c.embedDim, numHeads: c.numHeads, numKvHeads: c.numKvHeads };
      const weights = stateDict(c);
      const query = uniform(c.batchSize * c.seqLen * c.embedDim, 1, mulberry32(c.seed + 0x9e3779b9));
      const options = { batchSize: c.batchSize, seqLen: c.seqLen, isCausal: c.isCausal };
      const t0 = performance.now();
      const gpuLayer = gpu.createMultiHeadAttention(config, weights);
      const gpuOut = (await gpuLayer.forward(query, options)).output;
      const gpuMs = performance.now() - t0;
      gpuLayer.dispose();
      const cpuLayer = cpu.createMultiHeadAttention(config, weights);
      const cpuOut = (await cpuLayer.forward(query, options)).output;
      cpuLayer.dispose();
      const cmp = compare(gpuOut, cpuOut, c);
      result.cases.push({ name: c.name, elements: gpuOut.length, gpuMs: Math.round(gpuMs), sample: Array.from(gpuOut.slice(0, 3)), ...cmp });
      if (!cmp.ok)
        problems.push(`${c.name}: ${cmp.bad} of ${gpuOut.length} outputs differ from the CPU backend beyond ${cmp.tol.toExponential(2)}: ${cmp.firstBad.join('; ')}`);
    }

    // The error classes cross the package boundary intact.
    const c = CASES[0];
    const layer = gpu.createMultiHeadAttention({ embedDim: c.embedDim, numHeads: c.numHeads }, stateDict(c));
    try {
      await layer.forward(new Float32Array(5), { batchSize: 1, seqLen: 1 });
      problems.push('forward() with a query of the wrong length did not throw');
    } catch (e) {
      if (!(e instanceof lib.ShapeMismatchError && e instanceof lib.AttentionError)) {
        problems.push(`forward() with a wrong-length query threw ${describe(e)}, not a ShapeMismatchError (an AttentionError)`);
      }
    } finally {
      layer.dispose();
    }
    await new Promise((resolve) => setTimeout(resolve, 0)); // let late uncaptured errors arrive
    if (uncaptured.length) problems.push(`uncaptured WebGPU errors: ${uncaptured.join(' | ')}`);
    const stats = gpu.stats();
    result.gpuBuffersAfterDispose = stats.buffers;
  } catch (e) {
    problems.push(`threw ${describe(e)}${e instanceof Error && e.stack ? `\n${e.stack}` : ''}`);
  } finally {
    gpu?.dispose();
    cpu?.dispose();
  }
  result.ok = problems.length === 0;
  return result;
}
