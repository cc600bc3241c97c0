// The options of stateDictFromSafetensors and attentionLayerFromSafetensors, checked before the file
// is read: the layout, the prefix, a name map, and whichever sizes the caller gave (the rest are read
// from the file's shapes in ./layouts.ts).

import { InvalidArgumentError } from '../errors.ts';
import { describe, knownKeys, rejectUnknownKeys, requireBoolean, requireObject, requirePositiveInteger } from '../validate.ts';

export type WeightLayout = 'pytorch' | 'bert' | 'gpt2';

export interface SafetensorsLayoutOptions {
  /** Whose names and layout the file uses (see ./layouts.ts's comment). */
  layout: WeightLayout;
  /**
   * Prepended to every name: e.g. 'encoder.layers.0.self_attn.' (pytorch), 'encoder.layer.3.' or
   * 'bert.encoder.layer.3.' (bert), 'h.0.' or 'transformer.h.0.' (gpt2). A missing final '.' is added.
   * Default ''.
   */
  prefix?: string;
  /**
   * Custom tensor names: the layout's name (as in the table of ./layouts.ts, without the prefix) →
   * the file's full name, which is read as it is (no prefix). Names left out are prefix + the
   * layout's name. E.g. a model with separate q/k/v nn.Linear layers under other names, with layout
   * 'bert': { 'attention.self.query.weight': 'blocks.0.attn.q.weight', … }.
   */
  names?: Record<string, string>;
  /** E. Default: read from the file (the output projection's weight is [E, E]). */
  embedDim?: number;
  /** H: cannot be read from the weights (a head is a slice of the rows); embedDim must be divisible by it. */
  numHeads: number;
  /**
   * G (grouped-query attention: key/value projections of G·Dh rows). stateDictFromSafetensors:
   * default numHeads; attentionLayerFromSafetensors: default read from the file.
   */
  numKvHeads?: number;
  /**
   * Whether to read biases ('pytorch' only may say false: a layer built with bias=False).
   * stateDictFromSafetensors: default true; attentionLayerFromSafetensors: default whether the file has them.
   */
  bias?: boolean;
  /**
   * 'pytorch' only: channels of key/value when they differ from E (then q/k/v_proj_weight are read).
   * attentionLayerFromSafetensors reads them from the file when left out.
   */
  kdim?: number;
  vdim?: number;
}

/** SafetensorsLayoutOptions' keys (checked against the type: knownKeys). */
const OPTION_KEYS = knownKeys<SafetensorsLayoutOptions>({
  layout: true,
  prefix: true,
  names: true,
  embedDim: true,
  numHeads: true,
  numKvHeads: true,
  bias: true,
  kdim: true,
  vdim: true,
});

/** The tensor names of each layout (under the prefix), which options.names may map. */
export const LAYOUT_NAMES: Record<WeightLayout, readonly string[]> = {
  pytorch: ['in_proj_weight', 'in_proj_bias', 'out_proj.weight', 'out_proj.bias', 'q_proj_weight', 'k_proj_weight', 'v_proj_weight'],
  bert: [
    'attention.self.query.weight',
    'attention.self.query.bias',
    'attention.self.key.weight',
    'attention.self.key.bias',
    'attention.self.value.weight',
    'attention.self.value.bias',
    'attention.output.dense.weight',
    'attention.output.dense.bias',
  ],
  gpt2: ['attn.c_attn.weight', 'attn.c_attn.bias', 'attn.c_proj.weight', 'attn.c_proj.bias'],
};

/** Names that identify a layout, to say which one a file looks like. */
export const LAYOUT_MARKERS: Record<WeightLayout, string> = {
  pytorch: 'in_proj_weight',
  bert: 'attention.self.query.weight',
  gpt2: 'attn.c_attn.weight',
};

/** The options as given, checked; sizes the caller left out are undefined. */
export interface ResolvedLayoutOptions {
  layout: WeightLayout;
  prefix: string;
  names: Record<string, string>;
  E: number | undefined;
  H: number;
  G: number | undefined;
  kdim: number | undefined;
  vdim: number | undefined;
  bias: boolean | undefined;
}

