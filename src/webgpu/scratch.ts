// The scratch buffers of one forward call: taken from the engine's pool, all given back at once
// when the call's readback is done (or it failed), so concurrent calls never share one.

import { type BufferPool, Usage } from './buffers.ts';

export class CallScratch {
  private readonly taken: GPUBuffer[] = [];

  constructor(private readonly pool: BufferPool) {}

  get device(): GPUDevice {
    return this.pool.device;
  }

  /** A storage buffer of at least `bytes`. */
  storage(bytes: number, role: string, extraUsage = 0): GPUBuffer {
    return this.take(this.pool.acquire(bytes, Usage.STORAGE | Usage.COPY_DST | Usage.COPY_SRC | extraUsage, role));
  }

  /** A uniform buffer holding `data`. */
  uniforms(data: ArrayBuffer, role: string): GPUBuffer {
    const buffer = this.take(this.pool.acquire(data.byteLength, Usage.UNIFORM | Usage.COPY_DST, role));
    this.device.queue.writeBuffer(buffer, 0, data);
    return buffer;
  }

  /** A buffer to copy results into and map for reading. */
  readback(bytes: number, role: string): GPUBuffer {
    return this.take(this.pool.acquire(bytes, Usage.MAP_READ | Usage.COPY_DST, role));
  }

  releaseAll(): void {
    for (const b of this.taken.splice(0)) this.pool.release(b);
  }

  private take(buffer: GPUBuffer): GPUBuffer {
    this.taken.push(buffer);
    return buffer;
  }
}
