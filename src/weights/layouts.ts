// From the tensor names and layouts of real checkpoints to the engine's state_dict (PyTorch
// nn.MultiheadAttention's names and [out, in] layout), and loading files from wherever they are.
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
import { importNodeOnly } from '../node-only.ts';
import type { StateDict } from '../types.ts';
import { describe, rejectUnknownKeys, requireBoolean, requireObject, requirePositiveInteger } from '../validate.ts';
import { type SafetensorsFile, type SafetensorsTensor, WeightFileError, parseSafetensors } from './safetensors.ts';

export type WeightLayout = 'pytorch' | 'bert' | 'gpt2';

export interface SafetensorsLayoutOptions {
  /** Whose names and layout the file uses (see the module's comment). */
  layout: WeightLayout;
  /**
   * Prepended to every name: e.g. 'encoder.layers.0.self_attn.' (pytorch), 'encoder.layer.3.' or
   * 'bert.encoder.layer.3.' (bert), 'h.0.' or 'transformer.h.0.' (gpt2). A missing final '.' is added.
   * Default ''.
   */
  prefix?: string;
  /** E. */
  embedDim: number;
  /** H. */
  numHeads: number;
  /** G (grouped-query attention: key/value projections of G·Dh rows). Default numHeads. */
  numKvHeads?: number;
  /** Whether to read biases. Default true; 'pytorch' only may say false (a layer built with bias=False). */
  bias?: boolean;
  /** 'pytorch' only: channels of key/value when they differ from E (then q/k/v_proj_weight are read). */
  kdim?: number;
  vdim?: number;
}

const WHERE = 'stateDictFromSafetensors';
const OPTION_KEYS = ['layout', 'prefix', 'embedDim', 'numHeads', 'numKvHeads', 'bias', 'kdim', 'vdim'] as const;

/** Names that identify a layout, to say which one a file looks like. */
const LAYOUT_MARKERS: Record<WeightLayout, string> = {
  pytorch: 'in_proj_weight',
  bert: 'attention.self.query.weight',
  gpt2: 'attn.c_attn.weight',
};

interface Sizes {
  E: number;
  H: number;
  G: number;
  Dh: number;
  kdim: number;
  vdim: number;
  bias: boolean;
}

function resolveOptions(options: unknown): { layout: WeightLayout; prefix: string } & Sizes {
  const o = requireObject(WHERE, 'options', options, "Pass { layout: 'pytorch' | 'bert' | 'gpt2', embedDim, numHeads }.");
  rejectUnknownKeys(WHERE, 'options', o, OPTION_KEYS);
  const layout = o.layout as WeightLayout;
  if (!(Object.keys(LAYOUT_MARKERS) as unknown[]).includes(layout)) {
    throw new InvalidArgumentError({
      where: WHERE,
      argument: 'options.layout',
      expected: "'pytorch', 'bert' or 'gpt2'",
      given: describe(o.layout),
      fix: "'pytorch': nn.MultiheadAttention names; 'bert': Hugging Face BERT (attention.self.query…); 'gpt2': Hugging Face GPT-2 (attn.c_attn…).",
    });
  }
  if (o.prefix !== undefined && typeof o.prefix !== 'string') {
    throw new InvalidArgumentError({ where: WHERE, argument: 'options.prefix', expected: "a string such as 'encoder.layer.0.'", given: describe(o.prefix) });
  }
  let prefix = (o.prefix as string | undefined) ?? '';
  if (prefix && !prefix.endsWith('.')) prefix += '.';
  const E = requirePositiveInteger(WHERE, 'options.embedDim', o.embedDim);
  const H = requirePositiveInteger(WHERE, 'options.numHeads', o.numHeads);
  if (E % H !== 0) {
    throw new InvalidArgumentError({ where: WHERE, argument: 'options.embedDim', expected: `divisible by numHeads (${H})`, given: String(E) });
  }
  const G = o.numKvHeads === undefined ? H : requirePositiveInteger(WHERE, 'options.numKvHeads', o.numKvHeads);
  if (H % G !== 0) {
    throw new InvalidArgumentError({ where: WHERE, argument: 'options.numKvHeads', expected: `a divisor of numHeads (${H})`, given: String(G) });
  }
  const bias = o.bias === undefined ? true : requireBoolean(WHERE, 'options.bias', o.bias);
  if (!bias && layout !== 'pytorch') {
    throw new InvalidArgumentError({
      where: WHERE,
      argument: 'options.bias',
      expected: `true or left out with layout '${layout}'`,
      given: 'false',
      fix: `${layout === 'bert' ? 'BERT' : 'GPT-2'} attention always has biases.`,
    });
  }
  for (const k of ['kdim', 'vdim'] as const) {
    if (o[k] !== undefined && layout !== 'pytorch') {
      throw new InvalidArgumentError({
        where: WHERE,
        argument: `options.${k}`,
        expected: `left out with layout '${layout}'`,
        given: describe(o[k]),
        fix: 'Only the pytorch layout has separate key/value widths.',
      });
    }
  }
  const kdim = o.kdim === undefined ? E : requirePositiveInteger(WHERE, 'options.kdim', o.kdim);
  const vdim = o.vdim === undefined ? E : requirePositiveInteger(WHERE, 'options.vdim', o.vdim);
  return { layout, prefix, E, H, G, Dh: E / H, kdim, vdim, bias };
}

