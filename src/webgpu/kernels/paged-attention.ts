// Host side of a call on a PagedKvCache's kernels: shaders/paged_write.wgsl (the call's new K and V rows
// into their sequences' blocks of the pool) and shaders/paged_attention.wgsl with one of its bodies
// (paged_attention_rows.wgsl for prefills, paged_attention_keys.wgsl for decode steps and small trees),
// which read every sequence's keys in place through its block table; each body in two tiers (its loop
// pipeline until the unrolled one, compiled in the background, is ready). The call's metadata (per sequence
// its row, start, length, block table and tree) is one u32 buffer (pagedMeta), uploaded per call.

import quantizeBlockSource from '../../../shaders/kv_quantize_block.wgsl?raw';
import rounding from '../../../shaders/kv_rounding.wgsl?raw';
import attentionSource from '../../../shaders/paged_attention.wgsl?raw';
import keysSource from '../../../shaders/paged_attention_keys.wgsl?raw';
import rowsSource from '../../../shaders/paged_attention_rows.wgsl?raw';
import moveScalesSource from '../../../shaders/paged_move_scales.wgsl?raw';
import quantizeSource from '../../../shaders/paged_quantize.wgsl?raw';
import writeSource from '../../../shaders/paged_write.wgsl?raw';
import scoreRule from '../../../shaders/score_rule.wgsl?raw';
import type { PagedPlan } from '../../plan/index.ts';
import { kernelBindings } from '../bindings.ts';
import { defineKernel, encodeKernel, kernelSpec, singleKernel } from '../kernel.ts';
import { compilePipeline } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, scoreModParts } from '../shader.ts';
import { type KvFormat, kvBinding, kvLoader, SCALE_FIELD } from './attention-fields.ts';
import { keysPerTile } from './flash-attention.ts';
import { SCORE_BINDINGS, SCORE_FIELDS, type MaskBuffers, scoreBuffers } from './masks.ts';

/** paged_write.wgsl's uniforms. */
export const PAGED_WRITE_PARAMS = defineParams([
  ['G', 'u32', 'key/value heads'],
  ['T', 'u32', "the call's tokens"],
  ['kBase4', 'u32', 'where K starts in src, in vec4s'],
  ['vBase4', 'u32', 'where V starts in src, in vec4s'],
  ['blockSize', 'u32', 'positions per block'],
  ['poolV4', 'u32', 'where V starts in the pool, in vec4s'],
  ['zero', 'u32', '0 (kv_rounding.wgsl, f16 pools)'],
]);

/** paged_write.wgsl's bindings for a pool of `format` (undefined: the engine's ST4; 'f32', 'f16x2' as kv-cache.ts keeps them). */
function writeBindings(format: 'f32' | 'f16x2' | undefined) {
  const type = format === undefined ? 'array<ST4>' : kvBinding(format)[2];
  return kernelBindings('PagedWrite', [
    ['src', 'read-only-storage', 'array<ST4>', "the call's K [G, T, Dh/4] and V [G, T, Dh/4] (the qkv buffer)"],
    ['pool', 'storage', type, "the layer's pool: K, V [maxBlocks, G, blockSize, Dh/4]"],
    ['dest', 'read-only-storage', 'array<u32>', "[T]: each token's pool row (head 0)"],
  ]);
}

export const PAGED_WRITE_BINDINGS = writeBindings(undefined);
const WRITE_BINDINGS = { st: PAGED_WRITE_BINDINGS, f32: writeBindings('f32'), f16x2: writeBindings('f16x2') } as const;

/** How paged_write.wgsl stores one vec4, per pool format (f16: rounded as src/quant/kv.ts encodeKvRow, kv_rounding.wgsl halfBits). */
const STORE_POOL: Record<'st' | 'f32' | 'f16x2', string> = {
  st: 'fn storePool(i: u32, v: ST4) {\n  pool[i] = v;\n}',
  f32: 'fn storePool(i: u32, v: ST4) {\n  pool[i] = vec4<f32>(v);\n}',
  f16x2:
    'fn storePool(i: u32, s: ST4) {\n  let v = vec4<f32>(s);\n  pool[i] = vec2<u32>(halfBits(v.x) | (halfBits(v.y) << 16u), halfBits(v.z) | (halfBits(v.w) << 16u));\n}',
};

