// GPU memory of one engine: uploads, pooled scratch buffers, readback, and byte accounting.
//
// Scratch buffers are rounded up to a size class (4 per octave) and go back to a free list when a call
// is done with them, so repeated calls of one shape allocate nothing, and concurrent calls never share
// a buffer. Every buffer the engine creates is counted, so `stats()` is exact.

// Spec values of GPUBufferUsage / GPUMapMode, so this module works before any WebGPU global exists (Node).
export const Usage = {
  MAP_READ: 0x0001,
  COPY_SRC: 0x0004,
  COPY_DST: 0x0008,
  UNIFORM: 0x0040,
  STORAGE: 0x0080,
} as const;
export const MAP_MODE_READ = 0x0001;

/** Rounds up to one of four sizes per power of two (≤ 25 % waste), at least 256 bytes. */
export function sizeClass(bytes: number): number {
  const b = Math.max(256, bytes);
  const octave = 2 ** Math.floor(Math.log2(b));
  const step = Math.max(octave / 4, 4);
  return Math.ceil(b / step) * step;
}

export class BufferPool {
  private readonly free = new Map<string, GPUBuffer[]>();
  private readonly live = new Set<GPUBuffer>();
  private liveBytes = 0;

  constructor(
    readonly device: GPUDevice,
    private readonly label: string,
  ) {}

  /** A buffer holding `data`, owned by the caller until `destroy(buffer)`. Weights go here. */
  upload(data: Float32Array, usage: number, label: string): GPUBuffer {
    const buffer = this.create(Math.max(16, data.byteLength), usage | Usage.COPY_DST, label);
    this.device.queue.writeBuffer(buffer, 0, data.buffer, data.byteOffset, data.byteLength);
    return buffer;
  }

  /** A scratch buffer of at least `bytes`, from the free list when one fits; give it back with `release`. */
  acquire(bytes: number, usage: number, role: string): GPUBuffer {
    const size = sizeClass(bytes);
    const key = `${usage}:${size}`;
    const reused = this.free.get(key)?.pop();
    return reused ?? this.create(size, usage, `${this.label}.${role}`);
  }

  release(buffer: GPUBuffer): void {
    if (!this.live.has(buffer)) return;
    const key = `${buffer.usage}:${buffer.size}`;
    let list = this.free.get(key);
    if (!list) this.free.set(key, (list = []));
    list.push(buffer);
  }

  destroy(buffer: GPUBuffer): void {
    if (!this.live.delete(buffer)) return;
    this.liveBytes -= buffer.size;
    buffer.destroy();
  }

  /** Destroys the free scratch buffers (buffers in use and uploads stay). */
  trim(): void {
    for (const list of this.free.values()) for (const b of list) this.destroy(b);
    this.free.clear();
  }

  destroyAll(): void {
    for (const b of [...this.live]) this.destroy(b);
    this.free.clear();
  }

  stats(): { buffers: number; bytes: number } {
    return { buffers: this.live.size, bytes: this.liveBytes };
  }

  private create(size: number, usage: number, label: string): GPUBuffer {
    const buffer = this.device.createBuffer({ label, size, usage });
    this.live.add(buffer);
    this.liveBytes += size;
    return buffer;
  }
}

/** Packs a uniform struct of 32-bit scalars (u32, i32 or f32 by field) into 16-byte-aligned bytes. */
export function packUniforms(fields: readonly (readonly [kind: 'u32' | 'i32' | 'f32', value: number])[]): ArrayBuffer {
  const bytes = new ArrayBuffer(Math.ceil((fields.length * 4) / 16) * 16);
  const view = new DataView(bytes);
  fields.forEach(([kind, value], i) => {
    if (kind === 'f32') view.setFloat32(i * 4, value, true);
    else if (kind === 'i32') view.setInt32(i * 4, value, true);
    else view.setUint32(i * 4, value, true);
  });
  return bytes;
}
