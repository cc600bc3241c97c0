// What host and shaders share is declared once (src/webgpu/shader.ts): a kernel's uniform struct and
// its packing come from one field list, and the shared constants reach every shader with the host's
// values. The kernels' own declarations are checked against the WGSL they are compiled into.

import { describe, expect, test } from 'vitest';
import { FLASH_PARAMS } from '../src/webgpu/kernels/flash-attention.ts';
import { SCORE_FIELDS } from '../src/webgpu/kernels/masks.ts';
import { PROBS_PARAMS } from '../src/webgpu/kernels/attention-probs.ts';
import { defineBindings, PARAMS_BINDING } from '../src/webgpu/bindings.ts';
import { constant, defineParams, SHADER_CONSTANTS, shaderCode } from '../src/webgpu/shader.ts';
import { unrollLoops } from '../src/webgpu/software/unroll.ts';

describe('defineParams', () => {
  const params = defineParams([
    ['count', 'u32', 'how many'],
    ['scale', 'f32', 'a factor'],
    ['last', 'u32', 'the last field'],
  ]);

  test('the WGSL struct lists the fields in declaration order, with their types and meanings', () => {
    const fields = [...params.wgsl.matchAll(/^ {2}(\w+): (u32|f32),\s+\/\/ (.*)$/gm)].map((m) => [m[1], m[2], m[3]]);
    expect(fields).toEqual([
      ['count', 'u32', 'how many'],
      ['scale', 'f32', 'a factor'],
      ['last', 'u32', 'the last field'],
    ]);
    // The struct only: its binding is the kernel's bindings' (bindings.ts PARAMS_BINDING), written with them.
    expect(params.wgsl).not.toContain('@binding');
    const code = shaderCode({ precision: 'f32', params, bindings: defineBindings('Test', [PARAMS_BINDING]), sources: [] });
    expect(code).toContain('@group(0) @binding(0) var<uniform> params: Params;');
  });

  test('pack writes each field by name at its offset, 16-byte aligned, whatever order the values come in', () => {
    const bytes = params.pack({ last: 7, scale: 0.5, count: 3 });
    expect(bytes.byteLength).toBe(16);
    const view = new DataView(bytes);
    expect(view.getUint32(0, true)).toBe(3);
    expect(view.getFloat32(4, true)).toBe(0.5);
    expect(view.getUint32(8, true)).toBe(7);
  });

  test('a missing value or a field declared twice is refused', () => {
    expect(() => params.pack({ count: 1, scale: 1 } as never)).toThrow(/field last is undefined/);
    expect(() =>
      defineParams([
        ['a', 'u32', ''],
        ['a', 'f32', ''],
      ]),
    ).toThrow(/declared twice/);
  });
});

describe('the kernels share one declaration of the score rule fields', () => {
  test.each([
    ['flash_attention', FLASH_PARAMS],
    ['attention_probs', PROBS_PARAMS],
  ])('%s declares every SCORE_FIELDS entry, with the same type', (_name, params) => {
    for (const [name, type] of SCORE_FIELDS) expect(params.fields).toContainEqual(expect.arrayContaining([name, type]));
  });
});

describe('shared constants', () => {
  test('every shader gets each constant with the host value', () => {
    const code = shaderCode({ precision: 'f32', sources: [] });
    for (const [name, { type, value }] of Object.entries(SHADER_CONSTANTS)) {
      const m = new RegExp(`const ${name}: ${type} = ([^;]+);`).exec(code);
      expect(m, name).not.toBeNull();
      expect(Number(m![1].replace(/u$/, ''))).toBe(value);
      expect(constant(name as keyof typeof SHADER_CONSTANTS)).toBe(value);
    }
  });

  test('the masked value lies at or below the threshold the kernels test, and finite mask values stay above it', () => {
    expect(constant('MASKED')).toBeLessThanOrEqual(constant('MASKED_BELOW'));
    expect(constant('LOWEST_MASK_VALUE')).toBeGreaterThan(constant('MASKED_BELOW'));
    // The kernels scale mask values by log2(e): the lowest finite one must not overflow float32.
    expect(Math.fround(constant('LOWEST_MASK_VALUE') * Math.LOG2E)).toBeGreaterThan(-3.4e38);
  });
});

describe('unrollLoops', () => {
  test('writes out the loops bounded by the named constants, inner ones first, each copy in its own braces', () => {
    const code = 'for (var r = 0u; r < R; r++) { x[r] = 0.0; for (var d = 0u; d < D; d++) { y[r * D + d] += q[d]; } }';
    expect(unrollLoops(code, { R: 2, D: 2 })).toBe(
      '{ x[0u] = 0.0; { y[0u * D + 0u] += q[0u]; }{ y[0u * D + 1u] += q[1u]; } }{ x[1u] = 0.0; { y[1u * D + 0u] += q[0u]; }{ y[1u * D + 1u] += q[1u]; } }',
    );
  });

  test('leaves other loops as loops, and replaces only the whole name of the loop variable', () => {
    const code = 'for (var c = 0u; c < min(K, n); c++) { for (var d = 0u; d < D; d++) { s[c] += dd * d; } } for (var d = 0u; d < params.n; d++) { }';
    expect(unrollLoops(code, { D: 2 })).toBe('for (var c = 0u; c < min(K, n); c++) { { s[c] += dd * 0u; }{ s[c] += dd * 1u; } } for (var d = 0u; d < params.n; d++) { }');
  });
});