/** One write: the call's sizes, where K and V are, the pool (its format, its scales' word for q-dtypes), each token's pool row. */
interface WriteArgs {
  G: number;
  T: number;
  headDim: number;
  blockSize: number;
  src: { buffer: GPUBuffer; kBase: number; vBase: number };
  pool: { buffer: GPUBuffer; vBase: number; format?: KvFormat; scales?: number };
  dest: GPUBuffer;
}

/** The write of a call's new K and V rows into a float pool as a kernel (kernel.ts): an invocation per vec4, specialised by the head size and the pool's format. */
export const PAGED_WRITE = defineKernel({
  name: 'PagedWrite',
  params: PAGED_WRITE_PARAMS,
  specialise: (args: WriteArgs) => ({ headDim: args.headDim, format: (args.pool.format ?? 'st') as 'st' | 'f32' | 'f16x2' }),
  bindings: (s) => WRITE_BINDINGS[s.format],
  label: (s) => (s.format === 'st' ? 'PagedWrite' : `PagedWrite.${s.format}`),
  shader: (s) => ({ sizes: { DH4: s.headDim / 4 }, sources: s.format === 'f16x2' ? [rounding, STORE_POOL[s.format], writeSource] : [STORE_POOL[s.format], writeSource] }),
  run(args) {
    const { G, T, headDim: Dh } = args;
    const groups = Math.ceil((2 * G * T * Dh) / 4 / 256);
    return {
      uniforms: { G, T, kBase4: args.src.kBase / 4, vBase4: args.src.vBase / 4, blockSize: args.blockSize, poolV4: args.pool.vBase / 4, zero: 0 },
      buffers: { src: args.src.buffer, pool: args.pool.buffer, dest: args.dest },
      groups: [Math.min(groups, 65535), Math.ceil(groups / 65535)],
    };
  },
});

/** paged_quantize.wgsl's uniforms. */
export const PAGED_QUANTIZE_PARAMS = defineParams([
  ['G', 'u32', 'key/value heads'],
  ['T', 'u32', "the call's tokens"],
  ['kBase4', 'u32', 'where K starts in src, in vec4s'],
  ['vBase4', 'u32', 'where V starts in src, in vec4s'],
  ['blockSize', 'u32', 'positions per block'],
  ['poolRows', 'u32', "K's rows in the pool (maxBlocks·G·blockSize): V's first row"],
  ['scales', 'u32', 'the word of the pool where the block scales start'],
  ['parity', 'u32', 'the blocks this dispatch quantizes: those of index ≡ parity (mod 2)'],
  ['zero', 'u32', '0 (kv_rounding.wgsl productRN)'],
]);

/** paged_quantize.wgsl's bindings. */
const PAGED_QUANTIZE_BINDINGS = kernelBindings('PagedQuantize', [
  ['src', 'read-only-storage', 'array<ST4>', "the call's K [G, T, Dh/4] and V [G, T, Dh/4] (the qkv buffer)"],
  ['dst', 'storage', 'array<u32>', "the layer's pool: quants, then scales"],
  ['dest', 'read-only-storage', 'array<u32>', "[T]: each token's pool row (head 0)"],
]);

/** The quantized write (paged_quantize.wgsl) as a kernel, specialised by the head size and the dtype. */
export const PAGED_QUANTIZE = defineKernel({
  name: 'PagedQuantize',
  params: PAGED_QUANTIZE_PARAMS,
  specialise: (args: WriteArgs & { parity: number }) => ({ headDim: args.headDim, format: args.pool.format as 'q8_0' | 'q4_0' }),
  bindings: () => PAGED_QUANTIZE_BINDINGS,
  label: (s) => `PagedQuantize.${s.format}`,
  shader: (s) => ({ sizes: { DH4: s.headDim / 4, Q4: s.format === 'q4_0' ? 1 : 0 }, sources: [rounding, quantizeBlockSource, quantizeSource] }),
  run(args) {
    const { G, T, headDim: Dh } = args;
    const groups = Math.ceil((2 * G * T * Dh) / 32 / 64);
    return {
      uniforms: {
        G,
        T,
        kBase4: args.src.kBase / 4,
        vBase4: args.src.vBase / 4,
        blockSize: args.blockSize,
        poolRows: args.pool.vBase / Dh,
        scales: args.pool.scales ?? 0,
        parity: args.parity,
        zero: 0,
      },
      buffers: { src: args.src.buffer, dst: args.pool.buffer, dest: args.dest },
      groups: [Math.min(groups, 65535), Math.ceil(groups / 65535)],
    };
  },
});

