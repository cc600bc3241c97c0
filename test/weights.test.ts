// Real weight files: .safetensors in PyTorch's, Hugging Face BERT's and GPT-2's layouts (F32, F16,
// BF16, F64), made by scripts/make_weight_fixtures.py with their PyTorch reference outputs, parsed,
// turned into the engine's state_dict, and run on both backends; broken files and their errors;
// matmul-style ("numpy tutorial") weights; loading from paths, URLs, Blobs and Responses.

import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import {
  type AttentionEngine,
  type ForwardOptions,
  InvalidArgumentError,
  MissingWeightError,
  ShapeMismatchError,
  UnsupportedError,
  type StateDict,
} from '../src/index.ts';
import { parseSafetensors, WeightFileError, type WeightFileProblem } from '../src/weights/safetensors.ts';
import { loadSafetensors, stateDictFromSafetensors, type WeightLayout } from '../src/weights/layouts.ts';
import { stateDictFromMatmulWeights } from '../src/weights/numpy-style.ts';
import { compareArrays, expectClose, f32Tolerance, type Tolerance } from '../src/util/tolerance.ts';
import { mulberry32, uniform } from './helpers/random.ts';
import { useEngines } from './helpers/engines.ts';
import { expectFixturesPresent, loadJsonFixtures } from './helpers/fixtures.ts';
import { withErrorScopes } from './helpers/gpu.ts';

const DIR = new URL('./fixtures/weights/', import.meta.url);
const readBytes = (name: string) => new Uint8Array(readFileSync(new URL(name, DIR)));
/** JSON numbers, with "NaN", "Infinity", "-Infinity" as strings. */
const num = (v: number | string) => (typeof v === 'number' ? v : Number(v));

interface ModelFixture {
  name: string;
  description: string;
  file: string;
  layout: WeightLayout;
  prefix: string;
  config: { embedDim: number; numHeads: number; bias: boolean };
  options: { batchSize: number; seqLen: number; isCausal: boolean };
  keyPaddingMask?: number[];
  query: number[];
  output: number[];
  decoded?: Record<string, (number | string)[]>;
}

const MODEL_FIXTURES = ['pytorch_mha', 'bert_attention', 'gpt2_attention', 'pytorch_mha_f16', 'pytorch_mha_bf16', 'pytorch_mha_f64_nobias'];
// A failure to read them is reported by the 'present and well formed' test below (and by any test using one).
const modelSet = loadJsonFixtures<Omit<ModelFixture, 'name'>>(DIR, 'Regenerate them with `/usr/bin/python3 scripts/make_weight_fixtures.py`.', MODEL_FIXTURES);
const { fixtures } = modelSet;
/** One of MODEL_FIXTURES, as read above. */
function modelFixture(name: string): ModelFixture {
  if (modelSet.error) throw modelSet.error;
  const f = fixtures.find((m) => m.name === name);
  if (!f) throw new Error(`${name} is not one of MODEL_FIXTURES`);
  return f;
}

// Same reasoning as test/pytorch-fixtures.test.ts: the file's weights reach the engine bit-exactly (the
// conversions are exact, or F64 → float32 rounding as torch's .float() does, which the reference
// used), so the CPU backend is the float64 reference rounded once to float32.
const CPU_TOLERANCE: Tolerance = { atol: 1e-12, rtol: 2 ** -23 };
const gpuTolerance = (E: number, S: number) => f32Tolerance([E, S, E]);

function report(what: string, actual: ArrayLike<number>, expected: ArrayLike<number>, tol: Tolerance): void {
  if (!process.env.FIXTURE_ERRORS) return;
  const r = compareArrays(actual, expected, tol);
  let worst = 0;
  for (let i = 0; i < actual.length; i++) worst = Math.max(worst, Math.abs(actual[i] - expected[i]) / (tol.atol + tol.rtol * Math.abs(expected[i])));
  console.log(`${what.padEnd(44)} maxAbs ${r.maxAbs.toExponential(2)} maxRel ${r.maxRel.toExponential(2)} worst err/allowed ${worst.toFixed(3)}`);
}

const engines = useEngines();

type ErrorClass = new (...args: never[]) => Error;

function catchError(fn: () => unknown): unknown {
  try {
    fn();
  } catch (e) {
    return e;
  }
  return undefined;
}

function expectError(fn: () => unknown, kind: ErrorClass, ...fragments: string[]): Error {
  const error = catchError(fn);
  expect(error, 'expected an error').toBeInstanceOf(kind);
  for (const f of fragments) expect((error as Error).message).toContain(f);
  return error as Error;
}

async function expectRejection(promise: Promise<unknown>, kind: ErrorClass, ...fragments: string[]): Promise<Error> {
  const error = await promise.then(
    () => undefined,
    (e) => e,
  );
  expect(error, 'expected a rejection').toBeInstanceOf(kind);
  for (const f of fragments) expect((error as Error).message).toContain(f);
  return error as Error;
}

