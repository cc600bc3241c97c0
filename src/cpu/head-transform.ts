// QK-norm and rotary embeddings in float64: what shaders/head_transform.wgsl does to every query and
// key head after the projection, pass 1½ of the reference. An RMS norm with the head's weights
// (config.qkNorm; with over 'all', one norm over all the token's heads, normAcrossHeads), then the rotation of the first `dim` features by position·θ_i (config.rotary).

import { type ForwardPlan, type LayerSpec, rotaryAngles } from '../plan/index.ts';

/**
 * Transforms `heads` [batches, count, stride, Dh] in place: the query heads (kind 'query') or the key
 * heads ('key') of rows row0 … row0 + rows − 1 of each block, token m = b·rows + s at plan.positions[m].
 * Float32 heads (the 'wasm' backend's) are transformed in float64 and stored rounded.
 */
export function transformHeads(plan: ForwardPlan, heads: Float64Array | Float32Array, kind: 'query' | 'key', count: number, rows: number, stride = rows, row0 = 0): void {
  const { rotary, qkNorm, headDim: Dh } = plan.layer;
  if (!rotary && !qkNorm) return;
  const batches = heads.length / (count * stride * Dh);
  if (qkNorm?.over === 'all') {
    for (let b = 0; b < batches; b++) {
      for (let s = 0; s < rows; s++) normAcrossHeads(plan.layer, heads, (h) => ((b * count + h) * stride + row0 + s) * Dh, count, kind);
    }
  }
  const angles = rotary ? new Float64Array(rotary.dim) : undefined;
  for (let b = 0; b < batches; b++) {
    for (let s = 0; s < rows; s++) {
      if (rotary) rotaryAngles(rotary, plan.positions![b * rows + s], angles); // the token's, for all its heads
      for (let h = 0; h < count; h++) transformHead(plan.layer, heads, ((b * count + h) * stride + row0 + s) * Dh, kind, angles);
    }
  }
}

/**
 * config.vNorm (Gemma 4's v_norm): every value head of `heads` (any layout: Dh features in a row at
 * multiples of Dh) normed in place, x·rsqrt(mean(x²) + eps), no weights. Float32 heads in float64, stored rounded.
 */
export function normValues(layer: LayerSpec, heads: Float64Array | Float32Array, offset = 0, length = heads.length - offset): void {
  const { vNorm, headDim: Dh } = layer;
  if (!vNorm) return;
  for (let base = offset; base < offset + length; base += Dh) {
    let squares = 0;
    for (let d = 0; d < Dh; d++) squares += heads[base + d] ** 2;
    const r = 1 / Math.sqrt(squares / Dh + vNorm.eps);
    for (let d = 0; d < Dh; d++) heads[base + d] *= r;
  }
}

/**
 * QK-norm over a token's whole projection (qkNorm.over 'all', OLMo 2): the `count` heads of one token,
 * head h's Dh features at heads[headBase(h) …], scaled in place by rsqrt(mean of all count·Dh squares
 * + eps) and the weights [count·Dh]. Float32 heads are normed in float64 and stored rounded.
 */
export function normAcrossHeads(layer: LayerSpec, heads: Float64Array | Float32Array, headBase: (h: number) => number, count: number, kind: 'query' | 'key'): void {
  const { qkNorm, headDim: Dh } = layer;
  if (qkNorm?.over !== 'all') return;
  const weight = kind === 'query' ? qkNorm.query : qkNorm.key;
  let squares = 0;
  for (let h = 0; h < count; h++) {
    const base = headBase(h);
    for (let d = 0; d < Dh; d++) squares += heads[base + d] ** 2;
  }
  const r = 1 / Math.sqrt(squares / (count * Dh) + qkNorm.eps);
  for (let h = 0; h < count; h++) {
    const base = headBase(h);
    for (let d = 0; d < Dh; d++) heads[base + d] *= r * weight[h * Dh + d];
  }
}

/**
 * One head's Dh features at heads[base …] in place: QK-norm with the head's weights (qkNorm.over
 * 'head'; 'all' is normAcrossHeads, done first), then rotary by `angles`, its token's rotaryAngles
 * (cos, sin of each pair; required when the layer has rotary).
 */
export function transformHead(layer: LayerSpec, heads: Float64Array | Float32Array, base: number, kind: 'query' | 'key', angles: Float64Array | undefined): void {
  const { rotary, qkNorm, headDim: Dh } = layer;
  if (qkNorm && qkNorm.over === 'head') {
    const weight = kind === 'query' ? qkNorm.query : qkNorm.key;
    let squares = 0;
    for (let d = 0; d < Dh; d++) squares += heads[base + d] ** 2;
    const r = 1 / Math.sqrt(squares / Dh + qkNorm.eps);
    for (let d = 0; d < Dh; d++) heads[base + d] *= r * weight[d];
  }
  if (rotary) {
    if (!angles) throw new Error("transformHead: a layer with rotary needs its token's angles (rotaryAngles)");
    const half = rotary.dim / 2;
    for (let i = 0; i < half; i++) {
      const c = angles[2 * i];
      const sn = angles[2 * i + 1];
      const a = rotary.interleaved ? base + 2 * i : base + i;
      const z = rotary.interleaved ? a + 1 : a + half;
      const x = heads[a];
      const y = heads[z];
      heads[a] = x * c - y * sn;
      heads[z] = y * c + x * sn;
    }
  }
}