/** paged_move_scales.wgsl's uniforms. */
export const PAGED_MOVE_SCALES_PARAMS = defineParams([
  ['n', 'u32', 'scale words written'],
  ['scales', 'u32', 'the word of the pool where the block scales start'],
]);

/** The block scales of a q-dtype pool moved (copyBlock, acceptPath): paged_move_scales.wgsl. */
export const PAGED_MOVE_SCALES = singleKernel({
  name: 'PagedMoveScales',
  params: PAGED_MOVE_SCALES_PARAMS,
  bindings: kernelBindings('PagedMoveScales', [
    ['moves', 'read-only-storage', 'array<u32>', '[n] (word, low half from, high half from)'],
    ['old', 'read-only-storage', 'array<u32>', 'a copy of the scale plane'],
    ['dst', 'storage', 'array<u32>', 'the pool'],
  ]),
  source: moveScalesSource,
  run(args: { moves: GPUBuffer; old: GPUBuffer; dst: GPUBuffer; n: number; scales: number }) {
    return { uniforms: { n: args.n, scales: args.scales }, buffers: { moves: args.moves, old: args.old, dst: args.dst }, groups: [Math.ceil(args.n / 64)] };
  },
});

/** paged_attention.wgsl's uniforms. */
export const PAGED_PARAMS = defineParams([
  ['H', 'u32', 'query heads'],
  ['G', 'u32', 'key/value heads'],
  ['T', 'u32', "the call's tokens (rows of Q and O per head)"],
  ['blockSize', 'u32', 'positions per block (a power of two)'],
  ['blockShift', 'u32', 'log2(blockSize)'],
  ['poolV4', 'u32', 'where V starts in the pool, in vec4s'],
  ['seqBase', 'u32', "where the sequences' records start in meta"],
  ['tableBase', 'u32', 'where the block tables start in meta'],
  ['treeBase', 'u32', "where the trees' masks start in meta"],
  ['workBase', 'u32', "where this dispatch's work list starts in meta"],
  ['Dh4', 'u32', 'head size / 4 (DH4, as a value the compiler does not unroll loops over)'],
  ['loopWG', 'u32', 'keys body: WG, as a value'],
  ['loopHPW', 'u32', 'keys body: HPW, as a value'],
  ['loopBC', 'u32', 'rows body: BC, as a value'],
  ['kvScales', 'u32', 'a q8_0/q4_0 pool: the word where the block scales start (kv_q8_0.wgsl)'],
  ...SCORE_FIELDS,
  SCALE_FIELD,
]);

/** paged_attention.wgsl's bindings for a pool kept as `format` (kv: read through its loader). */
function pagedBindings(format: KvFormat | undefined) {
  const [, , type] = kvBinding(format);
  return kernelBindings('PagedAttention', [
    ['qkv', 'read-only-storage', 'array<ST4>', 'Q [H, T, Dh/4] (the qkv buffer)'],
    ['kv', 'read-only-storage', type, "the layer's pool: K, V [maxBlocks, G, blockSize, Dh/4] as its dtype keeps it"],
    ['out', 'storage', 'array<ST4>', 'O [H, T, Dh/4]'],
    ['info', 'read-only-storage', 'array<u32>', "sequences, block tables, trees' masks, work lists"],
    ...SCORE_BINDINGS,
  ]);
}

/** paged_attention.wgsl's bindings (a pool at the engine's precision). */
export const PAGED_BINDINGS = pagedBindings(undefined);
const PAGED_BINDINGS_OF = {
  st: PAGED_BINDINGS,
  f32: pagedBindings('f32'),
  f16x2: pagedBindings('f16x2'),
  q8_0: pagedBindings('q8_0'),
  q4_0: pagedBindings('q4_0'),
} as const;

