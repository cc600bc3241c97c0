// A llama-architecture GGUF that llama.cpp loads and runs, for scripts/bench-llama.ts: `layers` blocks of
// attention (E, H, G heads of E/H) with random weights of one type (Q4_0 or F32) for the four projections
// and a tiny FFN (n_ff 32, same type) that llama.cpp needs, RMSNorm weights of 1, a tiny vocabulary
// (a SentencePiece-style "llama" tokenizer: <unk> <s> </s> and the 256 byte tokens) whose embedding is F32
// and is reused as the output head (no output.weight: llama.cpp ties them). Seeded per block, so the
// first block of an 8-layer file and of a 1-layer file hold the same bytes.

import { GGML, type GgufWriterTensor, type GgufWriterValue, f32Bytes, randomBlocks, writeGguf } from '../test/helpers/gguf-writer.ts';
import { mulberry32, uniform } from '../test/helpers/random.ts';

export interface LlamaGgufOptions {
  layers: number;
  /** The projections' and the FFN's type. */
  type: 'q4_0' | 'f32';
  embed?: number;
  heads?: number;
  kvHeads?: number;
  /** n_ff (a multiple of 32 for Q4_0). */
  ffn?: number;
  /** llama.context_length. */
  context?: number;
}

/** The vocabulary's size: <unk>, <s>, </s>, then <0x00> … <0xFF>. */
export const LLAMA_GGUF_VOCAB = 3 + 256;

/** The bytes of the GGUF file. */
export function llamaGguf(options: LlamaGgufOptions): Uint8Array<ArrayBuffer> {
  const { layers, type, embed: E = 2048, heads: H = 16, kvHeads: G = 4, ffn = 32, context = 4096 } = options;
  const Dh = E / H;
  const V = LLAMA_GGUF_VOCAB;
  const u32 = (value: number): GgufWriterValue => ({ type: 'u32', value });
  const f32 = (value: number): GgufWriterValue => ({ type: 'f32', value });
  const tokens = ['<unk>', '<s>', '</s>', ...Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`)];
  const metadata: Record<string, GgufWriterValue> = {
    'general.architecture': { type: 'string', value: 'llama' },
    'general.name': { type: 'string', value: `bench-llama-${type}-${layers}l` },
    'general.file_type': u32(type === 'q4_0' ? 2 : 0),
    'llama.block_count': u32(layers),
    'llama.context_length': u32(context),
    'llama.embedding_length': u32(E),
    'llama.feed_forward_length': u32(ffn),
    'llama.attention.head_count': u32(H),
    'llama.attention.head_count_kv': u32(G),
    'llama.rope.dimension_count': u32(Dh),
    'llama.rope.freq_base': f32(10000),
    'llama.attention.layer_norm_rms_epsilon': f32(1e-5),
    'llama.vocab_size': u32(V),
    'tokenizer.ggml.model': { type: 'string', value: 'llama' },
    'tokenizer.ggml.tokens': { type: 'array', itemType: 'string', value: tokens },
    'tokenizer.ggml.scores': { type: 'array', itemType: 'f32', value: tokens.map(() => 0) },
    // 2 unknown, 3 control, 6 byte
    'tokenizer.ggml.token_type': { type: 'array', itemType: 'i32', value: tokens.map((_, i) => (i === 0 ? 2 : i < 3 ? 3 : 6)) },
    'tokenizer.ggml.unknown_token_id': u32(0),
    'tokenizer.ggml.bos_token_id': u32(1),
    'tokenizer.ggml.eos_token_id': u32(2),
    'tokenizer.ggml.add_bos_token': { type: 'bool', value: false },
  };
  const ones = (n: number) => f32Bytes(new Float32Array(n).fill(1));
  /** A row-major [rows, K] weight: ggml dims [K, rows]. */
  const weight = (name: string, rows: number, K: number, rng: () => number): GgufWriterTensor =>
    type === 'q4_0'
      ? { name, dims: [K, rows], type: GGML.Q4_0, data: randomBlocks('Q4_0', rows, K, rng) }
      : { name, dims: [K, rows], type: GGML.F32, data: f32Bytes(uniform(rows * K, 1 / Math.sqrt(K), rng)) };
  const tensors: GgufWriterTensor[] = [
    { name: 'token_embd.weight', dims: [E, V], type: GGML.F32, data: f32Bytes(uniform(V * E, 1, mulberry32(1))) },
    { name: 'output_norm.weight', dims: [E], type: GGML.F32, data: ones(E) },
  ];
  for (let l = 0; l < layers; l++) {
    const rng = mulberry32(1000 + l);
    const b = (s: string) => `blk.${l}.${s}`;
    tensors.push(
      { name: b('attn_norm.weight'), dims: [E], type: GGML.F32, data: ones(E) },
      weight(b('attn_q.weight'), H * Dh, E, rng),
      weight(b('attn_k.weight'), G * Dh, E, rng),
      weight(b('attn_v.weight'), G * Dh, E, rng),
      weight(b('attn_output.weight'), E, H * Dh, rng),
      { name: b('ffn_norm.weight'), dims: [E], type: GGML.F32, data: ones(E) },
      weight(b('ffn_gate.weight'), ffn, E, rng),
      weight(b('ffn_up.weight'), ffn, E, rng),
      weight(b('ffn_down.weight'), E, ffn, rng),
    );
  }
  return writeGguf({ metadata, tensors });
}
