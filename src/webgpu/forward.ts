// One forward on the GPU, its kernel variants already chosen: encoded as one command buffer (QKV
// projection → flash attention → output projection, and the probabilities when asked) with one
// readback (attend.ts: the attention kernel alone on given Q, K, V). Nothing here chooses
// variants or compiles ahead: the caller passes the choice (backend.ts, from tuning/).

import type { ForwardPlan } from '../plan/index.ts';
import { InvalidArgumentError, ShapeMismatchError } from '../errors.ts';
import type { BufferForwardResult, ForwardResult } from '../types.ts';
import { type BufferPool, MAP_MODE_READ, Usage } from './buffers.ts';
import { encodeAttentionProbs } from './kernels/attention-probs.ts';
import { encodeCopyRows } from './kernels/copy-tensor.ts';
import { encodeFlashAttention } from './kernels/flash-attention.ts';
import { encodeHeadTransform } from './kernels/head-transform.ts';
import { encodeLinearAttention } from './kernels/linear-attention.ts';
import { uploadMasks } from './kernels/masks.ts';
import { encodeOutputProjection } from './kernels/output-projection.ts';
import { encodeQkvProjection, type QkvTargets, qkvBufferTargets, qkvLayout } from './kernels/qkv-projection.ts';
import { fromF16 } from './f16.ts';
import { cropColumns, type Unpadded } from './padding.ts';
import { PassStages } from './profiler.ts';
import { CallScratch } from './scratch.ts';
import type { KernelChoice } from './variants.ts';
import type { GpuLayerWeights } from './weights.ts';

/** Where the attention output and each row's softmax statistics go. */
export function attentionBuffers(scratch: CallScratch, plan: ForwardPlan): { attention: GPUBuffer; rowStats: GPUBuffer } {
  const { batches, qRows } = plan.geometry;
  const { numHeads: H, headDim: Dh } = plan.layer;
  const rows = batches * H * qRows;
  return {
    attention: scratch.storage(rows * Dh * scratch.elementBytes, 'attention'), // O [B, H, Sq, Dh]
    rowStats: scratch.storage(rows * 8, 'rowStats'), // softmax (m, l) per row [B, H, Sq]
  };
}

/** The probabilities' buffer, when asked for: P [B, H, Sq, Skv] (f32). */
export function probsBuffer(scratch: CallScratch, plan: ForwardPlan): { probs: GPUBuffer | null; probsBytes: number } {
  const probsBytes = plan.needWeights ? plan.batchSize * plan.layer.numHeads * plan.seqLen * plan.kvSeqLen * 4 : 0;
  return { probs: plan.needWeights ? scratch.storage(probsBytes, 'probs') : null, probsBytes };
}

/** Copies `sources` into one staging buffer, submits, maps once, and returns each as float32 (f16 sources converted). */
export async function readBack(
  scratch: CallScratch,
  encoder: GPUCommandEncoder,
  sources: { buffer: GPUBuffer; bytes: number; f16?: boolean }[],
): Promise<Float32Array[]> {
  const total = sources.reduce((a, s) => a + s.bytes, 0);
  const readback = scratch.readback(total, 'readback');
  let offset = 0;
  for (const s of sources) {
    encoder.copyBufferToBuffer(s.buffer, 0, readback, offset, s.bytes);
    offset += s.bytes;
  }
  scratch.device.queue.submit([encoder.finish()]);
  await readback.mapAsync(MAP_MODE_READ, 0, total);
  const mapped = readback.getMappedRange(0, total);
  offset = 0;
  const out = sources.map((s) => {
    const bytes = mapped.slice(offset, offset + s.bytes);
    const copy = s.f16 ? fromF16(new Uint16Array(bytes)) : new Float32Array(bytes);
    offset += s.bytes;
    return copy;
  });
  readback.unmap();
  return out;
}

/** A KV cache on the GPU: one buffer, K [B, G, capacity, Dh] then V [B, G, capacity, Dh] (capacity: the cache's maxSeqLen). */
export interface GpuKvCache {
  buffer: GPUBuffer;
  /** Positions each (b, g) block holds. */
  capacity: number;
  /** Elements from the start of the buffer to V. */
  vBase: number;
}

/**
 * Runs one planned forward on the GPU and reads the output [B, Sq, E] (and P [B, H, Sq, Skv] if asked)
 * back. `unpadded`: the caller's sizes when the plan's layer is padded (padding.ts), else null.
 */