/** Rows of a sequence up to which each row gets a workgroup of its own, the keys spread over it (decode steps, small trees). */
export const KEYS_BODY_MAX_ROWS = 4;

/** The keys body's invocations: a power of two up to 64 whose parts (WG·HPW·(Dh + 2) floats) fit `workgroupBytes`. */
export function keysWorkgroup(headDim: number, headsPerGroup: number, workgroupBytes: number): number {
  let wg = 64;
  while (wg > 1 && wg * headsPerGroup * (headDim + 2) * 4 > workgroupBytes) wg /= 2;
  return wg;
}

/** The keys body's query heads per workgroup: the largest divisor of H / G whose q and accumulators (HPW·Dh floats each) stay within 128 floats. */
export function headsPerWorkgroup(numHeads: number, numKvHeads: number, headDim: number): number {
  const group = numHeads / numKvHeads;
  let best = 1;
  for (let n = 1; n <= group; n++) if (group % n === 0 && n * headDim <= 128) best = n;
  return best;
}

/** The rows body's query heads per workgroup (BR·HPW invocations, at most 128): the largest divisor of H / G up to 4. */
export function rowsHeadsPerWorkgroup(numHeads: number, numKvHeads: number): number {
  const group = numHeads / numKvHeads;
  let best = 1;
  for (let n = 1; n <= Math.min(group, 128 / ROWS_BR); n++) if (group % n === 0) best = n;
  return best;
}

/** LOOP: 1 where the loops over the head size (and the tiles) stay loops (fast to compile: the first tier), 0 where unrolled (compiled in the background). */
type PagedSpecialisation = { body: 'rows' | 'keys'; format: KvFormat | 'st'; headDim: number; BR: number; BC: number; WG: number; HPW: number; LOOP: number };

/** One dispatch of a body: the call's plan, the buffers, the meta offsets, the work list's offset and size. */
interface PagedArgs {
  body: 'rows' | 'keys';
  /** Its unrolled pipeline (LOOP = 0), once compiled; else the loop one. */
  unrolled?: boolean;
  headDim: number;
  plan: PagedPlan;
  meta: PagedMeta;
  buffers: { q: GPUBuffer; pool: { buffer: GPUBuffer; vBase: number; format?: KvFormat; scales?: number }; out: GPUBuffer; meta: GPUBuffer };
  masks: MaskBuffers;
  /** rows: the work list's sequences, the longest one's length; keys: its rows. */
  work: { base: number; count: number; longest: number };
}

const ROWS_BR = 32;

function keysSpecialisation(args: PagedArgs, device: GPUDevice): PagedSpecialisation {
  const HPW = headsPerWorkgroup(args.plan.layer.numHeads, args.plan.layer.numKvHeads, args.headDim);
  const WG = keysWorkgroup(args.headDim, HPW, device.limits.maxComputeWorkgroupStorageSize);
  return { body: 'keys', format: args.buffers.pool.format ?? 'st', headDim: args.headDim, BR: 0, BC: 0, WG, HPW, LOOP: args.unrolled ? 0 : 1 };
}

