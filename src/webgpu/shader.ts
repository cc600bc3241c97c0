// What the host and the shaders must agree on, declared once on the host and written into every
// shader's source: the shared constants (the masked-score sentinel and its threshold, log2(e), the
// largest head size), each kernel's uniform struct, its bindings (bindings.ts), and the specialisation
// prelude (storage type, compile-time sizes). A shader file never declares these itself; it says where they come from.
//
// Uniform structs follow ratchet's `*Meta` structs and webgpu-utils' structured views: a kernel's
// host module declares its parameters once (name, type, meaning), and both the WGSL `struct Params`
// and the bytes written to the uniform buffer are generated from that list, so a reordered or
// renamed field changes both sides together, and a field left out is a type error on the host.

import type { Bindings } from './bindings.ts';
import type { Precision } from './buffers.ts';

type ScalarType = 'u32' | 'f32';

/** Constants every shader sees, with the host's copy of each (the same values, by construction). */
export const SHADER_CONSTANTS = {
  /** A score no real one goes below: "no key seen yet" in running maxima; finite, as WGSL may assume no infinities. */
  NO_SCORE: { type: 'f32', value: -3.0e38 },
  /** What the host writes into attnMask for −Infinity (and a bool mask's true). */
  MASKED: { type: 'f32', value: -3.0e38 },
  /** attnMask entries at or below this are "not allowed"; finite mask values are raised to LOWEST_MASK_VALUE, far above it. */
  MASKED_BELOW: { type: 'f32', value: -1.0e38 },
  /**
   * Finite attnMask values are raised to at least this: the kernels scale them by log2(e), which must
   * not overflow float32, and they must stay apart from MASKED (so −3.4e38, float32's lowest, which
   * Hugging Face uses for "masked", is added like any number, as PyTorch does). In float32 a score plus
   * −1e37 is −1e37 whatever the score, as it is plus −3.4e38; only a row whose visible entries all lie
   * below −1e37 *and differ* could notice.
   */
  LOWEST_MASK_VALUE: { type: 'f32', value: -1.0e37 },
  /** log2(e): scores are kept in log2 units so that exp becomes exp2. */
  LOG2E: { type: 'f32', value: Math.LOG2E },
  /** The largest head size the attention kernels take (q and the accumulator live in registers). */
  MAX_HEAD_DIM: { type: 'u32', value: 256 },
} as const satisfies Record<string, { type: ScalarType; value: number }>;

/** The host's copy of a shared constant. */
export function constant(name: keyof typeof SHADER_CONSTANTS): number {
  return SHADER_CONSTANTS[name].value;
}

function literal(type: ScalarType, value: number): string {
  if (type === 'u32') return `${value}u`;
  const text = String(value);
  return /[.e]/.test(text) ? text : `${text}.0`;
}

/** One uniform field: its name, type, and what it means (the comment in the generated struct). */
export type ParamField = readonly [name: string, type: ScalarType, meaning: string];

/** A declaration list's entry: a uniform field (ParamField) or a binding (bindings.ts BindingDecl), named first. */
type Named = readonly [name: string, ...rest: unknown[]];

/** The entries of a shared declaration list that a kernel declares too, by name (in the list's order). */
export function pick<const L extends readonly Named[], N extends L[number][0]>(list: L, ...names: readonly N[]): Extract<L[number], readonly [N, ...unknown[]]>[] {
  return list.filter(([name]) => (names as readonly string[]).includes(name)) as Extract<L[number], readonly [N, ...unknown[]]>[];
}

/** The entries of a shared declaration list but those named (in the list's order). */
export function omit<const L extends readonly Named[], N extends L[number][0]>(list: L, ...names: readonly N[]): Exclude<L[number], readonly [N, ...unknown[]]>[] {
  return list.filter(([name]) => !(names as readonly string[]).includes(name)) as Exclude<L[number], readonly [N, ...unknown[]]>[];
}

/** A kernel's uniform struct: the WGSL declaration and the packing, from one list of fields. */
export interface Params<Name extends string> {
  readonly fields: readonly ParamField[];
  /** `struct Params { … }` for the shader. */
  readonly wgsl: string;
  /** The uniform buffer's bytes: every field by name (16-byte aligned, 4 bytes a field, in declaration order). */
  pack(values: Record<Name, number>): ArrayBuffer;
}

