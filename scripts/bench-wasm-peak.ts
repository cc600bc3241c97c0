// The ceiling of each multiply-add WebAssembly's 128-bit SIMD offers the 'wasm' kernels, on this machine
// (issue 41): a loop of 8 independent accumulators per instruction kind, operands in registers (no load,
// no unpacking, nothing else), timed on one thread, as G multiply-adds a second:
//   f32x4.mul + f32x4.add                                  4 products for 2 instructions (the 128-bit build)
//   f32x4.relaxed_madd                                     4 for 1 (the relaxed build's float kernels)
//   i32x4.dot_i16x8_s + i32x4.add                          8 for 2 (the 128-bit build's 'q8' kernels)
//   i16x8.relaxed_dot_i8x16_i7x16_s + i16x8.add            16 for 2 (the relaxed build's 4-bit 'q8' kernels)
//   i32x4.relaxed_dot_i8x16_i7x16_add_s                    16 for 1
// No kernel that multiplies with one of them can beat its row: the figures bound what the engine can do.
// Then the bound they put on a prefill of --tokens through bench-llama.ts's layer (E 2048, H 16, G 4,
// head 128): its projections' multiply-adds at the best integer row and its causal attention's at the
// best float row, on 1 thread and, at best, on 2. The loops are compiled here by AssemblyScript, as
// scripts/build-wasm.mjs compiles the kernels.
//
//   node scripts/run-ts.mjs scripts/bench-wasm-peak.ts [--runs 7] [--tokens 512]

import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  runs: { type: 'string', default: '7' },
  tokens: { type: 'string', default: '512' },
});
const runs = Number(values.runs);
const tokens = Number(values.tokens);
if (!(Number.isInteger(runs) && runs > 0) || !(Number.isInteger(tokens) && tokens > 0)) {
  console.error(`bench-wasm-peak: --runs and --tokens must be positive integers (given ${values.runs} and ${values.tokens})`);
  process.exit(2);
}

/** One loop: its export name, the instruction it times, the products of one instruction, its build, and a step of one accumulator. */
interface Loop {
  name: string;
  what: string;
  products: number;
  relaxed: boolean;
  float: boolean;
  step: (acc: string, x: string, y: string) => string;
}

const LOOPS: Loop[] = [
  { name: 'f32MulAdd', what: 'f32x4.mul + f32x4.add', products: 4, relaxed: false, float: true, step: (s, a, b) => `f32x4.add(${s}, f32x4.mul(${a}, ${b}))` },
  { name: 'f32Madd', what: 'f32x4.relaxed_madd', products: 4, relaxed: true, float: true, step: (s, a, b) => `f32x4.relaxed_madd(${a}, ${b}, ${s})` },
  {
    name: 'i16Dot',
    what: 'i32x4.dot_i16x8_s + i32x4.add',
    products: 8,
    relaxed: false,
    float: false,
    step: (s, a, b) => `i32x4.add(${s}, i32x4.dot_i16x8_s(${a}, ${b}))`,
  },
  {
    name: 'i8DotI16',
    what: 'i16x8.relaxed_dot_i8x16_i7x16_s + i16x8.add',
    products: 16,
    relaxed: true,
    float: false,
    step: (s, a, b) => `i16x8.add(${s}, i16x8.relaxed_dot_i8x16_i7x16_s(${a}, ${b}))`,
  },
  {
    name: 'i8DotI32',
    what: 'i32x4.relaxed_dot_i8x16_i7x16_add_s',
    products: 16,
    relaxed: true,
    float: false,
    step: (s, a, b) => `i32x4.relaxed_dot_i8x16_i7x16_add_s(${a}, ${b}, ${s})`,
  },
];

/**
 * The loop's source: 8 accumulators over 4 operands, one operand moved by an add each step (nothing to
 * hoist; for floats an add, not a product that would sink into subnormals), the sum returned.
 */
