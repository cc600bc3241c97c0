// From the tensor names and layouts of real checkpoints to the engine's state_dict (PyTorch
// nn.MultiheadAttention's names and [out, in] layout), with custom names (options.names) and the
// sizes the options leave out read from the file's shapes (./load.ts reads the file itself).
//
//   layout     tensors read, under `prefix`                                   → engine state_dict
//   'pytorch'  in_proj_weight [(H+2G)·Dh, E], in_proj_bias, out_proj.weight    the same names, as they are
//              [E, E], out_proj.bias (or q/k/v_proj_weight when kdim/vdim ≠ E)
//   'bert'     attention.self.{query,key,value}.{weight,bias}: nn.Linear,     query/key/value weights stacked
//              weight [out, in], y = x·Wᵀ + b; attention.output.dense.*        into in_proj_weight; dense → out_proj
//   'gpt2'     attn.c_attn.weight [E, 3E], .bias [3E]; attn.c_proj.weight      weights TRANSPOSED to [out, in]
//              [E, E], .bias: Conv1D, weight [in, out], y = x·W + b
//
// Hugging Face's BERT attention (BertSelfAttention + BertSelfOutput.dense, before its dropout,
// residual and LayerNorm) and GPT-2's (GPT2Attention; call forward with isCausal: true) are then this
// engine's layer: the head split (head h = output channels h·Dh … h·Dh + Dh − 1), the 1/√Dh scale and
// the order q, k, v are the same.

import { InvalidArgumentError, MissingWeightError, ShapeMismatchError } from '../errors.ts';
import type { MultiHeadAttentionConfig, StateDict } from '../types.ts';
import { LAYOUT_MARKERS, type ResolvedLayoutOptions, type SafetensorsLayoutOptions, type WeightLayout, resolveLayoutOptions } from './layout-options.ts';
import { type SafetensorsFile, type SafetensorsTensor, parseSafetensors } from './safetensors.ts';

export type { SafetensorsLayoutOptions, WeightLayout } from './layout-options.ts';
export { loadSafetensors } from './load.ts';

const WHERE = 'stateDictFromSafetensors';

interface Sizes {
  E: number;
  H: number;
  G: number;
  Dh: number;
  kdim: number;
  vdim: number;
  bias: boolean;
}

/** Where a layout reads E from: a tensor and the axis that holds E (the first present is used). */
const EMBED_DIM_SOURCES: Record<WeightLayout, [string, number][]> = {
  pytorch: [
    ['out_proj.weight', 0],
    ['in_proj_weight', 1],
    ['q_proj_weight', 0],
  ],
  bert: [
    ['attention.output.dense.weight', 0],
    ['attention.self.query.weight', 1],
  ],
  gpt2: [
    ['attn.c_proj.weight', 0],
    ['attn.c_attn.weight', 0],
  ],
};

/** The file's name of the layout's tensor `suffix`: options.names, else prefix + suffix. */
const nameIn = (o: ResolvedLayoutOptions, suffix: string) => o.names[suffix] ?? o.prefix + suffix;

/**
 * The sizes the options left out, read from the file's shapes. `infer` says whether numKvHeads, bias,
 * kdim and vdim are read too (attentionLayerFromSafetensors) or take their defaults (stateDictFromSafetensors).
 */
