// Any head size on the GPU. The kernels read and write vec4s along every feature axis (E, Dh, kdim,
// vdim), so a layer whose sizes are not multiples of 4 runs padded: each head gets Dp = ⌈Dh/4⌉·4
// lanes, the model width Ep = ⌈E/4⌉·4, and the lanes added hold zeros from end to end:
//
//   - the weights gain zero rows (a head's extra output lanes) and zero columns (extra input lanes),
//     so the projections give exactly 0 in every added lane;
//   - q·k over Dp lanes equals q·k over Dh (the added terms are 0·0); the scale stays the caller's or
//     1/√Dh, fixed when the call was planned; p·v leaves the added lanes of the output at 0;
//   - QK-norm divides by Dh, not Dp (head_transform.wgsl's normDim); rotary touches dim ≤ Dh lanes;
//   - linear attention's φ(0) = 1 is not 0: its kernel zeroes φ(q) past Dh (LINEAR_PARAMS.features),
//     which takes the added lanes of φ(k) out of every product;
//   - inputs are padded as they are uploaded (arrays) or copied (GPU buffers, copy_rows.wgsl), and
//     outputs cropped as they are read back or handed over; a KV cache stores Dp lanes a row and
//     reads and writes Dh.
//
// Aligned layers (every size a multiple of 4, the common case) never come here: their plans pass
// through unchanged.

import type { FloatLayerWeights, ForwardPlan, LayerSpec } from '../plan/index.ts';

/** n rounded up to a multiple of 4. */
export function up4(n: number): number {
  return Math.ceil(n / 4) * 4;
}

/** The caller's sizes of a padded call: what inputs hold and outputs must hold. */
export interface Unpadded {
  embedDim: number;
  kdim: number;
  vdim: number;
  headDim: number;
}

function aligned(spec: LayerSpec): boolean {
  return spec.embedDim % 4 === 0 && spec.headDim % 4 === 0 && spec.kdim % 4 === 0 && spec.vdim % 4 === 0;
}

const paddedSpecs = new WeakMap<LayerSpec, LayerSpec>();

/** The layer as the kernels see it: every size a multiple of 4 (the same object when it already is). */
export function paddedSpec(spec: LayerSpec): LayerSpec {
  if (aligned(spec)) return spec;
  let padded = paddedSpecs.get(spec);
  if (!padded) {
    const Dh = spec.headDim;
    const Dp = up4(Dh);
    const norm = spec.qkNorm;
    padded = {
      ...spec,
      embedDim: up4(spec.embedDim),
      headDim: Dp,
      unpaddedHeadDim: Dh,
      kdim: up4(spec.kdim),
      vdim: up4(spec.vdim),
      qkNorm: norm ? { ...norm, query: padColumns(norm.query, norm.query.length / Dh, Dh, Dp), key: padColumns(norm.key, norm.key.length / Dh, Dh, Dp) } : null,
    };
    paddedSpecs.set(spec, padded);
  }
  return padded;
}

/** The caller's sizes when `spec` needs padding, else null. */
export function unpaddedOf(spec: LayerSpec): Unpadded | null {
  return aligned(spec) ? null : { embedDim: spec.embedDim, kdim: spec.kdim, vdim: spec.vdim, headDim: spec.headDim };
}

/** One axis of a matrix: `blocks` blocks of `size` entries, each widened to `to`. */
interface Axis {
  blocks: number;
  size: number;
  to: number;
}

/** A copy of the [rows, cols] matrix `src` with each axis's blocks widened (zeros in the new entries). */
function widen(src: Float32Array, rows: Axis, cols: Axis): Float32Array {
  const width = cols.blocks * cols.size;
  const widthTo = cols.blocks * cols.to;
  const out = new Float32Array(rows.blocks * rows.to * widthTo);
  for (let rb = 0; rb < rows.blocks; rb++) {
    for (let r = 0; r < rows.size; r++) {
      const from = (rb * rows.size + r) * width;
      const to = (rb * rows.to + r) * widthTo;
      for (let cb = 0; cb < cols.blocks; cb++) {
        out.set(src.subarray(from + cb * cols.size, from + (cb + 1) * cols.size), to + cb * cols.to);
      }
    }
  }
  return out;
}

