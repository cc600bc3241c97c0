import { toF16 } from '../util/f16.ts';

// GPU memory of one engine: uploads, pooled scratch buffers, readback, and byte accounting.
//
// Scratch buffers are rounded up to a size class (4 per octave) and go back to an idle list when a
// call is done with them, so repeated calls of one shape allocate nothing, and concurrent calls never
// share a buffer. Idle scratch is bounded (MAX_IDLE_SCRATCH_BYTES) and dropped when a layer is
// disposed. Every buffer the engine creates is counted, so `stats()` is exact, and so is the
// high-water mark of bytes held (`peakBytes`), which stays when scratch is released or trimmed.

// Spec values of GPUBufferUsage / GPUMapMode, so this module works before any WebGPU global exists (Node).
export const Usage = {
  MAP_READ: 0x0001,
  COPY_SRC: 0x0004,
  COPY_DST: 0x0008,
  UNIFORM: 0x0040,
  STORAGE: 0x0080,
  QUERY_RESOLVE: 0x0200,
} as const;
export const MAP_MODE_READ = 0x0001;

/** Rounds up to one of four sizes per power of two (≤ 25 % waste), at least 256 bytes. */
export function sizeClass(bytes: number): number {
  const b = Math.max(256, bytes);
  const octave = 2 ** Math.floor(Math.log2(b));
  const step = Math.max(octave / 4, 4);
  return Math.ceil(b / step) * step;
}

/** Idle scratch kept for reuse, at most; the least recently released buffers go first. */
export const MAX_IDLE_SCRATCH_BYTES = 128 * 1024 * 1024;

/** Storage precision of the engine's tensors (weights, activations, KV caches) on the GPU. */
export type Precision = 'f32' | 'f16';

export class BufferPool {
  private readonly idle: GPUBuffer[] = []; // released scratch, oldest first
  private idleBytes = 0;
  private readonly live = new Set<GPUBuffer>();
  private liveBytes = 0;
  private highWater = 0;

  constructor(
    readonly device: GPUDevice,
    private readonly label: string,
    /** Tensors are stored as f32, or as f16 (converted on upload and readback). */
    readonly precision: Precision = 'f32',
  ) {}

  /** Bytes of one stored tensor element. */
  get elementBytes(): number {
    return this.precision === 'f16' ? 2 : 4;
  }

  /** A buffer holding the tensor `data` at the pool's precision, owned by the caller until `destroy(buffer)`. Weights go here. */
  upload(data: Float32Array, usage: number, label: string): GPUBuffer {
    const stored = this.precision === 'f16' ? toF16(data) : data;
    const buffer = this.create(Math.max(16, Math.ceil(stored.byteLength / 4) * 4), usage | Usage.COPY_DST, label);
    writeTensor(this.device, buffer, 0, stored);
    return buffer;
  }

  /** A zero-filled buffer owned by the caller until `destroy(buffer)` (a KV cache). */
  allocate(bytes: number, usage: number, label: string): GPUBuffer {
    return this.create(Math.max(16, bytes), usage, label);
  }

  /** A scratch buffer of at least `bytes`, reused when an idle one has the same usage and size class; give it back with `release`. */
  acquire(bytes: number, usage: number, role: string): GPUBuffer {
    const size = sizeClass(bytes);
    for (let i = this.idle.length - 1; i >= 0; i--) {
      const b = this.idle[i];
      if (b.size === size && b.usage === usage) {
        this.idle.splice(i, 1);
        this.idleBytes -= size;
        return b;
      }
    }
    return this.create(size, usage, `${this.label}.${role}`);
  }

  /** Returns a scratch buffer for reuse; beyond MAX_IDLE_SCRATCH_BYTES of idle ones, the oldest are destroyed. */
  release(buffer: GPUBuffer): void {
    if (!this.live.has(buffer)) return;
    this.idle.push(buffer);
    this.idleBytes += buffer.size;
    while (this.idleBytes > MAX_IDLE_SCRATCH_BYTES) this.destroy(this.idle[0]);
  }

  destroy(buffer: GPUBuffer): void {
    if (!this.live.delete(buffer)) return;
    const i = this.idle.indexOf(buffer);
    if (i >= 0) {
      this.idle.splice(i, 1);
      this.idleBytes -= buffer.size;
    }
    this.liveBytes -= buffer.size;
    buffer.destroy();
  }

  /** Destroys the idle scratch buffers (buffers in use by a call, and uploads, stay). */
  trim(): void {
    for (const b of [...this.idle]) this.destroy(b);
  }

  destroyAll(): void {
    for (const b of [...this.live]) this.destroy(b);
  }

  stats(): { buffers: number; bytes: number } {
    return { buffers: this.live.size, bytes: this.liveBytes };
  }

  /** The most bytes this pool held at once since it was made (weights, scratch in use or idle, staging). */
  get peakBytes(): number {
    return this.highWater;
  }

  private create(size: number, usage: number, label: string): GPUBuffer {
    const buffer = this.device.createBuffer({ label, size, usage });
    this.live.add(buffer);
    this.liveBytes += size;
    if (this.liveBytes > this.highWater) this.highWater = this.liveBytes;
    return buffer;
  }
}

/** Writes `data` (f32 values, or f16 bits) at `offset` bytes; pads an odd f16 count to 4 bytes. */
export function writeTensor(device: GPUDevice, buffer: GPUBuffer, offset: number, data: Float32Array | Uint16Array): void {
  if (data.byteLength % 4 === 0) {
    device.queue.writeBuffer(buffer, offset, data.buffer, data.byteOffset, data.byteLength);
  } else {
    const padded = new Uint16Array(data.length + 1);
    padded.set(data);
    device.queue.writeBuffer(buffer, offset, padded.buffer, 0, padded.byteLength);
  }
}
