// Small DOM helpers shared by the panels. No framework: each panel builds its elements once and
// updates them in place.

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;

/** h('td', { class: 'num' }, '1.23') — attributes starting with "on" become listeners; false/null are left out. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, '');
    else el.setAttribute(name, String(value));
  }
  append(el, ...children);
  return el;
}

export function append(el: Element, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

export function clear(el: Element): void {
  el.replaceChildren();
}

/** A labelled number input. */
export function numberField(label: string, id: string, value: number, opts: { min?: number; max?: number; step?: number; title?: string } = {}) {
  const input = h('input', { type: 'number', id, value, min: opts.min ?? 1, max: opts.max, step: opts.step ?? 1, title: opts.title });
  return { input, field: h('label', { class: 'field', for: id }, h('span', {}, label), input) };
}

export function checkboxField(label: string, id: string, checked: boolean, title?: string) {
  const input = h('input', { type: 'checkbox', id, title });
  input.checked = checked;
  return { input, field: h('label', { class: 'field check', for: id }, input, h('span', {}, label)) };
}

export function readInt(input: HTMLInputElement, name: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const v = Number(input.value);
  if (!Number.isInteger(v) || v < min || v > max) {
    throw new Error(`${name} must be a whole number from ${min}${max < Number.MAX_SAFE_INTEGER ? ` to ${max}` : ''}; got "${input.value}"`);
  }
  return v;
}

/** 12345678 → "12.3 M"; for FLOP and parameter counts. */
export function si(n: number, digits = 3): string {
  const units = ['', ' k', ' M', ' G', ' T'];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1000 && i < units.length - 1) {
    v /= 1000;
    i++;
  }
  return `${i === 0 ? String(Math.round(v)) : v.toPrecision(digits)}${units[i]}`;
}

export function grouped(n: number): string {
  return n.toLocaleString('en-US');
}

export function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toPrecision(3)} ${units[i]}`;
}

export function errorMessage(e: unknown): string {
  if (e instanceof Error) return e.name && e.name !== 'Error' ? `${e.name}: ${e.message}` : e.message;
  return String(e);
}

/** A colour per head: a categorical palette up to 12 heads, evenly spaced hues beyond. */
const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac', '#17becf', '#8c564b'];
export function headColor(h: number, H: number): string {
  return H <= PALETTE.length ? PALETTE[h] : `hsl(${Math.round((h * 360) / H)} 60% 50%)`;
}

/** A canvas sized in CSS pixels and drawn at the device pixel ratio. */
export function hiDpiCanvas(canvas: HTMLCanvasElement, width: number, height: number): CanvasRenderingContext2D {
  const dpr = Math.max(1, Math.min(3, window.devicePixelRatio || 1));
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext('2d')!;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

/** Marks a panel's state for people and tests: idle | running | done | error. */
export function setState(section: HTMLElement, state: 'idle' | 'running' | 'done' | 'error'): void {
  section.dataset.state = state;
}
