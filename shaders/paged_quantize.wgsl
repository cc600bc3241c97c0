// A paged call's new K and V rows quantized into a 'q8_0' or 'q4_0' pool (src/webgpu/paged-kv-cache.ts)
// by ggml's rule, bit for bit: kv_quantize_block.wgsl's quantizeBlock (the plain cache's code), each
// row to its own pool row (the paged_write.wgsl row table).
//
//   src   K [G, T, Dh/4] from kBase4, V [G, T, Dh/4] from vBase4 (vec4s of the storage type)
//   dst   the pool: quants (kv_q8_0.wgsl / kv_q4_0.wgsl: the vec4 of values i of K ++ V [maxBlocks, G,
//         blockSize, Dh/4] in word i or half of word i/2), then from word `scales` block k's f16 d in
//         half k % 2 of word scales + k/2
//   dest  [T] pool rows of head 0 (head g's is blockSize·g further; V's rows poolRows further)
//
// A scale word holds two blocks' scales, which may be of rows of different sequences (Dh/32 odd): a
// dispatch quantizes only the blocks of one parity (`parity`), so no two invocations of it write one
// word; the host dispatches it twice (parity 0, then 1). One invocation per (K or V, head, token, block
// of the row). Host guarantees: prepends kv_rounding.wgsl, kv_quantize_block.wgsl, `const DH4`, `const
// Q4`; dispatch = (min(groups, 65535), ceil(groups / 65535), 1), groups = ceil(2·G·T·Dh/32 / 64).

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u, @builtin(num_workgroups) groups: vec3u) {
  let i = (wid.y * groups.x + wid.x) * 64u + lid.x;
  let nb = DH4 / 8u;  // blocks a row
  let perHalf = params.G * params.T * nb;
  if (i >= 2u * perHalf) {
    return;
  }
  let half = i / perHalf;  // 0: K, 1: V
  let r = i % perHalf;
  let g = r / (params.T * nb);
  let t = (r / nb) % params.T;
  let k = r % nb;
  let row = half * params.poolRows + dest[t] + g * params.blockSize;
  let block = row * nb + k;
  if ((block & 1u) != params.parity) {
    return;
  }
  let source = select(params.kBase4, params.vBase4, half == 1u) + (g * params.T + t) * DH4 + k * 8u;
  let bits = quantizeBlock(source, block);
  let w = params.scales + block / 2u;
  let shift = (block & 1u) * 16u;
  dst[w] = (dst[w] & ~(0xffffu << shift)) | (bits << shift);
}
