// Where tuning sweeps are remembered between engines: localStorage in a browser, a JSON file in Node
// (`$XDG_CACHE_HOME/webgpu-attention/tuning.json`, else `~/.cache/…`), or a store of the caller's.

import type { TuningChoice, TuningStore } from '../../types.ts';
import { importNodeOnly } from '../../node-only.ts';

/** Remembered choices, keyed by version, adapter, kernel and shape class. Errors of a store are ignored (the sweep reruns). */
type TuningRecords = Record<string, TuningChoice>;

const STORAGE_KEY = 'webgpu-attention.tuning';

/** A store in the browser's localStorage under `key`. */
export function localStorageTuningStore(storage: Storage, key = STORAGE_KEY): TuningStore {
  return {
    where: `localStorage["${key}"]`,
    load: async () => parse(storage.getItem(key)),
    save: async (records) => storage.setItem(key, JSON.stringify(records)),
  };
}

/** A store in a JSON file (Node). The folder is created on the first save. */
export function fileTuningStore(path: string): TuningStore {
  const fs = () => importNodeOnly('node:fs/promises') as Promise<typeof import('node:fs/promises')>;
  return {
    where: path,
    load: async () => parse(await (await fs()).readFile(path, 'utf8').catch(() => null)),
    save: async (records) => {
      const { mkdir, writeFile, rename } = await fs();
      await mkdir(path.slice(0, Math.max(0, path.lastIndexOf('/'))) || '.', { recursive: true });
      // Write then rename, so a reader never sees half a file.
      const temporary = `${path}.${Math.random().toString(36).slice(2)}.tmp`;
      await writeFile(temporary, `${JSON.stringify(records, null, 1)}\n`);
      await rename(temporary, path);
    },
  };
}

/** A store that lives as long as the engine (what `tuning: { store: null }` means, in effect). */
export function memoryTuningStore(): TuningStore {
  let records: TuningRecords | null = null;
  return {
    where: 'memory',
    load: async () => records,
    save: async (r) => {
      records = r;
    },
  };
}

/** The store used when the caller names none: localStorage in a browser, the cache file in Node, else memory. */
export function defaultTuningStore(): TuningStore {
  const storage = (globalThis as { localStorage?: Storage }).localStorage;
  if (storage) return localStorageTuningStore(storage);
  const env = typeof process !== 'undefined' && process.versions?.node ? process.env : null;
  const home = env?.HOME ?? env?.USERPROFILE;
  const root = env?.XDG_CACHE_HOME || (home ? `${home}/.cache` : null);
  return root ? fileTuningStore(`${root}/webgpu-attention/tuning.json`) : memoryTuningStore();
}

function parse(text: string | null): TuningRecords | null {
  if (!text) return null;
  try {
    const value = JSON.parse(text) as unknown;
    return value && typeof value === 'object' && !Array.isArray(value) ? (value as TuningRecords) : null;
  } catch {
    return null; // a corrupt file is as good as none
  }
}