async function runLayer(engine: AttentionEngine, config: ModelFixture['config'], sd: StateDict, query: Float32Array, options: object): Promise<Float32Array> {
  const layer = engine.createMultiHeadAttention(config, sd);
  try {
    const call = () => layer.forward(query, options as ForwardOptions);
    const { output } = engine.backend === 'webgpu' ? await withErrorScopes(engine.device!, call) : await call();
    return output;
  } finally {
    layer.dispose();
  }
}

// ——— the model fixtures ———

test('the weight fixtures are present and well formed', () => {
  expectFixturesPresent(modelSet);
  for (const f of fixtures) {
    const { embedDim: E } = f.config;
    const { batchSize: B, seqLen: S } = f.options;
    expect(f.query.length, f.name).toBe(B * S * E);
    expect(f.output.length, f.name).toBe(B * S * E);
    expect(f.output.every(Number.isFinite), f.name).toBe(true);
  }
});

describe.each(fixtures.map((f) => [f.name, f] as const))('%s', (_name, f) => {
  const { embedDim: E, numHeads: H, bias } = f.config;
  const query = Float32Array.from(f.query);
  const options = { ...f.options, ...(f.keyPaddingMask ? { keyPaddingMask: Uint8Array.from(f.keyPaddingMask) } : {}) };
  const stateDict = () => stateDictFromSafetensors(parseSafetensors(readBytes(f.file)), { layout: f.layout, prefix: f.prefix, embedDim: E, numHeads: H, bias });

  test('parses, and yields the state_dict names and shapes of nn.MultiheadAttention', () => {
    const sd = stateDict();
    const expected = bias ? ['in_proj_bias', 'in_proj_weight', 'out_proj.bias', 'out_proj.weight'] : ['in_proj_weight', 'out_proj.weight'];
    expect(Object.keys(sd).sort()).toEqual(expected);
    expect(sd.in_proj_weight.length).toBe(3 * E * E);
    expect(sd['out_proj.weight'].length).toBe(E * E);
    if (bias) expect(sd.in_proj_bias.length).toBe(3 * E);
  });

  if (f.decoded) {
    test("every value decodes to the float32 torch's .float() gives (signed zeros, subnormals, ±Infinity, NaN included)", () => {
      const file = parseSafetensors(readBytes(f.file));
      expect([...file.keys()].sort()).toEqual(Object.keys(f.decoded!).sort());
      for (const [name, values] of Object.entries(f.decoded!)) {
        const data = file.get(name)!.data;
        expect(data.length, name).toBe(values.length);
        for (let i = 0; i < values.length; i++) {
          // Object.is: -0 ≠ 0 and NaN = NaN; expected values are float32 values written exactly.
          if (!Object.is(data[i], Math.fround(num(values[i])))) throw new Error(`${name}[${i}]: got ${data[i]}, expected ${values[i]}`);
        }
      }
    });
  }

  test('cpu backend matches PyTorch', async () => {
    const output = await runLayer(engines.cpu, f.config, stateDict(), query, options);
    report(`cpu ${f.name}`, output, f.output, CPU_TOLERANCE);
    expectClose(output, f.output, CPU_TOLERANCE, `${f.name} cpu`);
  });

  test('webgpu backend matches PyTorch', async () => {
    const output = await runLayer(engines.gpu, f.config, stateDict(), query, options);
    const tol = gpuTolerance(E, f.options.seqLen);
    report(`webgpu ${f.name}`, output, f.output, tol);
    expectClose(output, f.output, tol, `${f.name} webgpu`);
  });
});

