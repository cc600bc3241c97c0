// The layer shape shared by the Correctness and Shape-flow panels: B, S, E, H, causal, seed.

import type { BenchShape } from '../bench/types.ts';
import { checkboxField, h, numberField, readInt } from './dom.ts';

export interface LayerChoice extends BenchShape {
  seed: number;
}

export class LayerConfig {
  readonly element: HTMLElement;
  private readonly b = numberField('B (batch)', 'cfg-b', 2, { max: 64 });
  private readonly s = numberField('S (sequence)', 'cfg-s', 64, { max: 4096 });
  private readonly e = numberField('E (embed dim)', 'cfg-e', 128, { max: 4096 });
  private readonly heads = numberField('H (heads)', 'cfg-h', 4, { max: 64 });
  private readonly causal = checkboxField('causal', 'cfg-causal', false, 'query i sees keys j ≤ i');
  private readonly seed = numberField('seed', 'cfg-seed', 1, { min: 0 });
  private readonly message = h('p', { class: 'field-error', role: 'alert' });
  private readonly listeners: (() => void)[] = [];

  constructor() {
    const row = h('div', { class: 'form-row' }, this.b.field, this.s.field, this.e.field, this.heads.field, this.causal.field, this.seed.field);
    this.element = h('div', {}, row, this.message);
    for (const input of [this.b.input, this.s.input, this.e.input, this.heads.input, this.causal.input, this.seed.input]) {
      input.addEventListener('input', () => this.changed());
    }
    this.changed();
  }

  /** The current choice, or throws with a message naming the bad field. */
  read(): LayerChoice {
    const batchSize = readInt(this.b.input, 'B', 1, 64);
    const seqLen = readInt(this.s.input, 'S', 1, 4096);
    const embedDim = readInt(this.e.input, 'E', 1, 4096);
    const numHeads = readInt(this.heads.input, 'H', 1, 64);
    const seed = readInt(this.seed.input, 'seed', 0, 2 ** 32 - 1);
    if (embedDim % numHeads !== 0) throw new Error(`E (${embedDim}) must be divisible by H (${numHeads}): each head gets Dh = E / H columns.`);
    return { batchSize, seqLen, embedDim, numHeads, isCausal: this.causal.input.checked, seed };
  }

  /** The current choice or null (the message under the form says what is wrong). */
  tryRead(): LayerChoice | null {
    try {
      const c = this.read();
      this.message.textContent = '';
      return c;
    } catch (e) {
      this.message.textContent = (e as Error).message;
      return null;
    }
  }

  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  private changed(): void {
    this.tryRead();
    for (const l of this.listeners) l();
  }
}
