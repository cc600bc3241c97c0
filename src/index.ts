// The package entry: the public surface and nothing else.

export { AttentionEngine, createAttentionEngine } from './engine.ts';
export type { AdapterInfo, WarmupCall } from './engine.ts';
export { MultiHeadAttention } from './layer.ts';
export { KvCache } from './kv-cache.ts';
export { PagedKvCache } from './paged-kv-cache.ts';
export {
  AttentionError,
  ArgumentError,
  InvalidArgumentError,
  ShapeMismatchError,
  MissingWeightError,
  UnsupportedError,
  DeviceLimitError,
  DeviceLostError,
  DisposedError,
  WebGPUUnavailableError,
  WebGPUCallError,
} from './errors.ts';
export type { ArgumentProblem } from './errors.ts';
export type { WebGPUErrorScope } from './errors.ts';
export type {
  BackendKind,
  EngineOptions,
  EngineStats,
  ForwardOptions,
  BatchedForwardOptions,
  PackedForwardOptions,
  PagedForwardOptions,
  PagedKvCacheOptions,
  PagedSequence,
  MaskOptions,
  RotaryOptions,
  ScoreMod,
  KvCacheDtype,
  KvCacheOptions,
  ScoreOptions,
  HeadShapeOptions,
  LinearAttentionOptions,
  ScaledDotProductAttentionOptions,
  ForwardResult,
  HalfForwardResult,
  TensorArray,
  Float16ArrayLike,
  OutputTypeOption,
  BufferForwardResult,
  MultiHeadAttentionConfig,
  StateDict,
  QuantizedStateDict,
  TuningOptions,
  TuningStore,
  TuningChoice,
  BackendChoice,
  BackendChoiceReport,
  TuningReport,
  WarmupOptions,
  ProjectionVariant,
  AttentionVariant,
} from './types.ts';
export { fileTuningStore, localStorageTuningStore } from './webgpu/tuning/store.ts';
export { referenceMultiHeadAttention, referenceOutput } from './cpu/reference.ts';
export type { ReferenceResult } from './cpu/reference.ts';
export { parseSafetensors, WeightFileError } from './weights/safetensors.ts';
export type { SafetensorsFile, SafetensorsTensor, WeightFileProblem } from './weights/safetensors.ts';
export { stateDictFromSafetensors, attentionLayerFromSafetensors, loadSafetensors } from './weights/layouts.ts';
export type { SafetensorsLayoutOptions, WeightLayout } from './weights/layouts.ts';
export { stateDictFromMatmulWeights } from './weights/numpy-style.ts';
export type { MatmulWeights, MatmulProjection, MatmulBias } from './weights/numpy-style.ts';
// Hugging Face checkpoints: config.json + .safetensors (one layer's attention; the model's layer list; lazy shards).
export { attentionLayerFromHf, hfModelLayers, HF_FAMILIES } from './weights/hf.ts';
export type { HfAttentionLayer, HfAttentionConfig, HfLayerOptions, HfWeights } from './weights/hf.ts';
export { openSafetensors } from './weights/safetensors-lazy.ts';
export type { LazySafetensorsFile, LazyTensorInfo } from './weights/safetensors-lazy.ts';
// Quantized weights (GGUF block types, ONNX MatMulNBits): the tensor types and their exact dequantization.
export type { GgufQuantizedTensor, GgufQuantType, NBitsTensor, QuantizedTensor, WeightTensor } from './quant/types.ts';
export { isQuantized } from './quant/types.ts';
export { dequantize } from './quant/dequantize.ts';
// GGUF files (llama.cpp): the reader, and one attention layer's config and state_dict in the file's types.
export { parseGguf, loadGguf, GGML_TYPES } from './weights/gguf.ts';
export type { GgufFile, GgufHeader, GgufTensor, GgufTensorInfo, GgufValue, GgufValueType, GgmlType } from './weights/gguf.ts';
export { attentionLayerFromGguf, ggufModelLayers } from './weights/gguf-layer.ts';
export type { ModelLayer } from './weights/model-layers.ts';
export type { GgufLayerOptions, GgufAttentionLayer, GgufStateDict } from './weights/gguf-layer.ts';
// Quantizing float32 weights (round to nearest, as ggml's and ONNX Runtime's reference quantizers).
export { quantizeWeights } from './quant/quantize.ts';
export type { QuantizeOptions } from './quant/quantize.ts';
