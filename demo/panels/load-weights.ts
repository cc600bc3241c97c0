// Load-your-own panel: a .safetensors file from a file picker or dropped on the page, one attention
// layer of it found by its names (PyTorch, BERT or GPT-2, or a name map typed here), made into a layer
// with attentionLayerFromSafetensors (only H is asked for), and its attention maps on a sentence,
// checked against the float64 reference.

import {
  type AttentionEngine,
  type SafetensorsFile,
  type WeightLayout,
  attentionLayerFromSafetensors,
  loadSafetensors,
  referenceMultiHeadAttention,
} from 'webgpu-attention';
import { embedTokens } from './attention-maps.ts';
import { checkboxField, errorMessage, h, numberField, readInt, setState } from './dom.ts';
import { colourScale, headCanvas, hoverTip, maxOf, rowEntropies, scaleSelect } from './heatmap.ts';

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

export function mountLoadWeightsPanel(section: HTMLElement, engine: AttentionEngine): void {
  const body = section.querySelector<HTMLElement>('.panel-body')!;
  const input = h('input', { type: 'file', id: 'own-file', accept: '.safetensors,application/octet-stream' });
  const zone = h(
    'div',
    { class: 'drop-zone', id: 'own-drop' },
    h('label', { for: 'own-file' }, 'Drop a ', h('code', {}, '.safetensors'), ' file here, or choose one: '),
    input,
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
  const summary = h('table', { class: 'kv', id: 'own-summary' });
  const legend = h('div', { id: 'own-legend' });
  const grid = h('div', { class: 'maps', id: 'own-grid' });
  const tip = hoverTip('own-tip');
  body.append(
    zone,
    h(
      'div',
      { class: 'form-row' },
      h('label', { class: 'field', for: 'own-layer' }, h('span', {}, 'layers found'), layerSelect),
      h('label', { class: 'field', for: 'own-layout' }, h('span', {}, 'layout'), layout),
      h('label', { class: 'field', for: 'own-prefix' }, h('span', {}, 'prefix'), prefix),
      heads.field,
    ),
    h('label', { class: 'field', for: 'own-names' }, h('span', {}, 'name map (optional)'), names),
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
  let fileName = '';
  let layers: ReturnType<typeof findLayers> = [];

  async function open(source: File): Promise<void> {
    setState(section, 'running');
    status.textContent = `Reading ${source.name}…`;
    try {
      file = await loadSafetensors(source);
      fileName = source.name;
      layers = findLayers(file);
      layerSelect.replaceChildren(
        ...layers.map((l, i) => h('option', { value: i }, `${l.layout} · ${l.prefix || '(no prefix)'}${l.embedDim ? ` · E ${l.embedDim}` : ''}`)),
        h('option', { value: 'custom' }, 'other (layout, prefix and name map below)'),
      );
      layerSelect.disabled = false;
      run.disabled = false;
      choose(layers.length ? '0' : 'custom');
      await render();
    } catch (e) {
      file = null;
      run.disabled = true;
      status.replaceChildren(h('span', { class: 'error-text' }, errorMessage(e)));
      setState(section, 'error');
    }
  }

  function choose(value: string): void {
    layerSelect.value = value;
    const l = layers[Number(value)];
    if (!l) return;
    layout.value = l.layout;
    prefix.value = l.prefix;
    if (l.embedDim) heads.input.value = String(suggestHeads(l.embedDim));
    causal.input.checked = l.layout === 'gpt2';
  }

  async function render(): Promise<void> {
    if (!file) return;
    setState(section, 'running');
    try {
      const tokens = text.value.split(/\s+/).filter(Boolean);
      if (tokens.length === 0 || tokens.length > MAX_TOKENS) throw new Error(`Type 1 to ${MAX_TOKENS} tokens; got ${tokens.length}.`);
      const H = readInt(heads.input, 'H', 1, 256);
      const options = { layout: layout.value as WeightLayout, prefix: prefix.value, numHeads: H, names: parseNames(names.value) };
      const { config, stateDict } = attentionLayerFromSafetensors(file, options);
      const S = tokens.length;
      const E = config.embedDim;
      const isCausal = causal.input.checked;
      const query = embedTokens(tokens, E, 7, 1);
      const call = { batchSize: 1, seqLen: S, isCausal };
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
      let maxDiff = 0;
      for (let k = 0; k < output.length; k++) maxDiff = Math.max(maxDiff, Math.abs(output[k] - reference.output[k]));
      const row = (k: string, v: string) => h('tr', {}, h('th', {}, k), h('td', {}, v));
      summary.replaceChildren(
        row('file', `${fileName}: ${file.size} tensors`),
        row(
          'layer',
          `${options.layout}${options.prefix ? ` under "${options.prefix}"` : ''}${Object.keys(options.names).length ? `, ${Object.keys(options.names).length} names mapped` : ''}`,
        ),
        row(
          'config (read from the file)',
          `embedDim ${E}, numHeads ${H} (Dh ${E / H}), numKvHeads ${config.numKvHeads ?? H}, bias ${config.bias}${config.kdim ? `, kdim ${config.kdim}` : ''}${config.vdim ? `, vdim ${config.vdim}` : ''}`,
        ),
        row(
          'state_dict',
          Object.entries(stateDict)
            .map(([k, v]) => `${k} [${v.length}]`)
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
      summary.replaceChildren();
      legend.replaceChildren();
      grid.replaceChildren();
      status.replaceChildren(h('span', { class: 'error-text', id: 'own-error' }, errorMessage(e)));
      setState(section, 'error');
    }
  }

  input.addEventListener('change', () => {
    const f = input.files?.[0];
    if (f) void open(f);
  });
  zone.addEventListener('dragover', (ev) => {
    ev.preventDefault();
    zone.classList.add('over');
  });
  zone.addEventListener('dragleave', () => zone.classList.remove('over'));
  zone.addEventListener('drop', (ev) => {
    ev.preventDefault();
    zone.classList.remove('over');
    const f = ev.dataTransfer?.files[0];
    if (f) void open(f);
  });
  layerSelect.addEventListener('change', () => {
    choose(layerSelect.value);
    void render();
  });
  run.addEventListener('click', () => void render());
  scale.addEventListener('change', () => void render());
}
