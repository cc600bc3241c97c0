// GGUF files (llama.cpp's model format): written by test/helpers/gguf-writer.ts, read back by
// src/weights/gguf.ts (metadata of every value type, tensor tables, exact block bytes of Q4_0, Q8_0,
// Q4_K, Q6_K, F32/F16/BF16 values), cross-checked against @huggingface/gguf's parser on the same
// files; lazy reads from Blobs and Node paths; broken files; one attention layer of llama-, qwen2-,
// qwen3- and phi3-style files as config and state_dict; a float layer run end to end on 'cpu'.

import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { gguf as hfGguf, serializeGgufMetadata } from '@huggingface/gguf';
import { describe, expect, test } from 'vitest';
import {
  InvalidArgumentError,
  MissingWeightError,
  ShapeMismatchError,
  UnsupportedError,
  WeightFileError,
  attentionLayerFromGguf,
  createAttentionEngine,
  ggufModelLayers,
  dequantize,
  loadGguf,
  parseGguf,
  referenceMultiHeadAttention,
} from '../src/index.ts';
import { QK_NORM_KEYS } from '../src/option-keys.ts';
import type { GgufQuantizedTensor } from '../src/quant/types.ts';
import { mulberry32, uniform } from './helpers/random.ts';
import { expectClose, f32Tolerance, maxAbsFinite, outputTolerance } from '../src/util/tolerance.ts';
import type { WeightFileProblem } from '../src/weights/safetensors.ts';
import { GGML, type GgufWriterTensor, type GgufWriterValue, bf16Bytes, f16Bytes, f32Bytes, randomBlocks, writeGguf } from './helpers/gguf-writer.ts';
import { floatToHalfBits, halfToFloat } from '../src/util/f16.ts';

const TMP = mkdtempSync(join(tmpdir(), 'gguf-test-'));
const onDisk = (name: string, bytes: Uint8Array) => {
  const path = join(TMP, name);
  writeFileSync(path, bytes);
  return path;
};

/** Metadata of every value type GGUF has. */
const EVERY_TYPE: Record<string, GgufWriterValue> = {
  'general.architecture': { type: 'string', value: 'llama' },
  'test.u8': { type: 'u8', value: 250 },
  'test.i8': { type: 'i8', value: -120 },
  'test.u16': { type: 'u16', value: 65000 },
  'test.i16': { type: 'i16', value: -32000 },
  'test.u32': { type: 'u32', value: 4_000_000_000 },
  'test.i32': { type: 'i32', value: -2_000_000_000 },
  'test.f32': { type: 'f32', value: 0.25 },
  'test.bool': { type: 'bool', value: true },
  'test.false': { type: 'bool', value: false },
  'test.string': { type: 'string', value: 'héllo, 世界' },
  'test.empty': { type: 'string', value: '' },
  'test.emoji': { type: 'string', value: '🙂 four-byte UTF-8' },
  'test.u64': { type: 'u64', value: 2n ** 63n + 5n },
  'test.i64': { type: 'i64', value: -(2n ** 62n) },
  'test.f64': { type: 'f64', value: Math.PI },
  'test.array_u32': { type: 'array', itemType: 'u32', value: [1, 2, 3] },
  'test.array_f32': { type: 'array', itemType: 'f32', value: [0.5, -1.5] },
  'test.array_string': { type: 'array', itemType: 'string', value: ['<s>', '</s>', 'ab', 'Ġthe', '▁世界', '🙂', ''] },
  'test.array_i64': { type: 'array', itemType: 'i64', value: [-1n, 7n] },
  'test.array_empty': { type: 'array', itemType: 'u8', value: [] },
  'test.array_nested': {
    type: 'array',
    itemType: 'array',
    value: [
      { type: 'array', itemType: 'i8', value: [1, -2] },
      { type: 'array', itemType: 'i8', value: [] },
    ],
  },
};
const EXPECTED_METADATA: Record<string, unknown> = {
  ...Object.fromEntries(Object.entries(EVERY_TYPE).map(([k, v]) => [k, v.value])),
  'test.array_nested': [[1, -2], []],
};

const rng = mulberry32(25);
const floats = (n: number) => Array.from({ length: n }, (_, i) => ((i % 37) - 18) / 8); // exact in f16 and bf16
/** One tensor of each type the reader reads, plus a 3-D F32 one. */
const TENSORS: (GgufWriterTensor & { values?: number[] })[] = [
  { name: 'q4_0', dims: [64, 3], type: GGML.Q4_0, data: randomBlocks('Q4_0', 3, 64, rng) },
  { name: 'q8_0', dims: [96, 2], type: GGML.Q8_0, data: randomBlocks('Q8_0', 2, 96, rng) },
  { name: 'q4_k', dims: [256, 3], type: GGML.Q4_K, data: randomBlocks('Q4_K', 3, 256, rng) },
  { name: 'q6_k', dims: [512, 2], type: GGML.Q6_K, data: randomBlocks('Q6_K', 2, 512, rng) },
  { name: 'f32', dims: [5, 3, 2], type: GGML.F32, data: f32Bytes(floats(30)), values: floats(30) },
  { name: 'f16', dims: [7, 3], type: GGML.F16, data: f16Bytes(floats(21)), values: floats(21) },
  { name: 'bf16', dims: [9], type: GGML.BF16, data: bf16Bytes(floats(9)), values: floats(9) },
];

async function expectFileError(run: () => unknown, problem: WeightFileProblem, ...fragments: string[]) {
  let error: unknown;
  try {
    await run();
  } catch (e) {
    error = e;
  }
  expect(error).toBeInstanceOf(WeightFileError);
  expect((error as WeightFileError).problem).toBe(problem);
  for (const f of fragments) expect((error as Error).message).toContain(f);
  return error as WeightFileError;
}

