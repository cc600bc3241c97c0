// The stages of one call's command buffer, and their timings (createAttentionEngine({ profile: true })
// on an adapter with 'timestamp-query'). Stages are collected first and encoded at end(): without
// profiling, all of them in one compute pass; with it, each in its own pass whose beginning and end
// write a timestamp into a query set made for exactly that many stages (any number), resolved into a
// buffer read back with the output.

import { Usage } from './buffers.ts';
import type { CallScratch } from './scratch.ts';

export class PassStages {
  private readonly stages: { name: string; encode: (pass: GPUComputePassEncoder) => void }[] = [];
  private querySet: GPUQuerySet | null = null;
  /** The names of the stages encoded with timestamps, in order. */
  private names: string[] = [];

  constructor(
    private readonly device: GPUDevice,
    private readonly encoder: GPUCommandEncoder,
    private readonly label: string,
    private readonly profile: boolean,
  ) {}

  /** Adds one stage (one or more dispatches) under `name`; it is encoded, in order, by end(). */
  run(name: string, encode: (pass: GPUComputePassEncoder) => void): void {
    this.stages.push({ name, encode });
  }

  /**
   * Encodes the stages. With timestamps, resolves them into a buffer to read back (8 bytes each: a
   * beginning and an end per stage, resolved at offset 0, which satisfies resolveQuerySet's 256-byte alignment).
   */
  end(scratch: CallScratch): { buffer: GPUBuffer; bytes: number } | null {
    const stages = this.stages.splice(0);
    if (stages.length === 0) return null;
    if (!this.profile) {
      const pass = this.encoder.beginComputePass({ label: `${this.label}.pass` });
      for (const s of stages) s.encode(pass);
      pass.end();
      return null;
    }
    const count = 2 * stages.length;
    const querySet = this.device.createQuerySet({ label: `${this.label}.timestamps`, type: 'timestamp', count });
    this.querySet = querySet;
    this.names = stages.map((s) => s.name);
    stages.forEach((s, i) => {
      const pass = this.encoder.beginComputePass({
        label: `${this.label}.${s.name}`,
        timestampWrites: { querySet, beginningOfPassWriteIndex: 2 * i, endOfPassWriteIndex: 2 * i + 1 },
      });
      s.encode(pass);
      pass.end();
    });
    const resolved = scratch.buffer(8 * count, Usage.QUERY_RESOLVE | Usage.COPY_SRC, 'timestamps');
    this.encoder.resolveQuerySet(querySet, 0, count, resolved, 0);
    return { buffer: resolved, bytes: 8 * count };
  }

  /** Milliseconds per stage (a name met twice: the sum), and `gpu`, from the first beginning to the last end, from the resolved bytes. */
  timings(bytes: ArrayBufferLike): Record<string, number> {
    const n = this.names.length;
    const t = new BigUint64Array(bytes as ArrayBuffer, 0, 2 * n);
    const ms = (a: bigint, b: bigint) => Number(b - a) / 1e6;
    const out: Record<string, number> = {};
    this.names.forEach((name, i) => {
      out[name] = (out[name] ?? 0) + ms(t[2 * i], t[2 * i + 1]);
    });
    out.gpu = ms(t[0], t[2 * n - 1]);
    return out;
  }

  /** Destroys the query set once the queue has finished the work that writes it (at once when nothing was submitted). */
  destroyAfter(queue: GPUQueue | null): void {
    const set = this.querySet;
    this.querySet = null;
    if (!set) return;
    if (queue) void queue.onSubmittedWorkDone().then(() => set.destroy());
    else set.destroy();
  }
}
