// Load-your-own panel: files from a file picker, a folder picker or dropped on the page, and one
// attention layer of them drawn as attention maps on a sentence, checked against the float64
// reference. The files (load-model.ts) are one of:
// - a .safetensors file: the layer found by its names (PyTorch, BERT or GPT-2, or a name map typed
//   here), made with attentionLayerFromSafetensors (only H is asked for);
// - a GGUF file, or a Hugging Face checkpoint (config.json and its .safetensors shards): the model's
//   layers listed (kind, window, rope or NoPE, heads, head size; the ones the loaders refuse greyed with
//   the reason), and the chosen one made with attentionLayerFromGguf / attentionLayerFromHf, called with
//   the forward options the loader gives (causal, window, scale, softcap, sinks).

import {
  type AttentionEngine,
  type ForwardOptions,
  type MultiHeadAttentionConfig,
  type SafetensorsFile,
  type WeightLayout,
  type WeightTensor,
  attentionLayerFromSafetensors,
  loadSafetensors,
  referenceMultiHeadAttention,
} from 'webgpu-attention';
import { embedTokens } from './attention-maps.ts';
import { bytes, checkboxField, errorMessage, h, numberField, readInt, setState } from './dom.ts';
import { colourScale, headCanvas, hoverTip, maxOf, rowEntropies, scaleSelect } from './heatmap.ts';
import { type OpenedModel, classifyFiles, droppedFiles, layerKind, layerLabel, openModel } from './load-model.ts';

const LAYOUTS: { layout: WeightLayout; marker: string; eDim: [string, number] }[] = [
  { layout: 'gpt2', marker: 'attn.c_attn.weight', eDim: ['attn.c_proj.weight', 0] },
  { layout: 'bert', marker: 'attention.self.query.weight', eDim: ['attention.output.dense.weight', 0] },
  { layout: 'pytorch', marker: 'in_proj_weight', eDim: ['out_proj.weight', 0] },
  { layout: 'pytorch', marker: 'q_proj_weight', eDim: ['out_proj.weight', 0] },
];
const MAX_TOKENS = 32;

/** The attention layers of a file, by the names of each layout: [layout, prefix, embedDim if known]. */
export function findLayers(file: SafetensorsFile): { layout: WeightLayout; prefix: string; embedDim: number | undefined }[] {
  const found: { layout: WeightLayout; prefix: string; embedDim: number | undefined }[] = [];
  for (const { layout, marker, eDim } of LAYOUTS) {
    for (const name of file.keys()) {
      if (!name.endsWith(marker) || !(name.length === marker.length || name[name.length - marker.length - 1] === '.')) continue;
      const prefix = name.slice(0, name.length - marker.length);
      if (found.some((f) => f.layout === layout && f.prefix === prefix)) continue;
      found.push({ layout, prefix, embedDim: file.get(prefix + eDim[0])?.shape[eDim[1]] });
    }
  }
  return found;
}

/** A head count to start from: head size 64 where E allows, else the most heads of size ≥ 8 up to 8. */
export function suggestHeads(E: number): number {
  if (E >= 128 && E % 64 === 0) return E / 64;
  for (const heads of [8, 4, 2]) if (E % heads === 0 && E / heads >= 8) return heads;
  return 1;
}

