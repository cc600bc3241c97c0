// Shape-flow panel: the tensor shapes through the layer for the chosen config, the parameter and FLOP
// counts, and a view of how W_O mixes the heads: before it each column of concat(heads) belongs to one
// head; after it every output column draws on all of them.

import { attentionFlops, attentionFlopTerms } from '../bench/flops.ts';
import { randomStateDict } from '../../test/helpers/random.ts';
import { bytes, grouped, h, headColor, hiDpiCanvas, si } from './dom.ts';
import type { LayerChoice, LayerConfig } from './layer-config.ts';

function shapeText(dims: [string, number][]): HTMLElement {
  return h('span', { class: 'shape' }, `(${dims.map(([n]) => n).join(', ')})`, h('span', { class: 'muted' }, ` = (${dims.map(([, v]) => v).join(', ')})`));
}

function flowTable(c: LayerChoice): HTMLElement {
  const { batchSize: B, seqLen: S, embedDim: E, numHeads: H, isCausal } = c;
  const Dh = E / H;
  const f32 = (n: number) => bytes(4 * n);
  const rows: [string, string, HTMLElement, string][] = [
    [
      'query X',
      'input, batch first',
      shapeText([
        ['B', B],
        ['S', S],
        ['E', E],
      ]),
      f32(B * S * E),
    ],
    [
      'Q, K, V',
      'one GEMM X·W_inᵀ + b_in, stored split into heads',
      shapeText([
        ['B', B],
        ['H', H],
        ['S', S],
        ['Dh', Dh],
      ]),
      `3 × ${f32(B * H * S * Dh)}`,
    ],
    [
      'scores',
      `Q·Kᵀ/√Dh${isCausal ? ', causal mask' : ''}, online softmax: never stored`,
      shapeText([
        ['B', B],
        ['H', H],
        ['S', S],
        ['S', S],
      ]),
      `0 (would be ${f32(B * H * S * S)})`,
    ],
    [
      'O = softmax·V',
      'per head',
      shapeText([
        ['B', B],
        ['H', H],
        ['S', S],
        ['Dh', Dh],
      ]),
      f32(B * H * S * Dh),
    ],
    [
      'concat(heads)',
      'O read in place as head-major columns, no copy',
      shapeText([
        ['B', B],
        ['S', S],
        ['E', E],
      ]),
      '0 (a view of O)',
    ],
    [
      'output Y',
      'concat·W_Oᵀ + b_O',
      shapeText([
        ['B', B],
        ['S', S],
        ['E', E],
      ]),
      f32(B * S * E),
    ],
  ];
  return h(
    'table',
    { class: 'grid flow', id: 'shape-flow-table' },
    h('thead', {}, h('tr', {}, h('th', {}, 'tensor'), h('th', {}, 'how it is made'), h('th', {}, 'shape'), h('th', { class: 'num' }, 'memory (f32)'))),
    h(
      'tbody',
      {},
      ...rows.map(([t, how, shape, mem], i) =>
        h('tr', {}, h('td', {}, h('strong', {}, t)), h('td', {}, i ? `↓ ${how}` : how), h('td', {}, shape), h('td', { class: 'num' }, mem)),
      ),
    ),
  );
}

function countsTable(c: LayerChoice): HTMLElement {
  const { batchSize: B, seqLen: S, embedDim: E, isCausal } = c;
  const params = 4 * E * E + 4 * E;
  const { projections, attention } = attentionFlopTerms(B, S, E, isCausal);
  const total = attentionFlops(B, S, E, isCausal);
  const rows: [string, string, string][] = [
    ['head size Dh', 'E / H', `${E / c.numHeads}`],
    ['parameters', '4E² + 4E', `${grouped(params)}  (in_proj_weight [3E, E], in_proj_bias [3E], out_proj.weight [E, E], out_proj.bias [E])`],
    ['FLOPs, projections', '8·B·S·E²', si(projections)],
    ['FLOPs, attention', isCausal ? '4·B·S²·E / 2 (causal)' : '4·B·S²·E', si(attention)],
    ['FLOPs, total', 'attentionFlops()', `${si(total)}FLOP  (${grouped(total)})`],
  ];
  return h(
    'table',
    { class: 'kv', id: 'shape-flow-counts' },
    h('tbody', {}, ...rows.map(([k, formula, v]) => h('tr', {}, h('th', { scope: 'row' }, k), h('td', { class: 'formula' }, formula), h('td', {}, v)))),
  );
}