describe('layouts', () => {
  test('gpt2: Conv1D weights [in, out] are transposed; loading them untransposed would be wrong', async () => {
    const f = modelFixture('gpt2_attention');
    const file = parseSafetensors(readBytes(f.file));
    const { embedDim: E, numHeads: H } = f.config;
    const sd = stateDictFromSafetensors(file, { layout: 'gpt2', prefix: 'h.0.', embedDim: E, numHeads: H });
    const cAttn = file.get('h.0.attn.c_attn.weight')!.data; // [E, 3E]
    for (const [o, i] of [
      [0, 1],
      [5, 31],
      [3 * E - 1, 0],
      [2 * E + 7, 9],
    ])
      expect(sd.in_proj_weight[o * E + i]).toBe(cAttn[i * 3 * E + o]);
    // The same numbers without the transposition: a layer that runs but is far from GPT-2.
    const wrong = { ...sd, in_proj_weight: Float32Array.from(cAttn) };
    const output = await runLayer(engines.cpu, f.config, wrong, Float32Array.from(f.query), f.options);
    expect(compareArrays(output, f.output, CPU_TOLERANCE).maxAbs).toBeGreaterThan(0.05);
  });

  test('the prefix may leave out its final dot; the parsed file or its bytes may be given', () => {
    const f = modelFixture('bert_attention');
    const bytes = readBytes(f.file);
    const a = stateDictFromSafetensors(bytes, { layout: 'bert', prefix: 'bert.encoder.layer.0', embedDim: 32, numHeads: 4 });
    const b = stateDictFromSafetensors(parseSafetensors(bytes), { layout: 'bert', prefix: 'bert.encoder.layer.0.', embedDim: 32, numHeads: 4 });
    expect(a.in_proj_weight).toEqual(b.in_proj_weight);
  });

  test('a wrong prefix: MissingWeightError naming the tensor, listing the file, suggesting the prefix', () => {
    const bytes = readBytes('bert_attention.safetensors');
    expectError(
      () => stateDictFromSafetensors(bytes, { layout: 'bert', prefix: 'encoder.layer.0.', embedDim: 32, numHeads: 4 }),
      MissingWeightError,
      'tensor "encoder.layer.0.attention.self.query.weight"',
      'nothing under the prefix "encoder.layer.0."',
      '"bert.embeddings.position_ids" [1, 16]',
      'under the prefix "bert.encoder.layer.0.": pass one as options.prefix',
    );
    expectError(
      () => stateDictFromSafetensors(bytes, { layout: 'bert', prefix: 'bert.encoder.layer.1.', embedDim: 32, numHeads: 4 }),
      MissingWeightError,
      '"bert.encoder.layer.0."',
    );
  });

  test('the wrong layout: the error says which layout the file looks like', () => {
    expectError(
      () => stateDictFromSafetensors(readBytes('gpt2_attention.safetensors'), { layout: 'bert', prefix: 'h.0.', embedDim: 32, numHeads: 2 }),
      MissingWeightError,
      'h.0.attention.self.query.weight',
      'Under "h.0." the file has',
      '"h.0.attn.c_attn.weight" [32, 96]',
      "pass layout: 'gpt2'",
    );
    expectError(
      () => stateDictFromSafetensors(readBytes('pytorch_mha.safetensors'), { layout: 'gpt2', embedDim: 16, numHeads: 4 }),
      MissingWeightError,
      'attn.c_attn.weight',
      "pass layout: 'pytorch'",
    );
  });

  test('sizes that do not match the file: ShapeMismatchError with the shapes and the embedDim the file suggests', () => {
    expectError(
      () => stateDictFromSafetensors(readBytes('bert_attention.safetensors'), { layout: 'bert', prefix: 'bert.encoder.layer.0.', embedDim: 64, numHeads: 4 }),
      ShapeMismatchError,
      'tensor "bert.encoder.layer.0.attention.self.query.weight"',
      'of shape [64, 64]',
      'got shape [32, 32]',
      'suggests embedDim 32',
      'config.json',
    );
    expectError(
      () =>
        stateDictFromSafetensors(readBytes('pytorch_mha.safetensors'), {
          layout: 'pytorch',
          prefix: 'encoder.layers.0.self_attn.',
          embedDim: 16,
          numHeads: 4,
          numKvHeads: 2,
        }),
      ShapeMismatchError,
      'in_proj_weight',
      'of shape [32, 16]',
      'got shape [48, 16]',
      'numKvHeads 2',
    );
    expectError(
      () => stateDictFromSafetensors(readBytes('gpt2_attention.safetensors'), { layout: 'gpt2', prefix: 'h.0.', embedDim: 64, numHeads: 2 }),
      ShapeMismatchError,
      'tensor "h.0.attn.c_attn.weight"',
      'of shape [64, 192]',
      'got shape [32, 96]',
      'suggests embedDim 32',
    );
  });

  test('gpt2 with weights already transposed to [out, in]: the error says so', () => {
    const E = 8;
    const t = (shape: number[]) => ({ shape, data: new Float32Array(shape.reduce((a, b) => a * b, 1)) });
    const file = makeFile({
      'attn.c_attn.weight': t([3 * E, E]),
      'attn.c_attn.bias': t([3 * E]),
      'attn.c_proj.weight': t([E, E]),
      'attn.c_proj.bias': t([E]),
    });
    expectError(
      () => stateDictFromSafetensors(file, { layout: 'gpt2', embedDim: E, numHeads: 2 }),
      ShapeMismatchError,
      'attn.c_attn.weight',
      'of shape [8, 24]',
      'got shape [24, 8]',
      "nn.Linear's layout",
      'already transposed',
    );
  });

  test('pytorch without biases: bias: false reads none; the default asks for them and says why they are missing', () => {
    const bytes = readBytes('pytorch_mha_f64_nobias.safetensors');
    expectError(() => stateDictFromSafetensors(bytes, { layout: 'pytorch', embedDim: 8, numHeads: 2 }), MissingWeightError, 'in_proj_bias', 'bias=False', 'bias: false');
    expect(Object.keys(stateDictFromSafetensors(bytes, { layout: 'pytorch', embedDim: 8, numHeads: 2, bias: false })).sort()).toEqual([
      'in_proj_weight',
      'out_proj.weight',
    ]);
  });

  test('pytorch with separate q/k/v_proj_weight (kdim, vdim ≠ embedDim)', async () => {
    const E = 8,
      H = 2,
      kdim = 4,
      vdim = 12;
    const rnd = (n: number, seed: number) => uniform(n, 0.4, mulberry32(seed));
    const tensors = {
      'attn.q_proj_weight': { shape: [E, E], data: rnd(E * E, 1) },
      'attn.k_proj_weight': { shape: [E, kdim], data: rnd(E * kdim, 2) },
      'attn.v_proj_weight': { shape: [E, vdim], data: rnd(E * vdim, 3) },
      'attn.in_proj_bias': { shape: [3 * E], data: rnd(3 * E, 4) },
      'attn.out_proj.weight': { shape: [E, E], data: rnd(E * E, 5) },
      'attn.out_proj.bias': { shape: [E], data: rnd(E, 6) },
    };
    const sd = stateDictFromSafetensors(makeFile(tensors), { layout: 'pytorch', prefix: 'attn', embedDim: E, numHeads: H, kdim, vdim });
    expect(Object.keys(sd).sort()).toEqual(['in_proj_bias', 'k_proj_weight', 'out_proj.bias', 'out_proj.weight', 'q_proj_weight', 'v_proj_weight']);
    const layer = engines.cpu.createMultiHeadAttention({ embedDim: E, numHeads: H, kdim, vdim }, sd);
    const { output } = await layer.forward(rnd(2 * E, 7), { batchSize: 1, seqLen: 2, key: rnd(3 * kdim, 8), value: rnd(3 * vdim, 9), kvSeqLen: 3 });
    expect(output.every(Number.isFinite)).toBe(true);
    layer.dispose();
  });

  test('bad options', () => {
    const bytes = readBytes('pytorch_mha.safetensors');
    expectError(
      () => stateDictFromSafetensors(bytes, { layout: 'llama' as never, embedDim: 16, numHeads: 4 }),
      InvalidArgumentError,
      'options.layout',
      "'pytorch', 'bert' or 'gpt2'",
      '"llama"',
    );
    expectError(
      () => stateDictFromSafetensors(bytes, { layout: 'pytorch', embedDim: 16, numHeads: 3 }),
      InvalidArgumentError,
      'options.embedDim',
      'divisible by numHeads (3)',
    );
    expectError(
      () => stateDictFromSafetensors(bytes, { layout: 'pytorch', embedDim: 16, numHeads: 4, Prefix: 'a.' } as never),
      InvalidArgumentError,
      'options.Prefix',
      'Did you mean "prefix"?',
    );
    expectError(
      () => stateDictFromSafetensors(bytes, { layout: 'bert', embedDim: 16, numHeads: 4, bias: false }),
      InvalidArgumentError,
      'options.bias',
      'always has biases',
    );
  });
});

