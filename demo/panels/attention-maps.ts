// Attention-maps panel: a short sentence, seeded random token embeddings (plus sinusoidal positions),
// a layer with seeded random weights, and the attention probabilities of every head as a heatmap with
// the row entropies beside it (./heatmap.ts: colour scale, hover, one scale or each head's own). The probabilities come from the engine (needWeights: PyTorch's
// need_weights=True, average_attn_weights=False); the float64 reference is computed alongside to
// show they agree.

import { type AttentionEngine, type MultiHeadAttention, referenceMultiHeadAttention } from 'webgpu-attention';
import { linearFeature } from '../../src/cpu/linear.ts';
import { mulberry32, randomStateDict } from '../../test/helpers/random.ts';
import { checkboxField, errorMessage, h, numberField, readInt, setState } from './dom.ts';
import { colourScale, headCanvas, hoverTip, maxOf, rowEntropies, scaleSelect } from './heatmap.ts';

const SENTENCES = [
  { id: 'zh', label: 'Chinese: 我 爱 自然 语言 处理', text: '我 爱 自然 语言 处理' },
  { id: 'en', label: 'English: the cat sat on the mat because it was tired', text: 'the cat sat on the mat because it was tired' },
];
const EMBED_DIM = 64;
const MAX_TOKENS = 32;

/** FNV-1a over UTF-16 code units: a token's own seed. */
function hashToken(token: string): number {
  let x = 0x811c9dc5;
  for (let i = 0; i < token.length; i++) x = Math.imul(x ^ token.charCodeAt(i), 0x01000193);
  return x >>> 0;
}

/**
 * query [1, S, E]: each token's row of a seeded random table (uniform with standard deviation `std`,
 * the same vector for the same token) plus the sinusoidal position encoding of the Transformer paper.
 */
export function embedTokens(tokens: string[], E: number, seed: number, std: number): Float32Array {
  const out = new Float32Array(tokens.length * E);
  const bound = std * Math.sqrt(3);
  tokens.forEach((token, pos) => {
    const rng = mulberry32((hashToken(token) ^ Math.imul(seed + 1, 0x9e3779b1)) >>> 0);
    for (let i = 0; i < E; i++) {
      const angle = pos / 10000 ** ((2 * Math.floor(i / 2)) / E);
      out[pos * E + i] = (2 * rng() - 1) * bound + (i % 2 === 0 ? Math.sin(angle) : Math.cos(angle));
    }
  });
  return out;
}

/**
 * The one call of the needWeights API: per-head attention probabilities [B, H, S, S]
 * (PyTorch need_weights=True, average_attn_weights=False). Undefined if this build of the engine
 * does not return them.
 */
async function engineAttentionWeights(layer: MultiHeadAttention, query: Float32Array, seqLen: number, isCausal: boolean): Promise<Float32Array | undefined> {
  const result = await layer.forward(query, { batchSize: 1, seqLen, isCausal, needWeights: true });
  return result.attentionWeights;
}

/**
 * Linear attention's weights, for the comparison: out_i = Σ_j w_ij v_j with
 * w_ij = φ(q_i)·φ(k_j) / (Σ_j' φ(q_i)·φ(k_j') + 1e-6), φ = elu + 1, from the head-split Q, K [H, S, Dh]
 * of the float64 reference. The engine never forms these (that is the point of linear attention).
 */
export function linearWeights(q: ArrayLike<number>, k: ArrayLike<number>, H: number, S: number, Dh: number, isCausal: boolean): Float64Array {
  const w = new Float64Array(H * S * S);
  for (let h = 0; h < H; h++) {
    for (let i = 0; i < S; i++) {
      let sum = 1e-6;
      const row = (h * S + i) * S;
      for (let j = 0; j < (isCausal ? i + 1 : S); j++) {
        let dot = 0;
        for (let d = 0; d < Dh; d++) dot += linearFeature(q[(h * S + i) * Dh + d]) * linearFeature(k[(h * S + j) * Dh + d]);
        w[row + j] = dot;
        sum += dot;
      }
      for (let j = 0; j < S; j++) w[row + j] /= sum;
    }
  }
  return w;
}

