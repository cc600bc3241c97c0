// The public nouns' shapes. Names follow PyTorch's nn.MultiheadAttention (batch_first=True).

export type BackendKind = 'webgpu' | 'cpu';

export interface EngineOptions {
  /** 'webgpu' (fail if no adapter), 'cpu' (float64 reference), or leave out: WebGPU when an adapter exists, else CPU. */
  backend?: BackendKind;
  /** Run on this device (the caller keeps owning it: the engine's dispose() does not destroy it). */
  device?: GPUDevice;
}

export interface MultiHeadAttentionConfig {
  /** E: model width. */
  embedDim: number;
  /** H: query heads; embedDim must be divisible by it. */
  numHeads: number;
  /** G: key/value heads (grouped-query attention); divides numHeads. Default numHeads. */
  numKvHeads?: number;
  /** Whether the layer has in_proj_bias and out_proj.bias. Default true. */
  bias?: boolean;
  /** Refused unless 0: this engine is inference only. */
  dropout?: number;
}

/**
 * PyTorch nn.MultiheadAttention state_dict names → row-major Float32Array:
 *   in_proj_weight [(H + 2·G)·Dh, E]  (= [3E, E] when G = H), in_proj_bias [(H + 2·G)·Dh],
 *   out_proj.weight [E, E], out_proj.bias [E]. Linear layers compute y = x·Wᵀ + b.
 */
export type StateDict = Record<string, Float32Array>;

export interface ForwardOptions {
  /** B. */
  batchSize: number;
  /** S. */
  seqLen: number;
  /** Query i sees keys j ≤ i. Default false. */
  isCausal?: boolean;
  /**
   * Also return the attention probabilities, per head: PyTorch's need_weights=True with
   * average_attn_weights=False. They take B·H·S² floats; the output does not need them. Default false.
   */
  needWeights?: boolean;
  /** Refused unless 0: this engine is inference only. */
  dropout?: number;
}

export interface ForwardResult {
  /** [B, S, E], batch first. */
  output: Float32Array;
  /** [B, H, Sq, Skv]: softmax(Q·Kᵀ/√Dh) of each head; 0 where a key is masked. Only with needWeights. */
  attentionWeights?: Float32Array;
}

export interface EngineStats {
  /** GPU buffers the engine holds (weights, scratch, staging); 0 on the CPU backend. */
  buffers: number;
  /** Their total size in bytes. */
  bytes: number;
}
