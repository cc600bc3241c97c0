// The timings of one call's stages (createAttentionEngine({ profile: true }) on an adapter with
// 'timestamp-query'): with profiling, each stage of a call (call.ts GpuCall.stage) is a compute pass of
// its own whose beginning and end write a timestamp into one query set, made with the call, with room
// for MAX_STAGES stages (a forward encodes at most nine: copy_inputs, qkv_projection, head_transform,
// kv_store, flash_attention or linear_attention, attention_probs, output_gate, output_projection,
// crop_output); the stages used are
// resolved into a buffer read back with the output.

import { Usage } from './buffers.ts';
import type { CallScratch } from './scratch.ts';

/** The most stages one call times; a call encoding more is a fault here, reported as such. */
export const MAX_STAGES = 10;

export class StageTimestamps {
  private readonly querySet: GPUQuerySet;
  /** The names of the stages begun, in order. */
  private readonly names: string[] = [];

  constructor(
    device: GPUDevice,
    private readonly label: string,
  ) {
    this.querySet = device.createQuerySet({ label: `${label}.timestamps`, type: 'timestamp', count: 2 * MAX_STAGES });
  }

  /** The descriptor of the next stage's pass: its own, writing a timestamp at its beginning and at its end. */
  pass(name: string): GPUComputePassDescriptor {
    const i = this.names.length;
    if (i === MAX_STAGES) throw new Error(`${this.label}: more than ${MAX_STAGES} stages to time (a fault in webgpu-attention: raise profiler.ts MAX_STAGES)`);
    this.names.push(name);
    return { label: `${this.label}.${name}`, timestampWrites: { querySet: this.querySet, beginningOfPassWriteIndex: 2 * i, endOfPassWriteIndex: 2 * i + 1 } };
  }

  /**
   * Encodes the resolution of the timestamps written (8 bytes each: a beginning and an end per stage,
   * resolved at offset 0, which satisfies resolveQuerySet's 256-byte alignment) into a scratch buffer to read back.
   */
  resolve(encoder: GPUCommandEncoder, scratch: CallScratch): { buffer: GPUBuffer; bytes: number } | null {
    const count = 2 * this.names.length;
    if (count === 0) return null;
    const buffer = scratch.buffer(8 * count, Usage.QUERY_RESOLVE | Usage.COPY_SRC, 'timestamps');
    encoder.resolveQuerySet(this.querySet, 0, count, buffer, 0);
    return { buffer, bytes: 8 * count };
  }

  /** Milliseconds per stage (a name met twice: the sum), and `gpu`, from the first beginning to the last end, from the resolved bytes. */
  timings(bytes: ArrayBuffer): Record<string, number> {
    const n = this.names.length;
    const t = new BigUint64Array(bytes, 0, 2 * n);
    const ms = (a: bigint, b: bigint) => Number(b - a) / 1e6;
    const out: Record<string, number> = {};
    this.names.forEach((name, i) => {
      out[name] = (out[name] ?? 0) + ms(t[2 * i], t[2 * i + 1]);
    });
    out.gpu = ms(t[0], t[2 * n - 1]);
    return out;
  }

  /** Destroys the query set: once the work that writes it is done (its readback mapped), or never submitted. */
  destroy(): void {
    this.querySet.destroy();
  }
}
