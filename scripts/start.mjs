#!/usr/bin/env node
// `npm start`: builds the demo (vite build with vite.demo.config.ts → dist-demo/) and serves the
// build with `vite preview` on http://127.0.0.1:4173/ (PORT and HOST override; WebGPU needs a secure
// context, which 127.0.0.1 and localhost are). Before building, once PORT is known to be good, it
// sets up this machine's system packages for viewing the page (scripts/setup-system.sh).
import { spawnSync } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, preview } from 'vite';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const configFile = resolve(repo, 'vite.demo.config.ts');
const host = process.env.HOST ?? '127.0.0.1';
const port = Number(process.env.PORT ?? 4173);
if (!Number.isInteger(port) || port < 1 || port > 65535) {
  console.error(`start: PORT must be a port number; got "${process.env.PORT}"`);
  process.exit(2);
}

// Chromium with its CJK font (the attention maps' labels) and lavapipe, as for the tests: installed on
// Debian 12 as root; elsewhere the script names what is missing, and the page is served anyway.
const setup = spawnSync('bash', [resolve(repo, 'scripts/setup-system.sh'), 'lavapipe', 'chromium'], { stdio: ['ignore', 2, 2] });
if (setup.status !== 0) console.error('start: serving the demo anyway; open it in any browser with WebGPU.');

console.log('Building the demo (vite build --config vite.demo.config.ts)…');
await build({ configFile, logLevel: 'warn' });
const server = await preview({ configFile, preview: { host, port, strictPort: true, open: false } });
const url = `http://${host.includes(':') ? `[${host}]` : host}:${port}/`;
console.log(`\nwebgpu-attention demo: ${url}\n(Chromium on Linux needs --enable-unsafe-webgpu for WebGPU; Ctrl+C stops the server.)`);
const stop = () => server.close().finally(() => process.exit(0));
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