describe('reading GGUF files', () => {
  for (const [version, alignment] of [
    [3, undefined],
    [3, 64],
    [2, 16],
  ] as const) {
    test(`version ${version}, alignment ${alignment ?? 'default (32)'}: metadata, tensor table, exact bytes and values`, async () => {
      const bytes = writeGguf({ version, alignment, metadata: EVERY_TYPE, tensors: TENSORS });
      const file = parseGguf(bytes);
      expect(file.version).toBe(version);
      expect(file.alignment).toBe(alignment ?? 32);
      expect(file.dataOffset % (alignment ?? 32)).toBe(0);
      const expected = { ...EXPECTED_METADATA, ...(alignment ? { 'general.alignment': alignment } : {}) };
      expect(Object.fromEntries(file.metadata)).toEqual(expected);
      expect(file.metadataTypes.get('test.u64')).toBe('u64');
      expect(file.metadataTypes.get('test.array_string')).toBe('array<string>');
      expect(file.metadataTypes.get('test.array_nested')).toBe('array<array>');
      expect([...file.tensors.keys()]).toEqual(TENSORS.map((t) => t.name));
      for (const t of TENSORS) {
        const info = file.tensors.get(t.name)!;
        expect(info.dims).toEqual(t.dims);
        expect(info.shape).toEqual([...t.dims].reverse());
        expect(info.byteLength).toBe(t.data.length);
        const read = await file.tensor(t.name);
        if (t.values) {
          expect(read).toBeInstanceOf(Float32Array);
          expect(Array.from(read as Float32Array)).toEqual(t.values);
        } else {
          const q = read as GgufQuantizedTensor;
          expect(q.dtype).toBe(t.name);
          expect(q.shape).toEqual([t.dims[1], t.dims[0]]);
          expect(q.data).toEqual(t.data); // the exact block bytes
        }
      }
    });
  }

  test('F16 and BF16 widen exactly: signed zeros, subnormals, infinities, NaN', async () => {
    const halves = new Uint16Array([0x0000, 0x8000, 0x0001, 0x03ff, 0x7bff, 0xfc00, 0x7c00, 0x7e00]);
    const bf = new Uint16Array([0x3f80, 0x8000, 0x0001, 0x7f80, 0xff80, 0x7fc0]);
    const file = parseGguf(
      writeGguf({
        tensors: [
          { name: 'h', dims: [8], type: GGML.F16, data: new Uint8Array(halves.buffer) },
          { name: 'b', dims: [6], type: GGML.BF16, data: new Uint8Array(bf.buffer) },
        ],
      }),
    );
    expect(Array.from((await file.tensor('h')) as Float32Array)).toEqual([0, -0, 2 ** -24, 1023 * 2 ** -24, 65504, -Infinity, Infinity, Number.NaN]);
    const b = (await file.tensor('b')) as Float32Array;
    expect(Array.from(b.subarray(0, 5))).toEqual([1, -0, new Float32Array(new Uint32Array([0x10000]).buffer)[0], Infinity, -Infinity]);
    expect(b[5]).toBeNaN();
  });

  test.each([
    [3, 64],
    [2, 32],
  ] as const)(
    'matches @huggingface/gguf on the same file (version %i, alignment %i): metadata and tensor infos (name, shape, type, offset)',
    async (version, alignment) => {
      const bytes = writeGguf({ version, alignment, metadata: EVERY_TYPE, tensors: TENSORS });
      const path = onDisk(`cross-check-${version}.gguf`, bytes);
      const theirs = await hfGguf(path, { allowLocalFile: true });
      const ours = parseGguf(bytes);
      const { version: theirVersion, tensor_count, kv_count, ...theirMetadata } = theirs.metadata as unknown as Record<string, unknown>;
      expect(theirVersion).toBe(ours.version);
      expect(ours.version).toBe(version);
      expect(tensor_count).toBe(BigInt(ours.tensors.size));
      expect(kv_count).toBe(BigInt(ours.metadata.size));
      expect(theirMetadata).toEqual(Object.fromEntries(ours.metadata));
      expect(theirs.tensorDataOffset).toBe(BigInt(ours.dataOffset));
      expect(theirs.tensorInfos.map((t) => ({ name: t.name, dims: t.shape.map(Number), type: t.dtype, offset: Number(t.offset) }))).toEqual(
        [...ours.tensors.values()].map((t) => ({ name: t.name, dims: t.dims, type: t.type, offset: t.offset })),
      );
    },
  );

  test("reads @huggingface/gguf's own writer's metadata (serializeGgufMetadata) as that parser does", async () => {
    // Its writer takes no nested arrays, nor arrays of u8 (0.4.6 takes item type 0 for a missing one).
    const { 'test.array_nested': _, 'test.array_empty': _e, ...flat } = EVERY_TYPE;
    const { 'test.array_nested': __, 'test.array_empty': __e, ...expected } = EXPECTED_METADATA;
    const path = onDisk('typed.gguf', writeGguf({ metadata: flat }));
    const { typedMetadata } = await hfGguf(path, { allowLocalFile: true, typedMetadata: true });
    const theirBytes = serializeGgufMetadata(typedMetadata);
    const ours = parseGguf(theirBytes);
    expect(Object.fromEntries(ours.metadata)).toEqual(expected);
    expect(ours.tensors.size).toBe(0);
  });

  test('loadGguf: the same file from bytes, a Blob, a Response, a Node path and a file: URL', async () => {
    const bytes = writeGguf({ metadata: EVERY_TYPE, tensors: TENSORS });
    const path = onDisk('sources.gguf', bytes);
    const sources = [bytes, bytes.buffer, new Blob([bytes]), new Response(bytes), path, pathToFileURL(path), pathToFileURL(path).href];
    for (const source of sources) {
      const file = await loadGguf(source);
      expect(Object.fromEntries(file.metadata)).toEqual(EXPECTED_METADATA);
      expect((await file.tensor('q4_k')) as GgufQuantizedTensor).toEqual({ dtype: 'q4_k', shape: [3, 256], data: TENSORS[2].data });
      expect(Array.from((await file.tensor('f16')) as Float32Array)).toEqual(TENSORS[5].values);
    }
  });

  test('loadGguf reads a Blob lazily: the header (in more reads when it is long), then only the tensors asked for', async () => {
    // A header of ~9.6 MB (longer than the first read, 8 MiB) and 8 MiB of F32 after it.
    const big = new Uint8Array(8 << 20);
    const tokens = Array.from({ length: 20_000 }, (_, i) => `${'x'.repeat(480)}${i}`);
    const bytes = writeGguf({
      metadata: { 'tokenizer.ggml.tokens': { type: 'array', itemType: 'string', value: tokens } },
      tensors: [
        { name: 'big', dims: [big.length / 4], type: GGML.F32, data: big },
        { name: 'small', dims: [64, 1], type: GGML.Q8_0, data: randomBlocks('Q8_0', 1, 64, rng) },
      ],
    });
    const reads: [number, number][] = [];
    class CountingBlob extends Blob {
      override slice(start?: number, end?: number, type?: string) {
        reads.push([start ?? 0, end ?? this.size]);
        return super.slice(start, end, type);
      }
    }
    const file = await loadGguf(new CountingBlob([bytes]));
    expect(file.dataOffset).toBeGreaterThan(8 << 20);
    expect((file.metadata.get('tokenizer.ggml.tokens') as string[])[19_999]).toBe(tokens[19_999]);
    expect(reads.length).toBe(2); // the first 8 MiB, then enough for the header
    expect(reads[1][1]).toBeLessThan(file.dataOffset + file.tensors.get('big')!.offset + big.length);
    reads.length = 0;
    const small = (await file.tensor('small')) as GgufQuantizedTensor;
    expect(small.data.length).toBe(34 * 2);
    const at = file.dataOffset + file.tensors.get('small')!.offset;
    expect(reads).toEqual([[at, at + 68]]);
  });
});