/** Paged attention as a kernel (kernel.ts): the shared part and a body (rows or keys), specialised by the head size and the tiles. */
export const PAGED_ATTENTION = defineKernel({
  name: 'PagedAttention',
  params: PAGED_PARAMS,
  bindings: (s) => PAGED_BINDINGS_OF[s.format],
  label: (s) => (s.format === 'st' ? `PagedAttention.${s.body}` : `PagedAttention.${s.body}.${s.format}`),
  specialise: (args: PagedArgs, device: GPUDevice): PagedSpecialisation =>
    args.body === 'rows'
      ? {
          body: args.body,
          format: args.buffers.pool.format ?? 'st',
          headDim: args.headDim,
          BR: ROWS_BR,
          BC: keysPerTile(args.headDim, device.limits.maxComputeWorkgroupStorageSize),
          WG: 0,
          HPW: rowsHeadsPerWorkgroup(args.plan.layer.numHeads, args.plan.layer.numKvHeads),
          LOOP: args.unrolled ? 0 : 1,
        }
      : keysSpecialisation(args, device),
  shader: (s) => {
    const mod = scoreModParts(undefined); // paged calls refuse config.scoreMod (plan/paged.ts)
    const sizes: Record<string, number> =
      s.body === 'rows' ? { DH4: s.headDim / 4, BR: s.BR, BC: s.BC, HPW: s.HPW, LOOP: s.LOOP } : { DH4: s.headDim / 4, WG: s.WG, HPW: s.HPW, LOOP: s.LOOP };
    return {
      sizes: { ...sizes, HAS_SCORE_MOD: mod.HAS_SCORE_MOD },
      sources: [kvLoader(s.format === 'st' ? undefined : s.format), mod.source, scoreRule, attentionSource, s.body === 'rows' ? rowsSource : keysSource],
    };
  },
  run({ plan, meta, buffers, masks, work, body }, _scratch, s) {
    const { numHeads: H, numKvHeads: G } = plan.layer;
    const cache = plan.cache;
    const score = plan.sequences[0].plan.score;
    return {
      uniforms: {
        H,
        G,
        T: plan.tokens,
        blockSize: cache.blockSize,
        blockShift: Math.log2(cache.blockSize),
        poolV4: buffers.pool.vBase / 4,
        seqBase: meta.seqBase,
        tableBase: meta.tableBase,
        treeBase: meta.treeBase,
        workBase: work.base,
        Dh4: s.headDim / 4,
        loopWG: s.WG,
        loopHPW: s.HPW,
        loopBC: s.BC,
        kvScales: buffers.pool.scales ?? 0,
        ...masks.fields,
        scaleLog2e: score.scale * Math.LOG2E,
      },
      buffers: { qkv: buffers.q, kv: buffers.pool.buffer, out: buffers.out, info: buffers.meta, ...scoreBuffers(masks) },
      groups: body === 'rows' ? [Math.ceil(work.longest / s.BR), H / s.HPW, work.count] : [work.count, H / s.HPW, 1],
    };
  },
});

/** Where the parts of a call's meta buffer start (u32 words), and its words. */
export interface PagedMeta {
  words: Uint32Array;
  seqBase: number;
  tableBase: number;
  treeBase: number;
  /** The rows body's work list: sequences of more than KEYS_BODY_MAX_ROWS tokens. */
  rows: { base: number; count: number; longest: number };
  /** The keys body's work list: (sequence, row) of the other sequences' tokens. */
  keys: { base: number; count: number; longest: number };
  /** Each token's pool row of head 0 (paged_write.wgsl's dest). */
  dest: Uint32Array;
}

const NO_TREE = 0xffffffff;
const SEQ_WORDS = 5;

/** The call's meta words (paged_attention.wgsl): sequences, block tables, trees' masks, the two work lists; and the write's rows. */
export function pagedMeta(plan: PagedPlan): PagedMeta {
  const { blockSize } = plan.cache;
  const G = plan.layer.numKvHeads;
  const n = plan.sequences.length;
  const seqBase = 0;
  const tableBase = seqBase + n * SEQ_WORDS;
  const tableWords = plan.sequences.reduce((sum, s) => sum + s.blocks.length, 0);
  const treeBase = tableBase + tableWords;
  const treeWords = plan.sequences.reduce((sum, s) => sum + (s.tree ? s.length * s.length : 0), 0);
  const rowSeqs = plan.sequences.map((s, i) => [s, i] as const).filter(([s]) => s.length > KEYS_BODY_MAX_ROWS);
  const keyRows = plan.sequences.reduce((sum, s) => sum + (s.length > KEYS_BODY_MAX_ROWS ? 0 : s.length), 0);
  const rowsBase = treeBase + treeWords;
  const keysBase = rowsBase + rowSeqs.length;
  const words = new Uint32Array(Math.max(4, keysBase + 2 * keyRows));
  const dest = new Uint32Array(plan.tokens);
  let table = 0;
  let tree = 0;
  let k = keysBase;
  plan.sequences.forEach((s, i) => {
    words.set([s.row, s.start, s.length, table, s.tree ? tree : NO_TREE], seqBase + i * SEQ_WORDS);
    words.set(s.blocks, tableBase + table);
    table += s.blocks.length;
    if (s.tree) {
      // node i sees node j when j is i or one of its ancestors
      const at = treeBase + tree;
      for (let r = 0; r < s.length; r++) for (let a = r; a >= 0; a = s.tree[a]) words[at + r * s.length + a] = 1;
      tree += s.length * s.length;
    }
    if (s.length <= KEYS_BODY_MAX_ROWS) {
      for (let r = 0; r < s.length; r++) {
        words[k++] = i;
        words[k++] = r;
      }
    }
    for (let r = 0; r < s.length; r++) {
      const p = s.start + r;
      dest[s.row + r] = s.blocks[Math.floor(p / blockSize)] * G * blockSize + (p % blockSize);
    }
  });
  rowSeqs.forEach(([, i], w) => {
    words[rowsBase + w] = i;
  });
  return {
    words,
    seqBase,
    tableBase,
    treeBase,
    dest,
    rows: { base: rowsBase, count: rowSeqs.length, longest: Math.max(0, ...rowSeqs.map(([s]) => s.length)) },
    keys: { base: keysBase, count: keyRows, longest: 1 },
  };
}

