// The public shapes of kernel tuning and warm-up: the variants an engine chooses between, how it is
// told to choose (EngineOptions.tuning), what it reports (engine.tuning), and engine.warmup/tune's
// options. Re-exported by types.ts. (Their `calls`, WarmupCall, name the layer class, so they are
// declared in engine.ts: a type here that named layer.ts would close an import cycle back to types.ts.)
// The variant names are declared once, in the records (webgpu/variants.ts gathers them and derives the
// unions ProjectionVariant and AttentionVariant from their names): a new variant is a new record.

import type { AttentionVariant, ProjectionVariant } from './webgpu/variants.ts';

export type { AttentionVariant, ProjectionVariant };

export interface TuningOptions {
  /** 'auto' (default): sweep, remember, reuse. 'off': the built-in choice for the adapter kind (register tiles on CPU adapters, workgroup tiles on GPUs), no sweep. */
  mode?: 'auto' | 'off';
  /** Variants to use whatever the sweep would say (each kernel named here is never swept). */
  kernels?: { qkv_projection?: ProjectionVariant; flash_attention?: AttentionVariant; output_projection?: ProjectionVariant };
  /** Where sweeps are remembered: left out, the default place; null, nowhere (this engine only); or your own store. */
  store?: TuningStore | null;
  /**
   * Whether mode 'auto' compiles and sweeps in the background, between calls (tier 0 meanwhile). Left
   * out: yes, except on wgpu (Firefox, Deno), which compiles a pipeline on the thread that serves the
   * device, so that a call arriving during a background compile waits for all of it (40 ms to seconds
   * on a CPU adapter). There the first call of a shape compiles its final kernels in line (on a CPU
   * adapter, where the built-in ones would take seconds, the ones that compile fastest), remembered
   * choices are used, and sweeps run only when asked (engine.tune()). true or false decides it.
   */
  background?: boolean;
}

/** A place to keep tuning results between engines (see fileTuningStore, localStorageTuningStore). */
export interface TuningStore {
  /** Where the records live, for reports. */
  readonly where: string;
  /** The records saved last, or null. */
  load(): Promise<Record<string, TuningChoice> | null>;
  save(records: Record<string, TuningChoice>): Promise<void>;
}

/** How one kernel's variant was chosen for one shape class. */
export interface TuningChoice {
  kernel: 'qkv_projection' | 'flash_attention' | 'output_projection';
  /** The bucketed sizes the choice holds for, e.g. "f32 m1024 k1024 n4096". */
  shapeClass: string;
  variant: string;
  /** 'sweep': measured by this engine; 'store': measured earlier, remembered. */
  source: 'sweep' | 'store';
  /** Fastest of each candidate's timed runs, milliseconds (by `clock`). */
  timesMs?: Record<string, number>;
  /** How the runs were timed: the GPU's timestamp queries where the device has them, else the wall clock. */
  clock?: 'gpu-timestamps' | 'wall-clock';
  /**
   * Set when the timings could not tell the candidates apart (every one the same, at a completion
   * timer's step or floor, as Firefox's 100 ms timer made them): why. The built-in choice ran, and
   * nothing was remembered.
   */
  unusable?: string;
  /** How far each candidate's median run lies above its fastest, as a fraction (noise). */
  spreads?: Record<string, number>;
  /** Each candidate's first, untimed run in milliseconds: the driver's compile where it compiles at first use, plus one run. */
  firstRunMs?: Record<string, number>;
  /** False when the runs were too noisy to decide: the built-in choice ran, and nothing was remembered. */
  steady?: boolean;
  /** Why this variant. */
  note?: string;
  /** Variants the correctness gate refused, and why. */
  refused?: Record<string, string>;
}

/** engine.tuning: how this engine chooses its kernels, and what it chose. */
export interface TuningReport {
  mode: 'auto' | 'off';
  /** Where choices are remembered ('memory' for this engine only). */
  store: string;
  /** Variants the caller forced. */
  forced: TuningOptions['kernels'];
  /** What a kernel runs when nothing was swept, forced or remembered for its shape class. */
  defaults: { qkv_projection: ProjectionVariant; flash_attention: AttentionVariant; output_projection: ProjectionVariant };
  /** The choices this engine's calls have used so far (swept now, or remembered), in order of first use. */
  choices: TuningChoice[];
  /** What a call runs while its final kernels compile (mode 'auto'; never with forced variants or mode 'off'). */
  tier0: { qkv_projection: ProjectionVariant; flash_attention: AttentionVariant; output_projection: ProjectionVariant };
  /** Kernels compiled ahead of use (in the background, or by warmup()), with the wall time each took to compile and run once. */
  compiled: { kernel: string; variant: string; ms: number }[];
  /**
   * Whether compiles and sweeps run in the background (mode 'auto'), and why: `tuning.background`, or
   * the WebGPU implementation's default (off on wgpu: see TuningOptions.background).
   */
  background: { enabled: boolean; why: string };
  /** Background work (compiles, sweeps) not finished yet; engine.settled() waits for it. */
  pending: number;
  /** Background work that failed, and why (the calls went on with the kernels they had). */
  failures: string[];
  /**
   * How sweeps time kernels on this device (`clock`: timestamp queries where it has them, else the wall
   * clock), and how it completes GPU work: `completionMs`, an empty wait's round trip (null until
   * measured); `timerDriven` when that is a timer's (Firefox: ~100 ms), and then every wait is `nudged`
   * with empty submits so that a call costs its GPU work, not the timer.
   */
  timing: { clock: 'gpu-timestamps' | 'wall-clock'; completionMs: number | null; timerDriven: boolean | null; nudged: boolean };
  /**
   * Only on an engine that chooses its backend (no backend asked for, a software adapter): which
   * backend each shape class runs on, and why. Absent on an engine with one backend.
   */
  backends?: BackendChoiceReport;
}

/** How the backend of one shape class was chosen ('wasm' answers until WebGPU is measured and clearly faster). */
export interface BackendChoice {
  /** The bucketed call shape the choice holds for, e.g. "layer E512 H8 G8 · B1 Sq512 Skv512 causal". */
  shapeClass: string;
  backend: 'wasm' | 'webgpu';
  /** Fastest of each backend's timed runs, wall milliseconds (absent when one side failed). */
  timesMs?: Record<string, number>;
  /** How far each backend's median run lies above its fastest, as a fraction (noise). */
  spreads?: Record<string, number>;
  /** False when the runs were too noisy to decide: 'wasm' stays. */
  steady?: boolean;
  reason: string;
}

/** engine.tuning.backends: the automatic choice between the 'wasm' backend and WebGPU on a software adapter. */
export interface BackendChoiceReport {
  /** Why this engine chooses (no backend was asked for, and the adapter runs on the CPU). */
  why: string;
  /** The backend of the latest call. */
  current: 'wasm' | 'webgpu';
  /** The shape classes measured so far. */
  choices: BackendChoice[];
  /** Measurements queued or running; engine.settled() waits for them. */
  pending: number;
  /** Measurements that failed, and why ('wasm' kept for those classes). */
  failures: string[];
}

export interface WarmupOptions {
  /** Called after each kernel is compiled (warmup) or measured (tune): done of total. */
  onProgress?: (progress: { done: number; total: number; kernel: string; variant: string }) => void;
}