function resolveSizes(where: string, o: ResolvedLayoutOptions, file: SafetensorsFile, infer: boolean): Sizes {
  const { layout, H } = o;
  const shapeOf = (suffix: string) => file.get(nameIn(o, suffix))?.shape;
  let E = o.E;
  if (E === undefined) {
    const sources = EMBED_DIM_SOURCES[layout];
    const found = sources.find(([suffix]) => shapeOf(suffix)?.length === 2);
    if (!found) {
      const [suffix] = sources[0];
      throw new MissingWeightError({
        where,
        argument: `tensor "${nameIn(o, suffix)}"`,
        expected: `present, to read embedDim from (layout '${layout}'); or options.embedDim`,
        given: 'no such tensor in the file',
        fix: whatTheFileHas(file, o, suffix),
      });
    }
    E = shapeOf(found[0])![found[1]];
    if (E % H !== 0) {
      const divisors = [];
      for (let h = 1; h <= E && divisors.length < 12; h++) if (E % h === 0) divisors.push(h);
      throw new InvalidArgumentError({
        where,
        argument: 'options.numHeads',
        expected: `a divisor of embedDim ${E} (read from tensor "${nameIn(o, found[0])}" ${shapeText(shapeOf(found[0])!)})`,
        given: String(H),
        fix: `Heads that divide ${E}: ${divisors.join(', ')}${divisors.length === 12 ? ', …' : ''}; take the model's num_attention_heads / n_head.`,
      });
    }
  }
  const Dh = E / H;
  const separate = layout === 'pytorch' && !file.has(nameIn(o, 'in_proj_weight')) && file.has(nameIn(o, 'q_proj_weight'));
  let G = o.G;
  if (G === undefined && infer) {
    // Rows of the key projection (G·Dh), or of the fused one ((H + 2G)·Dh); a count that is not a divisor of H is left to the shape checks.
    const kvRows =
      layout === 'bert'
        ? shapeOf('attention.self.key.weight')?.[0]
        : separate
          ? shapeOf('k_proj_weight')?.[0]
          : (() => {
              const rows = layout === 'gpt2' ? shapeOf('attn.c_attn.weight')?.[1] : shapeOf('in_proj_weight')?.[0];
              return rows === undefined ? undefined : (rows - H * Dh) / 2;
            })();
    const g = kvRows === undefined ? H : kvRows / Dh;
    G = Number.isInteger(g) && g >= 1 && H % g === 0 ? g : H;
  }
  const bias =
    o.bias ??
    (infer && layout === 'pytorch' ? file.has(nameIn(o, 'in_proj_bias')) || file.has(nameIn(o, 'out_proj.bias')) || !file.has(nameIn(o, 'out_proj.weight')) : true);
  const width = (value: number | undefined, suffix: string) => value ?? (infer && separate ? (shapeOf(suffix)?.[1] ?? E) : E);
  return { E, H, G: G ?? H, Dh, kdim: width(o.kdim, 'k_proj_weight'), vdim: width(o.vdim, 'v_proj_weight'), bias };
}

const shapeText = (shape: readonly number[]) => `[${shape.join(', ')}]`;

/** A few names of the file, those under `prefix` first; and the prefixes under which `suffix` occurs. */
function whatTheFileHas(file: SafetensorsFile, o: ResolvedLayoutOptions, suffix: string): string {
  const { prefix, layout } = o;
  const names = [...file.keys()];
  const under = names.filter((n) => n.startsWith(prefix));
  const list = (xs: string[]) =>
    xs
      .slice(0, 6)
      .map((n) => `"${n}" ${shapeText(file.get(n)!.shape)}`)
      .join(', ') + (xs.length > 6 ? `, … (${xs.length} in all)` : '');
  const parts: string[] = [];
  const mapped = o.names[suffix];
  if (mapped !== undefined) parts.push(`options.names["${suffix}"] is "${mapped}", which the file lacks.`);
  if (names.length === 0) parts.push('The file has no tensors.');
  else if (prefix && under.length === 0) parts.push(`The file has nothing under the prefix "${prefix}"; it has ${list(names)}.`);
  else parts.push(`Under ${prefix ? `"${prefix}"` : 'no prefix'} the file has ${list(under)}.`);
  const prefixes = [...new Set(names.filter((n) => n.endsWith(suffix)).map((n) => n.slice(0, n.length - suffix.length)))];
  if (mapped !== undefined) {
    // the map names the tensor: a prefix would not help
  } else if (prefixes.length && !prefixes.includes(prefix)) {
    parts.push(
      `"${suffix}" is in the file under the prefix${prefixes.length > 1 ? 'es' : ''} ${prefixes
        .slice(0, 4)
        .map((p) => `"${p}"`)
        .join(', ')}${prefixes.length > 4 ? ', …' : ''}: pass one as options.prefix.`,
    );
  } else if (!prefixes.length) {
    const other = (Object.keys(LAYOUT_MARKERS) as WeightLayout[]).find((l) => l !== layout && names.some((n) => n.endsWith(LAYOUT_MARKERS[l])));
    if (other) parts.push(`The file looks like layout '${other}' (it has "…${LAYOUT_MARKERS[other]}"): pass layout: '${other}'.`);
  }
  return parts.join(' ');
}