export function mountAttentionMapsPanel(section: HTMLElement, engine: AttentionEngine): { render: () => Promise<void> } {
  const body = section.querySelector<HTMLElement>('.panel-body')!;
  const select = h(
    'select',
    { id: 'maps-sentence' },
    ...SENTENCES.map((s) => h('option', { value: s.id }, s.label)),
    h('option', { value: 'custom' }, 'your own (type below)'),
  );
  const text = h('input', { type: 'text', id: 'maps-text', value: SENTENCES[0].text, size: 48, spellcheck: 'false', 'aria-label': 'tokens, separated by spaces' });
  const heads = h('select', { id: 'maps-heads' }, ...[1, 2, 4, 8].map((n) => h('option', { value: n, selected: n === 4 }, String(n))));
  const seed = numberField('seed', 'maps-seed', 7, { min: 0 });
  const std = numberField('embedding std', 'maps-std', 1.5, {
    min: 0.1,
    max: 10,
    step: 0.1,
    title: 'standard deviation of the random token embeddings: larger → sharper softmax',
  });
  const causal = checkboxField('causal', 'maps-causal', false, 'token i attends only to tokens j ≤ i');
  const linear = checkboxField(
    'beside linear attention',
    'maps-linear',
    false,
    "each head's softmax map beside the weights linear attention (φ = elu + 1) gives the same Q and K",
  );
  const scale = scaleSelect('maps-scale');
  const status = h('p', { class: 'status', id: 'maps-status', 'aria-live': 'polite' });
  const legend = h('div', { id: 'maps-legend' });
  const grid = h('div', { class: 'maps', id: 'maps-grid' });
  const tip = hoverTip('maps-tip');
  body.append(
    h(
      'div',
      { class: 'form-row' },
      h('label', { class: 'field', for: 'maps-sentence' }, h('span', {}, 'sentence'), select),
      h('label', { class: 'field grow', for: 'maps-text' }, h('span', {}, 'tokens (split on spaces)'), text),
    ),
    h(
      'div',
      { class: 'form-row' },
      h('label', { class: 'field', for: 'maps-heads' }, h('span', {}, 'H (heads)'), heads),
      seed.field,
      std.field,
      causal.field,
      linear.field,
      h('label', { class: 'field', for: 'maps-scale' }, h('span', {}, 'colour scale'), scale),
    ),
    status,
    legend,
    grid,
    tip,
  );

  let generation = 0;
  async function render(): Promise<void> {
    const mine = ++generation;
    setState(section, 'running');
    try {
      const tokens = text.value.split(/\s+/).filter(Boolean);
      if (tokens.length === 0) throw new Error('Type at least one token (tokens are separated by spaces).');
      if (tokens.length > MAX_TOKENS) throw new Error(`At most ${MAX_TOKENS} tokens here; got ${tokens.length}.`);
      const H = Number(heads.value);
      const s = readInt(seed.input, 'seed', 0, 2 ** 32 - 1);
      const sigma = Number(std.input.value);
      if (!(sigma > 0 && sigma <= 10)) throw new Error(`embedding std must be in (0, 10]; got "${std.input.value}"`);
      const S = tokens.length;
      const isCausal = causal.input.checked;
      const config = { embedDim: EMBED_DIM, numHeads: H };
      const stateDict = randomStateDict(config, s);
      const query = embedTokens(tokens, EMBED_DIM, s, sigma);

      const reference = referenceMultiHeadAttention(config, stateDict, query, { batchSize: 1, seqLen: S, isCausal }).probs!;
      const layer = engine.createMultiHeadAttention(config, stateDict);
      let weights: Float32Array | undefined;
      try {
        weights = await engineAttentionWeights(layer, query, S, isCausal);
      } finally {
        layer.dispose();
      }
      // Linear attention on the same layer: the engine's output against the float64 reference's, and
      // the weights it implies, computed from the reference's Q and K.
      let compare: { weights: Float64Array; maxDiff: number } | null = null;
      if (linear.input.checked) {
        const linearConfig = { ...config, attention: 'linear' as const };
        const options = { batchSize: 1, seqLen: S, isCausal };
        const ref = referenceMultiHeadAttention(linearConfig, stateDict, query, options);
        const linearLayer = engine.createMultiHeadAttention(linearConfig, stateDict);
        try {
          const { output } = await linearLayer.forward(query, options);
          let maxDiff = 0;
          for (let k = 0; k < output.length; k++) maxDiff = Math.max(maxDiff, Math.abs(output[k] - ref.output[k]));
          compare = { weights: linearWeights(ref.q, ref.k, H, S, EMBED_DIM / H, isCausal), maxDiff };
        } finally {
          linearLayer.dispose();
        }
      }
      if (mine !== generation) return; // a newer render started meanwhile

      let source: string;
      let probs: ArrayLike<number>;
      if (weights) {
        let maxDiff = 0;
        for (let k = 0; k < reference.length; k++) maxDiff = Math.max(maxDiff, Math.abs(weights[k] - reference[k]));
        source = `Weights from the engine on ${engine.backend === 'webgpu' ? 'WebGPU' : 'its CPU backend'} (needWeights); max |engine − float64 reference| = ${maxDiff.toExponential(2)}.`;
        probs = weights;
      } else {
        source = 'This build of the engine returned no attentionWeights: showing the float64 CPU reference.';
        probs = reference;
      }

      // The brightest colour: each map's own largest probability, or the largest of all the maps shown.
      const shared = scale.value === 'shared';
      const all = Math.max(maxOf(probs, 0, H * S * S), compare ? maxOf(compare.weights, 0, H * S * S) : 0);
      const card = (p: ArrayLike<number>, hh: number, kind: string, attrs: Record<string, string | number>, caption: string) => {
        const offset = hh * S * S;
        const max = shared ? all : maxOf(p, offset, S * S);
        const canvas = headCanvas({ tokens, p, offset, isCausal, max, tip }, `${kind} of head ${hh}`);
        return h(
          'figure',
          { class: 'head', 'data-head': hh, ...attrs },
          h('figcaption', {}, h('strong', {}, `head ${hh}`), caption),
          canvas,
          shared ? null : colourScale(max, 'probability'),
        );
      };
      const cards: HTMLElement[] = [];
      const means: number[] = [];
      for (let hh = 0; hh < H; hh++) {
        const offset = hh * S * S;
        const mean = rowEntropies(probs, offset, S).reduce((a, b) => a + b, 0) / S;
        means.push(mean);
        let above = 0; // probability mass on keys after the query: exactly 0 when causal
        for (let i = 0; i < S; i++) for (let j = i + 1; j < S; j++) above += probs[offset + i * S + j];
        cards.push(
          card(
            probs,
            hh,
            'attention probabilities',
            { 'data-mass-above-diagonal': above, 'data-mean-entropy': mean },
            `${compare ? ' · softmax' : ''} · mean row entropy ${mean.toFixed(2)} bits`,
          ),
        );
        if (compare) {
          const linMean = rowEntropies(compare.weights, offset, S).reduce((a, b) => a + b, 0) / S;
          const linCard = card(
            compare.weights,
            hh,
            'linear attention weights',
            { 'data-linear': 'true', 'data-mean-entropy': linMean },
            ` · linear (elu + 1) · mean row entropy ${linMean.toFixed(2)} bits`,
          );
          linCard.classList.add('linear');
          cards.push(linCard);
        }
      }
      const uniformBits = isCausal ? tokens.reduce((a, _, i) => a + Math.log2(i + 1), 0) / S : Math.log2(S);
      status.replaceChildren(
        `${S} tokens, E = ${EMBED_DIM}, H = ${H} (Dh = ${EMBED_DIM / H}). Rows are queries, columns keys; each row sums to 1 and ${shared ? 'every map is coloured on the one scale above' : 'each map is coloured up to its own largest probability (its scale under it)'}; hover a cell for its query, key and probability. `,
        `A uniform row would have ${uniformBits.toFixed(2)} bits on average; these heads have ${means.map((m) => m.toFixed(2)).join(', ')}. `,
        source,
        ...(compare
          ? [
              ` Beside each head: the weights linear attention gives the same Q and K (φ(q)·φ(k), normalised per row; float64, from the reference's Q and K: the engine never forms them), usually flatter than the softmax's. `,
              h(
                'span',
                { id: 'maps-linear-check' },
                `The engine's linear-attention layer output: max |engine − float64 reference| = ${compare.maxDiff.toExponential(2)}.`,
              ),
            ]
          : []),
      );
      legend.replaceChildren(...(shared ? [colourScale(all, 'probability, all heads')] : []));
      grid.replaceChildren(...cards);
      setState(section, 'done');
    } catch (e) {
      if (mine !== generation) return;
      grid.replaceChildren();
      legend.replaceChildren();
      status.replaceChildren(h('span', { class: 'error-text' }, errorMessage(e)));
      setState(section, 'error');
    }
  }

  let timer = 0;
  const later = () => {
    clearTimeout(timer);
    timer = window.setTimeout(() => void render(), 150);
  };
  select.addEventListener('change', () => {
    const s = SENTENCES.find((x) => x.id === select.value);
    if (s) text.value = s.text;
    else text.focus();
    void render();
  });
  text.addEventListener('input', () => {
    const s = SENTENCES.find((x) => x.text === text.value.trim());
    select.value = s ? s.id : 'custom';
    later();
  });
  for (const el of [heads, seed.input, std.input, causal.input, linear.input]) el.addEventListener('input', later);
  linear.input.addEventListener('change', later);
  heads.addEventListener('change', later);
  scale.addEventListener('change', later);
  causal.input.addEventListener('change', later);
  return { render };
}
