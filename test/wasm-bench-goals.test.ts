// scripts/bench-report.ts's goal rows for the CPU systems (issue 14): ratios of medians from one run,
// met, missed, or not measured with the reason. Pure functions of saved reports: no device.

import { describe, expect, it } from 'vitest';
import type { BenchShape, SystemResult } from '../demo/bench/types.ts';
import { goalTable } from '../scripts/bench-report.ts';

type HeadlessReport = Parameters<typeof goalTable>[0][number];

const shape = (S: number, E: number, H: number): BenchShape => ({ batchSize: 1, seqLen: S, embedDim: E, numHeads: H, isCausal: false });
const ok = (id: string, medianMs: number, threads?: number): SystemResult => ({ id, label: id, status: 'ok', medianMs, ...(threads ? { threads } : {}) });

function report(s: BenchShape, systems: SystemResult[]): HeadlessReport {
  const result = { shape: s, flops: 1, warmup: 0, runs: 1, systems, seed: 1, tolerance: { atol: 0, rtol: 0 }, peerToleranceFactor: 4 };
  return { result, adapter: null, backend: 'webgpu', fallbackReason: null, features: [], userAgent: 'test' };
}

const row = (rows: ReturnType<typeof goalTable>, text: string) => {
  const found = rows.filter((r) => r.goal.includes(text));
  expect(found, text).toHaveLength(1);
  return found[0];
};

describe('goalTable: the WASM goals', () => {
  it('figures are ratios of medians; met and missed by the thresholds', () => {
    const rows = goalTable([
      report(shape(512, 512, 8), [ok('wasm', 60, 1), ok('wasm-threads', 40, 2), ok('ort-wasm', 50, 1), ok('cpu', 900)]),
      report(shape(128, 256, 4), [ok('wasm', 3, 1), ok('ort-wasm', 2, 1)]),
    ]);
    const vsOrt512 = row(rows, "S=512 E=512 H=8: 'wasm' 1 thread ≤ 1.25×");
    expect([vsOrt512.figure, vsOrt512.status]).toEqual(['1.20×', 'met']);
    expect(vsOrt512.note).toBe('wasm 60.0 ms on 1 thread, ort-wasm 50.0 ms on 1 thread');
    const vsOrt128 = row(rows, "S=128 E=256 H=4: 'wasm' 1 thread ≤ 1.25×");
    expect([vsOrt128.figure, vsOrt128.status]).toEqual(['1.50×', 'missed']);
    const threads = row(rows, 'default threads ≥ 1.6×');
    expect([threads.figure, threads.status]).toEqual(['1.50×', 'missed']);
    expect(threads.note).toContain('wasm-threads 40.0 ms on 2 threads');
    const cpu = row(rows, "≥ 10× faster than the float64 'cpu'");
    expect([cpu.figure, cpu.status]).toEqual(['15.00×', 'met']);
  });

  it('a failed or missing system, or a missing shape, is not measured, with the reason', () => {
    const failed: SystemResult = { id: 'ort-wasm', label: 'ort-wasm', status: 'failed', error: 'no' };
    const rows = goalTable([report(shape(512, 512, 8), [ok('wasm', 60, 1), failed])]);
    expect(row(rows, "S=512 E=512 H=8: 'wasm' 1 thread ≤ 1.25×")).toMatchObject({ status: 'not measured', note: 'ort-wasm failed' });
    expect(row(rows, 'default threads ≥ 1.6×')).toMatchObject({ status: 'not measured', note: 'wasm-threads not run' });
    expect(row(rows, "S=128 E=256 H=4: 'wasm' 1 thread ≤ 1.25×")).toMatchObject({ status: 'not measured', note: 'shape B=1 S=128 E=256 H=4 not in this run' });
  });
});
