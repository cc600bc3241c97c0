// Everything about a layer and a call, checked and resolved once, before any backend runs: the types
// every backend and kernel reads (types.ts, geometry.ts), and one module of checks per entry point.
// Order of checks: the layer's own sizes, then its weights, then the call's inputs.

export type {
  FloatLayerWeights,
  ForwardPlan,
  Geometry,
  LayerSpec,
  LayerWeights,
  MaskPlan,
  PagedPlan,
  PagedSequencePlan,
  PlanMode,
  QkNormPlan,
  RotaryPlan,
  ScorePlan,
} from './types.ts';
export { geometryOf } from './geometry.ts';
export { makePlan, NO_MASKS, type PlanParts, plainScore } from './make-plan.ts';
export { copyWeights, expectedWeights, floatLayerWeights, isFloat, resolveLayerSpec, resolveWeights } from './layer.ts';
export { resolveForwardPlan } from './forward.ts';
export { resolveKvCacheOptions } from './kv-cache.ts';
export { isPagedCall, resolvePagedCacheOptions, resolvePagedPlan } from './paged.ts';
export { resolveAttentionPlan } from './attention.ts';
export { resolveLinearPlan } from './linear.ts';
export { resolveShapeCalls, shapePlan } from './shape.ts';
export { rotaryAngle, rotaryAngles } from './head-transform.ts';
