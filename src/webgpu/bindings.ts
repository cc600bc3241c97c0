// A kernel's bindings, declared once on the host: from one list of (name, kind, WGSL type, meaning)
// come the WGSL `@group(0) @binding(i) var…` lines written into the shader's source, the explicit
// GPUBindGroupLayout and GPUPipelineLayout (cached per device), and the bind group's entries, built
// from a record of buffers by name. Binding i is the i-th name of the list, on both sides, by
// construction: no number is written by hand, and no pipeline's layout is inferred from its shader
// (an inferred layout drops a binding the shader's body stops using, and then refuses the bind group
// that still names it).
//
// The record `group` takes has exactly the declared names: a missing or an extra one is a type error
// (and, for callers that cast, refused at run time).

/** How a binding is used: a uniform buffer, a storage buffer read only, or one read and written. */
export type BindingKind = 'uniform' | 'read-only-storage' | 'storage';

/** One binding: its WGSL name, kind, WGSL type (`array<ST4>`, `Params`), and what it holds (a shape comment). */
export type BindingDecl = readonly [name: string, kind: BindingKind, type: string, meaning?: string];

/** The uniform struct every kernel with Params binds first (shader.ts defineParams declares the struct). */
export const PARAMS_BINDING = ['params', 'uniform', 'Params', "the kernel's uniforms (its Params declaration)"] as const satisfies BindingDecl;

/**
 * A kernel's bindings (kernel.ts): its Params at binding 0 (PARAMS_BINDING; encodeKernel binds the
 * uniform buffer there), then `decls` from binding 1. Every kernel declares its bindings with this,
 * so none lists the Params binding itself.
 */
export function kernelBindings<const D extends readonly BindingDecl[]>(label: string, decls: D): Bindings<'params' | D[number][0]> {
  return defineBindings(label, [PARAMS_BINDING, ...decls]);
}

/** A buffer bound whole, or a range of one. */
export type BoundBuffer = GPUBuffer | GPUBufferBinding;

/** A kernel's bindings: the WGSL declarations, the layout, and bind groups, from one list. */
export interface Bindings<Name extends string> {
  readonly decls: readonly BindingDecl[];
  /** Who owns them (`Owner`): labels the layouts and bind groups. */
  readonly label: string;
  /** The `@group(0) @binding(i) var…` lines for the shader. */
  readonly wgsl: string;
  /** The layout's entries, binding i for the i-th declaration. */
  readonly layoutEntries: readonly GPUBindGroupLayoutEntry[];
  /** The bind group layout on this device (one per device). */
  layout(device: GPUDevice): GPUBindGroupLayout;
  /** The pipeline layout on this device: the one bind group (one per device). */
  pipelineLayout(device: GPUDevice): GPUPipelineLayout;
  /** A bind group of these buffers, by name: every declared name, and no other. */
  group(device: GPUDevice, buffers: { readonly [N in Name]: BoundBuffer }, label?: string): GPUBindGroup;
}

const COMPUTE = 0x4; // GPUShaderStage.COMPUTE (a constant of the spec; the global exists only where WebGPU does)

function wgslVar(kind: BindingKind): string {
  return kind === 'uniform' ? 'var<uniform>' : kind === 'read-only-storage' ? 'var<storage, read>' : 'var<storage, read_write>';
}

/** Declares a kernel's bindings, group 0, binding i for the i-th entry. */
export function defineBindings<const D extends readonly BindingDecl[]>(label: string, decls: D): Bindings<D[number][0]> {
  const names = decls.map(([name]) => name);
  const seen = new Set<string>();
  for (const name of names) {
    if (seen.has(name)) throw new Error(`defineBindings(${label}): binding ${name} is declared twice`);
    seen.add(name);
  }
  const lines = decls.map(([name, kind, type], i) => `@group(0) @binding(${i}) ${wgslVar(kind)} ${name}: ${type};`);
  const width = Math.max(0, ...lines.map((line) => line.length));
  const wgsl = [
    `// Bindings, generated on the host from ${label}'s declaration (src/webgpu/kernels/*.ts): edit them there.`,
    ...lines.map((line, i) => (decls[i][3] ? `${line.padEnd(width)}  // ${decls[i][3]}` : line)),
  ].join('\n');
  const layoutEntries: GPUBindGroupLayoutEntry[] = decls.map(([, kind], i) => ({ binding: i, visibility: COMPUTE, buffer: { type: kind } }));
  const layouts = new WeakMap<GPUDevice, { group: GPUBindGroupLayout; pipeline: GPUPipelineLayout }>();
  const layoutsOn = (device: GPUDevice) => {
    let entry = layouts.get(device);
    if (!entry) {
      const group = device.createBindGroupLayout({ label: `${label}.bindGroupLayout`, entries: layoutEntries });
      entry = { group, pipeline: device.createPipelineLayout({ label: `${label}.pipelineLayout`, bindGroupLayouts: [group] }) };
      layouts.set(device, entry);
    }
    return entry;
  };
  return {
    decls,
    label,
    wgsl,
    layoutEntries,
    layout: (device) => layoutsOn(device).group,
    pipelineLayout: (device) => layoutsOn(device).pipeline,
    group(device, buffers, groupLabel) {
      const given = Object.keys(buffers);
      const missing = names.filter((name) => !given.includes(name));
      const extra = given.filter((name) => !seen.has(name));
      if (missing.length || extra.length) {
        throw new Error(
          `${label}.group: the bind group must name exactly ${names.join(', ')}` +
            `${missing.length ? `; missing ${missing.join(', ')}` : ''}${extra.length ? `; not declared ${extra.join(', ')}` : ''}`,
        );
      }
      const entries = names.map((name, binding) => {
        const bound = (buffers as Record<string, BoundBuffer>)[name];
        return { binding, resource: 'buffer' in bound ? bound : { buffer: bound } };
      });
      return device.createBindGroup({ label: groupLabel ?? `${label}.bindGroup`, layout: layoutsOn(device).group, entries });
    },
  };
}
