// A call on a PagedKvCache on the GPU (forward(x, { kvCache: paged, sequences })), all its sequences in
// ONE GpuCall (one submission): the QKV projection over the call's T rows at once (the kernels of a
// plain forward, on a plan of one batch of T tokens whose rotary positions are each token's own:
// start + i, or its depth in a tree), the head transform, paged_write.wgsl (each new K/V row into its
// sequence's block), paged attention (each sequence's keys read in place through its block table:
// kernels/paged-attention.ts), the output gate where the layer has one, and the output projection over
// [T, E] once. The call's sequences, block tables and trees travel in one u32 buffer uploaded per call.

import { DeviceLimitError } from '../errors.ts';
import { geometryOf, type ForwardPlan, type PagedPlan } from '../plan/index.ts';
import type { ForwardResult } from '../types.ts';
import type { DeviceState } from './device.ts';
import { GpuCall } from './call.ts';
import { encodeHeadTransform } from './kernels/head-transform.ts';
import { uploadMasks } from './kernels/masks.ts';
import { encodeActivationsQ8 } from './kernels/activations-q8.ts';
import { encodeOutputGate } from './kernels/output-gate.ts';
import { encodeOutputProjection } from './kernels/output-projection.ts';
import { encodePagedAttention, pagedMeta } from './kernels/paged-attention.ts';
import { encodePagedWrite } from './kernels/paged-write.ts';
import { encodeQkvProjection, qkvBufferTargets, qkvLayout } from './kernels/qkv-projection.ts';
import type { WebGPUPagedStorage } from './paged-kv-cache.ts';
import { padForwardPlan, type Unpadded } from './padding.ts';
import type { KernelChoice } from './variants.ts';
import type { GpuLayerWeights } from './weights.ts';

const WHERE = 'MultiHeadAttention.forward';

/**
 * The plan of the call's projections: one batch of its T tokens, self-attention, no cache, each token's
 * rotary position its own (the sequences' plans' positions back to back), the layer's padded spec.
 */
export function pagedProjectionPlan(paged: PagedPlan): ForwardPlan {
  const first = paged.sequences[0].plan;
  const window = pagedWindow(paged);
  const T = paged.tokens;
  const positions = paged.layer.rotary ? new Int32Array(T) : null;
  if (positions) for (const s of paged.sequences) positions.set(s.plan.positions!, s.row);
  const plan: ForwardPlan = {
    ...first,
    mode: 'self',
    batchSize: 1,
    seqLen: T,
    kvSeqLen: T,
    isCausal: true,
    needWeights: false,
    masks: { ...first.masks, window, attnMask: null, attnMaskPerHead: false, keyPaddingMask: null, headMask: null },
    positions,
    cuSeqlens: null,
    geometry: geometryOf('self', 1, T, T),
    query: paged.query,
    key: paged.query,
    value: paged.query,
    cache: null,
    gpu: null,
    returnBuffer: false,
  };
  return padForwardPlan(plan);
}

/**
 * The call's window for every sequence: each sequence's plan clamps it to its own Sq + Skv (plan/checks.ts
 * clampWindow), so the largest of them is the call's own window, or one no sequence's keys reach past.
 */
function pagedWindow(paged: PagedPlan): number {
  return Math.max(...paged.sequences.map((s) => s.plan.masks.window));
}

/** A paged call whose buffers would exceed the device's limits (the prepare step would split it): refused, as calls with a KV cache are. */
export function pagedCallTooBig(pieces: number): DeviceLimitError {
  return new DeviceLimitError({
    where: WHERE,
    argument: 'options.sequences',
    expected: "new tokens whose projections fit the device's buffer limits in one piece",
    given: `a call that would need ${pieces} pieces`,
    fix: 'Split the call: fewer new tokens per paged call (a long prefill in several calls).',
  });
}

