// Host side of a call on a PagedKvCache's attention (the pool's writes: paged-write.ts):
// shaders/paged_attention.wgsl with one of its bodies
// (paged_attention_rows.wgsl for prefills, paged_attention_keys.wgsl for decode steps and small trees),
// which read every sequence's keys in place through its block table; each body in two tiers (its loop
// pipeline until the unrolled one, compiled in the background, is ready). The call's metadata (per sequence
// its row, start, length, block table and tree) is one u32 buffer (pagedMeta), uploaded per call.

import attentionSource from '../../../shaders/paged_attention.wgsl?raw';
import keysSource from '../../../shaders/paged_attention_keys.wgsl?raw';
import rowsSource from '../../../shaders/paged_attention_rows.wgsl?raw';
import scoreRule from '../../../shaders/score_rule.wgsl?raw';
import type { PagedPlan } from '../../plan/index.ts';
import { kernelBindings } from '../bindings.ts';
import { defineKernel, encodeKernel, kernelSpec } from '../kernel.ts';
import { compilePipeline } from '../pipelines.ts';
import type { CallScratch } from '../scratch.ts';
import { defineParams, scoreModParts } from '../shader.ts';
import { type KvFormat, kvBinding, kvLoader, SCALE_FIELD } from './attention-fields.ts';
import { keysPerTile } from './flash-attention.ts';
import { SCORE_BINDINGS, SCORE_FIELDS, type MaskBuffers, scoreBuffers } from './masks.ts';

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
