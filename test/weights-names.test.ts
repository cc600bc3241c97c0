// Weight files with sizes left out and custom names: attentionLayerFromSafetensors reads embedDim,
// numKvHeads, bias and kdim/vdim from the file's shapes (numHeads is the one size a user gives),
// stateDictFromSafetensors reads embedDim when it is left out, and options.names maps a layout's
// tensors to other names. The fixtures are those of test/weights.test.ts (PyTorch references).

import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { type ForwardOptions, InvalidArgumentError, MissingWeightError, ShapeMismatchError, type StateDict } from '../src/index.ts';
import { mulberry32, uniform } from './helpers/random.ts';
import { expectClose } from '../src/util/tolerance.ts';
import { attentionLayerFromSafetensors, stateDictFromSafetensors, type WeightLayout } from '../src/weights/layouts.ts';
import { parseSafetensors } from '../src/weights/safetensors.ts';
import { useEngines } from './helpers/engines.ts';
import { writeSafetensors } from './helpers/safetensors.ts';

const DIR = new URL('./fixtures/weights/', import.meta.url);
const readBytes = (name: string) => new Uint8Array(readFileSync(new URL(name, DIR)));
const readJson = (name: string) => JSON.parse(readFileSync(new URL(name, DIR), 'utf8'));

const engines = useEngines('cpu');

function expectError(fn: () => unknown, kind: new (...args: never[]) => Error, ...fragments: string[]): void {
  let error: unknown;
  try {
    fn();
  } catch (e) {
    error = e;
  }
  expect(error, 'expected an error').toBeInstanceOf(kind);
  for (const f of fragments) expect((error as Error).message).toContain(f);
}

function expectSameStateDict(a: StateDict, b: StateDict): void {
  expect(Object.keys(a).sort()).toEqual(Object.keys(b).sort());
  for (const k of Object.keys(a)) expect(a[k], k).toEqual(b[k]);
}

const random = (n: number, seed: number) => uniform(n, 0.5, mulberry32(seed));

const FIXTURES: { name: string; layout: WeightLayout; prefix: string }[] = [
  { name: 'pytorch_mha', layout: 'pytorch', prefix: 'encoder.layers.0.self_attn.' },
  { name: 'bert_attention', layout: 'bert', prefix: 'bert.encoder.layer.0.' },
  { name: 'gpt2_attention', layout: 'gpt2', prefix: 'h.0.' },
  { name: 'pytorch_mha_f64_nobias', layout: 'pytorch', prefix: '' },
];

describe.each(FIXTURES)('$name: only numHeads given', ({ name, layout }) => {
  const json = readJson(`${name}.json`);
  const bytes = readBytes(`${name}.safetensors`);
  const { embedDim, numHeads, bias } = json.config;

  test("the config read from the file is the fixture's; the state_dict is the one of the full options", () => {
    const { config, stateDict } = attentionLayerFromSafetensors(bytes, { layout, prefix: json.prefix, numHeads });
    expect(config).toEqual({ embedDim, numHeads, bias });
    expectSameStateDict(stateDict, stateDictFromSafetensors(bytes, { layout, prefix: json.prefix, embedDim, numHeads, bias }));
  });

  test('stateDictFromSafetensors without embedDim gives the same state_dict', () => {
    const full = stateDictFromSafetensors(bytes, { layout, prefix: json.prefix, embedDim, numHeads, bias });
    expectSameStateDict(stateDictFromSafetensors(bytes, { layout, prefix: json.prefix, numHeads, bias }), full);
  });

  test('the layer it makes matches PyTorch (cpu backend)', async () => {
    const { config, stateDict } = attentionLayerFromSafetensors(bytes, { layout, prefix: json.prefix, numHeads });
    const layer = engines.cpu.createMultiHeadAttention(config, stateDict);
    try {
      const keyPaddingMask = json.keyPaddingMask ? { keyPaddingMask: Uint8Array.from(json.keyPaddingMask) } : {};
      const options: ForwardOptions = { ...json.options, ...keyPaddingMask };
      const { output } = await layer.forward(Float32Array.from(json.query), options);
      expectClose(output, Float32Array.from(json.output), { atol: 1e-6, rtol: 1e-5 }, `${name} output`);
    } finally {
      layer.dispose();
    }
  });
});

