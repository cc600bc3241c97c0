// The package entry: the public surface and nothing else.

export { AttentionEngine, createAttentionEngine } from './engine.ts';
export type { AdapterInfo, WarmupCall } from './engine.ts';
export { MultiHeadAttention } from './layer.ts';
export { KvCache } from './kv-cache.ts';
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
  MaskOptions,
  RotaryOptions,
  ScoreMod,
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
export { referenceMultiHeadAttention } from './cpu/reference.ts';
export type { ReferenceResult } from './cpu/reference.ts';
export { parseSafetensors, WeightFileError } from './weights/safetensors.ts';
export type { SafetensorsFile, SafetensorsTensor, WeightFileProblem } from './weights/safetensors.ts';
export { stateDictFromSafetensors, attentionLayerFromSafetensors, loadSafetensors } from './weights/layouts.ts';
export type { SafetensorsLayoutOptions, WeightLayout } from './weights/layouts.ts';
export { stateDictFromMatmulWeights } from './weights/numpy-style.ts';
export type { MatmulWeights, MatmulProjection, MatmulBias } from './weights/numpy-style.ts';
export { parseGguf, loadGguf, GGML_TYPES } from './weights/gguf.ts';
export type { GgufFile, GgufHeader, GgufTensor, GgufTensorInfo, GgufValue, GgufValueType, GgmlType } from './weights/gguf.ts';
export { attentionLayerFromGguf } from './weights/gguf-layer.ts';
export type { GgufLayerOptions, GgufAttentionLayer, GgufStateDict } from './weights/gguf-layer.ts';
export type { GgufQuantizedTensor, GgufQuantType } from './quant/types.ts';
