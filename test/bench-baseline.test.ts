// The benchmark's comparison with a saved baseline (scripts/bench-baseline.ts): verdicts beyond the
// noise band, the goal row, and saving that merges into an earlier file. Made-up reports: no GPU.

import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { adapterSlug, baselineGoal, compareWithBaseline, comparisonText, type Report, saveBaseline } from '../scripts/bench-baseline.ts';

const lavapipe = { vendor: 'mesa', architecture: 'llvmpipe', device: '', description: 'llvmpipe (LLVM 15)' };

function report(id: string, medians: Record<string, number | null>): Report {
  const systems = Object.entries(medians).map(([sid, ms]) => (ms === null ? { id: sid, status: 'failed' } : { id: sid, status: 'ok', medianMs: ms }));
  return { id, result: { systems }, adapter: lavapipe };
}

test('adapter slugs name the software adapters and fall back to vendor-architecture', () => {
  expect(adapterSlug(lavapipe)).toBe('lavapipe');
  expect(adapterSlug({ vendor: 'google', architecture: 'swiftshader', device: '', description: '' })).toBe('swiftshader');
  expect(adapterSlug({ vendor: 'NVIDIA', architecture: 'Hopper', device: '', description: '' })).toBe('nvidia-hopper');
  expect(adapterSlug(null)).toBe('no-adapter');
});

test('saved medians are compared beyond ±10% noise, and the goal says which presets got slower', () => {
  const file = join(mkdtempSync(join(tmpdir(), 'baseline-')), 'node-lavapipe.json');
  saveBaseline(file, 'node', [report('tiny', { engine: 1, tfjs: 4 }), report('s512-e512', { engine: 100, cpu: null })], 'commit abc');
  // A later save of one preset keeps the other's figures.
  saveBaseline(file, 'node', [report('s128-e256', { engine: 10 })], 'commit abc');
  const saved = JSON.parse(readFileSync(file, 'utf8'));
  expect(saved.medians).toEqual({ tiny: { engine: 1, tfjs: 4 }, 's512-e512': { engine: 100 }, 's128-e256': { engine: 10 } });
  expect(saved.adapter).toBe('lavapipe');

  const now = [report('tiny', { engine: 1.05, tfjs: 3 }), report('s512-e512', { engine: 125 }), report('s128-e256', { engine: 8 }), report('long', { engine: 900 })];
  const c = compareWithBaseline(file, now)!;
  expect(c.rows.map((r) => [r.preset, r.system, r.verdict])).toEqual([
    ['tiny', 'engine', 'same'],
    ['tiny', 'tfjs', 'faster'],
    ['s512-e512', 'engine', 'slower'],
    ['s128-e256', 'engine', 'faster'],
  ]);
  expect(comparisonText(c)).toContain('  s512-e512    engine             100.0 ms →     125.0 ms  ×1.25  slower');
  expect(baselineGoal(c, file)).toMatchObject({ status: 'missed', figure: 'worst ×1.25 (s512-e512)', note: 'slower: s512-e512' });
  const fine = compareWithBaseline(file, [report('tiny', { engine: 0.5 })])!;
  expect(baselineGoal(fine, file)).toMatchObject({ status: 'met', note: '1 preset(s) compared' });
});

test('without a baseline file the goal is not measured and says how to make one', () => {
  const file = join(tmpdir(), 'no-such-baseline.json');
  expect(compareWithBaseline(file, [report('tiny', { engine: 1 })])).toBeNull();
  expect(baselineGoal(null, file)).toMatchObject({ status: 'not measured' });
  expect(baselineGoal(null, file).note).toContain('--save-baseline');
});
