// The order of test files in a `vitest run` (vite.config.ts test.sequence.sequencer). The files share
// one Mesa shader cache per run (test/global-setup.ts), so a kernel is compiled by the first file that
// runs it and read back by every later one. Two files run at a time (vite.config.ts maxWorkers). The
// two kernel-variant files compile every variant at head sizes 4, 20 and 128, so they go first, one on
// each worker; the tuner's correctness gate in test/tuning.test.ts (every variant at head size 20) then
// finds its kernels compiled: measured alone, 604 s cold against 3.7 s with its kernels in the cache
// (2 cores, load ~13, 2026-12-01). Then the other files that take minutes (they compile the built-in
// choice at many head sizes), so that the short ones fill the end; the rest by name, the same order on
// every machine. Without sharding (this project runs none), `shard` passes the files through. No
// import of vitest here: vite.config.ts also configures the demo's dev server.

interface Specification {
  readonly moduleId: string;
}

const FIRST = [
  'test/kernel-variants.test.ts',
  'test/kernel-variants-software.test.ts',
  'test/gpu-vs-cpu.test.ts',
  'test/head-sizes.test.ts',
  'test/default-limits.test.ts',
];

function rank(spec: Specification): number {
  const path = spec.moduleId.replaceAll('\\', '/');
  const i = FIRST.findIndex((name) => path.endsWith(name));
  return i < 0 ? FIRST.length : i;
}

export class CompileFirstSequencer {
  async shard<T extends Specification>(files: T[]): Promise<T[]> {
    return files;
  }

  async sort<T extends Specification>(files: T[]): Promise<T[]> {
    return [...files].sort((a, b) => rank(a) - rank(b) || (a.moduleId < b.moduleId ? -1 : a.moduleId > b.moduleId ? 1 : 0));
  }
}