/** Encodes, submits and reads one paged call (`plan`: pagedProjectionPlan's, its layer with the weights' formats). */
export function forwardPagedWebGPU(
  state: DeviceState,
  weights: GpuLayerWeights,
  paged: PagedPlan,
  plan: ForwardPlan,
  storage: WebGPUPagedStorage,
  choice: KernelChoice,
  unpadded: Unpadded | null,
): Promise<ForwardResult> {
  const T = paged.tokens;
  const { numHeads: H, numKvHeads: G, headDim: Dh, embedDim: E } = plan.layer; // padded
  const maxGroups = state.device.limits.maxComputeWorkgroupsPerDimension;
  if (T > maxGroups) {
    throw new DeviceLimitError({
      where: WHERE,
      argument: 'options.sequences',
      expected: `at most ${maxGroups} new tokens in one paged call (maxComputeWorkgroupsPerDimension)`,
      given: String(T),
      fix: 'Split the call.',
    });
  }
  const pool = storage.live(state.generation);
  const call = new GpuCall(state.pool, { where: WHERE, callerBuffers: false, returnBuffer: false, profile: false, after: [weights.verdict, ...pool.after] });
  const { scratch } = call;
  try {
    const query = scratch.tensor(plan.query, 'query'); // [T, Ep]
    const layout = qkvLayout(plan);
    const targets = qkvBufferTargets(plan, scratch.storage(layout.total * scratch.elementBytes, 'qkv')); // Q [H, T, Dp] ++ K, V [G, T, Dp]
    const meta = pagedMeta(paged);
    const upload = (words: Uint32Array, role: string) => {
      const buffer = scratch.storage(words.byteLength, role);
      scratch.device.queue.writeBuffer(buffer, 0, words.buffer, words.byteOffset, words.byteLength);
      return buffer;
    };
    const metaBuffer = upload(meta.words, 'PagedAttention.meta');
    const dest = upload(meta.dest.length >= 4 ? meta.dest : Uint32Array.from({ length: 4 }, (_, i) => meta.dest[i] ?? 0), 'PagedWrite.dest');
    const first = paged.sequences[0].plan;
    const masks = uploadMasks(scratch, {
      ...first,
      masks: { ...first.masks, window: pagedWindow(paged), attnMask: null, keyPaddingMask: null, headMask: null },
      cuSeqlens: null,
    });
    const attention = scratch.storage(H * T * Dh * scratch.elementBytes, 'attention'); // O [H, T, Dp]
    const y = scratch.storage(T * E * scratch.elementBytes, 'y');
    // config.activations 'q8' (activations-q8.ts): inputs of projections with quantized weights rounded as ggml's Q8_0.
    const x = weights.q8?.qkv ? encodeActivationsQ8(call.stage('activations_q8'), scratch, query, { rows: T, K: unpadded?.embedDim ?? E, ld: E }, 'queryQ8') : query;
    encodeQkvProjection(call.stage('qkv_projection'), scratch, plan, { query: x, key: x, value: x }, weights.projection, targets, choice.qkv_projection);
    const layer = plan.layer;
    if (layer.rotary || layer.qkNorm || layer.vNorm) encodeHeadTransform(call.stage('head_transform'), scratch, plan, targets);
    const kv = targets.kv;
    encodePagedWrite(call.stage('paged_write'), scratch, {
      G,
      T,
      headDim: Dh,
      blockSize: paged.cache.blockSize,
      src: { buffer: kv.buffer, kBase: kv.kBase, vBase: kv.vBase },
      pool,
      dest,
    });
    encodePagedAttention(call.stage('paged_attention'), scratch, { ...paged, layer }, Dh, meta, { q: targets.q, pool, out: attention, meta: metaBuffer }, masks);
    if (weights.gate) encodeOutputGate(call.stage('output_gate'), scratch, plan, { attention, query, gate: weights.gate });
    encodeOutputProjection(
      call.stage('output_projection'),
      scratch,
      plan,
      {
        attention: weights.q8?.out
          ? encodeActivationsQ8(call.stage('activations_q8'), scratch, attention, { batches: 1, S: T, heads: H, Dh, uDh: unpadded?.headDim ?? Dh }, 'attentionQ8')
          : attention,
        weight: weights.outProjWeight,
        bias: weights.outProjBias,
        y,
      },
      choice.output_projection,
    );
    return call.finish({ result: y, rows: T, cols: E, keepCols: unpadded?.embedDim ?? E, probs: null, probsBytes: 0 }) as Promise<ForwardResult>;
  } catch (e) {
    return call.fail(e);
  }
}
