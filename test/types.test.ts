// The result types of forward and scaledDotProductAttention follow their options: needWeights: true
// makes attentionWeights present (attentionWeightsBuffer with returnBuffer), as returnBuffer makes
// outputBuffer present. Checked by the type checker (`tsc --noEmit`, in `npm test`); the calls are
// never made, so the tests need no engine.

import { describe, expectTypeOf, test } from 'vitest';
import type { AttentionEngine, AttentionVariant, BufferForwardResult, ForwardResult, MultiHeadAttention, ProjectionVariant } from '../src/index.ts';

declare const mha: MultiHeadAttention;
declare const engine: AttentionEngine;
declare const someBoolean: boolean;
const x = new Float32Array(0);
const batched = { batchSize: 1, seqLen: 1 };
const sdpa = { batchSize: 1, numHeads: 1, seqLen: 1, headDim: 4 };

/** What a never-made call would resolve to. */
type Resolves<F extends () => Promise<unknown>> = Awaited<ReturnType<F>>;

describe('MultiHeadAttention.forward', () => {
  test('needWeights: true: attentionWeights is a Float32Array, not optional', () => {
    const call = () => mha.forward(x, { ...batched, needWeights: true });
    expectTypeOf<Resolves<typeof call>['attentionWeights']>().toEqualTypeOf<Float32Array>();
    expectTypeOf<Resolves<typeof call>>().toExtend<ForwardResult>();
    const withFalse = () => mha.forward(x, { ...batched, needWeights: true, returnBuffer: false });
    expectTypeOf<Resolves<typeof withFalse>['attentionWeights']>().toEqualTypeOf<Float32Array>();
  });

  test('without needWeights: true the result stays ForwardResult, attentionWeights optional', () => {
    const none = () => mha.forward(x, batched);
    const off = () => mha.forward(x, { ...batched, needWeights: false });
    const maybe = () => mha.forward(x, { ...batched, needWeights: someBoolean });
    const packed = () => mha.forward(x, { cuSeqlens: new Int32Array([0, 1]) });
    expectTypeOf<Resolves<typeof none>>().toEqualTypeOf<ForwardResult>();
    expectTypeOf<Resolves<typeof off>>().toEqualTypeOf<ForwardResult>();
    expectTypeOf<Resolves<typeof maybe>>().toEqualTypeOf<ForwardResult>();
    expectTypeOf<Resolves<typeof packed>>().toEqualTypeOf<ForwardResult>();
    expectTypeOf<ForwardResult['attentionWeights']>().toEqualTypeOf<Float32Array | undefined>();
  });

  test('returnBuffer: true: BufferForwardResult as before; with needWeights its buffer is present', () => {
    const buffer = () => mha.forward(x, { ...batched, returnBuffer: true });
    const bufferNoWeights = () => mha.forward(x, { ...batched, returnBuffer: true, needWeights: false });
    const bufferWeights = () => mha.forward(x, { ...batched, returnBuffer: true, needWeights: true });
    expectTypeOf<Resolves<typeof buffer>>().toEqualTypeOf<BufferForwardResult>();
    expectTypeOf<Resolves<typeof bufferNoWeights>>().toEqualTypeOf<BufferForwardResult>();
    expectTypeOf<Resolves<typeof bufferWeights>>().toExtend<BufferForwardResult>();
    expectTypeOf<Resolves<typeof bufferWeights>['attentionWeightsBuffer']>().toEqualTypeOf<GPUBuffer>();
  });
});

describe('AttentionEngine.scaledDotProductAttention', () => {
  test('needWeights: true: attentionWeights is a Float32Array, not optional', () => {
    const call = () => engine.scaledDotProductAttention(x, x, x, { ...sdpa, needWeights: true });
    expectTypeOf<Resolves<typeof call>['attentionWeights']>().toEqualTypeOf<Float32Array>();
    expectTypeOf<Resolves<typeof call>>().toExtend<ForwardResult>();
  });

  test('without needWeights: true the result stays ForwardResult', () => {
    const none = () => engine.scaledDotProductAttention(x, x, x, sdpa);
    const maybe = () => engine.scaledDotProductAttention(x, x, x, { ...sdpa, needWeights: someBoolean });
    expectTypeOf<Resolves<typeof none>>().toEqualTypeOf<ForwardResult>();
    expectTypeOf<Resolves<typeof maybe>>().toEqualTypeOf<ForwardResult>();
  });

  test('returnBuffer: true: BufferForwardResult as before; with needWeights its buffer is present', () => {
    const buffer = () => engine.scaledDotProductAttention(x, x, x, { ...sdpa, returnBuffer: true });
    const bufferWeights = () => engine.scaledDotProductAttention(x, x, x, { ...sdpa, returnBuffer: true, needWeights: true });
    expectTypeOf<Resolves<typeof buffer>>().toEqualTypeOf<BufferForwardResult>();
    expectTypeOf<Resolves<typeof bufferWeights>['attentionWeightsBuffer']>().toEqualTypeOf<GPUBuffer>();
  });
});

describe('variant names', () => {
  test('ProjectionVariant and AttentionVariant are the names of the records (webgpu/variants.ts), not string', () => {
    expectTypeOf<ProjectionVariant>().toEqualTypeOf<
      'register-4x4' | 'register-8x8' | 'workgroup-64' | 'workgroup-128' | 'subgroup-4x4' | 'subgroup-8x4' | 'subgroup-16x4' | 'gemv' | 'gemv-rows' | 'gemv-rows-subgroup'
    >();
    expectTypeOf<AttentionVariant>().toEqualTypeOf<
      | 'rows32-keys32'
      | 'rows64-keys32'
      | 'rows32-keys32-loop'
      | 'rows32-keys32-r2'
      | 'rows32-keys32-r4'
      | 'rows64-keys32-r4'
      | 'rows16-keys32-sg'
      | 'rows32-keys4-r4-unrolled'
      | 'rows64-keys4-r2-shuffle'
      | 'rows128-keys4-r4-shuffle'
    >();
  });
});
