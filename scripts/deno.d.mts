// Types of scripts/deno.mjs (Deno with WebGPU on the built package).
export declare const root: string;
export declare const LVP_ICD: string;
/** The Deno binary (DENO_PATH, else the devDependency's). */
export declare const deno: string;
/** The Vulkan ICD Deno is given (VK_ICD_FILENAMES, else lavapipe's). */
export declare const icd: string;
export declare function denoMissing(): string | null;
/** `fastCompiles` (default true): GALLIVM_PERF=nopt, lavapipe's compiles without LLVM's optimisation passes. */
export declare function denoEnv(fastCompiles?: boolean): Record<string, string | undefined>;
export declare function ensureDist(timeoutS: number, log: (line: string) => void): string | null;
