// A minimal .safetensors writer for tests: F32 tensors back to back, the header padded with spaces to
// a multiple of 8 bytes, as safetensors' own writer does.

/** The bytes of a .safetensors file holding `tensors` (F32), in the given order. */
export function writeSafetensors(tensors: Record<string, { shape: number[]; data: Float32Array }>): Uint8Array {
  const header: Record<string, unknown> = {};
  let offset = 0;
  for (const [name, { shape, data }] of Object.entries(tensors)) {
    header[name] = { dtype: 'F32', shape, data_offsets: [offset, offset + data.byteLength] };
    offset += data.byteLength;
  }
  const text = new TextEncoder().encode(JSON.stringify(header));
  const pad = (8 - (text.length % 8)) % 8;
  const out = new Uint8Array(8 + text.length + pad + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(text.length + pad), true);
  out.set(text, 8);
  out.fill(0x20, 8 + text.length, 8 + text.length + pad);
  let at = 8 + text.length + pad;
  for (const { data } of Object.values(tensors)) {
    out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), at);
    at += data.byteLength;
  }
  return out;
}