/** "layout name = file name" lines → options.names (blank lines and # comments skipped). */
export function parseNames(text: string): Record<string, string> {
  const names: Record<string, string> = {};
  for (const [n, raw] of text.split('\n').entries()) {
    const line = raw.replace(/#.*/, '').trim();
    if (!line) continue;
    const m = /^(\S+)\s*(?:=|->|→|:)\s*(\S+)$/.exec(line);
    if (!m) throw new Error(`name map, line ${n + 1}: write "<layout name> = <name in the file>"; got "${raw.trim()}"`);
    names[m[1]] = m[2];
  }
  return names;
}

const row = (k: string, v: string) => h('tr', {}, h('th', {}, k), h('td', {}, v));

function tensorText(name: string, v: WeightTensor): string {
  return v instanceof Float32Array ? `${name} [${v.length}]` : `${name} ${v.dtype} [${v.shape.join(', ')}]`;
}

export function mountLoadWeightsPanel(section: HTMLElement, engine: AttentionEngine): void {
  const body = section.querySelector<HTMLElement>('.panel-body')!;
  const input = h('input', { type: 'file', id: 'own-file', multiple: true, accept: '.safetensors,.gguf,.json,application/octet-stream' });
  const folderInput = h('input', { type: 'file', id: 'own-folder', webkitdirectory: true, multiple: true });
  const zone = h(
    'div',
    { class: 'drop-zone', id: 'own-drop' },
    h(
      'p',
      {},
      'Drop a ',
      h('code', {}, '.safetensors'),
      ' file, a ',
      h('code', {}, '.gguf'),
      ' file or a Hugging Face checkpoint folder (',
      h('code', {}, 'config.json'),
      ' and its ',
      h('code', {}, '.safetensors'),
      ' shards) here, or choose:',
    ),
    h('div', { class: 'drop-inputs' }, h('label', { for: 'own-file' }, 'files ', input), h('label', { for: 'own-folder' }, 'a folder ', folderInput)),
  );
  const layerSelect = h('select', { id: 'own-layer', disabled: true }, h('option', { value: '' }, '(no file yet)'));
  const layout = h('select', { id: 'own-layout' }, ...(['gpt2', 'bert', 'pytorch'] as const).map((l) => h('option', { value: l }, l)));
  const prefix = h('input', { type: 'text', id: 'own-prefix', size: 28, spellcheck: 'false' });
  const heads = numberField('H (heads)', 'own-heads', 4, { max: 256, title: 'num_attention_heads / n_head: the one size the weights do not tell' });
  const names = h('textarea', {
    id: 'own-names',
    class: 'names',
    rows: 3,
    spellcheck: 'false',
    placeholder: 'Other names: one "<layout name> = <name in the file>" a line, e.g.\nattention.self.query.weight = blocks.0.attn.q.weight',
  });
  const text = h('input', { type: 'text', id: 'own-text', value: 'the cat sat on the mat because it was tired', size: 48, spellcheck: 'false' });
  const causal = checkboxField('causal', 'own-causal', true, 'GPT-2 is causal; BERT is not');
  const scale = scaleSelect('own-scale');
  const run = h('button', { id: 'own-run', class: 'primary', disabled: true }, 'Load the layer');
  const status = h('p', { class: 'status', id: 'own-status', 'aria-live': 'polite' }, 'No file yet.');
  const modelLayers = h('div', { class: 'model-layers', id: 'own-model-layers', hidden: true });
  const summary = h('table', { class: 'kv', id: 'own-summary' });
  const legend = h('div', { id: 'own-legend' });
  const grid = h('div', { class: 'maps', id: 'own-grid' });
  const tip = hoverTip('own-tip');
  // The fields of a plain .safetensors file only (a model's layers carry their own sizes and options).
  const plainOnly = [
    h('label', { class: 'field', for: 'own-layout' }, h('span', {}, 'layout'), layout),
    h('label', { class: 'field', for: 'own-prefix' }, h('span', {}, 'prefix'), prefix),
    heads.field,
  ];
  const namesField = h('label', { class: 'field', for: 'own-names' }, h('span', {}, 'name map (optional)'), names);
  body.append(
    zone,
    h('div', { class: 'form-row' }, h('label', { class: 'field', for: 'own-layer' }, h('span', {}, 'layers found'), layerSelect), ...plainOnly),
    namesField,
    modelLayers,
    h(
      'div',
      { class: 'form-row' },
      h('label', { class: 'field grow', for: 'own-text' }, h('span', {}, 'tokens (split on spaces)'), text),
      causal.field,
      h('label', { class: 'field', for: 'own-scale' }, h('span', {}, 'colour scale'), scale),
    ),
    h('div', { class: 'actions' }, run),
    status,
    summary,
    legend,
    grid,
    tip,
  );

  let file: SafetensorsFile | null = null;
  let model: OpenedModel | null = null;
  let fileName = '';
  let layers: ReturnType<typeof findLayers> = [];
  let generation = 0;

  function showMode(isModel: boolean): void {
    for (const el of [...plainOnly, namesField, causal.field]) el.hidden = isModel;
    modelLayers.hidden = !isModel;
    section.dataset.source = isModel ? model!.kind : file ? 'safetensors' : '';
  }

  function fail(e: unknown): void {
    summary.replaceChildren();
    legend.replaceChildren();
    grid.replaceChildren();
    status.replaceChildren(h('span', { class: 'error-text', id: 'own-error' }, errorMessage(e)));
    setState(section, 'error');
  }

  async function open(files: File[]): Promise<void> {
    const mine = ++generation;
    setState(section, 'running');
    status.textContent = `Reading ${files.length === 1 ? files[0].name : `${files.length} files`}…`;
    try {
      file = null;
      model = null;
      const source = classifyFiles(files);
      if (source.kind === 'safetensors') {
        const f = await loadSafetensors(source.file);
        if (mine !== generation) return;
        file = f;
        fileName = source.file.name;
        layers = findLayers(file);
        layerSelect.replaceChildren(
          ...layers.map((l, i) => h('option', { value: i }, `${l.layout} · ${l.prefix || '(no prefix)'}${l.embedDim ? ` · E ${l.embedDim}` : ''}`)),
          h('option', { value: 'custom' }, 'other (layout, prefix and name map below)'),
        );
        modelLayers.replaceChildren();
        showMode(false);
        layerSelect.disabled = false;
        run.disabled = false;
        choose(layers.length ? '0' : 'custom');
      } else {
        const m = await openModel(source);
        if (mine !== generation) return;
        model = m;
        fileName = m.name;
        listModelLayers(m);
        showMode(true);
        layerSelect.disabled = false;
        run.disabled = false;
        const first = m.layers.find((l) => !l.unsupported) ?? m.layers[0];
        if (!first) throw new Error(`${m.name} lists no layers.`);
        layerSelect.value = String(first.layer);
        markChosen();
      }
      await render();
    } catch (e) {
      if (mine !== generation) return;
      file = null;
      model = null;
      run.disabled = true;
      layerSelect.replaceChildren(h('option', { value: '' }, '(no layers)'));
      layerSelect.disabled = true;
      modelLayers.replaceChildren();
      showMode(false);
      fail(e);
    }
  }

  /** The model's layers: the select's options and a table of them (refused ones greyed, with the reason). */
  function listModelLayers(m: OpenedModel): void {
    layerSelect.replaceChildren(
      ...m.layers.map((l) => h('option', { value: l.layer, class: l.unsupported ? 'refused' : null, title: l.unsupported ?? '' }, layerLabel(l))),
    );
    const refused = m.layers.filter((l) => l.unsupported).length;
    const rows = m.layers.map((l) => {
      const tr = h(
        'tr',
        { 'data-layer': l.layer, class: l.unsupported ? 'refused' : null, title: l.unsupported ? 'refused by the loader' : 'draw this layer' },
        h('td', {}, String(l.layer)),
        h('td', {}, layerKind(l)),
        h('td', {}, l.kind === 'linear' ? '—' : l.rope ? 'rope' : 'NoPE'),
        h('td', {}, `${l.numHeads}${l.numKvHeads !== l.numHeads ? ` / ${l.numKvHeads}` : ''}`),
        h('td', {}, String(l.headDim)),
        h('td', { class: 'reason' }, l.unsupported ?? '✓'),
      );
      tr.addEventListener('click', () => {
        layerSelect.value = String(l.layer);
        markChosen();
        void render();
      });
      return tr;
    });
    modelLayers.replaceChildren(
      h(
        'p',
        { class: 'muted' },
        `${m.kind === 'gguf' ? 'GGUF' : 'Hugging Face checkpoint'} ${m.name} · ${m.architecture} · ${m.layers.length} layers${refused ? ` (${refused} refused by the loader: greyed)` : ''}. Click a layer to draw it.`,
      ),
      h(
        'div',
        { class: 'model-layers-scroll' },
        h(
          'table',
          { class: 'layers' },
          h('thead', {}, h('tr', {}, ...['layer', 'attention', 'position', 'heads / KV', 'head size', 'loads'].map((t) => h('th', {}, t)))),
          h('tbody', {}, ...rows),
        ),
      ),
    );
  }

  function markChosen(): void {
    for (const tr of Array.from(modelLayers.querySelectorAll<HTMLElement>('tr[data-layer]'))) tr.classList.toggle('chosen', tr.dataset.layer === layerSelect.value);
  }

  function choose(value: string): void {
    layerSelect.value = value;
    if (model) {
      markChosen();
      return;
    }
    const l = layers[Number(value)];
    if (!l) return;
    layout.value = l.layout;
    prefix.value = l.prefix;
    if (l.embedDim) heads.input.value = String(suggestHeads(l.embedDim));
    causal.input.checked = l.layout === 'gpt2';
  }

  /** A plain .safetensors layer: from the layout fields. */
  function plainLayer(S: number) {
    const H = readInt(heads.input, 'H', 1, 256);
    const options = { layout: layout.value as WeightLayout, prefix: prefix.value, numHeads: H, names: parseNames(names.value) };
    const { config, stateDict } = attentionLayerFromSafetensors(file!, options);
    const E = config.embedDim;
    const call: ForwardOptions = { batchSize: 1, seqLen: S, isCausal: causal.input.checked };
    const rows = [
      row('file', `${fileName}: ${file!.size} tensors`),
      row(
        'layer',
        `${options.layout}${options.prefix ? ` under "${options.prefix}"` : ''}${Object.keys(options.names).length ? `, ${Object.keys(options.names).length} names mapped` : ''}`,
      ),
      row(
        'config (read from the file)',
        `embedDim ${E}, numHeads ${H} (Dh ${E / H}), numKvHeads ${config.numKvHeads ?? H}, bias ${config.bias}${config.kdim ? `, kdim ${config.kdim}` : ''}${config.vdim ? `, vdim ${config.vdim}` : ''}`,
      ),
    ];
    return { config, stateDict: stateDict as Record<string, WeightTensor>, call, rows };
  }

  /** A GGUF or checkpoint layer: read by its loader, called with the loader's forward options. */
  async function modelLayer(m: OpenedModel, S: number) {
    const index = Number(layerSelect.value);
    const listed = m.layers.find((l) => l.layer === index);
    const { config, stateDict, forward, architecture } = await m.load(index, S);
    const call: ForwardOptions = { batchSize: 1, seqLen: S, ...forward };
    const H = config.numHeads;
    const Dh = config.headDim ?? config.embedDim / H;
    const read = m.bytes();
    const opts = [
      'causal',
      forward.window !== undefined ? `window ${forward.window}` : null,
      forward.scale !== undefined ? `scale ${+forward.scale.toPrecision(6)}` : null,
      forward.softcap !== undefined ? `softcap ${forward.softcap}` : null,
      forward.sinks ? `sinks [${forward.sinks.length}]` : null,
    ].filter(Boolean);
    const rows = [
      row(m.kind === 'gguf' ? 'file' : 'checkpoint', `${m.name}: ${m.files.join(', ')}`),
      row('layer', `${index} of ${m.layers.length} (${architecture})${listed ? `: ${layerLabel(listed)}` : ''}`),
      row(
        'config (read from the model)',
        `embedDim ${config.embedDim}, numHeads ${H}, numKvHeads ${config.numKvHeads ?? H}, headDim ${Dh}${config.headDim ? ' (H·Dh ≠ E)' : ''}, bias ${config.bias ?? true}${configExtras(config)}`,
      ),
      row('forward options', opts.join(', ')),
    ];
    if (read.read !== null) rows.push(row('bytes read', `${bytes(read.read)} of ${bytes(read.total)} (headers and this layer's tensors)`));
    return { config, stateDict, call, rows };
  }

  async function render(): Promise<void> {
    if (!file && !model) return;
    const mine = ++generation;
    setState(section, 'running');
    try {
      const tokens = text.value.split(/\s+/).filter(Boolean);
      if (tokens.length === 0 || tokens.length > MAX_TOKENS) throw new Error(`Type 1 to ${MAX_TOKENS} tokens; got ${tokens.length}.`);
      const S = tokens.length;
      const { config, stateDict, call, rows } = model ? await modelLayer(model, S) : plainLayer(S);
      if (mine !== generation) return;
      const H = config.numHeads;
      const isCausal = call.isCausal ?? false;
      const query = embedTokens(tokens, config.embedDim, 7, 1);
      const reference = referenceMultiHeadAttention(config, stateDict, query, call);
      const layer = engine.createMultiHeadAttention(config, stateDict);
      let probs: Float32Array;
      let output: Float32Array;
      try {
        const result = await layer.forward(query, { ...call, needWeights: true });
        probs = result.attentionWeights!;
        output = result.output;
      } finally {
        layer.dispose();
      }
      if (mine !== generation) return;
      let maxDiff = 0;
      for (let k = 0; k < output.length; k++) maxDiff = Math.max(maxDiff, Math.abs(output[k] - reference.output[k]));
      if (Number.isNaN(maxDiff) || output.some(Number.isNaN)) maxDiff = Number.NaN;
      summary.replaceChildren(
        ...rows,
        row(
          'state_dict',
          Object.entries(stateDict)
            .map(([k, v]) => tensorText(k, v))
            .join(', '),
        ),
      );
      const shared = scale.value === 'shared';
      const all = maxOf(probs, 0, H * S * S);
      const cards: HTMLElement[] = [];
      for (let hh = 0; hh < H; hh++) {
        const offset = hh * S * S;
        const max = shared ? all : maxOf(probs, offset, S * S);
        const mean = rowEntropies(probs, offset, S).reduce((a, b) => a + b, 0) / S;
        cards.push(
          h(
            'figure',
            { class: 'head', 'data-head': hh, 'data-mean-entropy': mean },
            h('figcaption', {}, h('strong', {}, `head ${hh}`), ` · mean row entropy ${mean.toFixed(2)} bits`),
            headCanvas({ tokens, p: probs, offset, isCausal, max, tip }, `attention probabilities of head ${hh}`),
            shared ? null : colourScale(max, 'probability'),
          ),
        );
      }
      legend.replaceChildren(...(shared ? [colourScale(all, 'probability, all heads')] : []));
      grid.replaceChildren(...cards);
      status.replaceChildren(
        h(
          'span',
          { id: 'own-check', 'data-max-diff': maxDiff },
          `The layer's output on ${engine.backend === 'webgpu' ? 'WebGPU' : 'the CPU backend'}: max |engine − float64 reference| = ${maxDiff.toExponential(2)}. `,
        ),
        `Embeddings are seeded random (std 1) plus positions, as in the panel above; hover a cell for its query, key and probability.`,
      );
      setState(section, 'done');
    } catch (e) {
      if (mine === generation) fail(e);
    }
  }

  const take = (files: File[]) => {
    if (files.length) void open(files);
  };
  input.addEventListener('change', () => take(Array.from(input.files ?? [])));
  folderInput.addEventListener('change', () => take(Array.from(folderInput.files ?? [])));
  zone.addEventListener('dragover', (ev) => {
    ev.preventDefault();
    zone.classList.add('over');
  });
  zone.addEventListener('dragleave', () => zone.classList.remove('over'));
  zone.addEventListener('drop', (ev) => {
    ev.preventDefault();
    zone.classList.remove('over');
    if (!ev.dataTransfer) return;
    droppedFiles(ev.dataTransfer).then(take, fail);
  });
  layerSelect.addEventListener('change', () => {
    choose(layerSelect.value);
    void render();
  });
  run.addEventListener('click', () => void render());
  scale.addEventListener('change', () => void render());
  text.addEventListener('change', () => {
    if (model) void render();
  });
}

/** The config's fields beyond the sizes, briefly (rotary, norms, gate). */
function configExtras(config: MultiHeadAttentionConfig): string {
  const parts: string[] = [];
  const c = config;
  const rotary = c.rotary as { invFreq?: ArrayLike<number> } | undefined;
  if (rotary) {
    const f = rotary.invFreq;
    const zeros = f ? Array.prototype.filter.call(f, (x: number) => x === 0).length : 0;
    parts.push(`rotary${f ? ` (${f.length} frequencies${zeros ? `, ${zeros} zero` : ''})` : ''}`);
  } else parts.push('no rotary (NoPE)');
  if (c.qkNorm) parts.push('QK-norm');
  if (c.vNorm) parts.push('V norm');
  if (c.kEqV) parts.push('K = V');
  if (c.outputGate) parts.push('output gate');
  return `, ${parts.join(', ')}`;
}