test("a numHeads that does not divide the file's embedDim: the error lists the ones that do", () => {
  expectError(
    () => attentionLayerFromSafetensors(readBytes('gpt2_attention.safetensors'), { layout: 'gpt2', prefix: 'h.0.', numHeads: 5 }),
    InvalidArgumentError,
    'options.numHeads',
    'a divisor of embedDim 32',
    '"h.0.attn.c_proj.weight" [32, 32]',
    '1, 2, 4, 8, 16, 32',
  );
});

test('nothing to read embedDim from: MissingWeightError naming the tensor and what the file has', () => {
  expectError(
    () => attentionLayerFromSafetensors(readBytes('gpt2_attention.safetensors'), { layout: 'gpt2', prefix: 'h.1.', numHeads: 2 }),
    MissingWeightError,
    '"h.1.attn.c_proj.weight"',
    'options.embedDim',
    'nothing under the prefix "h.1."',
  );
});

describe('sizes read from shapes', () => {
  const E = 16;
  const H = 4;
  const Dh = E / H;

  test('grouped-query (pytorch in_proj_weight of (H + 2G)·Dh rows) and no biases', () => {
    const G = 1;
    const N = (H + 2 * G) * Dh;
    const bytes = writeSafetensors({ in_proj_weight: { shape: [N, E], data: random(N * E, 1) }, 'out_proj.weight': { shape: [E, E], data: random(E * E, 2) } });
    const { config, stateDict } = attentionLayerFromSafetensors(bytes, { layout: 'pytorch', numHeads: H });
    expect(config).toEqual({ embedDim: E, numHeads: H, numKvHeads: G, bias: false });
    expect(Object.keys(stateDict).sort()).toEqual(['in_proj_weight', 'out_proj.weight']);
    // stateDictFromSafetensors keeps its defaults (numKvHeads = numHeads, bias true) and says what is wrong.
    expectError(() => stateDictFromSafetensors(bytes, { layout: 'pytorch', numHeads: H }), ShapeMismatchError, 'in_proj_weight', `[${3 * E}, ${E}]`);
  });

  test('grouped-query (bert key of G·Dh rows), and an explicit numKvHeads wins', () => {
    const G = 2;
    const t = (n: string, shape: number[], seed: number) => [n, { shape, data: random(shape[0] * (shape[1] ?? 1), seed) }] as const;
    const bytes = writeSafetensors(
      Object.fromEntries([
        t('attention.self.query.weight', [E, E], 1),
        t('attention.self.query.bias', [E], 2),
        t('attention.self.key.weight', [G * Dh, E], 3),
        t('attention.self.key.bias', [G * Dh], 4),
        t('attention.self.value.weight', [G * Dh, E], 5),
        t('attention.self.value.bias', [G * Dh], 6),
        t('attention.output.dense.weight', [E, E], 7),
        t('attention.output.dense.bias', [E], 8),
      ]),
    );
    expect(attentionLayerFromSafetensors(bytes, { layout: 'bert', numHeads: H }).config).toEqual({ embedDim: E, numHeads: H, numKvHeads: G, bias: true });
    expectError(() => attentionLayerFromSafetensors(bytes, { layout: 'bert', numHeads: H, numKvHeads: H }), ShapeMismatchError, 'attention.self.key.weight');
  });

  test('pytorch q/k/v_proj_weight: kdim and vdim from their columns', () => {
    const [kdim, vdim] = [6, 10];
    const bytes = writeSafetensors({
      q_proj_weight: { shape: [E, E], data: random(E * E, 1) },
      k_proj_weight: { shape: [E, kdim], data: random(E * kdim, 2) },
      v_proj_weight: { shape: [E, vdim], data: random(E * vdim, 3) },
      in_proj_bias: { shape: [3 * E], data: random(3 * E, 4) },
      'out_proj.weight': { shape: [E, E], data: random(E * E, 5) },
      'out_proj.bias': { shape: [E], data: random(E, 6) },
    });
    const { config, stateDict } = attentionLayerFromSafetensors(bytes, { layout: 'pytorch', numHeads: H });
    expect(config).toEqual({ embedDim: E, numHeads: H, bias: true, kdim, vdim });
    expectSameStateDict(stateDict, stateDictFromSafetensors(bytes, { layout: 'pytorch', embedDim: E, numHeads: H, kdim, vdim }));
  });
});