function source(loop: Loop): string {
  const splat = loop.float ? 'f32x4.splat(<f32>seed' : 'i32x4.splat(seed';
  const add = loop.float ? 'f32x4.add' : 'i32x4.add';
  const pairs = [
    ['a', 'b'],
    ['a', 'c'],
    ['a', 'd'],
    ['b', 'c'],
    ['b', 'd'],
    ['c', 'd'],
    ['d', 'a'],
    ['c', 'a'],
  ];
  return `export function ${loop.name}(n: i32, seed: i32): i32 {
  let a = ${splat} + 1);
  const b = ${splat} + 2);
  const c = ${splat} + 3);
  const d = ${splat} + 4);
  ${pairs.map((_, i) => `let s${i} = i32x4.splat(0);`).join(' ')}
  for (let i = 0; i < n; i++) {
    ${pairs.map(([x, y], i) => `s${i} = ${loop.step(`s${i}`, x, y)};`).join('\n    ')}
    a = ${add}(a, b);
  }
  return i32x4.extract_lane(${add}(${add}(${add}(s0, s1), ${add}(s2, s3)), ${add}(${add}(s4, s5), ${add}(s6, s7))), 0);
}
`;
}

const asc = (await import('assemblyscript/asc')).default;

/** The loops of one build, instantiated; null where this platform does not validate it (no relaxed SIMD). */
async function instantiate(relaxed: boolean): Promise<Record<string, (n: number, seed: number) => number> | null> {
  const text = LOOPS.filter((l) => l.relaxed === relaxed)
    .map(source)
    .join('\n');
  let binary: Uint8Array | null = null;
  const { error, stderr } = await asc.main(
    ['peak.ts', '--outFile', 'peak.wasm', '-O3', '--runtime', 'stub', '--enable', 'simd', ...(relaxed ? ['--enable', 'relaxed-simd'] : [])],
    {
      readFile: (name: string) => (name === 'peak.ts' ? text : null),
      writeFile: (name: string, contents: string | Uint8Array) => {
        if (name.endsWith('.wasm') && typeof contents !== 'string') binary = contents;
      },
      listFiles: () => [],
    },
  );
  if (error || !binary) throw new Error(`bench-wasm-peak: the loops did not compile: ${stderr.toString()}`);
  if (!WebAssembly.validate(binary)) return null;
  const { instance } = await WebAssembly.instantiate(binary as Uint8Array<ArrayBuffer>, {});
  return instance.exports as Record<string, (n: number, seed: number) => number>;
}

const modules = { plain: await instantiate(false), relaxed: await instantiate(true) };
const STEPS = 2e7;
console.log(`WebAssembly SIMD multiply-adds, operands in registers, 1 thread: G products a second, median of ${runs} (max)`);
const peaks = new Map<string, number>();
for (const loop of LOOPS) {
  const run = (loop.relaxed ? modules.relaxed : modules.plain)?.[loop.name];
  if (!run) {
    console.log(`  ${loop.what.padEnd(46)}      -  (this platform has no relaxed SIMD)`);
    continue;
  }
  run(STEPS / 20, 3); // compiled and warm
  const rates: number[] = [];
  for (let r = 0; r < runs; r++) {
    const t0 = performance.now();
    run(STEPS, 3);
    rates.push((STEPS * 8 * loop.products) / ((performance.now() - t0) / 1000) / 1e9);
  }
  rates.sort((x, y) => x - y);
  peaks.set(loop.name, rates[rates.length >> 1]);
  console.log(`  ${loop.what.padEnd(46)} ${rates[rates.length >> 1].toFixed(1).padStart(6)}  (${rates[rates.length - 1].toFixed(1)})`);
}

// The layer: Q, K, V and the output projection (integer, 'q8'), and the causal attention's Q·Kᵀ and P·V
// over its own tokens (float).
const [E, H, G, Dh] = [2048, 16, 4, 128];
const projections = tokens * E * (E + 2 * G * Dh + E);
const attention = ((tokens * (tokens + 1)) / 2) * H * Dh * 2;
const bestOf = (float: boolean) => Math.max(...LOOPS.filter((l) => l.float === float && peaks.has(l.name)).map((l) => peaks.get(l.name)!));
const [int, float] = [bestOf(false), bestOf(true)];
const floor = (threads: number) => ((projections / int + attention / float) / threads / 1e9) * 1000;
console.log(
  `A prefill of ${tokens} tokens, E ${E} H ${H} G ${G} head ${Dh}: projections ${(projections / 1e9).toFixed(2)}G multiply-adds at the best integer row (${int.toFixed(1)}G/s), ` +
    `attention ${(attention / 1e9).toFixed(2)}G at the best float row (${float.toFixed(1)}G/s): no less than ${floor(1).toFixed(1)} ms on 1 thread, ${floor(2).toFixed(1)} ms on 2 ` +
    '(each thread at those rates, nothing else done)',
);
