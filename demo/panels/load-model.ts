// The model files of the Load-your-own panel: what the files chosen (or a dropped folder) are (one
// .safetensors file, a GGUF file, or a Hugging Face checkpoint: config.json plus its .safetensors
// shards), and a model opened from them: its layer list (hfModelLayers / ggufModelLayers, no tensor
// read) and one layer loaded (attentionLayerFromHf over lazy shards, attentionLayerFromGguf), which
// reads only that layer's tensors.

import {
  type LazySafetensorsFile,
  type ModelLayer,
  type MultiHeadAttentionConfig,
  type WeightTensor,
  attentionLayerFromGguf,
  attentionLayerFromHf,
  ggufModelLayers,
  hfModelLayers,
  loadGguf,
  openSafetensors,
} from 'webgpu-attention';

/** What the files chosen are. */
export type ModelSource =
  | { kind: 'safetensors'; file: File }
  | { kind: 'gguf'; file: File }
  | { kind: 'hf'; config: File; shards: File[]; index: File | null; folder: string };

const isGguf = (f: File) => /\.gguf$/i.test(f.name);
const isSafetensors = (f: File) => /\.safetensors$/i.test(f.name);
const INDEX = 'model.safetensors.index.json';
const path = (f: File) => f.webkitRelativePath || f.name;

/**
 * The files chosen (picker, folder or drop) as one model source; throws an Error saying what is
 * missing or ambiguous. Files that are none of these (tokenizer.json, README.md, …) are ignored.
 */
export function classifyFiles(files: readonly File[]): ModelSource {
  if (files.length === 0) throw new Error('No file chosen.');
  const ggufs = files.filter(isGguf);
  const shards = files.filter(isSafetensors);
  const configs = files.filter((f) => f.name === 'config.json');
  const index = files.find((f) => f.name === INDEX) ?? null;
  if (ggufs.length > 1) {
    throw new Error(
      `${ggufs.length} GGUF files chosen (${ggufs.map(path).join(', ')}): choose one. A model split in parts (-00001-of-0000N.gguf) is read as one file: merge it first with llama.cpp's llama-gguf-split --merge.`,
    );
  }
  if (ggufs.length === 1) {
    if (shards.length || configs.length) throw new Error(`A GGUF file (${ggufs[0].name}) was chosen with .safetensors or config.json files: choose the GGUF file alone.`);
    return { kind: 'gguf', file: ggufs[0] };
  }
  if (configs.length > 1) throw new Error(`${configs.length} config.json files chosen (${configs.map(path).join(', ')}): choose one checkpoint's folder.`);
  if (configs.length === 1) {
    if (shards.length === 0) {
      throw new Error(
        'config.json was chosen without weights: no .safetensors file among the files. Choose config.json together with its model*.safetensors files (and model.safetensors.index.json when sharded), or the whole folder.',
      );
    }
    const folder = path(configs[0]).split('/').slice(0, -1).join('/');
    return { kind: 'hf', config: configs[0], shards, index, folder };
  }
  if (shards.length > 1 || index) {
    throw new Error(
      `Missing config.json: ${shards.length} .safetensors file(s)${index ? ` and ${INDEX}` : ''} were chosen, which is a Hugging Face checkpoint, and its layers' sizes (heads, head size, rope, windows) are in its config.json. Choose config.json with them, or the whole folder.`,
    );
  }
  if (shards.length === 1) return { kind: 'safetensors', file: shards[0] };
  throw new Error(
    `No .safetensors, .gguf or config.json among the ${files.length} file(s) chosen (${files.slice(0, 5).map(path).join(', ')}${files.length > 5 ? ', …' : ''}).`,
  );
}

/**
 * The files of a drop: a dropped folder walked (DataTransferItem.webkitGetAsEntry), or the files
 * dropped. Call it in the drop handler itself: the items' entries are taken before its first await.
 */
export function droppedFiles(data: DataTransfer): Promise<File[]> {
  const entries = Array.from(data.items)
    .map((item) => (item.kind === 'file' ? item.webkitGetAsEntry?.() : null))
    .filter((e): e is FileSystemEntry => !!e);
  const plain = Array.from(data.files);
  if (!entries.some((e) => e.isDirectory)) return Promise.resolve(plain);
  return (async () => {
    const out: File[] = [];
    const walk = async (entry: FileSystemEntry): Promise<void> => {
      if (entry.isFile) {
        out.push(await new Promise<File>((resolve, reject) => (entry as FileSystemFileEntry).file(resolve, reject)));
      } else if (entry.isDirectory) {
        const reader = (entry as FileSystemDirectoryEntry).createReader();
        for (;;) {
          // readEntries gives a directory's entries in batches, then an empty one.
          const batch = await new Promise<FileSystemEntry[]>((resolve, reject) => reader.readEntries(resolve, reject));
          if (batch.length === 0) break;
          for (const e of batch) await walk(e);
        }
      }
    };
    for (const e of entries) await walk(e);
    return out;
  })();
}