/** Declares a kernel's uniform struct. Fields are 32-bit scalars, laid out in the order given. */
export function defineParams<const F extends readonly ParamField[]>(fields: F): Params<F[number][0]> {
  const names = new Set<string>();
  for (const [name] of fields) {
    if (names.has(name)) throw new Error(`defineParams: field ${name} is declared twice`);
    names.add(name);
  }
  const width = Math.max(...fields.map(([name, type]) => `${name}: ${type},`.length));
  const wgsl = [
    "// Generated on the host from the kernel's parameter declaration (src/webgpu/kernels/*.ts): edit it there.",
    'struct Params {',
    ...fields.map(([name, type, meaning]) => `  ${`${name}: ${type},`.padEnd(width)}  // ${meaning}`),
    '}',
  ].join('\n');
  return {
    fields,
    wgsl,
    pack(values) {
      const bytes = new ArrayBuffer(Math.ceil((fields.length * 4) / 16) * 16);
      const view = new DataView(bytes);
      fields.forEach(([name, type], i) => {
        const value = (values as Record<string, number>)[name];
        if (typeof value !== 'number' || Number.isNaN(value)) throw new Error(`Params.pack: field ${name} is ${value}`);
        if (type === 'f32') view.setFloat32(i * 4, value, true);
        else view.setUint32(i * 4, value, true);
      });
      return bytes;
    },
  };
}

/** How a shader is specialised: text, because `override` constants reach neither types nor array lengths. */
export interface ShaderSpec {
  /** Storage type of tensors: ST = f32 and ST4 = vec4<f32>, or f16 and vec4<f16> with `enable f16;`; SM4 the matching mat4x4. */
  precision: Precision;
  /** `enable subgroups;` first: the kernel uses subgroup builtins (only where the device has the `subgroups` feature). */
  subgroups?: boolean;
  /** The kernel's uniform struct, if it has one (bound as `params`: bindings.ts PARAMS_BINDING). */
  params?: Params<string>;
  /** The kernel's bindings (bindings.ts): their `@group(0) @binding(i)` lines go into the source. */
  bindings?: Bindings<string>;
  /** `const NAME: u32 = value;` lines, for sizes WGSL needs at compile time (private array lengths). */
  sizes?: Record<string, number>;
  /** The WGSL files, concatenated in this order after the prelude. */
  sources: readonly string[];
}

/** The complete WGSL of a kernel: prelude (storage type, shared constants, sizes), its Params, its sources. */
export function shaderCode(spec: ShaderSpec): string {
  const prelude = [
    ...(spec.subgroups ? ['enable subgroups;'] : []),
    ...(spec.precision === 'f16'
      ? ['enable f16;', 'alias ST = f16;', 'alias ST4 = vec4<f16>;', 'alias SM4 = mat4x4<f16>;']
      : ['alias ST = f32;', 'alias ST4 = vec4<f32>;', 'alias SM4 = mat4x4<f32>;']),
    '// Shared constants, declared in src/webgpu/shader.ts (SHADER_CONSTANTS).',
    ...Object.entries(SHADER_CONSTANTS).map(([name, { type, value }]) => `const ${name}: ${type} = ${literal(type, value)};`),
    ...Object.entries(spec.sizes ?? {}).map(([name, value]) => `const ${name}: u32 = ${value}u;`),
  ];
  return [...prelude, ...(spec.params ? [spec.params.wgsl] : []), ...(spec.bindings ? [spec.bindings.wgsl] : []), ...spec.sources].join('\n');
}

/** The identity scoreMod the attention kernels get when a layer has none (HAS_SCORE_MOD = 0 skips its call). */
const NO_SCORE_MOD = 'fn scoreMod(score: f32, b: u32, h: u32, i: u32, j: u32) -> f32 { return score; }';

/** The sources and size constant that put a custom score modification (or none) into an attention kernel. */
export function scoreModParts(wgsl: string | undefined): { source: string; HAS_SCORE_MOD: number } {
  return wgsl === undefined ? { source: NO_SCORE_MOD, HAS_SCORE_MOD: 0 } : { source: `// config.scoreMod (the caller's WGSL):\n${wgsl}`, HAS_SCORE_MOD: 1 };
}
