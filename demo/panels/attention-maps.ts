// Attention-maps panel: a short sentence, seeded random token embeddings (plus sinusoidal positions),
// a layer with seeded random weights, and the attention probabilities of every head as a heatmap with
// the row entropies beside it. The probabilities come from the engine (needWeights: PyTorch's
// need_weights=True, average_attn_weights=False); the float64 reference is computed alongside to
// show they agree.

import { type AttentionEngine, type MultiHeadAttention, referenceMultiHeadAttention } from 'webgpu-attention';
import { linearFeature } from '../../src/cpu/linear.ts';
import { mulberry32, randomStateDict } from '../../src/util/random.ts';
import { checkboxField, errorMessage, h, hiDpiCanvas, numberField, readInt, setState } from './dom.ts';

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

/** Entropy in bits of each row of one head's [S, S] probabilities. */
export function rowEntropies(p: ArrayLike<number>, offset: number, S: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < S; i++) {
    let e = 0;
    for (let j = 0; j < S; j++) {
      const v = p[offset + i * S + j];
      if (v > 0) e -= v * Math.log2(v);
    }
    out.push(e);
  }
  return out;
}

// Viridis, sampled at 9 points and interpolated.
const VIRIDIS = [
  [68, 1, 84],
  [71, 44, 122],
  [59, 81, 139],
  [44, 113, 142],
  [33, 144, 141],
  [39, 173, 129],
  [92, 200, 99],
  [170, 220, 50],
  [253, 231, 37],
];
function viridis(t: number): string {
  const x = Math.max(0, Math.min(1, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const c = VIRIDIS[i].map((a, k) => Math.round(a + (VIRIDIS[i + 1][k] - a) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

const FONT = '12px system-ui, "Noto Sans CJK SC", "WenQuanYi Zen Hei", "Microsoft YaHei", "PingFang SC", sans-serif';

/** One head: heatmap (rows: queries, columns: keys) with token labels, and row entropies to the right (also drawn by real-model.ts). */
export function drawHead(canvas: HTMLCanvasElement, tokens: string[], p: ArrayLike<number>, offset: number, entropies: number[], isCausal: boolean): void {
  const S = tokens.length;
  const probe = canvas.getContext('2d')!;
  probe.font = FONT;
  const labelW = Math.ceil(Math.max(...tokens.map((t) => probe.measureText(t).width))) + 8;
  const cell = Math.max(16, Math.min(34, Math.floor(300 / S)));
  const left = labelW;
  const top = labelW * 0.75 + 8; // column labels are drawn at −45°
  const gridW = cell * S;
  const barW = 70;
  const width = left + gridW + 10 + barW + 40;
  const height = top + gridW + 4;
  const ctx = hiDpiCanvas(canvas, width, height);
  ctx.font = FONT;

  // Cells; colour scaled to this head's largest probability so each map uses the whole ramp.
  let max = 0;
  for (let k = 0; k < S * S; k++) max = Math.max(max, p[offset + k]);
  for (let i = 0; i < S; i++) {
    for (let j = 0; j < S; j++) {
      const masked = isCausal && j > i;
      ctx.fillStyle = masked ? '#eee' : viridis(max > 0 ? p[offset + i * S + j] / max : 0);
      ctx.fillRect(left + j * cell, top + i * cell, cell - 1, cell - 1);
    }
  }
  // Row labels (queries), right-aligned.
  ctx.fillStyle = '#222';
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (const [i, t] of tokens.entries()) ctx.fillText(t, left - 6, top + i * cell + cell / 2);
  // Column labels (keys), rotated.
  ctx.textAlign = 'left';
  tokens.forEach((t, j) => {
    ctx.save();
    ctx.translate(left + j * cell + cell / 2, top - 6);
    ctx.rotate(-Math.PI / 4);
    ctx.fillText(t, 0, 0);
    ctx.restore();
  });
  // Row entropies: a bar against the row's maximum log2(visible keys), and the value.
  const bx = left + gridW + 10;
  ctx.textAlign = 'left';
  ctx.fillStyle = '#555';
  ctx.fillText('entropy (bits)', bx, top - 8);
  entropies.forEach((e, i) => {
    const visible = isCausal ? i + 1 : S;
    const maxBits = Math.log2(visible);
    const y = top + i * cell;
    ctx.fillStyle = '#e6e9ef';
    ctx.fillRect(bx, y + 3, barW, cell - 7);
    ctx.fillStyle = '#4e79a7';
    ctx.fillRect(bx, y + 3, maxBits > 0 ? (barW * e) / maxBits : 0, cell - 7);
    ctx.fillStyle = '#222';
    ctx.fillText(e.toFixed(2), bx + barW + 4, y + cell / 2);
  });
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
  const status = h('p', { class: 'status', id: 'maps-status', 'aria-live': 'polite' });
  const grid = h('div', { class: 'maps', id: 'maps-grid' });
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
    ),
    status,
    grid,
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

      const cards: HTMLElement[] = [];
      const means: number[] = [];
      for (let hh = 0; hh < H; hh++) {
        const offset = hh * S * S;
        const ent = rowEntropies(probs, offset, S);
        const mean = ent.reduce((a, b) => a + b, 0) / S;
        means.push(mean);
        let above = 0; // probability mass on keys after the query: exactly 0 when causal
        for (let i = 0; i < S; i++) for (let j = i + 1; j < S; j++) above += probs[offset + i * S + j];
        const canvas = h('canvas', { class: 'heatmap', role: 'img', 'aria-label': `attention probabilities of head ${hh}` });
        drawHead(canvas, tokens, probs, offset, ent, isCausal);
        cards.push(
          h(
            'figure',
            { class: 'head', 'data-head': hh, 'data-mass-above-diagonal': above, 'data-mean-entropy': mean },
            h('figcaption', {}, h('strong', {}, `head ${hh}`), compare ? ' · softmax' : '', ` · mean row entropy ${mean.toFixed(2)} bits`),
            canvas,
          ),
        );
        if (compare) {
          const lin = rowEntropies(compare.weights, offset, S);
          const linMean = lin.reduce((a, b) => a + b, 0) / S;
          const linCanvas = h('canvas', { class: 'heatmap', role: 'img', 'aria-label': `linear attention weights of head ${hh}` });
          drawHead(linCanvas, tokens, compare.weights, offset, lin, isCausal);
          cards.push(
            h(
              'figure',
              { class: 'head linear', 'data-head': hh, 'data-linear': 'true', 'data-mean-entropy': linMean },
              h('figcaption', {}, h('strong', {}, `head ${hh}`), ` · linear (elu + 1) · mean row entropy ${linMean.toFixed(2)} bits`),
              linCanvas,
            ),
          );
        }
      }
      const uniformBits = isCausal ? tokens.reduce((a, _, i) => a + Math.log2(i + 1), 0) / S : Math.log2(S);
      status.replaceChildren(
        `${S} tokens, E = ${EMBED_DIM}, H = ${H} (Dh = ${EMBED_DIM / H}). Rows are queries, columns keys; each row sums to 1 and each map is coloured up to its own largest probability. `,
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
      grid.replaceChildren(...cards);
      setState(section, 'done');
    } catch (e) {
      if (mine !== generation) return;
      grid.replaceChildren();
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
  causal.input.addEventListener('change', later);
  return { render };
}
