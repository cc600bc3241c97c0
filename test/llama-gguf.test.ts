// scripts/llama-gguf.ts, the llama-architecture GGUF that scripts/bench-llama.ts writes for llama.cpp
// (nothing here needs node-llama-cpp or wllama): what @huggingface/gguf reads back from it (the
// metadata llama.cpp's loader asks for, the tensors' types and shapes, a tokenizer), the engine's loader
// taking each block's attention layer from it (E, H, G, Q4_0 blocks, llama's rope), and the first block
// of an 8-layer and a 1-layer file holding the same bytes (what cancels in the per-layer figure).

import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gguf as hfGguf } from '@huggingface/gguf';
import { describe, expect, test } from 'vitest';
import { attentionLayerFromGguf, parseGguf } from '../src/index.ts';
import { LLAMA_GGUF_VOCAB, llamaGguf } from '../scripts/llama-gguf.ts';

// Small: E 256, H 2, G 1 (head 128, as the benchmark's), n_ff 32.
const SHAPE = { embed: 256, heads: 2, kvHeads: 1 } as const;

describe('scripts/llama-gguf.ts', () => {
  test('@huggingface/gguf reads the llama metadata, a tokenizer and the tensors llama.cpp needs', async () => {
    const bytes = llamaGguf({ layers: 2, type: 'q4_0', ...SHAPE });
    const path = join(mkdtempSync(join(tmpdir(), 'llama-gguf-')), 'm.gguf');
    writeFileSync(path, bytes);
    const { metadata, tensorInfos } = await hfGguf(path, { allowLocalFile: true });
    const m = metadata as unknown as Record<string, unknown>;
    expect(m['general.architecture']).toBe('llama');
    expect(m['llama.block_count']).toBe(2);
    expect(m['llama.embedding_length']).toBe(256);
    expect(m['llama.attention.head_count']).toBe(2);
    expect(m['llama.attention.head_count_kv']).toBe(1);
    expect(m['llama.rope.dimension_count']).toBe(128);
    expect(m['llama.feed_forward_length']).toBe(32);
    expect(m['tokenizer.ggml.model']).toBe('llama');
    expect((m['tokenizer.ggml.tokens'] as string[]).length).toBe(LLAMA_GGUF_VOCAB);
    expect((m['tokenizer.ggml.tokens'] as string[])[3 + 0x0a]).toBe('<0x0A>');
    const byName = new Map(tensorInfos.map((t) => [t.name, t]));
    expect(byName.size).toBe(2 + 2 * 9);
    expect(byName.has('output.weight')).toBe(false); // tied to token_embd.weight
    expect(byName.get('token_embd.weight')?.shape).toEqual([256n, BigInt(LLAMA_GGUF_VOCAB)]);
    const q4 = 2; // GGML_TYPE_Q4_0
    expect(byName.get('blk.1.attn_q.weight')).toMatchObject({ shape: [256n, 256n], dtype: q4 });
    expect(byName.get('blk.1.attn_k.weight')).toMatchObject({ shape: [256n, 128n], dtype: q4 });
    expect(byName.get('blk.1.attn_v.weight')).toMatchObject({ shape: [256n, 128n], dtype: q4 });
    expect(byName.get('blk.1.attn_output.weight')).toMatchObject({ shape: [256n, 256n], dtype: q4 });
    expect(byName.get('blk.1.ffn_down.weight')).toMatchObject({ shape: [32n, 256n], dtype: q4 });
    expect(byName.get('blk.1.ffn_norm.weight')).toMatchObject({ shape: [256n], dtype: 0 });
  });

  test("the engine's loader takes each block's attention layer: E, H, G, Q4_0 or float weights, llama's rope", async () => {
    for (const type of ['q4_0', 'f32'] as const) {
      const file = parseGguf(llamaGguf({ layers: 2, type, ...SHAPE }));
      for (const l of [0, 1]) {
        const layer = await attentionLayerFromGguf(file, { layer: l });
        expect(layer.architecture).toBe('llama');
        expect(layer.config).toMatchObject({ embedDim: 256, numHeads: 2, numKvHeads: 1 });
        expect(layer.config.rotary).toMatchObject({ interleaved: true });
        const w = layer.stateDict['out_proj.weight'];
        if (type === 'q4_0') expect(w).toMatchObject({ dtype: 'q4_0', shape: [256, 256] });
        else {
          expect(w).toBeInstanceOf(Float32Array);
          expect((w as Float32Array).every(Number.isFinite)).toBe(true);
        }
      }
    }
  });

  test('the first block of an 8-layer and of a 1-layer file holds the same bytes; the blocks differ', async () => {
    const many = parseGguf(llamaGguf({ layers: 8, type: 'q4_0', ...SHAPE }));
    const one = parseGguf(llamaGguf({ layers: 1, type: 'q4_0', ...SHAPE }));
    expect(one.tensors.size).toBe(2 + 9);
    for (const name of ['blk.0.attn_q.weight', 'blk.0.attn_output.weight', 'blk.0.ffn_down.weight', 'token_embd.weight'])
      expect(await many.tensor(name)).toEqual(await one.tensor(name));
    expect(await many.tensor('blk.1.attn_q.weight')).not.toEqual(await many.tensor('blk.0.attn_q.weight'));
  });
});