const shapeText = (shape: readonly number[]) => `[${shape.join(', ')}]`;

/** A few names of the file, those under `prefix` first; and the prefixes under which `suffix` occurs. */
function whatTheFileHas(file: SafetensorsFile, prefix: string, suffix: string, layout: WeightLayout): string {
  const names = [...file.keys()];
  const under = names.filter((n) => n.startsWith(prefix));
  const list = (xs: string[]) =>
    xs
      .slice(0, 6)
      .map((n) => `"${n}" ${shapeText(file.get(n)!.shape)}`)
      .join(', ') + (xs.length > 6 ? `, … (${xs.length} in all)` : '');
  const parts: string[] = [];
  if (names.length === 0) parts.push('The file has no tensors.');
  else if (prefix && under.length === 0) parts.push(`The file has nothing under the prefix "${prefix}"; it has ${list(names)}.`);
  else parts.push(`Under ${prefix ? `"${prefix}"` : 'no prefix'} the file has ${list(under)}.`);
  const prefixes = [...new Set(names.filter((n) => n.endsWith(suffix)).map((n) => n.slice(0, n.length - suffix.length)))];
  if (prefixes.length && !prefixes.includes(prefix)) {
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

/** Reads `prefix + suffix` and checks its shape; throws MissingWeightError / ShapeMismatchError. */
function take(file: SafetensorsFile, prefix: string, suffix: string, shape: number[], layout: WeightLayout, hint: (found: number[]) => string): Float32Array {
  const name = prefix + suffix;
  const tensor: SafetensorsTensor | undefined = file.get(name);
  if (!tensor) {
    throw new MissingWeightError({
      where: WHERE,
      argument: `tensor "${name}"`,
      expected: `present (layout '${layout}', shape ${shapeText(shape)})`,
      given: 'no such tensor in the file',
      fix: whatTheFileHas(file, prefix, suffix, layout),
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
  const s = resolveOptions(options);
  const tensors = file instanceof Map ? file : parseSafetensors(file);
  const { layout, prefix, E, H, G, Dh } = s;
  const N = (H + 2 * G) * Dh; // rows of in_proj_weight
  const sd: StateDict = {};

  if (layout === 'pytorch') {
    const get = (suffix: string, shape: number[]) =>
      take(tensors, prefix, suffix, shape, layout, (f) =>
        sizesHint(
          s,
          f,
          suffix,
          suffix === 'k_proj_weight' || suffix === 'v_proj_weight' ? -1 : shape.length === 2 ? 1 : 0,
          suffix === 'in_proj_bias' && s.G === s.H ? 3 : 1,
        ),
      );
    const separate = s.kdim !== E || s.vdim !== E || (!tensors.has(`${prefix}in_proj_weight`) && tensors.has(`${prefix}q_proj_weight`));
    if (separate) {
      sd.q_proj_weight = get('q_proj_weight', [H * Dh, E]);
      sd.k_proj_weight = get('k_proj_weight', [G * Dh, s.kdim]);
      sd.v_proj_weight = get('v_proj_weight', [G * Dh, s.vdim]);
    } else {
      sd.in_proj_weight = get('in_proj_weight', [N, E]);
    }
    sd['out_proj.weight'] = get('out_proj.weight', [E, E]);
    if (s.bias) {
      if (!tensors.has(`${prefix}in_proj_bias`) && !tensors.has(`${prefix}out_proj.bias`) && tensors.has(`${prefix}out_proj.weight`)) {
        throw new MissingWeightError({
          where: WHERE,
          argument: `tensor "${prefix}in_proj_bias"`,
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
        weight: take(tensors, prefix, `${name}.weight`, [rows, E], layout, (f) => sizesHint(s, f, `${name}.weight`, 1)),
        bias: take(tensors, prefix, `${name}.bias`, [rows], layout, (f) => sizesHint(s, f, `${name}.bias`, rows === E ? 0 : -1)),
      };
    };
    const q = linear('attention.self.query', H * Dh);
    const k = linear('attention.self.key', G * Dh);
    const v = linear('attention.self.value', G * Dh);
    const o = linear('attention.output.dense', E);
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
    sd['out_proj.weight'] = o.weight;
    sd['out_proj.bias'] = o.bias;
    return sd;
  }

  // gpt2: Conv1D keeps weight [in, out] (y = x·W + b); the engine wants [out, in].
  const conv1dHint = (name: string, out: number) => (f: number[]) =>
    f.length === 2 && f[0] === out && f[1] === E && out !== E
      ? `It is [out, in] = [${out}, ${E}], nn.Linear's layout, not GPT-2 Conv1D's [in, out] = [${E}, ${out}]: the weights were already transposed; build the state_dict with layout 'pytorch' names, or transpose back.`
      : sizesHint(s, f, name, 0);
  const cAttnW = take(tensors, prefix, 'attn.c_attn.weight', [E, N], layout, conv1dHint('attn.c_attn.weight', N));
  const cAttnB = take(tensors, prefix, 'attn.c_attn.bias', [N], layout, (f) => sizesHint(s, f, 'attn.c_attn.bias', 0, s.G === s.H ? 3 : 1));
  const cProjW = take(tensors, prefix, 'attn.c_proj.weight', [E, E], layout, conv1dHint('attn.c_proj.weight', E));
  const cProjB = take(tensors, prefix, 'attn.c_proj.bias', [E], layout, (f) => sizesHint(s, f, 'attn.c_proj.bias', 0));
  sd.in_proj_weight = transpose(cAttnW, E, N);
  sd.in_proj_bias = cAttnB;
  sd['out_proj.weight'] = transpose(cProjW, E, E);
  sd['out_proj.bias'] = cProjB;
  return sd;
}

// ——— Loading a file ———

const isNode = () => typeof process !== 'undefined' && !!process.versions?.node;
/** 'https://…', 'http://…', 'file:…', 'blob:…', 'data:…': a URL rather than a path. */
const looksLikeUrl = (s: string) => /^[a-z][a-z0-9+.-]*:/i.test(s) && !/^[a-z]:[\\/]/i.test(s); // not a Windows drive path

async function fetchBytes(url: string): Promise<ArrayBuffer> {
  let response: Response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw new WeightFileError({
      where: 'loadSafetensors',
      argument: 'source',
      expected: 'a URL that can be fetched',
      given: JSON.stringify(url),
      fix: `fetch failed (${(e as Error).message}${(e as { cause?: Error }).cause ? `: ${(e as { cause: Error }).cause.message}` : ''}); check the URL, the network and CORS.`,
      problem: 'read',
    });
  }
  return responseBytes(response, url);
}

async function responseBytes(response: Response, what: string): Promise<ArrayBuffer> {
  if (!response.ok) {
    throw new WeightFileError({
      where: 'loadSafetensors',
      argument: 'source',
      expected: 'a successful HTTP response (2xx)',
      given: `HTTP ${response.status} ${response.statusText} for ${what}`,
      fix: 'Check the URL (a Hugging Face file is at https://huggingface.co/<repo>/resolve/main/model.safetensors).',
      problem: 'read',
    });
  }
  return response.arrayBuffer();
}

async function readPath(path: string | URL): Promise<Uint8Array> {
  const fs = (await importNodeOnly('node:fs/promises')) as { readFile: (p: string | URL) => Promise<Uint8Array> };
  try {
    return await fs.readFile(path);
  } catch (e) {
    const code = (e as { code?: string }).code;
    throw new WeightFileError({
      where: 'loadSafetensors',
      argument: 'source',
      expected: 'a readable file',
      given: JSON.stringify(String(path)),
      fix:
        code === 'ENOENT'
          ? `There is no such file (relative paths are resolved against the current directory, ${process.cwd()}).`
          : `Reading it failed: ${(e as Error).message}.`,
      problem: 'read',
    });
  }
}

/**
 * Reads and parses a .safetensors file from bytes (ArrayBuffer, Uint8Array), a fetch Response, a
 * Blob/File (an <input type=file>), a URL (fetched; in Node, file: URLs are read from disk), or — in
 * Node only — a file path. Throws WeightFileError when it cannot be read or parsed.
 */
export async function loadSafetensors(source: ArrayBuffer | Uint8Array | Response | Blob | URL | string): Promise<SafetensorsFile> {
  if (source instanceof ArrayBuffer || source instanceof Uint8Array) return parseSafetensors(source);
  if (typeof Response !== 'undefined' && source instanceof Response) return parseSafetensors(await responseBytes(source, source.url || 'the response'));
  if (typeof Blob !== 'undefined' && source instanceof Blob) return parseSafetensors(await source.arrayBuffer());
  if (source instanceof URL || typeof source === 'string') {
    const text = String(source);
    if (isNode() && (source instanceof URL ? source.protocol === 'file:' : /^file:/i.test(text))) return parseSafetensors(await readPath(new URL(text)));
    if (looksLikeUrl(text) || !isNode()) return parseSafetensors(await fetchBytes(text)); // a browser resolves a relative path against the page
    return parseSafetensors(await readPath(text));
  }
  throw new InvalidArgumentError({
    where: 'loadSafetensors',
    argument: 'source',
    expected: 'an ArrayBuffer, Uint8Array, Response, Blob, URL, or a path/URL string',
    given: describe(source),
  });
}