describe('options.names', () => {
  // The BERT fixture's tensors under names of another model (separate q/k/v nn.Linear layers).
  const bert = parseSafetensors(readBytes('bert_attention.safetensors'));
  const json = readJson('bert_attention.json');
  const RENAME: Record<string, string> = {
    'attention.self.query.weight': 'blocks.0.attn.q.weight',
    'attention.self.query.bias': 'blocks.0.attn.q.bias',
    'attention.self.key.weight': 'blocks.0.attn.k.weight',
    'attention.self.key.bias': 'blocks.0.attn.k.bias',
    'attention.self.value.weight': 'blocks.0.attn.v.weight',
    'attention.self.value.bias': 'blocks.0.attn.v.bias',
    'attention.output.dense.weight': 'blocks.0.attn.o.weight',
    'attention.output.dense.bias': 'blocks.0.attn.o.bias',
  };
  const renamed = writeSafetensors(
    Object.fromEntries(Object.entries(RENAME).map(([from, to]) => [to, { shape: bert.get(json.prefix + from)!.shape, data: bert.get(json.prefix + from)!.data }])),
  );
  const original = stateDictFromSafetensors(bert, { layout: 'bert', prefix: json.prefix, embedDim: 32, numHeads: 4 });

  test('mapped names are read as they are (no prefix); the state_dict is the original one', () => {
    expectSameStateDict(stateDictFromSafetensors(renamed, { layout: 'bert', names: RENAME, numHeads: 4 }), original);
    const { config, stateDict } = attentionLayerFromSafetensors(renamed, { layout: 'bert', prefix: 'ignored.', names: RENAME, numHeads: 4 });
    expect(config).toEqual({ embedDim: 32, numHeads: 4, bias: true });
    expectSameStateDict(stateDict, original);
  });

  test("names left out of the map are prefix + the layout's name", () => {
    const { 'attention.output.dense.weight': _w, 'attention.output.dense.bias': _b, ...some } = RENAME;
    const mixed = writeSafetensors({
      ...Object.fromEntries(Object.values(some).map((n) => [n, { shape: parseSafetensors(renamed).get(n)!.shape, data: parseSafetensors(renamed).get(n)!.data }])),
      'x.attention.output.dense.weight': { shape: [32, 32], data: original['out_proj.weight'] },
      'x.attention.output.dense.bias': { shape: [32], data: original['out_proj.bias'] },
    });
    expectSameStateDict(stateDictFromSafetensors(mixed, { layout: 'bert', prefix: 'x', names: some, numHeads: 4 }), original);
  });

  test('a mapped name the file lacks, a key the layout does not read, a value that is not a name', () => {
    expectError(
      () => stateDictFromSafetensors(renamed, { layout: 'bert', names: { ...RENAME, 'attention.self.key.weight': 'blocks.0.attn.key.weight' }, numHeads: 4 }),
      MissingWeightError,
      '"blocks.0.attn.key.weight"',
      'options.names["attention.self.key.weight"] is "blocks.0.attn.key.weight", which the file lacks',
    );
    expectError(
      () => stateDictFromSafetensors(renamed, { layout: 'bert', names: { query: 'blocks.0.attn.q.weight' }, numHeads: 4 }),
      InvalidArgumentError,
      'options.names["query"]',
      'attention.self.query.weight',
    );
    expectError(
      () => stateDictFromSafetensors(renamed, { layout: 'gpt2', names: { 'attn.c_attn.weight': 7 } as never, numHeads: 4 }),
      InvalidArgumentError,
      'a tensor name',
    );
    expectError(() => stateDictFromSafetensors(renamed, { layout: 'gpt2', names: ['a'] as never, numHeads: 4 }), InvalidArgumentError, 'options.names');
  });
});
