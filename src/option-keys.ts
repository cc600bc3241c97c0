// The option names each entry point accepts: one table per options type of types.ts, from which the
// lists that rejectUnknownKeys (validate.ts) checks against are made. knownKeys checks each table
// against its type, so an option added to (or renamed in) types.ts without its table here fails to
// compile instead of being refused at run time as "unknown". A table's order is the order an unknown
// option's message lists the known ones in.

import type {
  BatchedForwardOptions,
  EngineOptions,
  ForwardOptions,
  HeadShapeOptions,
  KvCacheOptions,
  LinearAttentionOptions,
  MultiHeadAttentionConfig,
  PackedForwardOptions,
  PagedForwardOptions,
  PagedKvCacheOptions,
  PagedSequence,
  RotaryOptions,
  ScaledDotProductAttentionOptions,
  TuningOptions,
  WarmupOptions,
} from './types.ts';
import { knownKeys } from './validate.ts';

/** MultiHeadAttention.forward's options, batched and packed (cuSeqlens) forms together. */
export const FORWARD_KEYS = knownKeys<ForwardOptions>({
  batchSize: true,
  seqLen: true,
  isCausal: true,
  needWeights: true,
  key: true,
  value: true,
  kvSeqLen: true,
  keyPaddingMask: true,
  attnMask: true,
  window: true,
  headMask: true,
  cuSeqlens: true,
  kvCache: true,
  returnBuffer: true,
  dropout: true,
  scale: true,
  softcap: true,
  sinks: true,
  alibiSlopes: true,
  positionIds: true,
  outputType: true,
  treeParents: true,
  sequences: true,
});

/** The batched form's options that the packed form (cuSeqlens) has not: refused beside cuSeqlens, in this order. */
export const BATCHED_ONLY_KEYS = knownKeys<Omit<BatchedForwardOptions, keyof PackedForwardOptions>>({
  batchSize: true,
  seqLen: true,
  key: true,
  value: true,
  kvSeqLen: true,
  keyPaddingMask: true,
  attnMask: true,
  needWeights: true,
  kvCache: true,
  returnBuffer: true,
  positionIds: true,
  treeParents: true,
});

/** The sizes of a call on head-split tensors (HeadShapeOptions), shared by scaledDotProductAttention and linearAttention. */
const HEAD_SHAPE: { readonly [K in keyof HeadShapeOptions]-?: true } = { batchSize: true, numHeads: true, numKvHeads: true, seqLen: true, kvSeqLen: true, headDim: true };

/** engine.scaledDotProductAttention's options. */
export const SDPA_KEYS = knownKeys<ScaledDotProductAttentionOptions>({
  ...HEAD_SHAPE,
  isCausal: true,
  attnMask: true,
  keyPaddingMask: true,
  window: true,
  headMask: true,
  needWeights: true,
  dropout: true,
  scale: true,
  softcap: true,
  sinks: true,
  alibiSlopes: true,
  rotary: true,
  positionIds: true,
  returnBuffer: true,
  scoreMod: true,
  outputType: true,
});

/** engine.linearAttention's options. */
export const LINEAR_KEYS = knownKeys<LinearAttentionOptions>({
  ...HEAD_SHAPE,
  isCausal: true,
  keyPaddingMask: true,
  eps: true,
  needWeights: true,
});

/** createMultiHeadAttention's config. */
export const CONFIG_KEYS = knownKeys<MultiHeadAttentionConfig>({
  embedDim: true,
  numHeads: true,
  numKvHeads: true,
  headDim: true,
  kdim: true,
  vdim: true,
  bias: true,
  dropout: true,
  rotary: true,
  qkNorm: true,
  vNorm: true,
  kEqV: true,
  outputGate: true,
  scoreMod: true,
  attention: true,
  activations: true,
});

/** config.rotary, and scaledDotProductAttention's options.rotary. */
export const ROTARY_KEYS = knownKeys<RotaryOptions>({ dim: true, base: true, interleaved: true, invFreq: true, attentionFactor: true, cos: true, sin: true });

/** config.qkNorm. */
export const QK_NORM_KEYS = knownKeys<NonNullable<MultiHeadAttentionConfig['qkNorm']>>({ query: true, key: true, eps: true, over: true });

/** config.vNorm (when an object). */
export const V_NORM_KEYS = knownKeys<{ eps?: number }>({ eps: true });

/** What a call on a PagedKvCache (sequences) takes: refused there are the other options, named in this order. */
export const PAGED_KEYS = knownKeys<PagedForwardOptions>({
  kvCache: true,
  sequences: true,
  isCausal: true,
  window: true,
  dropout: true,
  scale: true,
  softcap: true,
  sinks: true,
  alibiSlopes: true,
  outputType: true,
  cuSeqlens: true,
});

/** One entry of PagedForwardOptions.sequences. */
export const PAGED_SEQUENCE_KEYS = knownKeys<PagedSequence>({ id: true, length: true, treeParents: true });

/** mha.createPagedKvCache's options. */
export const PAGED_CACHE_KEYS = knownKeys<PagedKvCacheOptions>({ blockSize: true, maxBlocks: true, dtype: true, sharing: true });

/** mha.createKvCache's options. */
export const KV_CACHE_KEYS = knownKeys<KvCacheOptions>({ batchSize: true, maxSeqLen: true, dtype: true, key: true, value: true, length: true });

/** createAttentionEngine's options. */
export const ENGINE_KEYS = knownKeys<EngineOptions>({
  backend: true,
  device: true,
  limits: true,
  precision: true,
  profile: true,
  threads: true,
  tuning: true,
  wasmSimd: true,
});

/** createAttentionEngine's options.limits. */
export const LIMIT_KEYS = knownKeys<NonNullable<EngineOptions['limits']>>({
  maxStorageBufferBindingSize: true,
  maxBufferSize: true,
  maxComputeWorkgroupsPerDimension: true,
});

/** createAttentionEngine's options.tuning. */
export const TUNING_KEYS = knownKeys<TuningOptions>({ mode: true, kernels: true, store: true, background: true });

/** engine.warmup's and engine.tune's options. */
export const WARMUP_OPTION_KEYS = knownKeys<WarmupOptions>({ onProgress: true });