/** share[h][n]: the fraction of ‖W_O row n‖² that comes from head h's Dh columns. */
export function headShares(outProj: Float32Array, E: number, H: number): Float64Array[] {
  const Dh = E / H;
  const shares = Array.from({ length: H }, () => new Float64Array(E));
  for (let n = 0; n < E; n++) {
    let total = 0;
    const parts = new Float64Array(H);
    for (let k = 0; k < E; k++) {
      const w = outProj[n * E + k];
      parts[Math.floor(k / Dh)] += w * w;
      total += w * w;
    }
    for (let hh = 0; hh < H; hh++) shares[hh][n] = total > 0 ? parts[hh] / total : 0;
  }
  return shares;
}

function mixingView(c: LayerChoice): HTMLElement {
  const { embedDim: E, numHeads: H } = c;
  const Dh = E / H;
  const sd = randomStateDict({ embedDim: E, numHeads: H }, c.seed);
  const shares = headShares(sd['out_proj.weight'], E, H);
  const width = 720;
  const colW = width / E;
  const labelW = 0;
  const stripH = 22;
  const barH = 90;
  const gap = 34;
  const height = 16 + stripH + gap + barH + 6;
  const canvas = h('canvas', {
    id: 'head-mix-canvas',
    role: 'img',
    'aria-label': 'head of origin of each concat column, and the share of each head in each output column',
  });
  const ctx = hiDpiCanvas(canvas, width + labelW, height);
  canvas.style.height = 'auto'; // scales with its width (max-width: 100% on a narrow screen), keeping its aspect
  ctx.font = '12px system-ui, sans-serif';
  ctx.fillStyle = '#333';
  ctx.textBaseline = 'alphabetic';
  ctx.fillText(`concat(heads): ${E} columns, each from exactly one head`, 0, 12);
  for (let k = 0; k < E; k++) {
    ctx.fillStyle = headColor(Math.floor(k / Dh), H);
    ctx.fillRect(labelW + k * colW, 16, Math.max(colW, 1), stripH);
  }
  const y0 = 16 + stripH + gap;
  ctx.fillStyle = '#333';
  ctx.fillText(`after W_O: share of each head in each of the ${E} output columns (from ‖W_O[n, head block]‖²)`, 0, y0 - 6);
  for (let n = 0; n < E; n++) {
    let y = y0 + barH;
    for (let hh = 0; hh < H; hh++) {
      const hgt = shares[hh][n] * barH;
      ctx.fillStyle = headColor(hh, H);
      ctx.fillRect(labelW + n * colW, y - hgt, Math.max(colW, 1), hgt);
      y -= hgt;
    }
  }
  let min = 1;
  let max = 0;
  for (const s of shares) {
    for (const v of s) {
      min = Math.min(min, v);
      max = Math.max(max, v);
    }
  }
  const legend = h(
    'ul',
    { class: 'legend' },
    ...Array.from({ length: H }, (_, hh) => h('li', {}, h('span', { class: 'swatch', style: `background:${headColor(hh, H)}` }), `head ${hh}`)),
  );
  return h(
    'div',
    { class: 'mixing' },
    canvas,
    legend,
    h(
      'p',
      { id: 'head-mix-summary' },
      `Every output column draws on all ${H} heads: the smallest share of any head in any column is ${(100 * min).toFixed(1)}%, the largest ${(100 * max).toFixed(1)}% `,
      `(an even split would be ${(100 / H).toFixed(1)}%). Weights: out_proj.weight from seed ${c.seed}, PyTorch's init.`,
    ),
  );
}

export function mountShapeFlowPanel(section: HTMLElement, config: LayerConfig): void {
  const body = section.querySelector<HTMLElement>('.panel-body')!;
  let pending = 0;
  const render = () => {
    const c = config.tryRead();
    if (!c) {
      body.replaceChildren(h('p', { class: 'muted' }, 'Fix the layer shape above to see its shape flow.'));
      section.dataset.state = 'error';
      return;
    }
    body.replaceChildren(
      flowTable(c),
      countsTable(c),
      h('h3', {}, 'How W_O mixes the heads'),
      c.embedDim <= 1024 ? mixingView(c) : h('p', { class: 'muted' }, 'The mixing view is drawn for E ≤ 1024.'),
    );
    section.dataset.state = 'done';
  };
  config.onChange(() => {
    cancelAnimationFrame(pending);
    pending = requestAnimationFrame(render);
  });
  render();
}
