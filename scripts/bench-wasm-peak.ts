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
// scripts/build-wasm.mjs compiles the kernels. `--chromium` runs the same loops in headless Chromium too
// (CHROMIUM_PATH, else /usr/bin/chromium), whose V8 may lower an instruction differently from this Node's.
//
//   node scripts/run-ts.mjs scripts/bench-wasm-peak.ts [--runs 7] [--tokens 512] [--chromium]

import { parseCli } from './cli.ts';

const { values } = parseCli(import.meta.url, {
  runs: { type: 'string', default: '7' },
  tokens: { type: 'string', default: '512' },
  chromium: { type: 'boolean', default: false },
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
 * The loop's source: 8 accumulators, each step's 8 products distinct and every one of them reading an
 * operand that moves by an add each step (a or e: nothing loop-invariant for a compiler to hoist out of
 * the loop; for floats an add, not a product that would sink into subnormals), the sum returned.
 */
function source(loop: Loop): string {
  const splat = loop.float ? 'f32x4.splat(<f32>seed' : 'i32x4.splat(seed';
  const add = loop.float ? 'f32x4.add' : 'i32x4.add';
  const pairs = [
    ['a', 'b'],
    ['a', 'c'],
    ['a', 'd'],
    ['e', 'b'],
    ['e', 'c'],
    ['e', 'd'],
    ['a', 'a'],
    ['e', 'e'],
  ];
  return `export function ${loop.name}(n: i32, seed: i32): i32 {
  let a = ${splat} + 1);
  const b = ${splat} + 2);
  const c = ${splat} + 3);
  const d = ${splat} + 4);
  let e = ${splat} + 5);
  ${pairs.map((_, i) => `let s${i} = i32x4.splat(0);`).join(' ')}
  for (let i = 0; i < n; i++) {
    ${pairs.map(([x, y], i) => `s${i} = ${loop.step(`s${i}`, x, y)};`).join('\n    ')}
    a = ${add}(a, b);
    e = ${add}(e, c);
  }
  return i32x4.extract_lane(${add}(${add}(${add}(s0, s1), ${add}(s2, s3)), ${add}(${add}(s4, s5), ${add}(s6, s7))), 0);
}
`;
}

const asc = (await import('assemblyscript/asc')).default;

/** The loops of one build, compiled. */
async function compile(relaxed: boolean): Promise<Uint8Array> {
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
  return binary;
}

/** A request to time the loops: each build's bytes (base64) and its loops' names and products a step. */
interface Request {
  builds: { base64: string; loops: { name: string; products: number }[] }[];
  runs: number;
  steps: number;
}

/**
 * Times every loop of `request` where this runs (Node, or a page: self-contained, no closure), median of
 * request.runs after one warm call; a build this platform does not validate gives no rate for its loops.
 */
async function timeLoops(request: Request): Promise<Record<string, number>> {
  const rates: Record<string, number> = {};
  for (const build of request.builds) {
    const bytes = Uint8Array.from(atob(build.base64), (c) => c.charCodeAt(0));
    if (!WebAssembly.validate(bytes)) continue;
    const { instance } = await WebAssembly.instantiate(bytes, {});
    const exports = instance.exports as Record<string, (n: number, seed: number) => number>;
    for (const loop of build.loops) {
      const run = exports[loop.name];
      run(request.steps / 20, 3); // compiled and warm
      const each: number[] = [];
      for (let r = 0; r < request.runs; r++) {
        const t0 = performance.now();
        run(request.steps, 3);
        each.push((request.steps * 8 * loop.products) / ((performance.now() - t0) / 1000) / 1e9);
      }
      each.sort((x, y) => x - y);
      rates[loop.name] = each[each.length >> 1];
    }
  }
  return rates;
}

const request: Request = {
  builds: await Promise.all(
    [false, true].map(async (relaxed) => ({
      base64: Buffer.from(await compile(relaxed)).toString('base64'),
      loops: LOOPS.filter((l) => l.relaxed === relaxed).map(({ name, products }) => ({ name, products })),
    })),
  ),
  runs,
  steps: 2e7,
};

/** The same loops in headless Chromium. */
async function inChromium(): Promise<{ version: string; rates: Record<string, number> }> {
  const { chromium } = await import('@playwright/test');
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', headless: true });
  try {
    const page = await browser.newPage();
    await page.goto('about:blank');
    const rates = await page.evaluate(`(${timeLoops.toString()})(${JSON.stringify(request)})`);
    return { version: browser.version(), rates: rates as Record<string, number> };
  } finally {
    await browser.close();
  }
}

const columns: { name: string; rates: Record<string, number> }[] = [{ name: `Node ${process.versions.node}`, rates: await timeLoops(request) }];
if (values.chromium) {
  const c = await inChromium();
  columns.push({ name: `Chromium ${c.version}`, rates: c.rates });
}
console.log(`WebAssembly SIMD multiply-adds, operands in registers, 1 thread: G products a second, median of ${runs}`);
console.log(`  ${''.padEnd(46)} ${columns.map((c) => c.name.padStart(18)).join(' ')}`);
for (const loop of LOOPS) {
  const cells = columns.map((c) => (c.rates[loop.name] === undefined ? '-  (no relaxed SIMD)' : c.rates[loop.name].toFixed(1)).padStart(18));
  console.log(`  ${loop.what.padEnd(46)} ${cells.join(' ')}`);
}

// The layer: Q, K, V and the output projection (integer, 'q8'), and the causal attention's Q·Kᵀ and P·V
// over its own tokens (float).
const [E, H, G, Dh] = [2048, 16, 4, 128];
const projections = tokens * E * (E + 2 * G * Dh + E);
const attention = ((tokens * (tokens + 1)) / 2) * H * Dh * 2;
for (const column of columns) {
  const bestOf = (float: boolean) => Math.max(...LOOPS.filter((l) => l.float === float && column.rates[l.name] !== undefined).map((l) => column.rates[l.name]));
  const [int, float] = [bestOf(false), bestOf(true)];
  const floor = (threads: number) => ((projections / int + attention / float) / threads / 1e9) * 1000;
  console.log(
    `${column.name}: a prefill of ${tokens} tokens, E ${E} H ${H} G ${G} head ${Dh}: projections ${(projections / 1e9).toFixed(2)}G multiply-adds at the best integer row (${int.toFixed(1)}G/s), ` +
      `attention ${(attention / 1e9).toFixed(2)}G at the best float row (${float.toFixed(1)}G/s): no less than ${floor(1).toFixed(1)} ms on 1 thread, ${floor(2).toFixed(1)} ms on 2 ` +
      '(each thread at those rates, nothing else done)',
  );
}
