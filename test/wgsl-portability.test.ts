// WGSL that every implementation accepts: Dawn/Tint (Chromium, Node), wgpu/naga (Firefox, Deno) and
// WebKit (Safari, not testable here). The kernels run on the first two in CI (test:firefox,
// test:deno); this file keeps out, in every shader source, the constructs known to be rejected or
// unimplemented by one of them, so a change that adds one fails here first, whatever adapter runs it.

import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';

function wgslFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? wgslFiles(path) : name.endsWith('.wgsl') ? [path] : [];
  });
}

/** The source without comments (a comment may name what the code must not use). */
const code = (path: string) => readFileSync(path, 'utf8').replace(/\/\/.*$/gm, '');

const RULES: [what: string, pattern: RegExp, why: string][] = [
  ['pointer parameters to storage or workgroup memory', /ptr\s*<\s*(storage|workgroup)/, 'naga and WebKit do not accept them without unrestricted_pointer_parameters'],
  ['the linear_indexing extension', /linear_indexing/, 'not shipped by naga or WebKit'],
  ['an `enable` of its own', /^\s*enable\s/m, 'the host prepends `enable f16;` / `enable subgroups;` only where the device has the feature (shader.ts)'],
  ['a bitcast of a vec2 of f16', /bitcast\s*<[^>]*vec2\s*<\s*f16/, 'naga rejects it'],
  ['`requires` directives', /^\s*requires\s/m, 'language extensions differ between implementations'],
];

const files = wgslFiles(join(import.meta.dirname, '..', 'shaders'));

describe('every shader keeps to WGSL that Dawn, naga and WebKit all accept', () => {
  test('the shaders are found', () => {
    expect(files.length).toBeGreaterThan(20);
  });
  test.each(RULES)('no %s', (_what, pattern, why) => {
    const offenders = files.filter((f) => pattern.test(code(f)));
    expect(offenders, why).toEqual([]);
  });
});