// ——— broken files ———

describe('broken files', () => {
  const cases: [string, WeightFileProblem, string[]][] = [
    [
      'truncated.safetensors',
      'truncated',
      ['tensor "out_proj.weight".data_offsets', 'within the 246 bytes of data', '[192, 256]', '10 bytes past the end', 'cut short', 'download or copy it again'],
    ],
    ['truncated_header.safetensors', 'truncated', ['header length', 'at most the 88 bytes that follow it', 'got 176', 'cut short']],
    ['bad_header_json.safetensors', 'header', ['the header (bytes 8–191)', 'a JSON object', 'not JSON', 're-save']],
    ['header_not_object.safetensors', 'header', ['the header must be a JSON object', 'got JSON array']],
    ['missing_shape.safetensors', 'header', ['tensor "out_proj.weight"', 'dtype, shape and data_offsets', 'no shape']],
    ['wrong_dtype.safetensors', 'dtype', ['tensor "out_proj.weight".dtype', 'F32, F16, BF16, F64', 'got "float32"', 'safetensors calls this dtype "F32"']],
    [
      'offsets_out_of_bounds.safetensors',
      'offsets',
      ['tensor "in_proj_weight".data_offsets', '[1000, 1192]', '936 bytes past the end', 'header points outside the file'],
    ],
    [
      'offsets_mismatch.safetensors',
      'offsets',
      ['tensor "in_proj_weight".data_offsets', 'numel([12, 5]) × sizeof(F32) = 60 × 4 = 240 bytes', 'got [0, 192] (192 bytes)'],
    ],
  ];
  test.each(cases)('%s: WeightFileError (%s)', (file, problem, fragments) => {
    const error = expectError(() => parseSafetensors(readBytes(`broken/${file}`)), WeightFileError, 'parseSafetensors: ', ...fragments) as WeightFileError;
    expect(error.problem).toBe(problem);
    expect(error.name).toBe('WeightFileError');
    if (error.message.includes('tensor "')) expect(error.tensor).toBeDefined();
  });

  test("a WeightFileError is an AttentionError with the engine's message shape", () => {
    const error = catchError(() => parseSafetensors(readBytes('broken/wrong_dtype.safetensors')));
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(/^parseSafetensors: .+ must be .+; got .+\. .+/);
  });

  test('short files, empty or bad headers, bytes that are not a file', () => {
    expectError(() => parseSafetensors(new Uint8Array(5)), WeightFileError, 'at least 8 bytes', 'got 5 bytes');
    expectError(() => parseSafetensors(new TextEncoder().encode('<!DOCTYPE html><html>…</html>')), WeightFileError, 'header length', 'starts with text', 'HTML');
    expectError(() => parseSafetensors(fileBytes('', new Uint8Array())), WeightFileError, 'at least 2', 'got 0');
    const badUtf8 = new Uint8Array([4, 0, 0, 0, 0, 0, 0, 0, 0x7b, 0xff, 0xfe, 0x7d]);
    expectError(() => parseSafetensors(badUtf8), WeightFileError, 'UTF-8');
    expectError(() => parseSafetensors(fileBytes('{"__metadata__": 3}', new Uint8Array())), WeightFileError, '__metadata__', 'an object');
    expectError(
      () => parseSafetensors(fileBytes('{"w": {"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 8]}}', new Uint8Array(8))),
      WeightFileError,
      'tensor "w".shape',
      'non-negative integers',
    );
    expectError(() => parseSafetensors(fileBytes('{"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}', new Uint8Array(8))), WeightFileError, 'got [8, 0]');
    expectError(
      () => parseSafetensors(fileBytes('{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}}', new Uint8Array(8))),
      WeightFileError,
      'two non-negative integers',
      'got [0]',
    );
    expectError(() => parseSafetensors(fileBytes('{"w": [1, 2]}', new Uint8Array())), WeightFileError, 'tensor "w"', '{ dtype, shape, data_offsets }');
    expectError(
      () => parseSafetensors(fileBytes('{"w": {"dtype": "toString", "shape": [1], "data_offsets": [0, 4]}}', new Uint8Array(4))),
      WeightFileError,
      'got "toString"',
    );
    expectError(() => parseSafetensors('file.safetensors' as never), WeightFileError, 'an ArrayBuffer or a Uint8Array', 'loadSafetensors');
  });
});

