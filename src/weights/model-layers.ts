// What a model file says about each of its attention layers, before any weight is read: what the
// demo's "Load your own" panel lists and what a user checks before picking a layer. Filled in by
// hfModelLayers (a Hugging Face config.json, weights/hf.ts) and ggufModelLayers (a GGUF header,
// weights/gguf-layer.ts).

/** One layer of a model, as its config or header describes it. */
export interface ModelLayer {
  /** The layer (block) index, from 0. */
  layer: number;
  /**
   * 'full': softmax attention over every earlier position; 'sliding': over the last `window`;
   * 'linear': a linear-attention or state-space block (Qwen3.5's gated delta net, a hybrid's
   * recurrent layer), which the loaders refuse.
   */
  kind: 'full' | 'sliding' | 'linear';
  /** The window of a sliding layer (keys seen, the query's own included); absent otherwise. */
  window?: number;
  /** Whether the layer rotates its queries and keys (false: a NoPE layer). */
  rope: boolean;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  /** null when the loader can build this layer; else why it refuses it (the UnsupportedError's text). */
  unsupported: string | null;
}
