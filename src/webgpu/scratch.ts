// The scratch buffers of one forward call: taken from the engine's pool, all given back at once
// when the call's readback is done, so concurrent calls never share one; destroyed when it failed.

import { type BufferPool, type Precision, Usage, writeTensor } from './buffers.ts';
import { toF16 } from '../util/f16.ts';

export class CallScratch {
  private readonly taken: GPUBuffer[] = [];

  constructor(private readonly pool: BufferPool) {}

  get device(): GPUDevice {
    return this.pool.device;
  }

  get precision(): Precision {
    return this.pool.precision;
  }

  /** Bytes of one stored tensor element (4, or 2 with precision f16). */
  get elementBytes(): number {
    return this.pool.elementBytes;
  }

  /** A storage buffer holding the tensor `data` at the engine's precision. */
  tensor(data: Float32Array, role: string): GPUBuffer {
    const stored = this.precision === 'f16' ? toF16(data) : data;
    const buffer = this.storage(stored.byteLength, role);
    writeTensor(this.device, buffer, 0, stored);
    return buffer;
  }

  /** Writes the tensor `data` into `buffer` at element `offset`, at the engine's precision. */
  writeTensorAt(buffer: GPUBuffer, offset: number, data: Float32Array): void {
    writeTensor(this.device, buffer, offset * this.elementBytes, this.precision === 'f16' ? toF16(data) : data);
  }

  /** A storage buffer of at least `bytes`. */
  storage(bytes: number, role: string): GPUBuffer {
    return this.take(this.pool.acquire(bytes, Usage.STORAGE | Usage.COPY_DST | Usage.COPY_SRC, role));
  }

  /** A uniform buffer holding `data`. */
  uniforms(data: ArrayBuffer, role: string): GPUBuffer {
    const buffer = this.take(this.pool.acquire(data.byteLength, Usage.UNIFORM | Usage.COPY_DST, role));
    this.device.queue.writeBuffer(buffer, 0, data);
    return buffer;
  }

  /** A scratch buffer of any usage. */
  buffer(bytes: number, usage: number, role: string): GPUBuffer {
    return this.take(this.pool.acquire(bytes, usage, role));
  }

  /** A buffer to copy results into and map for reading. */
  readback(bytes: number, role: string): GPUBuffer {
    return this.take(this.pool.acquire(bytes, Usage.MAP_READ | Usage.COPY_DST, role));
  }

  releaseAll(): void {
    for (const b of this.taken.splice(0)) this.pool.release(b);
  }

  /**
   * Destroys every buffer taken, for a call that failed: one may be invalid (made when memory ran out)
   * or hold half a result, so none goes back for reuse.
   */
  destroyAll(): void {
    for (const b of this.taken.splice(0)) this.pool.destroy(b);
  }

  private take(buffer: GPUBuffer): GPUBuffer {
    this.taken.push(buffer);
    return buffer;
  }
}