export async function forwardWebGPU(
  pool: BufferPool,
  weights: GpuLayerWeights,
  plan: ForwardPlan,
  cache: GpuKvCache | null,
  profile: boolean,
  choice: KernelChoice,
  unpadded: Unpadded | null = null,
): Promise<ForwardResult | BufferForwardResult> {
  const device = pool.device;
  const { batches, qRows, kvRows } = plan.geometry;
  const E = plan.layer.embedDim; // Ep when padded
  const userE = unpadded?.embedDim ?? E;
  const scratch = new CallScratch(pool);
  try {
    // Inputs: the caller's GPUBuffers where given (read in place, or copied to padded rows), else
    // uploads of the arrays (at the engine's precision).
    const g = plan.gpu;
    if (g) checkInputSizes(plan, g, scratch.elementBytes, unpadded);
    const copies: { src: GPUBuffer; dst: GPUBuffer; rows: number; srcCols: number; dstCols: number }[] = [];
    const caller = (buffer: GPUBuffer, rows: number, cols: number, colsTo: number, role: string): GPUBuffer => {
      if (cols === colsTo) return buffer;
      const dst = scratch.storage(rows * colsTo * scratch.elementBytes, role);
      copies.push({ src: buffer, dst, rows, srcCols: cols, dstCols: colsTo });
      return dst;
    };
    const { kdim, vdim } = plan.layer;
    const query = g?.query ? caller(g.query, batches * qRows, userE, E, 'query') : scratch.tensor(plan.query, 'query'); // [B, Sq, E]
    const key = plan.mode !== 'cross' ? query : g?.key ? caller(g.key, batches * kvRows, unpadded?.kdim ?? kdim, kdim, 'key') : scratch.tensor(plan.key, 'key'); // [B, Skv, kdim]
    let value = query; // [B, Skv, vdim]
    if (plan.mode === 'cross') {
      if (g?.value) value = caller(g.value, batches * kvRows, unpadded?.vdim ?? vdim, vdim, 'value');
      else if (plan.value === plan.key && !g?.key)
        value = key; // one array for both: one upload
      else value = scratch.tensor(plan.value, 'value');
    }
    const { numHeads: H, headDim: Dh } = plan.layer;
    // Q ++ K ++ V head-split in one scratch buffer; with a KV cache, Q alone, and K, V in the cache.
    const targets: QkvTargets =
      cache && plan.cache
        ? {
            q: scratch.storage(plan.batchSize * H * plan.seqLen * Dh * scratch.elementBytes, 'q'),
            kv: { buffer: cache.buffer, kBase: 0, vBase: cache.vBase, stride: cache.capacity, row0: plan.cache.start },
          }
        : qkvBufferTargets(plan, scratch.storage(qkvLayout(plan).total * scratch.elementBytes, 'qkv'));
    const masks = uploadMasks(scratch, plan);
    const f16 = scratch.precision === 'f16';
    const outputBytes = batches * qRows * E * scratch.elementBytes; // Y stored at the engine's precision
    // With returnBuffer the output goes straight into a buffer the caller will own (cropped into it when padded).
    const owned = (bytes: number, label: string) =>
      device.createBuffer({ label, size: Math.max(16, Math.ceil(bytes / 4) * 4), usage: Usage.STORAGE | Usage.COPY_SRC | Usage.COPY_DST });
    const ownedY = plan.returnBuffer ? owned(batches * qRows * userE * scratch.elementBytes, 'MultiHeadAttention.outputBuffer') : null;
    const y = ownedY && userE === E ? ownedY : scratch.storage(outputBytes, 'y'); // Y [B, Sq, E]

    const { attention, rowStats } = attentionBuffers(scratch, plan);
    const { probs, probsBytes } = probsBuffer(scratch, plan);
    const { q, kv } = targets;
    // A caller's buffer from another device, or of the wrong kind, is a validation error: catch it here.
    if (g) device.pushErrorScope('validation');
    const encoder = device.createCommandEncoder({ label: 'MultiHeadAttention.forward' });
    const stages = new PassStages(device, encoder, 'MultiHeadAttention.forward', profile);
    if (copies.length > 0) {
      stages.run('copy_inputs', (pass) => {
        for (const c of copies) encodeCopyRows(pass, scratch, c.src, c.dst, c);
      });
    }
    stages.run('qkv_projection', (pass) => encodeQkvProjection(pass, scratch, plan, { query, key, value }, weights.projection, targets, choice.qkv_projection));
    if (plan.layer.rotary || plan.layer.qkNorm) stages.run('head_transform', (pass) => encodeHeadTransform(pass, scratch, plan, targets));
    if (plan.layer.attention === 'linear') stages.run('linear_attention', (pass) => encodeLinearAttention(pass, scratch, plan, { q, kv, attention }, masks));
    else stages.run('flash_attention', (pass) => encodeFlashAttention(pass, scratch, plan, { q, kv, attention, rowStats }, masks, choice.flash_attention));
    if (probs) stages.run('attention_probs', (pass) => encodeAttentionProbs(pass, scratch, plan, { q, kv, rowStats, probs }, masks));
    stages.run('output_projection', (pass) =>
      encodeOutputProjection(pass, scratch, plan, { attention, weight: weights.outProjWeight, bias: weights.outProjBias, y }, choice.output_projection),
    );
    if (ownedY && ownedY !== y) stages.run('crop_output', (pass) => encodeCopyRows(pass, scratch, y, ownedY, { rows: batches * qRows, srcCols: E, dstCols: userE }));
    const timestamps = stages.end(scratch);
    if (plan.returnBuffer && ownedY) {
      const weightsBuffer = probs ? owned(probsBytes, 'MultiHeadAttention.attentionWeightsBuffer') : null;
      if (probs && weightsBuffer) encoder.copyBufferToBuffer(probs, 0, weightsBuffer, 0, probsBytes);
      device.queue.submit([encoder.finish()]);
      stages.destroyAfter(device.queue);
      await rejectInvalidBuffers(device, !!g, [ownedY, weightsBuffer]);
      return weightsBuffer ? { outputBuffer: ownedY, attentionWeightsBuffer: weightsBuffer } : { outputBuffer: ownedY };
    }
    const sources = [{ buffer: y, bytes: outputBytes, f16 }, ...(probs ? [{ buffer: probs, bytes: probsBytes }] : []), ...(timestamps ? [timestamps] : [])];
    // Submit (readBack's synchronous part) before popping the validation scope, then wait for both,
    // so nothing is left pending either way.
    const reading = readBack(scratch, encoder, sources);
    const [verdict, read] = await Promise.allSettled([rejectInvalidBuffers(device, !!g, []), reading]);
    stages.destroyAfter(device.queue);
    if (verdict.status === 'rejected') throw verdict.reason;
    if (read.status === 'rejected') throw read.reason;
    const output = cropColumns(read.value[0], batches * qRows, E, userE);
    const attentionWeights = probs ? read.value[1] : undefined;
    const timings = timestamps ? stages.timings(read.value[read.value.length - 1].buffer) : undefined;
    return { output, ...(attentionWeights ? { attentionWeights } : {}), ...(timings ? { timings } : {}) };
  } finally {
    scratch.releaseAll();
  }
}

