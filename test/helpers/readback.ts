// A GPU buffer filled from, or read back to, the host, for tests and scripts that check what a kernel or the engine
// left in a buffer they own (GPU-resident outputs, returnBuffer). The engine's own readbacks are its
// business (src/webgpu); this is the caller's side: copy into a staging buffer, map, copy out.

// Spec values of GPUBufferUsage.MAP_READ, .COPY_DST and GPUMapMode.READ: the globals exist only where
// WebGPU was installed as globals (a browser; a Node script that copies Dawn's), the values everywhere.
const MAP_READ = 0x1;
const COPY_DST = 0x8;
const READ = 0x1;

/** The first `bytes` bytes of `source` (which needs COPY_SRC usage), as a fresh ArrayBuffer. */
export async function readBuffer(device: GPUDevice, source: GPUBuffer, bytes: number, label = 'readBuffer.staging'): Promise<ArrayBuffer> {
  const size = Math.ceil(bytes / 4) * 4; // copyBufferToBuffer moves whole 4-byte words
  const staging = device.createBuffer({ label, size, usage: MAP_READ | COPY_DST });
  try {
    const encoder = device.createCommandEncoder({ label });
    encoder.copyBufferToBuffer(source, 0, staging, 0, size);
    device.queue.submit([encoder.finish()]);
    await staging.mapAsync(READ);
    return staging.getMappedRange().slice(0, bytes);
  } finally {
    staging.destroy();
  }
}

const STORAGE = 0x80;

/** A STORAGE buffer holding `data` (padded with zeros to whole 4-byte words, at least 16 bytes). */
export function uploadBuffer(device: GPUDevice, data: Float32Array | Uint16Array): GPUBuffer {
  const bytes = new Uint8Array(Math.max(16, Math.ceil(data.byteLength / 4) * 4));
  bytes.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  const b = device.createBuffer({ size: bytes.byteLength, usage: STORAGE | COPY_DST });
  device.queue.writeBuffer(b, 0, bytes);
  return b;
}