/** Reads the layout's tensor `suffix` (options.names, else prefix + suffix) and checks its shape; throws MissingWeightError / ShapeMismatchError. */
function take(file: SafetensorsFile, o: ResolvedLayoutOptions, suffix: string, shape: number[], hint: (found: number[]) => string): Float32Array {
  const { layout } = o;
  const name = nameIn(o, suffix);
  const tensor: SafetensorsTensor | undefined = file.get(name);
  if (!tensor) {
    throw new MissingWeightError({
      where: WHERE,
      argument: `tensor "${name}"`,
      expected: `present (layout '${layout}', shape ${shapeText(shape)})`,
      given: 'no such tensor in the file',
      fix: whatTheFileHas(file, o, suffix),
    });
  }
  const ok = tensor.shape.length === shape.length && tensor.shape.every((d, i) => d === shape[i]);
  if (!ok) {
    throw new ShapeMismatchError({
      where: WHERE,
      argument: `tensor "${name}"`,
      expected: `of shape ${shapeText(shape)} for layout '${layout}'`,
      given: `shape ${shapeText(tensor.shape)}`,
      fix: hint(tensor.shape),
    });
  }
  return tensor.data;
}

/**
 * A fix for a wrong shape, with the embedDim the file's tensor suggests: `inDim` is the axis holding
 * E (the input channels of a weight, the only axis of an [E] bias), `per` how many E it spans there.
 */
function sizesHint(s: Sizes, found: number[], what: string, inDim: number, per = 1): string {
  const d = found.length === 2 || (found.length === 1 && inDim === 0) ? found[inDim] : undefined;
  const guess = d !== undefined && d % per === 0 ? d / per : undefined;
  return `The options say embedDim ${s.E}, numHeads ${s.H}${s.G !== s.H ? `, numKvHeads ${s.G}` : ''} (head size ${s.Dh}); ${
    guess && guess !== s.E ? `this ${what} suggests embedDim ${guess}: ` : ''
  }check embedDim, numHeads and numKvHeads against the model's config.json (hidden_size / n_embd, num_attention_heads / n_head).`;
}

/** [rows, cols] row-major → [cols, rows]. */
export function transpose(m: Float32Array, rows: number, cols: number): Float32Array {
  const t = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) t[c * rows + r] = m[r * cols + c];
  }
  return t;
}

/**
 * The engine's StateDict (PyTorch nn.MultiheadAttention names: in_proj_weight, in_proj_bias,
 * out_proj.weight, out_proj.bias) of one attention layer of a parsed safetensors file (or its bytes).
 * Create the layer with the same sizes: createMultiHeadAttention({ embedDim, numHeads, numKvHeads,
 * bias }, stateDict) (and kdim/vdim for a pytorch file with separate projections).
 *
 * Throws MissingWeightError naming the tensor and listing what the file has under the prefix (and
 * the prefixes where the name does occur), ShapeMismatchError for a tensor of another shape than the
 * sizes need, WeightFileError for a file that cannot be parsed.
 */
export function stateDictFromSafetensors(file: SafetensorsFile | ArrayBuffer | Uint8Array, options: SafetensorsLayoutOptions): StateDict {
  const o = resolveLayoutOptions(WHERE, options);
  const tensors = file instanceof Map ? file : parseSafetensors(file);
  return readLayer(tensors, o, resolveSizes(WHERE, o, tensors, false));
}

/**
 * One attention layer of a safetensors file as the config and state_dict of createMultiHeadAttention:
 * the same options as stateDictFromSafetensors, but only numHeads is needed (it cannot be read from
 * the weights); embedDim, numKvHeads, bias and (pytorch) kdim/vdim are read from the file's shapes
 * when left out. `engine.createMultiHeadAttention(config, stateDict)` then takes them as they are.
 * Throws as stateDictFromSafetensors does, and InvalidArgumentError when numHeads does not divide
 * the file's embedDim (listing the head counts that do).
 */
export function attentionLayerFromSafetensors(
  file: SafetensorsFile | ArrayBuffer | Uint8Array,
  options: SafetensorsLayoutOptions,
): { config: MultiHeadAttentionConfig; stateDict: StateDict } {
  const where = 'attentionLayerFromSafetensors';
  const o = resolveLayoutOptions(where, options);
  const tensors = file instanceof Map ? file : parseSafetensors(file);
  const s = resolveSizes(where, o, tensors, true);
  const stateDict = readLayer(tensors, o, s);
  const config: MultiHeadAttentionConfig = { embedDim: s.E, numHeads: s.H, bias: s.bias };
  if (s.G !== s.H) config.numKvHeads = s.G;
  if (s.kdim !== s.E) config.kdim = s.kdim;
  if (s.vdim !== s.E) config.vdim = s.vdim;
  return { config, stateDict };
}

