// "A real model" panel: a sentence typed by the reader, tokenised with Universal Sentence Encoder
// Lite's own SentencePiece vocabulary, the model's first layer run in float64 on the CPU to get the
// real input of its second layer, and that layer (E=512, H=4, Dh=128, the model's own weights) run on
// this engine with needWeights. Per-head maps and row entropies are drawn as the attention-maps panel
// draws them, the tokens on the axes; the float64 reference of the same layer is computed alongside.
// The model (28 MB) loads on the first run, not with the page.

import { type AttentionEngine, type MultiHeadAttention, referenceMultiHeadAttention } from 'webgpu-attention';
import { loadUseLite } from '../model/load.ts';
import type { Token } from '../model/sentencepiece.ts';
import { attentionInput, attentionStateDict, USE_LITE_LAYER } from '../model/use-lite.ts';
import { bytes, errorMessage, h, setState } from './dom.ts';
import { colourScale, headCanvas, hoverTip, maxOf, rowEntropies } from './heatmap.ts';

const DEFAULT_TEXT = "The animal didn't cross the street because it was too tired.";
/** Longer sentences run, but their maps would be unreadable here. */
const MAX_TOKENS = 40;

/** The panel's last result, for the e2e test to check against its own float64 reference. */
export interface RealModelRun {
  text: string;
  tokens: Token[];
  /** The layer's input [S, 512] (float32, as the engine received it). */
  input: Float32Array;
  /** The engine's attentionWeights [1, H, S, S]. */
  attentionWeights: Float32Array;
  output: Float32Array;
}
let lastRun: RealModelRun | null = null;
export function lastRealModelRun(): RealModelRun | null {
  return lastRun;
}

export function mountRealModelPanel(section: HTMLElement, engine: AttentionEngine): { render: () => Promise<void> } {
  const body = section.querySelector<HTMLElement>('.panel-body')!;
  const text = h('input', { type: 'text', id: 'model-text', value: DEFAULT_TEXT, size: 60, spellcheck: 'false', 'aria-label': 'a sentence' });
  const run = h('button', { type: 'button', id: 'model-run' }, 'Run the model');
  const status = h('p', { class: 'status', id: 'model-status', 'aria-live': 'polite' }, 'Press "Run the model": it loads 28 MB of weights once.');
  const tokenList = h('p', { class: 'muted', id: 'model-tokens' });
  const grid = h('div', { class: 'maps', id: 'model-grid' });
  const tip = hoverTip('model-tip');
  body.append(
    h('div', { class: 'form-row' }, h('label', { class: 'field grow', for: 'model-text' }, h('span', {}, 'sentence'), text), run),
    status,
    tokenList,
    grid,
    tip,
  );

  let layer: MultiHeadAttention | null = null;
  let stateDict: ReturnType<typeof attentionStateDict> | null = null;
  let generation = 0;
  async function render(): Promise<void> {
    const mine = ++generation;
    setState(section, 'running');
    status.textContent = stateDict ? 'Running the model…' : 'Loading the model (28 MB)…';
    try {
      const model = await loadUseLite();
      stateDict ??= attentionStateDict(model.weights);
      layer ??= engine.createMultiHeadAttention(USE_LITE_LAYER, stateDict);
      if (text.value.trim() === '') throw new Error('Type a sentence.');
      const tokens = model.tokenizer.encode(text.value.trim());
      const S = tokens.length;
      if (S > MAX_TOKENS) throw new Error(`At most ${MAX_TOKENS} tokens here; "${text.value.trim()}" has ${S}.`);
      const ids = tokens.map((t) => t.id);
      const input = new Float32Array(attentionInput(model.weights, ids)); // [S, 512]: the first layer, float64 on the CPU
      const options = { batchSize: 1, seqLen: S, needWeights: true };
      const result = await layer.forward(input, options);
      const reference = referenceMultiHeadAttention(USE_LITE_LAYER, stateDict, input, options);
      if (mine !== generation) return; // a newer render started meanwhile
      const probs = result.attentionWeights!;
      lastRun = { text: text.value.trim(), tokens, input, attentionWeights: probs, output: result.output };

      let maxDiff = 0;
      for (let k = 0; k < probs.length; k++) maxDiff = Math.max(maxDiff, Math.abs(probs[k] - reference.probs![k]));
      const labels = tokens.map((t) => t.piece);
      const H = USE_LITE_LAYER.numHeads;
      const means: number[] = [];
      const cards: HTMLElement[] = [];
      for (let hh = 0; hh < H; hh++) {
        const offset = hh * S * S;
        const ent = rowEntropies(probs, offset, S);
        const mean = ent.reduce((a, b) => a + b, 0) / S;
        means.push(mean);
        const max = maxOf(probs, offset, S * S); // each head on its own scale, shown under it
        const canvas = headCanvas({ tokens: labels, p: probs, offset, isCausal: false, max, tip }, `USE Lite layer 2, attention probabilities of head ${hh}`);
        cards.push(
          h(
            'figure',
            { class: 'head', 'data-head': hh, 'data-mean-entropy': mean },
            h('figcaption', {}, h('strong', {}, `head ${hh}`), ` · mean row entropy ${mean.toFixed(2)} bits`),
            canvas,
            colourScale(max, 'probability'),
          ),
        );
      }
      tokenList.replaceChildren(
        `${S} SentencePiece tokens (▁ marks a word start; id in the vocabulary): `,
        ...tokens.map((t) => h('code', { class: 'token', title: `id ${t.id}` }, `${t.piece}`)).flatMap((c, i) => (i ? [' ', c] : [c])),
      );
      status.replaceChildren(
        `The model's second layer (E = 512, H = 4, Dh = 128) on ${S} tokens, on ${engine.backend === 'webgpu' ? 'WebGPU' : 'the CPU backend'} with needWeights. `,
        `Rows are queries, columns keys; hover a cell for its query, key and probability. A uniform row would have ${Math.log2(S).toFixed(2)} bits; these heads have ${means.map((m) => m.toFixed(2)).join(', ')}. `,
        h('span', { id: 'model-check', 'data-max-diff': maxDiff }, `Max |engine − float64 reference| over the maps = ${maxDiff.toExponential(2)}.`),
        ` (Weights: ${bytes(model.bytes)} loaded.)`,
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

  run.addEventListener('click', () => void render());
  text.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter') void render();
  });
  return { render };
}