describe('broken GGUF files', () => {
  const good = writeGguf({ metadata: EVERY_TYPE, tensors: TENSORS });

  test('cut short: in the header and in the tensor data', async () => {
    await expectFileError(() => parseGguf(good.subarray(0, 2)), 'truncated');
    await expectFileError(() => parseGguf(good.subarray(0, 100)), 'truncated', 'metadata');
    await expectFileError(() => parseGguf(good.subarray(0, 20)), 'truncated', 'counts');
    const strings = writeGguf({ metadata: { 'tokenizer.chat_template': { type: 'string', value: 'x'.repeat(5000) } } });
    await expectFileError(() => parseGguf(strings.subarray(0, 1000)), 'truncated', 'tokenizer.chat_template'); // inside a long string
    const file = parseGguf(good);
    await expectFileError(() => parseGguf(good.subarray(0, file.dataOffset + 10)), 'truncated', 'q4_0', 'consistent');
    await expectFileError(() => loadGguf(new Blob([good.subarray(0, 100)])), 'truncated');
    await expectFileError(() => loadGguf(onDisk('cut.gguf', good.subarray(0, good.length - 40))), 'truncated');
  });

  test('not GGUF: bad magic, a safetensors file, text, version 1, big-endian', async () => {
    const bad = good.slice();
    bad.set([0x47, 0x47, 0x4d, 0x4c]);
    await expectFileError(() => parseGguf(bad), 'header', 'magic', '"GGUF"', 'GGML');
    await expectFileError(() => parseGguf(new TextEncoder().encode('<!DOCTYPE html><html>')), 'header', 'text');
    const v1 = good.slice();
    new DataView(v1.buffer).setUint32(4, 1, true);
    await expectFileError(() => parseGguf(v1), 'header', 'version', 'version 1');
    const be = good.slice();
    new DataView(be.buffer).setUint32(4, 3, false);
    await expectFileError(() => parseGguf(be), 'header', 'big-endian');
  });

  test('tensor offsets outside the file or off the alignment', async () => {
    const tensors = TENSORS.slice(0, 2);
    await expectFileError(() => parseGguf(writeGguf({ tensors, offsets: [0, 1 << 16] })), 'offsets', 'q8_0');
    await expectFileError(() => parseGguf(writeGguf({ tensors, offsets: [0, 8] })), 'offsets', 'alignment');
  });

  test('a ggml type the engine does not read is refused by name when read (the file still parses)', async () => {
    const file = parseGguf(
      writeGguf({
        tensors: [
          { name: 'blk.0.attn_q.weight', dims: [256, 1], type: GGML.Q5_K, data: new Uint8Array(176) },
          { name: 'iq', dims: [256], type: GGML.IQ4_XS, data: new Uint8Array(136) },
          { name: 'ok', dims: [32, 1], type: GGML.Q4_0, data: new Uint8Array(18) },
        ],
      }),
    );
    const e = await expectFileError(() => file.tensor('blk.0.attn_q.weight'), 'dtype', 'Q5_K', 'blk.0.attn_q.weight');
    expect(e.tensor).toBe('blk.0.attn_q.weight');
    await expectFileError(() => file.tensor('iq'), 'dtype', 'IQ4_XS');
    await expect(file.tensor('nope')).rejects.toThrow(MissingWeightError);
    expect(((await file.tensor('ok')) as GgufQuantizedTensor).dtype).toBe('q4_0');
  });

  test('ne[0] not a multiple of the block size', async () => {
    await expectFileError(
      () => parseGguf(writeGguf({ tensors: [{ name: 'w', dims: [48, 2], type: GGML.Q4_K, data: new Uint8Array(144) }] })),
      'header',
      'multiple of 256',
    );
  });
});