function readLayer(tensors: SafetensorsFile, o: ResolvedLayoutOptions, s: Sizes): StateDict {
  const { layout } = o;
  const { E, H, G, Dh } = s;
  const N = (H + 2 * G) * Dh; // rows of in_proj_weight
  const sd: StateDict = {};

  if (layout === 'pytorch') {
    const get = (suffix: string, shape: number[]) =>
      take(tensors, o, suffix, shape, (f) =>
        sizesHint(
          s,
          f,
          suffix,
          suffix === 'k_proj_weight' || suffix === 'v_proj_weight' ? -1 : shape.length === 2 ? 1 : 0,
          suffix === 'in_proj_bias' && s.G === s.H ? 3 : 1,
        ),
      );
    const separate = s.kdim !== E || s.vdim !== E || (!tensors.has(nameIn(o, 'in_proj_weight')) && tensors.has(nameIn(o, 'q_proj_weight')));
    if (separate) {
      sd.q_proj_weight = get('q_proj_weight', [H * Dh, E]);
      sd.k_proj_weight = get('k_proj_weight', [G * Dh, s.kdim]);
      sd.v_proj_weight = get('v_proj_weight', [G * Dh, s.vdim]);
    } else {
      sd.in_proj_weight = get('in_proj_weight', [N, E]);
    }
    sd['out_proj.weight'] = get('out_proj.weight', [E, E]);
    if (s.bias) {
      if (!tensors.has(nameIn(o, 'in_proj_bias')) && !tensors.has(nameIn(o, 'out_proj.bias')) && tensors.has(nameIn(o, 'out_proj.weight'))) {
        throw new MissingWeightError({
          where: WHERE,
          argument: `tensor "${nameIn(o, 'in_proj_bias')}"`,
          expected: `present (layout 'pytorch', shape [${N}])`,
          given: 'no biases in the file',
          fix: 'The layer was saved with bias=False: pass bias: false here and to createMultiHeadAttention.',
        });
      }
      sd.in_proj_bias = get('in_proj_bias', [N]);
      sd['out_proj.bias'] = get('out_proj.bias', [E]);
    }
    return sd;
  }

  if (layout === 'bert') {
    const linear = (name: string, rows: number) => {
      return {
        weight: take(tensors, o, `${name}.weight`, [rows, E], (f) => sizesHint(s, f, `${name}.weight`, 1)),
        bias: take(tensors, o, `${name}.bias`, [rows], (f) => sizesHint(s, f, `${name}.bias`, rows === E ? 0 : -1)),
      };
    };
    const q = linear('attention.self.query', H * Dh);
    const k = linear('attention.self.key', G * Dh);
    const v = linear('attention.self.value', G * Dh);
    const out = linear('attention.output.dense', E);
    // nn.Linear stores [out, in] like in_proj_weight: stack the rows, q then k then v.
    const w = new Float32Array(N * E);
    w.set(q.weight, 0);
    w.set(k.weight, H * Dh * E);
    w.set(v.weight, (H + G) * Dh * E);
    const b = new Float32Array(N);
    b.set(q.bias, 0);
    b.set(k.bias, H * Dh);
    b.set(v.bias, (H + G) * Dh);
    sd.in_proj_weight = w;
    sd.in_proj_bias = b;
    sd['out_proj.weight'] = out.weight;
    sd['out_proj.bias'] = out.bias;
    return sd;
  }

  // gpt2: Conv1D keeps weight [in, out] (y = x·W + b); the engine wants [out, in].
  const conv1dHint = (name: string, out: number) => (f: number[]) =>
    f.length === 2 && f[0] === out && f[1] === E && out !== E
      ? `It is [out, in] = [${out}, ${E}], nn.Linear's layout, not GPT-2 Conv1D's [in, out] = [${E}, ${out}]: the weights were already transposed; build the state_dict with layout 'pytorch' names, or transpose back.`
      : sizesHint(s, f, name, 0);
  const cAttnW = take(tensors, o, 'attn.c_attn.weight', [E, N], conv1dHint('attn.c_attn.weight', N));
  const cAttnB = take(tensors, o, 'attn.c_attn.bias', [N], (f) => sizesHint(s, f, 'attn.c_attn.bias', 0, s.G === s.H ? 3 : 1));
  const cProjW = take(tensors, o, 'attn.c_proj.weight', [E, E], conv1dHint('attn.c_proj.weight', E));
  const cProjB = take(tensors, o, 'attn.c_proj.bias', [E], (f) => sizesHint(s, f, 'attn.c_proj.bias', 0));
  sd.in_proj_weight = transpose(cAttnW, E, N);
  sd.in_proj_bias = cAttnB;
  sd['out_proj.weight'] = transpose(cProjW, E, E);
  sd['out_proj.bias'] = cProjB;
  return sd;
}