/** GPU-resident inputs must hold their tensors at the engine's precision (4 bytes an element, or 2 with f16). */
function checkInputSizes(plan: ForwardPlan, g: NonNullable<ForwardPlan['gpu']>, el: number, unpadded: Unpadded | null): void {
  const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
  const { embedDim: E, kdim, vdim } = unpadded ?? plan.layer;
  const type = el === 2 ? "float16 (the engine's precision is f16)" : 'float32';
  for (const [argument, buffer, shape, n] of [
    ['query', g.query, `[B, Sq, E] = [${B}, ${Sq}, ${E}]`, B * Sq * E],
    ['options.key', g.key, `[B, Skv, kdim] = [${B}, ${Skv}, ${kdim}]`, B * Skv * kdim],
    ['options.value', g.value, `[B, Skv, vdim] = [${B}, ${Skv}, ${vdim}]`, B * Skv * vdim],
  ] as const) {
    if (buffer && buffer.size < n * el) {
      throw new ShapeMismatchError({
        where: 'MultiHeadAttention.forward',
        argument,
        expected: `a GPUBuffer of at least ${n * el} bytes (${shape} ${type})`,
        given: `${buffer.size} bytes`,
      });
    }
  }
}

/** Pops the validation scope pushed for GPU-resident inputs; turns an error into the caller's mistake. */
export async function rejectInvalidBuffers(device: GPUDevice, scoped: boolean, created: (GPUBuffer | null)[], where = 'MultiHeadAttention.forward'): Promise<void> {
  if (!scoped) return;
  const error = await device.popErrorScope();
  if (!error) return;
  for (const b of created) b?.destroy();
  throw new InvalidArgumentError({
    where,
    argument: 'a GPUBuffer input',
    expected: "a buffer of this engine's device (engine.device) with STORAGE usage",
    given: `one WebGPU refused: ${error.message.split('\n')[0]}`,
    fix: 'Create input buffers on engine.device, or pass your device to createAttentionEngine({ device }).',
  });
}
