// One head's attention map, shared by the Attention-maps and Load-your-own panels: a heatmap (rows
// queries, columns keys) with token labels and row entropies, coloured on a viridis ramp from 0 to a
// given maximum (the head's own, or one for all maps), a colour scale that shows those values, and a
// hover that names the query, the key and the probability.

import { h, hiDpiCanvas } from './dom.ts';

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
export function viridis(t: number): string {
  const x = Math.max(0, Math.min(1, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const c = VIRIDIS[i].map((a, k) => Math.round(a + (VIRIDIS[i + 1][k] - a) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

const FONT = '12px system-ui, "Noto Sans CJK SC", "WenQuanYi Zen Hei", "Microsoft YaHei", "PingFang SC", sans-serif';

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

/** The largest value of `count` consecutive elements from `offset`. */
export function maxOf(p: ArrayLike<number>, offset: number, count: number): number {
  let max = 0;
  for (let k = 0; k < count; k++) max = Math.max(max, p[offset + k]);
  return max;
}

/** A probability as the scale and the hover print it. */
export const formatProbability = (v: number) => (v === 0 ? '0' : v >= 0.01 ? v.toFixed(3) : v.toExponential(1));

/** A horizontal colour scale from 0 to `max`, its values under it (0, ¼, ½, ¾ and max). */
export function colourScale(max: number, label: string): HTMLElement {
  const stops = VIRIDIS.map((c, i) => `rgb(${c.join(',')}) ${((100 * i) / (VIRIDIS.length - 1)).toFixed(1)}%`).join(', ');
  return h(
    'div',
    { class: 'colour-scale', 'data-max': max, role: 'img', 'aria-label': `${label}: colours from 0 to ${formatProbability(max)}` },
    h('span', { class: 'colour-scale-label' }, label),
    h('span', { class: 'colour-scale-bar', style: `background: linear-gradient(to right, ${stops})` }),
    h('span', { class: 'colour-scale-ticks' }, ...[0, 0.25, 0.5, 0.75, 1].map((f) => h('span', {}, formatProbability(f * max)))),
  );
}

export interface HeadMap {
  tokens: string[];
  /** [.., S, S] probabilities; this head's map starts at `offset`. */
  p: ArrayLike<number>;
  offset: number;
  isCausal: boolean;
  /** The value drawn in the ramp's last colour (the head's own largest, or one for all maps). */
  max: number;
  /** The shared hover box. */
  tip: HTMLElement;
}

/** Draws one head and wires its hover; returns the canvas. */
export function headCanvas(map: HeadMap, label: string): HTMLCanvasElement {
  const canvas = h('canvas', { class: 'heatmap', role: 'img', 'aria-label': label });
  const { tokens, p, offset, isCausal, max, tip } = map;
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
  canvas.dataset.max = String(max);

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
  const entropies = rowEntropies(p, offset, S);
  const bx = left + gridW + 10;
  ctx.fillStyle = '#555';
  ctx.fillText('entropy (bits)', bx, top - 8);
  entropies.forEach((e, i) => {
    const maxBits = Math.log2(isCausal ? i + 1 : S);
    const y = top + i * cell;
    ctx.fillStyle = '#e6e9ef';
    ctx.fillRect(bx, y + 3, barW, cell - 7);
    ctx.fillStyle = '#4e79a7';
    ctx.fillRect(bx, y + 3, maxBits > 0 ? (barW * e) / maxBits : 0, cell - 7);
    ctx.fillStyle = '#222';
    ctx.fillText(e.toFixed(2), bx + barW + 4, y + cell / 2);
  });

  // Hover: the cell under the pointer, in CSS pixels.
  canvas.addEventListener('mousemove', (ev) => {
    const r = canvas.getBoundingClientRect();
    const j = Math.floor((ev.clientX - r.left - left) / cell);
    const i = Math.floor((ev.clientY - r.top - top) / cell);
    if (i < 0 || j < 0 || i >= S || j >= S) {
      tip.hidden = true;
      return;
    }
    const v = p[offset + i * S + j];
    tip.replaceChildren(
      h('span', {}, 'query ', h('strong', {}, tokens[i]), ` (${i})`),
      h('span', {}, 'key ', h('strong', {}, tokens[j]), ` (${j})`),
      h('span', {}, isCausal && j > i ? 'masked (causal): p = 0' : `p = ${formatProbability(v)}`),
    );
    Object.assign(tip.dataset, { query: i, key: j, probability: v });
    tip.hidden = false;
    const host = tip.offsetParent?.getBoundingClientRect() ?? { left: 0, top: 0 };
    tip.style.left = `${ev.clientX - host.left + 14}px`;
    tip.style.top = `${ev.clientY - host.top + 14}px`;
  });
  canvas.addEventListener('mouseleave', () => {
    tip.hidden = true;
  });
  return canvas;
}

/** The hover box a panel's maps share (position it inside an element with position: relative). */
export function hoverTip(id: string): HTMLElement {
  const tip = h('div', { class: 'map-tip', id, role: 'tooltip' });
  tip.hidden = true;
  return tip;
}

/** The scale choice: each head's own largest probability, or one for all the maps shown. */
export function scaleSelect(id: string): HTMLSelectElement {
  return h(
    'select',
    { id, title: 'what the brightest colour means' },
    h('option', { value: 'head' }, "each head's own"),
    h('option', { value: 'shared' }, 'one for all heads'),
  );
}
