// The WebGPU backend: one device, one buffer pool, the per-device pipeline cache.

import type { Backend, BackendLayer } from '../backend.ts';
import { DeviceLimitError, UnsupportedError } from '../errors.ts';
import type { ForwardPlan, LayerSpec, LayerWeights } from '../plan.ts';
import type { ForwardResult } from '../types.ts';
import { BufferPool } from './buffers.ts';
import { attendWebGPU, forwardWebGPU, GpuLayerWeights } from './forward.ts';
import { qkvLayout } from './kernels/qkv-projection.ts';

/** Head sizes the kernels take: vec4 lanes, and q and the accumulator held in registers. */
export const MAX_HEAD_DIM = 256;

export class WebGPUBackend implements Backend {
  readonly kind = 'webgpu' as const;
  readonly pool: BufferPool;

  constructor(
    readonly device: GPUDevice,
    /** Whether the engine created the device (and so destroys it on dispose). */
    private readonly ownsDevice: boolean,
  ) {
    this.pool = new BufferPool(device, 'AttentionEngine');
  }

  async attend(plan: ForwardPlan): Promise<ForwardResult> {
    checkHeadDim('scaledDotProductAttention', 'options.headDim', String(plan.layer.headDim), plan.layer.headDim);
    checkLimits(this.device, plan);
    return attendWebGPU(this.pool, plan, plan.query, plan.key, plan.value);
  }

  createLayer(spec: LayerSpec, weights: LayerWeights): BackendLayer {
    checkHeadDim('createMultiHeadAttention', 'embedDim / numHeads (the head size)', `${spec.embedDim} / ${spec.numHeads} = ${spec.headDim}`, spec.headDim);
    for (const [name, dim] of [['kdim', spec.kdim], ['vdim', spec.vdim]] as const) {
      if (dim % 4 !== 0) {
        throw new UnsupportedError({
          where: 'createMultiHeadAttention',
          argument: `config.${name}`,
          expected: 'a multiple of 4 on the WebGPU backend (the projections read vec4s)',
          given: String(dim),
          fix: "Pad the key/value channels to a multiple of 4, or use createAttentionEngine({ backend: 'cpu' }).",
        });
      }
    }
    const gpuWeights = new GpuLayerWeights(this.pool, spec, weights);
    return {
      forward: (plan) => {
        checkLimits(this.device, plan);
        return forwardWebGPU(this.pool, gpuWeights, plan);
      },
      dispose: () => {
        gpuWeights.destroy();
        this.pool.trim(); // idle scratch goes too, so stats() returns to what it was before the layer
      },
    };
  }

  stats() {
    return this.pool.stats();
  }

  dispose(): void {
    this.pool.destroyAll();
    if (this.ownsDevice) this.device.destroy();
  }
}

function checkHeadDim(where: string, argument: string, given: string, Dh: number): void {
  if (Dh % 4 === 0 && Dh <= MAX_HEAD_DIM) return;
  throw new UnsupportedError({
    where,
    argument,
    expected: `a multiple of 4 from 4 to ${MAX_HEAD_DIM} on the WebGPU backend`,
    given,
    fix: "Choose sizes so the head size fits, or use createAttentionEngine({ backend: 'cpu' }), which takes any size.",
  });
}

/** Refuses, before any GPU work, a call whose buffers or dispatches exceed the device's limits. */
function checkLimits(device: GPUDevice, plan: ForwardPlan): void {
  const limits = device.limits;
  const maxBinding = Math.min(limits.maxStorageBufferBindingSize, limits.maxBufferSize);
  const { batchSize: B, seqLen: Sq, kvSeqLen: Skv } = plan;
  const buffers = [
    { what: 'the Q/K/V buffer for this call', bytes: qkvLayout(plan).total * 4, fix: 'Split the batch into smaller calls.' },
    {
      what: 'the attention weights [B, H, Sq, Skv] (needWeights)',
      bytes: plan.needWeights ? B * plan.layer.numHeads * Sq * Skv * 4 : 0,
      fix: 'Ask for needWeights on shorter sequences or smaller batches; the output alone needs no S² memory.',
    },
  ];
  for (const { what, bytes, fix } of buffers) {
    if (bytes > maxBinding) {
      throw new DeviceLimitError({
        where: 'MultiHeadAttention.forward',
        argument: what,
        expected: `at most maxStorageBufferBindingSize = ${maxBinding} bytes`,
        given: `${bytes} bytes (batchSize ${B}, seqLen ${Sq})`,
        fix,
      });
    }
  }
  const rows = plan.batchSize * plan.seqLen;
  const groups = Math.max(Math.ceil(rows / 32), plan.needWeights ? B * plan.layer.numHeads : B);
  if (groups > limits.maxComputeWorkgroupsPerDimension) {
    throw new DeviceLimitError({
      where: 'MultiHeadAttention.forward',
      argument: 'batchSize·seqLen',
      expected: `at most ${32 * limits.maxComputeWorkgroupsPerDimension} rows (maxComputeWorkgroupsPerDimension = ${limits.maxComputeWorkgroupsPerDimension})`,
      given: String(rows),
      fix: 'Split the batch into smaller calls.',
    });
  }
}