/** Writes the call's new K and V rows into the pool: as floats (paged_write.wgsl), or quantized (paged_quantize.wgsl, twice: even blocks, then odd). */
export function encodePagedWrite(pass: GPUComputePassEncoder, scratch: CallScratch, args: WriteArgs): void {
  const format = args.pool.format;
  if (format === 'q8_0' || format === 'q4_0') {
    for (const parity of [0, 1]) encodeKernel(pass, scratch, PAGED_QUANTIZE, { ...args, parity });
  } else encodeKernel(pass, scratch, PAGED_WRITE, args);
}

/** Moves a q-dtype pool's scales as `moves` says (triples: paged_move_scales.wgsl), `old` a copy of the plane. */
export function encodePagedMoveScales(pass: GPUComputePassEncoder, scratch: CallScratch, args: Parameters<typeof PAGED_MOVE_SCALES.run>[0]): void {
  encodeKernel(pass, scratch, PAGED_MOVE_SCALES, args);
}

// The bodies' unrolled pipelines ready on each device (by key): a call uses a body's loop pipeline (fast to
// compile) until its unrolled twin, compiled in the background from the first call on, is ready: the
// tiers of flash_attention_row.wgsl's "-loop" variant, in small.
const unrolledReady = new WeakMap<GPUDevice, Set<string>>();
const unrolledCompiling = new WeakMap<GPUDevice, Promise<unknown>[]>();

/** @internal Resolves when every unrolled pipeline whose compile has started on `device` is ready (tests, benchmarks). */
export async function pagedPipelinesCompiled(device: GPUDevice): Promise<void> {
  await Promise.all(unrolledCompiling.get(device) ?? []);
}

/** Whether the unrolled pipeline for these arguments is ready; if not, its compile is started. */
function unrolledPipeline(scratch: CallScratch, args: PagedArgs): boolean {
  const device = scratch.device;
  const spec = kernelSpec(PAGED_ATTENTION, scratch.precision, PAGED_ATTENTION.specialise({ ...args, unrolled: true }, device));
  let ready = unrolledReady.get(device);
  if (!ready) {
    ready = new Set();
    unrolledReady.set(device, ready);
  }
  if (ready.has(spec.key)) return true;
  const set = ready;
  const compiling = compilePipeline(device, spec).then(
    () => set.add(spec.key),
    () => {}, // a lost device: the loop pipeline goes on serving
  );
  const list = unrolledCompiling.get(device) ?? [];
  list.push(compiling);
  unrolledCompiling.set(device, list);
  return false;
}

/** Both bodies' dispatches of a call (those with work): O [H, T, Dh] written for every token. */
export function encodePagedAttention(
  pass: GPUComputePassEncoder,
  scratch: CallScratch,
  plan: PagedPlan,
  headDim: number,
  meta: PagedMeta,
  buffers: PagedArgs['buffers'],
  masks: MaskBuffers,
): void {
  for (const body of ['keys', 'rows'] as const) {
    const work = meta[body];
    if (work.count === 0) continue;
    const args: PagedArgs = { body, headDim, plan, meta, buffers, masks, work };
    encodeKernel(pass, scratch, PAGED_ATTENTION, { ...args, unrolled: unrolledPipeline(scratch, args) });
  }
}