/** An attention block's metadata and tensors, as llama.cpp's converter writes them. */
function modelFile(o: {
  arch: string;
  E: number;
  H: number;
  G?: number;
  /** Head size (default E/H; write attention.key_length for another). */
  Dh?: number;
  blocks?: number;
  layer?: number;
  type?: (which: string) => 'F32' | 'F16' | 'Q4_0' | 'Q8_0' | 'Q4_K' | 'Q6_K';
  fused?: boolean;
  qkvBias?: boolean;
  outBias?: boolean;
  qkNorm?: boolean;
  /** Weights of each QK-norm (default Dh). */
  normSize?: number;
  extra?: Record<string, GgufWriterValue>;
  shapes?: Record<string, number[]>;
}) {
  const { arch, E, H, G = H, blocks = 2, layer = 1 } = o;
  const Dh = o.Dh ?? E / H;
  const r = mulberry32(E + H + G);
  const tensors: (GgufWriterTensor & { values?: Float32Array })[] = [];
  const weight = (name: string, N: number, K: number) => {
    const type = o.type?.(name) ?? 'F32';
    const [n, k] = o.shapes?.[name] ?? [N, K];
    if (type === 'F32' || type === 'F16') {
      const values = uniform(n * k, 0.3, r);
      tensors.push({ name, dims: [k, n], type: GGML[type], data: type === 'F32' ? f32Bytes(values) : f16Bytes(values), values });
    } else tensors.push({ name, dims: [k, n], type: GGML[type], data: randomBlocks(type, n, k, r) });
  };
  const vector = (name: string, n: number) => {
    const values = uniform(n, 0.5, r);
    tensors.push({ name, dims: [n], type: GGML.F32, data: f32Bytes(values), values });
  };
  const b = `blk.${layer}.`;
  if (o.fused) weight(`${b}attn_qkv.weight`, (H + 2 * G) * Dh, E);
  else {
    weight(`${b}attn_q.weight`, H * Dh, E);
    weight(`${b}attn_k.weight`, G * Dh, E);
    weight(`${b}attn_v.weight`, G * Dh, E);
  }
  if (o.qkvBias && o.fused) vector(`${b}attn_qkv.bias`, (H + 2 * G) * Dh);
  if (o.qkvBias && !o.fused)
    for (const [n, rows] of [
      ['q', H * Dh],
      ['k', G * Dh],
      ['v', G * Dh],
    ] as const)
      vector(`${b}attn_${n}.bias`, rows);
  weight(`${b}attn_output.weight`, E, H * Dh);
  if (o.outBias) vector(`${b}attn_output.bias`, E);
  if (o.qkNorm) {
    vector(`${b}attn_q_norm.weight`, o.normSize ?? Dh);
    vector(`${b}attn_k_norm.weight`, o.normSize ?? Dh);
  }
  const metadata: Record<string, GgufWriterValue> = {
    'general.architecture': { type: 'string', value: arch },
    [`${arch}.block_count`]: { type: 'u32', value: blocks },
    [`${arch}.embedding_length`]: { type: 'u32', value: E },
    [`${arch}.attention.head_count`]: { type: 'u32', value: H },
    [`${arch}.attention.head_count_kv`]: { type: 'u32', value: G },
    [`${arch}.rope.freq_base`]: { type: 'f32', value: 500000 },
    [`${arch}.attention.layer_norm_rms_epsilon`]: { type: 'f32', value: 2 ** -20 },
    ...o.extra,
  };
  const bytes = writeGguf({ metadata, tensors });
  return { bytes, tensor: (name: string) => tensors.find((t) => t.name === `${b}${name}`)! };
}

