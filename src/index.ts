// The package entry: the public surface and nothing else.

export { AttentionEngine, createAttentionEngine } from './engine.ts';
export type { AdapterInfo } from './engine.ts';
export { MultiHeadAttention } from './layer.ts';
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
} from './errors.ts';
export type {
  BackendKind,
  EngineOptions,
  EngineStats,
  ForwardOptions,
  BatchedForwardOptions,
  PackedForwardOptions,
  MaskOptions,
  ScaledDotProductAttentionOptions,
  ForwardResult,
  MultiHeadAttentionConfig,
  StateDict,
} from './types.ts';
export { referenceMultiHeadAttention } from './cpu/reference.ts';
export type { ReferenceResult } from './cpu/reference.ts';
