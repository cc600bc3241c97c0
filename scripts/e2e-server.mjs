#!/usr/bin/env node
// Vite's dev server for the browser tests: the repo root (so /e2e/harness.html and /src/*.ts are
// served), the repo's vite.config.ts, a fixed port. `hmr: false`: otherwise an edit to a source file
// while the suite runs makes Vite reload the harness page in the middle of a test. File watching
// stays on, so the next page load still gets fresh code.
//   node scripts/e2e-server.mjs [port]
import { createServer } from 'vite';

const port = Number(process.argv[2] ?? process.env.E2E_PORT ?? 5174);
const server = await createServer({ clearScreen: false, server: { host: '127.0.0.1', port, strictPort: true, hmr: false } });
await server.listen();
server.printUrls();