export function resolveLayoutOptions(where: string, options: unknown): ResolvedLayoutOptions {
  const o = requireObject(where, 'options', options, "Pass { layout: 'pytorch' | 'bert' | 'gpt2', numHeads }.");
  rejectUnknownKeys(where, 'options', o, OPTION_KEYS);
  const layout = o.layout as WeightLayout;
  if (!(Object.keys(LAYOUT_MARKERS) as unknown[]).includes(layout)) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.layout',
      expected: "'pytorch', 'bert' or 'gpt2'",
      given: describe(o.layout),
      fix: "'pytorch': nn.MultiheadAttention names; 'bert': Hugging Face BERT (attention.self.query…); 'gpt2': Hugging Face GPT-2 (attn.c_attn…). Other names: pick the layout whose tensors match and map them with options.names.",
    });
  }
  if (o.prefix !== undefined && typeof o.prefix !== 'string') {
    throw new InvalidArgumentError({ where, argument: 'options.prefix', expected: "a string such as 'encoder.layer.0.'", given: describe(o.prefix) });
  }
  let prefix = (o.prefix as string | undefined) ?? '';
  if (prefix && !prefix.endsWith('.')) prefix += '.';
  const names = resolveNames(where, layout, o.names);
  const E = o.embedDim === undefined ? undefined : requirePositiveInteger(where, 'options.embedDim', o.embedDim);
  const H = requirePositiveInteger(
    where,
    'options.numHeads',
    o.numHeads,
    "The weights do not say how many heads they hold: pass the model's num_attention_heads / n_head.",
  );
  if (E !== undefined && E % H !== 0) {
    throw new InvalidArgumentError({ where, argument: 'options.embedDim', expected: `divisible by numHeads (${H})`, given: String(E) });
  }
  const G = o.numKvHeads === undefined ? undefined : requirePositiveInteger(where, 'options.numKvHeads', o.numKvHeads);
  if (G !== undefined && H % G !== 0) {
    throw new InvalidArgumentError({ where, argument: 'options.numKvHeads', expected: `a divisor of numHeads (${H})`, given: String(G) });
  }
  const bias = o.bias === undefined ? undefined : requireBoolean(where, 'options.bias', o.bias);
  if (bias === false && layout !== 'pytorch') {
    throw new InvalidArgumentError({
      where,
      argument: 'options.bias',
      expected: `true or left out with layout '${layout}'`,
      given: 'false',
      fix: `${layout === 'bert' ? 'BERT' : 'GPT-2'} attention always has biases.`,
    });
  }
  for (const k of ['kdim', 'vdim'] as const) {
    if (o[k] !== undefined && layout !== 'pytorch') {
      throw new InvalidArgumentError({
        where,
        argument: `options.${k}`,
        expected: `left out with layout '${layout}'`,
        given: describe(o[k]),
        fix: 'Only the pytorch layout has separate key/value widths.',
      });
    }
  }
  const kdim = o.kdim === undefined ? undefined : requirePositiveInteger(where, 'options.kdim', o.kdim);
  const vdim = o.vdim === undefined ? undefined : requirePositiveInteger(where, 'options.vdim', o.vdim);
  return { layout, prefix, names, E, H, G, kdim, vdim, bias };
}

function resolveNames(where: string, layout: WeightLayout, value: unknown): Record<string, string> {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidArgumentError({
      where,
      argument: 'options.names',
      expected: "an object { '<layout name>': '<name in the file>' }",
      given: describe(value),
    });
  }
  const known = LAYOUT_NAMES[layout];
  const names: Record<string, string> = {};
  for (const [key, name] of Object.entries(value)) {
    if (!known.includes(key)) {
      throw new InvalidArgumentError({
        where,
        argument: `options.names["${key}"]`,
        expected: `one of layout '${layout}''s names: ${known.join(', ')}`,
        given: 'a name the layout does not read',
        fix: "The keys are the layout's names without the prefix; the values are the full names in the file.",
      });
    }
    if (typeof name !== 'string' || name === '') {
      throw new InvalidArgumentError({ where, argument: `options.names["${key}"]`, expected: 'a tensor name of the file (a non-empty string)', given: describe(name) });
    }
    names[key] = name;
  }
  return names;
}