describe('attentionLayerFromGguf', () => {
  test('llama-style (Q4_K with a Q6_K V, as Q4_K_M; GQA): separate projections, adjacent-pair rotary', async () => {
    const m = modelFile({ arch: 'llama', E: 256, H: 4, G: 2, type: (n) => (n.includes('attn_v') ? 'Q6_K' : 'Q4_K') });
    const { config, stateDict, architecture, forward } = await attentionLayerFromGguf(m.bytes, { layer: 1 });
    expect(architecture).toBe('llama');
    expect(forward).toEqual({ isCausal: true });
    expect(config).toEqual({ embedDim: 256, numHeads: 4, numKvHeads: 2, bias: false, rotary: { dim: 64, base: 500000, interleaved: true } });
    expect(Object.keys(stateDict).sort()).toEqual(['k_proj_weight', 'out_proj.weight', 'q_proj_weight', 'v_proj_weight']);
    expect(stateDict.q_proj_weight).toEqual({ dtype: 'q4_k', shape: [256, 256], data: m.tensor('attn_q.weight').data });
    expect(stateDict.k_proj_weight).toEqual({ dtype: 'q4_k', shape: [128, 256], data: m.tensor('attn_k.weight').data });
    expect(stateDict.v_proj_weight).toEqual({ dtype: 'q6_k', shape: [128, 256], data: m.tensor('attn_v.weight').data });
    expect((stateDict['out_proj.weight'] as GgufQuantizedTensor).dtype).toBe('q4_k');
  });

  test('qwen2-style: q/k/v biases concatenated, a zero output bias, half rotary; Q8_0 and Q4_0', async () => {
    const m = modelFile({ arch: 'qwen2', E: 128, H: 4, G: 2, qkvBias: true, type: (n) => (n.includes('output') ? 'Q4_0' : 'Q8_0') });
    const { config, stateDict } = await attentionLayerFromGguf(parseGguf(m.bytes), { layer: 1 });
    expect(config).toMatchObject({ embedDim: 128, numHeads: 4, numKvHeads: 2, bias: true, rotary: { dim: 32, base: 500000, interleaved: false } });
    const bias = [...m.tensor('attn_q.bias').values!, ...m.tensor('attn_k.bias').values!, ...m.tensor('attn_v.bias').values!];
    expect(Array.from(stateDict.in_proj_bias as Float32Array)).toEqual(bias);
    expect(stateDict['out_proj.bias']).toEqual(new Float32Array(128));
    expect((stateDict.q_proj_weight as GgufQuantizedTensor).dtype).toBe('q8_0');
    expect((stateDict['out_proj.weight'] as GgufQuantizedTensor).dtype).toBe('q4_0');
  });

  test('qwen3-style: QK-norm weights and eps; key_length matching E/H is fine', async () => {
    const m = modelFile({ arch: 'qwen3', E: 256, H: 4, qkNorm: true, extra: { 'qwen3.attention.key_length': { type: 'u32', value: 64 } } });
    const { config } = await attentionLayerFromGguf(m.bytes, { layer: 1 });
    expect(config.numKvHeads).toBeUndefined();
    expect(config.rotary).toEqual({ dim: 64, base: 500000, interleaved: false });
    expect(config.qkNorm).toEqual({ query: m.tensor('attn_q_norm.weight').values, key: m.tensor('attn_k_norm.weight').values, eps: 2 ** -20 });
  });

  test('fused attn_qkv (phi3-style, F16) with biases and a partial rotary dimension', async () => {
    const m = modelFile({
      arch: 'phi3',
      E: 96,
      H: 3,
      G: 1,
      fused: true,
      qkvBias: true,
      outBias: true,
      type: () => 'F16',
      extra: { 'phi3.rope.dimension_count': { type: 'u32', value: 16 } },
    });
    const { config, stateDict } = await attentionLayerFromGguf(m.bytes, { layer: 1 });
    expect(config).toEqual({ embedDim: 96, numHeads: 3, numKvHeads: 1, bias: true, rotary: { dim: 16, base: 500000, interleaved: false } });
    expect(Object.keys(stateDict).sort()).toEqual(['in_proj_bias', 'in_proj_weight', 'out_proj.bias', 'out_proj.weight']);
    // F16 values widened: the writer's values rounded to half.
    expect(stateDict.in_proj_weight).toEqual(Float32Array.from(m.tensor('attn_qkv.weight').values!, (v) => halfToFloat(floatToHalfBits(v))));
    expect((stateDict.in_proj_weight as Float32Array).length).toBe(160 * 96);
    expect(stateDict.in_proj_bias).toEqual(m.tensor('attn_qkv.bias').values);
    expect(stateDict['out_proj.bias']).toEqual(m.tensor('attn_output.bias').values);
  });

  test('per-layer head counts (arrays, as OpenELM has) are read at the layer', async () => {
    const m = modelFile({
      arch: 'openelm',
      E: 64,
      H: 4,
      G: 2,
      extra: {
        'openelm.attention.head_count': { type: 'array', itemType: 'u32', value: [8, 4] },
        'openelm.attention.head_count_kv': { type: 'array', itemType: 'u32', value: [8, 2] },
      },
    });
    const { config } = await attentionLayerFromGguf(m.bytes, { layer: 1 });
    expect(config).toMatchObject({ numHeads: 4, numKvHeads: 2, rotary: { dim: 16, interleaved: false } });
  });

  test('rope scaling: rope_freqs.weight (Llama 3.1) gives inverse frequencies θ_i / freq_i (no table, any position)', async () => {
    const half = 8;
    const factors = Float32Array.from({ length: half }, (_, i) => 1 + i);
    const base = modelFile({ arch: 'llama', E: 64, H: 4 });
    const parsed = parseGguf(base.bytes);
    const tensors: GgufWriterTensor[] = [];
    for (const [name, info] of parsed.tensors) {
      tensors.push({ name, dims: [...info.dims], type: info.type, data: f32Bytes((await parsed.tensor(name)) as Float32Array) });
    }
    tensors.push({ name: 'rope_freqs.weight', dims: [half], type: GGML.F32, data: f32Bytes(factors) });
    const metadata: Record<string, GgufWriterValue> = {
      'general.architecture': { type: 'string', value: 'llama' },
      'llama.block_count': { type: 'u32', value: 2 },
      'llama.embedding_length': { type: 'u32', value: 64 },
      'llama.attention.head_count': { type: 'u32', value: 4 },
    };
    const bytes = writeGguf({ metadata, tensors });
    for (const options of [{ layer: 1 }, { layer: 1, maxPositions: 5 }]) {
      const { config } = await attentionLayerFromGguf(bytes, options);
      const { invFreq, cos, sin, base } = config.rotary!;
      expect(cos).toBeUndefined();
      expect(sin).toBeUndefined();
      expect(base).toBeUndefined();
      expect(invFreq!.length).toBe(half);
      for (let i = 0; i < half; i++) expect(invFreq![i]).toBeCloseTo(10000 ** (-(2 * i) / 16) / factors[i], 12);
    }
  });

  test('errors: layer past block_count, key_length mismatch, a wrong shape, a missing tensor, an unknown architecture', async () => {
    const m = modelFile({ arch: 'llama', E: 64, H: 4, blocks: 2 });
    const past = await attentionLayerFromGguf(m.bytes, { layer: 2 }).catch((e) => e);
    expect(past).toBeInstanceOf(InvalidArgumentError);
    expect(past.argument).toBe('options.layer');
    expect(past.message).toContain('llama.block_count = 2');
    await expect(attentionLayerFromGguf(m.bytes, { layer: -1 })).rejects.toThrow(InvalidArgumentError);
    await expect(attentionLayerFromGguf(new Blob([m.bytes]) as never, { layer: 0 })).rejects.toThrow(/loadGguf/);

    const gemma = modelFile({
      arch: 'gemma2',
      E: 64,
      H: 4,
      extra: { 'gemma2.attention.key_length': { type: 'u32', value: 16 }, 'gemma2.attention.value_length': { type: 'u32', value: 32 } },
    });
    const kl = await attentionLayerFromGguf(gemma.bytes, { layer: 1 }).catch((e) => e);
    expect(kl).toBeInstanceOf(UnsupportedError);
    expect(kl.argument).toBe('metadata key "gemma2.attention.value_length"');

    const wrong = modelFile({ arch: 'llama', E: 64, H: 4, G: 2, shapes: { 'blk.1.attn_k.weight': [64, 64] } });
    const shape = await attentionLayerFromGguf(wrong.bytes, { layer: 1 }).catch((e) => e);
    expect(shape).toBeInstanceOf(ShapeMismatchError);
    expect(shape.message).toContain('blk.1.attn_k.weight');
    expect(shape.message).toContain('[32, 64]');

    await expect(attentionLayerFromGguf(m.bytes, { layer: 0 })).rejects.toThrow(MissingWeightError); // the file holds block 1 only

    const unknown = modelFile({ arch: 'mystery', E: 64, H: 4 });
    await expect(attentionLayerFromGguf(unknown.bytes, { layer: 1 })).rejects.toThrow(/options\.interleaved/);
    expect((await attentionLayerFromGguf(unknown.bytes, { layer: 1, interleaved: true })).config.rotary?.interleaved).toBe(true);

    const olmo = modelFile({ arch: 'olmo2', E: 64, H: 4, qkNorm: true, normSize: 64 }); // a norm over all heads
    const norm = await attentionLayerFromGguf(olmo.bytes, { layer: 1 }).catch((e) => e);
    if ((QK_NORM_KEYS as readonly string[]).includes('over')) expect((norm.config.qkNorm as { over?: string }).over).toBe('all');
    else {
      expect(norm).toBeInstanceOf(UnsupportedError);
      expect(norm.message).toContain('OLMo 2');
    }
    const odd = modelFile({ arch: 'olmo2', E: 64, H: 4, qkNorm: true, normSize: 24 }); // neither per head nor whole
    await expect(attentionLayerFromGguf(odd.bytes, { layer: 1 })).rejects.toThrow(UnsupportedError);
  });

  test("a float32 file's layer on 'cpu' equals the same layer built by hand from the writer's values", async () => {
    const E = 64;
    const H = 4;
    const G = 2;
    const m = modelFile({ arch: 'qwen2', E, H, G, qkvBias: true, qkNorm: true });
    const { config, stateDict, forward } = await attentionLayerFromGguf(m.bytes, { layer: 1 });
    const v = (name: string) => m.tensor(name).values!;
    // Row-major [N, K] values written with ne [K, N]: the state_dict is those values as they are.
    const byHand = {
      q_proj_weight: v('attn_q.weight'),
      k_proj_weight: v('attn_k.weight'),
      v_proj_weight: v('attn_v.weight'),
      in_proj_bias: Float32Array.from([...v('attn_q.bias'), ...v('attn_k.bias'), ...v('attn_v.bias')]),
      'out_proj.weight': v('attn_output.weight'),
      'out_proj.bias': new Float32Array(E),
    };
    const handConfig = {
      embedDim: E,
      numHeads: H,
      numKvHeads: G,
      bias: true,
      rotary: { dim: E / H, base: 500000, interleaved: false },
      qkNorm: { query: v('attn_q_norm.weight'), key: v('attn_k_norm.weight'), eps: 2 ** -20 },
    };
    expect(config).toEqual(handConfig);
    expect(stateDict).toEqual(byHand);
    const engine = await createAttentionEngine({ backend: 'cpu' });
    try {
      const S = 5;
      const x = uniform(S * E, 1, mulberry32(7));
      const mha = engine.createMultiHeadAttention(config, stateDict as Record<string, Float32Array>);
      const out = await mha.forward(x, { batchSize: 1, seqLen: S, ...forward });
      const ref = referenceMultiHeadAttention(handConfig, byHand, x, { batchSize: 1, seqLen: S, isCausal: true });
      expectClose(out.output, ref.output, f32Tolerance([E, S]));
      mha.dispose();
    } finally {
      engine.dispose();
    }
  });
  test('smollm3: every 4th layer has no rope (NoPE, as llama.cpp hard-codes), and rotating it changes the output', async () => {
    const E = 64;
    const H = 4;
    const G = 2;
    // Blocks 2 and 3 of a 4-block smollm3 file: 2 rotates, 3 ((3 + 1) % 4 == 0) does not.
    const roped = modelFile({ arch: 'smollm3', E, H, G, blocks: 4, layer: 2 });
    const nope = modelFile({ arch: 'smollm3', E, H, G, blocks: 4, layer: 3 });
    expect((await attentionLayerFromGguf(roped.bytes, { layer: 2 })).config.rotary).toEqual({ dim: 16, base: 500000, interleaved: true });
    const { config, stateDict, forward } = await attentionLayerFromGguf(nope.bytes, { layer: 3 });
    expect(config.rotary).toBeUndefined();
    expect(config).toEqual({ embedDim: E, numHeads: H, numKvHeads: G, bias: false });
    // The layer as llama.cpp runs it (no rope) on 'cpu', against the float64 reference without rotary;
    // the same layer rotated is measurably different, so a loader that rotated it would fail here.
    const S = 6;
    const x = uniform(S * E, 1, mulberry32(41));
    const options = { batchSize: 1, seqLen: S, ...forward };
    const floats = stateDict as Record<string, Float32Array>;
    const noRope = referenceMultiHeadAttention({ embedDim: E, numHeads: H, numKvHeads: G, bias: false }, floats, x, options);
    const rotated = referenceMultiHeadAttention({ ...config, rotary: { dim: 16, base: 500000, interleaved: true } }, floats, x, options);
    const engine = await createAttentionEngine({ backend: 'cpu' });
    try {
      const mha = engine.createMultiHeadAttention(config, floats);
      const { output } = await mha.forward(x, options);
      expectClose(output, noRope.output, f32Tolerance([E, S]));
      expect(Math.max(...output.map((v, i) => Math.abs(v - rotated.output[i])))).toBeGreaterThan(1e-2);
      mha.dispose();
    } finally {
      engine.dispose();
    }
  });

  test("Gemma 2/3's scale as llama.cpp sets it: 1/√Dh, but 1/√(E/H) for the 27B models (46 and 62 blocks)", async () => {
    const head = { type: 'u32', value: 32 } as const;
    for (const [arch, blocks27] of [
      ['gemma2', 46],
      ['gemma3', 62],
    ] as const) {
      const extra = { [`${arch}.attention.key_length`]: head, [`${arch}.attention.value_length`]: head };
      const small = await attentionLayerFromGguf(modelFile({ arch, E: 96, H: 4, Dh: 32, blocks: 26, extra }).bytes, { layer: 1 });
      expect(small.forward.scale).toBeCloseTo(1 / Math.sqrt(32), 12);
      const big = await attentionLayerFromGguf(modelFile({ arch, E: 96, H: 4, Dh: 32, blocks: blocks27, extra }).bytes, { layer: 1 });
      expect(big.forward.scale).toBeCloseTo(1 / Math.sqrt(96 / 4), 12);
    }
    // Gemma 2 without the keys: window 4096 on even layers, softcap 50 (llama.cpp's defaults), no window on odd ones.
    const g2 = modelFile({ arch: 'gemma2', E: 64, H: 4, blocks: 4, layer: 2 });
    expect((await attentionLayerFromGguf(g2.bytes, { layer: 2 })).forward).toMatchObject({ window: 4096, softcap: 50 });
    const g2odd = modelFile({ arch: 'gemma2', E: 64, H: 4, blocks: 4, layer: 3 });
    expect((await attentionLayerFromGguf(g2odd.bytes, { layer: 3 })).forward.window).toBeUndefined();
  });

  test('architectures llama.cpp runs with rules this reader does not implement are refused, naming them and the layer', async () => {
    for (const [arch, what] of [
      ['llama4', /NoPE every 4th layer/],
      ['bert', /non-causal/],
      ['cohere2', /sliding windows/],
      ['deepseek2', /MLA/],
    ] as const) {
      const e = await attentionLayerFromGguf(modelFile({ arch, E: 64, H: 4 }).bytes, { layer: 1 }).catch((err) => err);
      expect(e).toBeInstanceOf(UnsupportedError);
      expect(e.message).toContain(`"${arch}" (layer 1)`);
      expect(e.message).toMatch(what);
    }
    const longrope = modelFile({ arch: 'phi3', E: 64, H: 4 });
    const parsed = parseGguf(longrope.bytes);
    const tensors: GgufWriterTensor[] = [];
    for (const [name, info] of parsed.tensors) tensors.push({ name, dims: [...info.dims], type: info.type, data: f32Bytes((await parsed.tensor(name)) as Float32Array) });
    tensors.push({ name: 'rope_factors_long.weight', dims: [8], type: GGML.F32, data: f32Bytes(new Float32Array(8).fill(1)) });
    const metadata: Record<string, GgufWriterValue> = {};
    for (const [k, v] of parsed.metadata) if (typeof v === 'number') metadata[k] = { type: 'u32', value: v };
    metadata['general.architecture'] = { type: 'string', value: 'phi3' };
    const e = await attentionLayerFromGguf(writeGguf({ metadata, tensors }), { layer: 1 }).catch((err) => err);
    expect(e).toBeInstanceOf(UnsupportedError);
    expect(e.message).toContain('LongRoPE');
  });

  test('a sliding-window pattern or local rope base stated in the file: read where it agrees with llama.cpp’s rule, refused where not', async () => {
    // gemma2 with a window: even layers slide (set_swa_pattern(2)); layer 1 is full, layer 2 slides.
    const withKeys = (extra: Record<string, GgufWriterValue>, layer: number) =>
      attentionLayerFromGguf(modelFile({ arch: 'gemma2', E: 64, H: 4, blocks: 4, layer, extra }).bytes, { layer }).catch((err) => err);
    const agree = await withKeys({ 'gemma2.attention.sliding_window_pattern': { type: 'u32', value: 2 } }, 1);
    expect(agree).not.toBeInstanceOf(Error);
    const disagree = await withKeys({ 'gemma2.attention.sliding_window_pattern': { type: 'u32', value: 3 } }, 1);
    expect(disagree).toBeInstanceOf(UnsupportedError);
    expect(disagree.message).toContain('gemma2.attention.sliding_window_pattern');
    const base = await withKeys({ 'gemma2.rope.freq_base_swa': { type: 'f32', value: 5000 } }, 2);
    expect(base).toBeInstanceOf(UnsupportedError);
    expect(base.message).toContain('gemma2.rope.freq_base_swa');
    // gemma2's sliding layers keep the file's base (500000 here): a file stating that agrees.
    expect(await withKeys({ 'gemma2.rope.freq_base_swa': { type: 'f32', value: 500000 } }, 2)).not.toBeInstanceOf(Error);
  });

  test('ggufModelLayers: kinds from the header alone (a recurrent block of a hybrid, NoPE layers, head sizes)', () => {
    const hybrid = modelFile({
      arch: 'lfm2',
      E: 64,
      H: 4,
      blocks: 3,
      extra: { 'lfm2.attention.head_count_kv': { type: 'array', itemType: 'u32', value: [0, 2, 0] } },
    });
    const layers = ggufModelLayers(hybrid.bytes);
    expect(layers.map((l) => l.kind)).toEqual(['linear', 'full', 'linear']);
    expect(layers[0].unsupported).toMatch(/head_count_kv = 0/);
    expect(layers[1]).toEqual({ layer: 1, kind: 'full', rope: true, numHeads: 4, numKvHeads: 2, headDim: 16, unsupported: null });
    const smol = ggufModelLayers(modelFile({ arch: 'smollm3', E: 64, H: 4, blocks: 8 }).bytes);
    expect(smol.map((l) => l.rope)).toEqual([true, true, true, false, true, true, true, false]);
    expect(() => ggufModelLayers({} as never)).toThrow(InvalidArgumentError);
  });

  test("keys llama.cpp's graph does not use for the architecture are not used: phi3's sliding_window, qwen2's softcap", async () => {
    const phi3 = modelFile({ arch: 'phi3', E: 64, H: 4, extra: { 'phi3.attention.sliding_window': { type: 'u32', value: 4 } } });
    expect(ggufModelLayers(phi3.bytes)[1]).toMatchObject({ kind: 'full', unsupported: null });
    expect((await attentionLayerFromGguf(phi3.bytes, { layer: 1 })).forward).toEqual({ isCausal: true });
    const qwen2 = modelFile({ arch: 'qwen2', E: 64, H: 4, extra: { 'qwen2.attn_logit_softcapping': { type: 'f32', value: 30 } } });
    expect((await attentionLayerFromGguf(qwen2.bytes, { layer: 1 })).forward).toEqual({ isCausal: true });
  });

  test("llama's rotary rule: llama.cpp's converter permutes Hugging Face's Q/K rows, and interleaved pairs on them equal halves on the originals", async () => {
    const E = 64;
    const H = 4;
    const G = 2;
    const Dh = E / H;
    const r = mulberry32(31);
    const hf = { q: uniform(E * E, 0.3, r), k: uniform(G * Dh * E, 0.3, r), v: uniform(G * Dh * E, 0.3, r), o: uniform(E * E, 0.3, r) };
    // convert_hf_to_gguf.py's permute(): per head, rows (half a, index j) → (j, a).
    const permute = (w: Float32Array, heads: number) => {
      const out = new Float32Array(w.length);
      for (let h = 0; h < heads; h++)
        for (let j = 0; j < Dh / 2; j++)
          for (let a = 0; a < 2; a++) out.set(w.subarray((h * Dh + a * (Dh / 2) + j) * E, (h * Dh + a * (Dh / 2) + j + 1) * E), (h * Dh + 2 * j + a) * E);
      return out;
    };
    const tensors: GgufWriterTensor[] = [
      { name: 'blk.0.attn_q.weight', dims: [E, E], type: GGML.F32, data: f32Bytes(permute(hf.q, H)) },
      { name: 'blk.0.attn_k.weight', dims: [E, G * Dh], type: GGML.F32, data: f32Bytes(permute(hf.k, G)) },
      { name: 'blk.0.attn_v.weight', dims: [E, G * Dh], type: GGML.F32, data: f32Bytes(hf.v) },
      { name: 'blk.0.attn_output.weight', dims: [E, E], type: GGML.F32, data: f32Bytes(hf.o) },
    ];
    const metadata: Record<string, GgufWriterValue> = {
      'general.architecture': { type: 'string', value: 'llama' },
      'llama.block_count': { type: 'u32', value: 1 },
      'llama.embedding_length': { type: 'u32', value: E },
      'llama.attention.head_count': { type: 'u32', value: H },
      'llama.attention.head_count_kv': { type: 'u32', value: G },
    };
    const { config, stateDict, forward } = await attentionLayerFromGguf(writeGguf({ metadata, tensors }), { layer: 0 });
    expect(config.rotary).toEqual({ dim: Dh, base: 10000, interleaved: true });
    const S = 7;
    const x = uniform(S * E, 1, mulberry32(32));
    const options = { batchSize: 1, seqLen: S, ...forward };
    const fromGguf = referenceMultiHeadAttention(config, stateDict as Record<string, Float32Array>, x, options);
    const hfConfig = { embedDim: E, numHeads: H, numKvHeads: G, bias: false, rotary: { base: 10000 } }; // Hugging Face's Llama: halves
    const hfState = { q_proj_weight: hf.q, k_proj_weight: hf.k, v_proj_weight: hf.v, 'out_proj.weight': hf.o };
    const fromHf = referenceMultiHeadAttention(hfConfig, hfState, x, options);
    expectClose(fromGguf.output, fromHf.output, f32Tolerance([E, S]));
    // And the rule matters: halves on the permuted rows differ.
    const wrong = referenceMultiHeadAttention({ ...config, rotary: { ...config.rotary, interleaved: false } }, stateDict as Record<string, Float32Array>, x, options);
    expect(Math.max(...wrong.output.map((v, i) => Math.abs(v - fromHf.output[i])))).toBeGreaterThan(1e-3);
  });
});