/** [rows, cols] → [rows, to] with zeros in the new columns. */
export function padColumns(src: Float32Array, rows: number, cols: number, to: number): Float32Array {
  if (cols === to) return src;
  return widen(src, { blocks: 1, size: rows, to: rows }, { blocks: 1, size: cols, to });
}

/** [rows, from] → [rows, cols]: the first `cols` columns of each row. */
export function cropColumns(src: Float32Array, rows: number, from: number, cols: number): Float32Array {
  if (from === cols) return src;
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) out.set(src.subarray(r * from, r * from + cols), r * cols);
  return out;
}

/** A layer's weights for its padded spec: zero rows for the added head lanes, zero columns for the added input lanes. */
export function padWeights(spec: LayerSpec, w: FloatLayerWeights): FloatLayerWeights {
  if (aligned(spec)) return w;
  const { numHeads: H, numKvHeads: G, headDim: Dh, embedDim: E, kdim, vdim } = spec;
  const Dp = up4(Dh);
  const heads = (count: number): Axis => ({ blocks: count, size: Dh, to: Dp });
  const plain = (n: number): Axis => ({ blocks: 1, size: n, to: up4(n) });
  const inProj = w.inProjWeight ? widen(w.inProjWeight, heads(H + 2 * G), plain(E)) : null;
  const q = H * Dp * up4(E);
  const k = G * Dp * up4(kdim);
  return {
    inProjWeight: inProj,
    qProjWeight: inProj ? inProj.subarray(0, q) : widen(w.qProjWeight, heads(H), plain(E)),
    kProjWeight: inProj ? inProj.subarray(q, q + k) : widen(w.kProjWeight, heads(G), plain(kdim)),
    vProjWeight: inProj ? inProj.subarray(q + k) : widen(w.vProjWeight, heads(G), plain(vdim)),
    inProjBias: w.inProjBias ? widen(w.inProjBias, { blocks: 1, size: 1, to: 1 }, heads(H + 2 * G)) : null,
    outProjWeight: widen(w.outProjWeight, plain(E), heads(H)), // [E, H·Dh]: rows are outputs, columns the heads' lanes
    outProjBias: w.outProjBias ? padColumns(w.outProjBias, 1, E, up4(E)) : null,
    ...(w.gateProjWeight
      ? {
          gateProjWeight: widen(w.gateProjWeight, heads(H), plain(E)), // config.outputGate's W_g [H·Dh, E]
          gateProjBias: w.gateProjBias ? widen(w.gateProjBias, { blocks: 1, size: 1, to: 1 }, heads(H)) : null,
        }
      : {}),
  };
}

/** A layer's forward plan on its padded layer: the input arrays widened ([tokens, E] → [tokens, Ep], key and value likewise). */
export function padForwardPlan(plan: ForwardPlan): ForwardPlan {
  const spec = plan.layer;
  if (aligned(spec)) return plan;
  const layer = paddedSpec(spec);
  const query = padColumns(plan.query, plan.query.length / spec.embedDim, spec.embedDim, layer.embedDim);
  const key = plan.key === plan.query ? query : padColumns(plan.key, plan.key.length / spec.kdim, spec.kdim, layer.kdim);
  const value = plan.value === plan.key ? key : plan.value === plan.query ? query : padColumns(plan.value, plan.value.length / spec.vdim, spec.vdim, layer.vdim);
  return { ...plan, layer, query, key, value };
}

/** scaledDotProductAttention's plan with heads of Dp lanes: Q, K, V arrays [·, Dh] → [·, Dp]. */
export function padAttentionPlan(plan: ForwardPlan): ForwardPlan {
  const Dh = plan.layer.headDim;
  if (Dh % 4 === 0) return plan;
  const Dp = up4(Dh);
  const { numHeads: H } = plan.layer;
  const layer: LayerSpec = { ...plan.layer, headDim: Dp, unpaddedHeadDim: Dh, embedDim: H * Dp, kdim: H * Dp, vdim: H * Dp };
  const pad = (a: Float32Array) => padColumns(a, a.length / Dh, Dh, Dp);
  return { ...plan, layer, query: pad(plan.query), key: pad(plan.key), value: pad(plan.value) };
}