/** One layer as a loader made it: createMultiHeadAttention's arguments and its forward options. */
export interface LoadedLayer {
  config: MultiHeadAttentionConfig;
  stateDict: Record<string, WeightTensor>;
  forward: { isCausal: true; window?: number; scale?: number; softcap?: number; sinks?: Float32Array };
  architecture: string;
}

/** A GGUF file or a Hugging Face checkpoint, opened: its layers listed, any one loadable. */
export interface OpenedModel {
  kind: 'gguf' | 'hf';
  /** The file's or the checkpoint folder's name. */
  name: string;
  /** The files it reads (names). */
  files: string[];
  architecture: string;
  layers: ModelLayer[];
  load(layer: number, maxPositions: number): Promise<LoadedLayer>;
  /** Bytes read from the files so far, of their total (null where the reader does not count). */
  bytes(): { read: number | null; total: number };
}

/** Opens a GGUF file or a checkpoint: headers only (and config.json). */
export async function openModel(source: Exclude<ModelSource, { kind: 'safetensors' }>): Promise<OpenedModel> {
  if (source.kind === 'gguf') {
    const gguf = await loadGguf(source.file);
    const layers = ggufModelLayers(gguf);
    const arch = gguf.metadata.get('general.architecture');
    return {
      kind: 'gguf',
      name: source.file.name,
      files: [source.file.name],
      architecture: typeof arch === 'string' ? arch : '(no general.architecture)',
      layers,
      load: (layer) => attentionLayerFromGguf(gguf, { layer }),
      bytes: () => ({ read: null, total: source.file.size }),
    };
  }
  const text = await source.config.text();
  let config: Record<string, unknown>;
  try {
    config = JSON.parse(text);
  } catch (e) {
    throw new Error(`${path(source.config)} is not JSON: ${(e as Error).message}.`);
  }
  const layers = hfModelLayers(config);
  let shards = source.shards;
  if (source.index) {
    // A sharded checkpoint: its index names the shards; each must be among the files, and only those are read.
    let map: Record<string, string> | undefined;
    try {
      map = JSON.parse(await source.index.text()).weight_map;
    } catch (e) {
      throw new Error(`${INDEX} is not JSON: ${(e as Error).message}.`);
    }
    if (!map || typeof map !== 'object') throw new Error(`${INDEX} has no "weight_map": it is not a safetensors index.`);
    const named = [...new Set(Object.values(map))];
    const missing = named.filter((n) => !shards.some((s) => s.name === n));
    if (missing.length) {
      throw new Error(`${INDEX} names ${missing.length} shard(s) not chosen: ${missing.join(', ')}. Choose every shard with config.json, or the whole folder.`);
    }
    shards = shards.filter((s) => named.includes(s.name));
  }
  const lazy: LazySafetensorsFile[] = await Promise.all(shards.map((s) => openSafetensors(s)));
  const text_config = config.text_config as Record<string, unknown> | undefined;
  const modelType = String(text_config?.model_type ?? config.model_type ?? '(no model_type)');
  return {
    kind: 'hf',
    name: source.folder || 'checkpoint',
    files: [source.config.name, ...(source.index ? [source.index.name] : []), ...shards.map((s) => s.name)],
    architecture: modelType,
    layers,
    load: (layer, maxPositions) => attentionLayerFromHf(config, lazy, { layer, maxPositions }),
    bytes: () => ({ read: lazy.reduce((a, f) => a + f.bytesRead, 0), total: lazy.reduce((a, f) => a + f.byteLength, 0) }),
  };
}

/** A layer's kind in words: "sliding (window 8)", "full", "linear attention". */
export function layerKind(l: ModelLayer): string {
  return l.kind === 'sliding' ? `sliding (window ${l.window})` : l.kind === 'full' ? 'full' : 'linear attention';
}

/** A layer as an option of the layer list. */
export function layerLabel(l: ModelLayer): string {
  const parts = [`layer ${l.layer}`, layerKind(l)];
  if (l.kind !== 'linear') parts.push(l.rope ? 'rope' : 'NoPE');
  parts.push(`${l.numHeads} heads${l.numKvHeads !== l.numHeads ? ` / ${l.numKvHeads} KV` : ''}`, `head size ${l.headDim}`);
  if (l.unsupported) parts.push('refused');
  return parts.join(' · ');
}