describe('a quantized GGUF layer end to end', () => {
  // A Q4_K_M-style llama block (q4_k weights, a q6_k attn_v) and a qwen2-style one (q8_0 / q4_0, q/k/v
  // biases and no output bias): the state_dict holds the file's blocks, and the cpu and wasm backends
  // run it to the float64 reference on the dequantized weights (ggml's dequantize_row_*).
  test.each([
    ['llama', (name: string) => (name.includes('attn_v') ? 'Q6_K' : 'Q4_K'), { qkvBias: false }],
    ['qwen2', (name: string) => (name.includes('attn_output') ? 'Q4_0' : 'Q8_0'), { qkvBias: true }],
  ] as const)('%s: the blocks as read, on cpu and wasm = the reference on dequantized weights', async (arch, type, extra) => {
    const E = 256;
    const H = 4;
    const G = 2;
    const file = modelFile({ arch, E, H, G, type, ...extra });
    const { config, stateDict, forward } = await attentionLayerFromGguf(file.bytes, { layer: 1 });
    const quantized = Object.entries(stateDict).filter(([, t]) => !(t instanceof Float32Array));
    expect(quantized.map(([name]) => name).sort()).toEqual(['k_proj_weight', 'out_proj.weight', 'q_proj_weight', 'v_proj_weight']);
    const floats = Object.fromEntries(Object.entries(stateDict).map(([name, t]) => [name, t instanceof Float32Array ? t : dequantize(t)]));
    const S = 6;
    const x = uniform(2 * S * E, 1, mulberry32(11));
    const options = { batchSize: 2, seqLen: S, ...forward };
    const ref = referenceMultiHeadAttention(config, floats, x, options);
    for (const backend of ['cpu', 'wasm'] as const) {
      const engine = await createAttentionEngine({ backend });
      try {
        const { output } = await engine.createMultiHeadAttention(config, stateDict).forward(x, options);
        // randomBlocks' scales make weights of up to ~100 and logits in the thousands: the float32 rule
        // for large logits (outputTolerance) applies.
        expectClose(output, ref.output, outputTolerance([E, S, E], maxAbsFinite(ref.scores!), maxAbsFinite(ref.output)), `${arch} on ${backend}`);
      } finally {
        engine.dispose();
      }
    }
  });
});
