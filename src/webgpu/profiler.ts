// Kernel timings from timestamp queries (createAttentionEngine({ profile: true }) on an adapter with
// 'timestamp-query'). Without a query set every stage shares one compute pass; with one, each stage
// gets its own pass whose beginning and end write a timestamp, read back with the output.

import { Usage } from './buffers.ts';
import type { CallScratch } from './scratch.ts';

const QUERY_RESOLVE = 0x0200; // GPUBufferUsage.QUERY_RESOLVE
const MAX_STAGES = 4;

export class PassStages {
  private shared: GPUComputePassEncoder | null = null;
  private readonly names: string[] = [];
  private readonly querySet: GPUQuerySet | null;

  constructor(
    device: GPUDevice,
    private readonly encoder: GPUCommandEncoder,
    private readonly label: string,
    profile: boolean,
  ) {
    this.querySet = profile ? device.createQuerySet({ label: `${label}.timestamps`, type: 'timestamp', count: 2 * MAX_STAGES }) : null;
  }

  /** Encodes one stage (one or more dispatches) under `name`. */
  run(name: string, encode: (pass: GPUComputePassEncoder) => void): void {
    if (!this.querySet) {
      this.shared ??= this.encoder.beginComputePass({ label: `${this.label}.pass` });
      encode(this.shared);
      return;
    }
    const i = this.names.length;
    this.names.push(name);
    const pass = this.encoder.beginComputePass({
      label: `${this.label}.${name}`,
      timestampWrites: { querySet: this.querySet, beginningOfPassWriteIndex: 2 * i, endOfPassWriteIndex: 2 * i + 1 },
    });
    encode(pass);
    pass.end();
  }

  /** Ends the shared pass; with timestamps, resolves them into a buffer to read back (8 bytes each). */
  end(scratch: CallScratch): { buffer: GPUBuffer; bytes: number } | null {
    this.shared?.end();
    this.shared = null;
    if (!this.querySet || this.names.length === 0) return null;
    const count = 2 * this.names.length;
    const resolved = scratch.buffer(8 * 2 * MAX_STAGES, QUERY_RESOLVE | Usage.COPY_SRC, 'timestamps');
    this.encoder.resolveQuerySet(this.querySet, 0, count, resolved, 0);
    return { buffer: resolved, bytes: 8 * count };
  }

  /** Milliseconds per stage, and `gpu`, from the first beginning to the last end, from the resolved bytes. */
  timings(bytes: ArrayBufferLike): Record<string, number> {
    const t = new BigUint64Array(bytes as ArrayBuffer, 0, 2 * this.names.length);
    const ms = (a: bigint, b: bigint) => Number(b - a) / 1e6;
    const out: Record<string, number> = {};
    this.names.forEach((name, i) => {
      out[name] = ms(t[2 * i], t[2 * i + 1]);
    });
    out.gpu = ms(t[0], t[2 * this.names.length - 1]);
    return out;
  }

  /** Destroys the query set once the queue has finished the work that writes it. */
  destroyAfter(queue: GPUQueue): void {
    const set = this.querySet;
    if (set) void queue.onSubmittedWorkDone().then(() => set.destroy());
  }
}