// ——— the reader on files built here ———

/** A safetensors file: 8-byte LE length, the header padded with spaces to 8 bytes, the data. */
function fileBytes(header: string, data: Uint8Array): Uint8Array {
  const text = new TextEncoder().encode(header);
  const pad = (8 - (text.length % 8)) % 8;
  const out = new Uint8Array(8 + text.length + pad + data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(text.length + pad), true);
  out.set(text, 8);
  out.fill(0x20, 8 + text.length, 8 + text.length + pad);
  out.set(data, 8 + text.length + pad);
  return out;
}

/** F32 tensors written back to back in the given order. */
function makeFile(tensors: Record<string, { shape: number[]; data: Float32Array }>): Uint8Array {
  const header: Record<string, unknown> = {};
  const chunks: Uint8Array[] = [];
  let offset = 0;
  for (const [name, { shape, data }] of Object.entries(tensors)) {
    header[name] = { dtype: 'F32', shape, data_offsets: [offset, offset + data.byteLength] };
    chunks.push(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    offset += data.byteLength;
  }
  const data = new Uint8Array(offset);
  let at = 0;
  for (const c of chunks) {
    data.set(c, at);
    at += c.length;
  }
  return fileBytes(JSON.stringify(header), data);
}

describe('the reader', () => {
  test('tensors in any order, overlapping, a scalar, an empty tensor, metadata; a view into a larger buffer; unaligned data', () => {
    const data = new Uint8Array(new Float32Array([1, 2, 3, 4, 5]).buffer);
    const header = JSON.stringify({
      __metadata__: { format: 'pt' },
      b: { dtype: 'F32', shape: [2], data_offsets: [8, 16] },
      a: { dtype: 'F32', shape: [2, 2], data_offsets: [0, 16] },
      s: { dtype: 'F32', shape: [], data_offsets: [16, 20] },
      e: { dtype: 'F32', shape: [0, 3], data_offsets: [20, 20] },
    });
    const file = fileBytes(header, data);
    // Inside a larger buffer, at an odd offset: the reader must not assume alignment.
    const big = new Uint8Array(file.length + 7);
    big.set(file, 3);
    const parsed = parseSafetensors(big.subarray(3, 3 + file.length));
    expect([...parsed.keys()]).toEqual(['b', 'a', 's', 'e']);
    expect([...parsed.get('a')!.data]).toEqual([1, 2, 3, 4]);
    expect([...parsed.get('b')!.data]).toEqual([3, 4]);
    expect(parsed.get('s')!.shape).toEqual([]);
    expect([...parsed.get('s')!.data]).toEqual([5]);
    expect(parsed.get('e')!.data.length).toBe(0);
    expect(parsed.get('a')!.data).toBe(parsed.get('a')!.data); // converted once
    const ab = parseSafetensors(file.slice().buffer as ArrayBuffer);
    expect([...ab.get('a')!.data]).toEqual([1, 2, 3, 4]);
  });

  test('non-float dtypes parse; reading their data is an UnsupportedError naming the tensor', () => {
    const file = parseSafetensors(readBytes('bert_attention.safetensors'));
    expect(file.get('bert.embeddings.position_ids')!.dtype).toBe('I64');
    expect(file.get('bert.embeddings.position_ids')!.shape).toEqual([1, 16]);
    expectError(
      () => file.get('bert.embeddings.position_ids')!.data,
      UnsupportedError,
      'tensor "bert.embeddings.position_ids" (dtype I64, shape [1, 16])',
      'F32, F16, BF16, F64',
    );
    const gpt2 = parseSafetensors(readBytes('gpt2_attention.safetensors'));
    expect(gpt2.get('h.0.attn.bias')!.dtype).toBe('U8');
  });

  test("F64 beyond float32's range is refused, not turned into Infinity", () => {
    const file = parseSafetensors(fileBytes('{"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}}', new Uint8Array(new Float64Array([1, 1e39]).buffer)));
    expectError(() => file.get('w')!.data, UnsupportedError, 'tensor "w"[1]', '1e+39');
  });
});

// ——— matmul-style weights ———

interface NumpyFixture {
  config: { embedDim: number; numHeads: number };
  options: { batchSize: number; seqLen: number; isCausal: boolean };
  wQkv: number[];
  wO: number[];
  bQkv: number[];
  bO: number[];
  query: number[];
  output: number[];
  outputNoBias: number[];
}

describe('stateDictFromMatmulWeights (numpy-tutorial weights, x @ W)', () => {
  const f = JSON.parse(readFileSync(new URL('numpy_style.json', DIR), 'utf8')) as NumpyFixture;
  const { embedDim: E, numHeads: H } = f.config;
  const Dh = E / H;
  const wQkv = Float32Array.from(f.wQkv);
  const wO = Float32Array.from(f.wO);
  const bQkv = Float32Array.from(f.bQkv);
  const bO = Float32Array.from(f.bO);
  const query = Float32Array.from(f.query);
  /** Columns [c0, c0 + n) of the [E, 3E] matrix. */
  const columns = (c0: number, n: number) => {
    const m = new Float32Array(E * n);
    for (let r = 0; r < E; r++) m.set(wQkv.subarray(r * 3 * E + c0, r * 3 * E + c0 + n), r * n);
    return m;
  };
  const perHead = (part: number) => Array.from({ length: H }, (_, i) => columns(part * E + i * Dh, Dh)); // W_Q_i [E, Dh]
  const perHeadBias = (part: number) => Array.from({ length: H }, (_, i) => bQkv.slice(part * E + i * Dh, part * E + (i + 1) * Dh));
  const config = { embedDim: E, numHeads: H };

  const forms: [string, () => StateDict, boolean][] = [
    ['fused wQkv [E, 3E]', () => stateDictFromMatmulWeights({ wQkv, wO, bQkv, bO, embedDim: E, numHeads: H }), true],
    [
      'wQ, wK, wV [E, E]',
      () =>
        stateDictFromMatmulWeights({
          wQ: columns(0, E),
          wK: columns(E, E),
          wV: columns(2 * E, E),
          wO,
          bQ: bQkv.slice(0, E),
          bK: bQkv.slice(E, 2 * E),
          bV: bQkv.slice(2 * E),
          bO,
          embedDim: E,
          numHeads: H,
        }),
      true,
    ],
    [
      'per-head lists W_Q_i [E, Dh]',
      () =>
        stateDictFromMatmulWeights({
          wQ: perHead(0),
          wK: perHead(1),
          wV: perHead(2),
          wO,
          bQ: perHeadBias(0),
          bK: perHeadBias(1),
          bV: perHeadBias(2),
          bO,
          embedDim: E,
          numHeads: H,
        }),
      true,
    ],
    ['no biases given (zeros, default layer)', () => stateDictFromMatmulWeights({ wQ: perHead(0), wK: perHead(1), wV: perHead(2), wO, embedDim: E, numHeads: H }), false],
  ];

  describe.each(forms)('%s', (_name, make, withBias) => {
    const expected = withBias ? f.output : f.outputNoBias;
    test("cpu backend matches the tutorial's per-head forward", async () => {
      const output = await runLayer(engines.cpu, { ...config, bias: true }, make(), query, f.options);
      report(`cpu numpy ${_name}`, output, expected, CPU_TOLERANCE);
      expectClose(output, expected, CPU_TOLERANCE, 'cpu');
    });
    test("webgpu backend matches the tutorial's per-head forward", async () => {
      const output = await runLayer(engines.gpu, { ...config, bias: true }, make(), query, f.options);
      const tol = gpuTolerance(E, f.options.seqLen);
      report(`webgpu numpy ${_name}`, output, expected, tol);
      expectClose(output, expected, tol, 'webgpu');
    });
  });

  test('bias: false gives a state_dict without biases for a bias: false layer', async () => {
    const sd = stateDictFromMatmulWeights({ wQkv, wO, embedDim: E, numHeads: H, bias: false });
    expect(Object.keys(sd).sort()).toEqual(['in_proj_weight', 'out_proj.weight']);
    expectClose(await runLayer(engines.cpu, { ...config, bias: false }, sd, query, f.options), f.outputNoBias, CPU_TOLERANCE, 'cpu, bias false');
  });

  test('the same matrices passed as in_proj_weight without the helper give a wrong layer (which is why it exists)', async () => {
    const wrong = { in_proj_weight: wQkv, in_proj_bias: bQkv, 'out_proj.weight': wO, 'out_proj.bias': bO };
    const output = await runLayer(engines.cpu, { ...config, bias: true }, wrong, query, f.options);
    expect(compareArrays(output, f.output, CPU_TOLERANCE).maxAbs).toBeGreaterThan(0.05);
  });

  test('grouped-query: per-head lists of G key/value heads', async () => {
    const G = 2;
    const sd = stateDictFromMatmulWeights({ wQ: perHead(0), wK: perHead(1).slice(0, G), wV: perHead(2).slice(0, G), wO, embedDim: E, numHeads: H, numKvHeads: G });
    expect(sd.in_proj_weight.length).toBe((H + 2 * G) * Dh * E);
    // in_proj_weight row (H + g)·Dh + d is column d of W_K_g.
    const wK1 = perHead(1)[1];
    for (let d = 0; d < Dh; d++) for (let r = 0; r < E; r++) expect(sd.in_proj_weight[((H + 1) * Dh + d) * E + r]).toBe(wK1[r * Dh + d]);
    const output = await runLayer(engines.cpu, { ...config, numKvHeads: G, bias: true } as never, sd, query, f.options);
    expect(output.every(Number.isFinite)).toBe(true);
  });

  test('shape errors name the argument, the expected shape and the fix', () => {
    const base = { wO, embedDim: E, numHeads: H };
    expectError(
      () => stateDictFromMatmulWeights({ ...base, wQ: perHead(0).slice(0, 3), wK: perHead(1), wV: perHead(2) }),
      ShapeMismatchError,
      'weights.wQ',
      'a list of numHeads = 4 per-head matrices W_Q_i [E, Dh] = [16, 4]',
      'got a list of 3',
    );
    expectError(
      () => stateDictFromMatmulWeights({ ...base, wQ: perHead(0), wK: [...perHead(1).slice(0, 3), columns(0, 3)], wV: perHead(2) }),
      ShapeMismatchError,
      'weights.wK[3]',
      'of length [E, Dh] = [16, 4] = 64',
      'got length 48',
    );
    expectError(
      () => stateDictFromMatmulWeights({ ...base, wQ: [columns(0, E), ...perHead(0).slice(1)], wK: perHead(1), wV: perHead(2) }),
      ShapeMismatchError,
      'weights.wQ[0]',
      'looks like the whole [E, E] matrix',
    );
    expectError(
      () => stateDictFromMatmulWeights({ ...base, wQ: perHead(0)[0], wK: perHead(1), wV: perHead(2) }),
      ShapeMismatchError,
      'weights.wQ',
      "one head's size [E, Dh] = [16, 4]",
      'list of all 4',
    );
    expectError(() => stateDictFromMatmulWeights({ ...base, wQkv: columns(0, 2 * E) }), ShapeMismatchError, 'weights.wQkv', '[E, 3E] = [16, 48] = 768', 'got length 512');
    expectError(() => stateDictFromMatmulWeights({ ...base, wQkv, bQkv: bO }), ShapeMismatchError, 'weights.bQkv', 'got length 16');
    expectError(
      () => stateDictFromMatmulWeights({ ...base, wQ: perHead(0), wK: perHead(1), wV: perHead(2), bQ: perHeadBias(0).slice(1) }),
      ShapeMismatchError,
      'weights.bQ',
      'numHeads = 4 per-head vectors [Dh] = [4]',
      'got a list of 3',
    );
    expectError(() => stateDictFromMatmulWeights({ ...base, wQkv, wQ: perHead(0) }), InvalidArgumentError, 'weights.wQ', 'either the fused wQkv');
    expectError(() => stateDictFromMatmulWeights({ ...base, wQ: perHead(0), wV: perHead(2) }), MissingWeightError, 'weights.wK', 'with wQ, wV');
    expectError(() => stateDictFromMatmulWeights({ wQkv, embedDim: E, numHeads: H } as never), MissingWeightError, 'weights.wO');
    expectError(() => stateDictFromMatmulWeights({ ...base, wQkv, bO, bias: false }), InvalidArgumentError, 'weights.bO', 'left out with bias: false');
    expectError(
      () => stateDictFromMatmulWeights({ ...base, wQkv: Array.from(wQkv) as never }),
      InvalidArgumentError,
      'weights.wQkv',
      'a Float32Array',
      'an Array of length 768',
    );
    expectError(() => stateDictFromMatmulWeights({ ...base, wqkv: wQkv } as never), InvalidArgumentError, 'weights.wqkv', 'Did you mean "wQkv"?');
  });
});

// ——— loadSafetensors ———

describe('loadSafetensors', () => {
  const path = fileURLToPath(new URL('pytorch_mha.safetensors', DIR));
  const expectedWeight = () => parseSafetensors(readBytes('pytorch_mha.safetensors')).get('encoder.layers.0.self_attn.in_proj_weight')!.data;
  const check = (file: Awaited<ReturnType<typeof loadSafetensors>>) => expect(file.get('encoder.layers.0.self_attn.in_proj_weight')!.data).toEqual(expectedWeight());

  let server: Server;
  let base = '';
  beforeAll(async () => {
    server = createServer((req, res) => {
      if (req.url === '/pytorch_mha.safetensors') {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        res.end(readFileSync(path));
      } else {
        res.writeHead(404, { 'content-type': 'text/plain' });
        res.end('not found');
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const address = server.address() as { port: number };
    base = `http://127.0.0.1:${address.port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server?.close(() => resolve())));

  test('from a file path (Node), a file: URL string and a URL object', async () => {
    check(await loadSafetensors(path));
    check(await loadSafetensors(`file://${path}`));
    check(await loadSafetensors(new URL('pytorch_mha.safetensors', DIR)));
  });

  test('from a Uint8Array, an ArrayBuffer, a Blob and a Response', async () => {
    const bytes = readBytes('pytorch_mha.safetensors');
    check(await loadSafetensors(bytes));
    check(await loadSafetensors(readFileSync(path))); // a Node Buffer, whose slice() does not copy
    check(await loadSafetensors(bytes.subarray(0))); // a view
    check(await loadSafetensors(bytes.slice().buffer as ArrayBuffer));
    check(await loadSafetensors(new Blob([bytes])));
    check(await loadSafetensors(new Response(bytes)));
  });

  test('from an http URL (fetch)', async () => {
    check(await loadSafetensors(`${base}/pytorch_mha.safetensors`));
  });

  test('then into a layer', async () => {
    const f = modelFixture('pytorch_mha');
    const sd = stateDictFromSafetensors(await loadSafetensors(path), { layout: 'pytorch', prefix: f.prefix, embedDim: 16, numHeads: 4 });
    expectClose(await runLayer(engines.cpu, f.config, sd, Float32Array.from(f.query), f.options), f.output, CPU_TOLERANCE, 'cpu via loadSafetensors');
  });

  test('errors: a missing file, an HTTP error, a broken file, a bad source', async () => {
    const missing = await expectRejection(loadSafetensors('/nonexistent/model.safetensors'), WeightFileError, '"/nonexistent/model.safetensors"', 'no such file');
    expect((missing as WeightFileError).problem).toBe('read');
    await expectRejection(loadSafetensors(`${base}/missing.safetensors`), WeightFileError, 'HTTP 404', 'missing.safetensors');
    await expectRejection(loadSafetensors(new Response('nope', { status: 500, statusText: 'Server Error' })), WeightFileError, 'HTTP 500 Server Error');
    await expectRejection(loadSafetensors(fileURLToPath(new URL('broken/truncated.safetensors', DIR))), WeightFileError, 'cut short');
    await expectRejection(loadSafetensors(42 as never), InvalidArgumentError, 'source', 'got 42');
  });
});
