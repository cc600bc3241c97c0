// The layer shared by the Correctness and Shape-flow panels: B, S, E, H, causal, seed, and the
// attention options of today's models (softmax or linear attention, rotary embeddings, softcap,
// sinks, ALiBi), turned into createMultiHeadAttention's config and forward's options.

import type { ForwardOptions, MultiHeadAttentionConfig } from 'webgpu-attention';
import type { BenchShape } from '../bench/types.ts';
import { checkboxField, h, numberField, readInt } from './dom.ts';

/** The attention options the panel offers (each maps to one config or forward option). */
export interface LayerOptions {
  attention: 'softmax' | 'linear';
  /** config.rotary = {} (halves, base 10000: Llama). */
  rotary: boolean;
  /** options.softcap, 0 = none (Gemma 2 uses 50). */
  softcap: number;
  /** options.sinks: one learned-looking logit per head (gpt-oss). */
  sinks: boolean;
  /** options.alibiSlopes: the ALiBi paper's geometric slopes 2^(−8(h+1)/H). */
  alibi: boolean;
}

export interface LayerChoice extends BenchShape {
  seed: number;
  options: LayerOptions;
}

export const PLAIN_OPTIONS: LayerOptions = { attention: 'softmax', rotary: false, softcap: 0, sinks: false, alibi: false };

/** The layer's config for createMultiHeadAttention. */
export function layerConfigOf(c: LayerChoice): MultiHeadAttentionConfig {
  return {
    embedDim: c.embedDim,
    numHeads: c.numHeads,
    ...(c.options.attention === 'linear' ? { attention: 'linear' as const } : {}),
    ...(c.options.rotary ? { rotary: {} } : {}),
  };
}

/** forward's options for one batch of the choice (score options included). */
export function forwardOptionsOf(c: LayerChoice): ForwardOptions {
  const H = c.numHeads;
  const o = c.options;
  return {
    batchSize: c.batchSize,
    seqLen: c.seqLen,
    isCausal: c.isCausal,
    ...(o.softcap > 0 ? { softcap: o.softcap } : {}),
    ...(o.sinks ? { sinks: Float32Array.from({ length: H }, (_, h) => Math.sin(h + 1) * 2) } : {}),
    ...(o.alibi ? { alibiSlopes: Float32Array.from({ length: H }, (_, h) => 2 ** ((-8 * (h + 1)) / H)) } : {}),
  };
}

/** A short description of the options, for tables ("softmax, rotary, softcap 30"). */
export function describeOptions(o: LayerOptions): string {
  const parts: string[] = [o.attention];
  if (o.rotary) parts.push('rotary');
  if (o.softcap > 0) parts.push(`softcap ${o.softcap}`);
  if (o.sinks) parts.push('sinks');
  if (o.alibi) parts.push('ALiBi');
  return parts.join(', ');
}

export class LayerConfig {
  readonly element: HTMLElement;
  private readonly b = numberField('B (batch)', 'cfg-b', 2, { max: 64 });
  private readonly s = numberField('S (sequence)', 'cfg-s', 64, { max: 4096 });
  private readonly e = numberField('E (embed dim)', 'cfg-e', 128, { max: 4096 });
  private readonly heads = numberField('H (heads)', 'cfg-h', 4, { max: 64 });
  private readonly causal = checkboxField('causal', 'cfg-causal', false, 'query i sees keys j ≤ i');
  private readonly seed = numberField('seed', 'cfg-seed', 1, { min: 0 });
  private readonly attention = h(
    'select',
    { id: 'cfg-attention', title: 'config.attention: softmax(q·kᵀ/√Dh)·v, or linear attention with φ = elu + 1 (O(S·Dh²))' },
    h('option', { value: 'softmax' }, 'softmax'),
    h('option', { value: 'linear' }, 'linear (elu + 1)'),
  );
  private readonly rotary = checkboxField('rotary', 'cfg-rotary', false, 'config.rotary: Llama-style rotary embeddings (halves, base 10000)');
  private readonly softcap = numberField('softcap (0 = off)', 'cfg-softcap', 0, { min: 0, title: 'options.softcap: scores become c·tanh(s / c) (Gemma 2)' });
  private readonly sinks = checkboxField('sinks', 'cfg-sinks', false, 'options.sinks: a logit per head that joins the softmax with value 0 (gpt-oss)');
  private readonly alibi = checkboxField('ALiBi', 'cfg-alibi', false, "options.alibiSlopes: −slope·|i − j| added to the scores (the ALiBi paper's slopes)");
  private readonly message = h('p', { class: 'field-error', role: 'alert', id: 'cfg-message' });
  private readonly listeners: (() => void)[] = [];

  constructor() {
    const row = h('div', { class: 'form-row' }, this.b.field, this.s.field, this.e.field, this.heads.field, this.causal.field, this.seed.field);
    const options = h(
      'div',
      { class: 'form-row', id: 'cfg-options' },
      h('label', { class: 'field', for: 'cfg-attention' }, h('span', {}, 'attention'), this.attention),
      this.rotary.field,
      this.softcap.field,
      this.sinks.field,
      this.alibi.field,
    );
    this.element = h('div', {}, row, options, this.message);
    const inputs = [this.b, this.s, this.e, this.heads, this.causal, this.seed, this.rotary, this.softcap, this.sinks, this.alibi].map((f) => f.input);
    for (const input of [...inputs, this.attention]) input.addEventListener('input', () => this.changed());
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
    const softcap = Number(this.softcap.input.value);
    if (!Number.isFinite(softcap) || softcap < 0) throw new Error(`softcap must be a number ≥ 0 (0 = off); got "${this.softcap.input.value}"`);
    const options: LayerOptions = {
      attention: this.attention.value === 'linear' ? 'linear' : 'softmax',
      rotary: this.rotary.input.checked,
      softcap,
      sinks: this.sinks.input.checked,
      alibi: this.alibi.input.checked,
    };
    if (options.attention === 'linear' && (softcap > 0 || options.sinks || options.alibi)) {
      throw new Error('Linear attention forms no scores: softcap, sinks and ALiBi apply to softmax attention only.');
    }
    if (options.rotary && (embedDim / numHeads) % 2 !== 0) throw new Error(`Rotary embeddings rotate pairs: the head size Dh = ${embedDim / numHeads} must be even.`);
    return { batchSize, seqLen, embedDim, numHeads, isCausal: this.causal.input.checked, seed, options };
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
