// Loading a .safetensors file from wherever it is: bytes, a Response, a Blob, a URL, or a path in Node.

import { InvalidArgumentError } from '../errors.ts';
import { importNodeOnly } from '../node-only.ts';
import { describe } from '../validate.ts';
import { type SafetensorsFile, WeightFileError, parseSafetensors } from './safetensors.ts';

const isNode = () => typeof process !== 'undefined' && !!process.versions?.node;
/** 'https://…', 'http://…', 'file:…', 'blob:…', 'data:…': a URL rather than a path. */
const looksLikeUrl = (s: string) => /^[a-z][a-z0-9+.-]*:/i.test(s) && !/^[a-z]:[\\/]/i.test(s); // not a Windows drive path

async function fetchBytes(url: string): Promise<ArrayBuffer> {
  let response: Response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw new WeightFileError({
      where: 'loadSafetensors',
      argument: 'source',
      expected: 'a URL that can be fetched',
      given: JSON.stringify(url),
      fix: `fetch failed (${(e as Error).message}${(e as { cause?: Error }).cause ? `: ${(e as { cause: Error }).cause.message}` : ''}); check the URL, the network and CORS.`,
      problem: 'read',
    });
  }
  return responseBytes(response, url);
}

async function responseBytes(response: Response, what: string): Promise<ArrayBuffer> {
  if (!response.ok) {
    throw new WeightFileError({
      where: 'loadSafetensors',
      argument: 'source',
      expected: 'a successful HTTP response (2xx)',
      given: `HTTP ${response.status} ${response.statusText} for ${what}`,
      fix: 'Check the URL (a Hugging Face file is at https://huggingface.co/<repo>/resolve/main/model.safetensors).',
      problem: 'read',
    });
  }
  return response.arrayBuffer();
}

async function readPath(path: string | URL): Promise<Uint8Array> {
  const fs = (await importNodeOnly('node:fs/promises')) as { readFile: (p: string | URL) => Promise<Uint8Array> };
  try {
    return await fs.readFile(path);
  } catch (e) {
    const code = (e as { code?: string }).code;
    throw new WeightFileError({
      where: 'loadSafetensors',
      argument: 'source',
      expected: 'a readable file',
      given: JSON.stringify(String(path)),
      fix:
        code === 'ENOENT'
          ? `There is no such file (relative paths are resolved against the current directory, ${process.cwd()}).`
          : `Reading it failed: ${(e as Error).message}.`,
      problem: 'read',
    });
  }
}

/**
 * Reads and parses a .safetensors file from bytes (ArrayBuffer, Uint8Array), a fetch Response, a
 * Blob/File (an <input type=file>), a URL (fetched; in Node, file: URLs are read from disk), or — in
 * Node only — a file path. Throws WeightFileError when it cannot be read or parsed.
 */
export async function loadSafetensors(source: ArrayBuffer | Uint8Array | Response | Blob | URL | string): Promise<SafetensorsFile> {
  if (source instanceof ArrayBuffer || source instanceof Uint8Array) return parseSafetensors(source);
  if (typeof Response !== 'undefined' && source instanceof Response) return parseSafetensors(await responseBytes(source, source.url || 'the response'));
  if (typeof Blob !== 'undefined' && source instanceof Blob) return parseSafetensors(await source.arrayBuffer());
  if (source instanceof URL || typeof source === 'string') {
    const text = String(source);
    if (isNode() && (source instanceof URL ? source.protocol === 'file:' : /^file:/i.test(text))) return parseSafetensors(await readPath(new URL(text)));
    if (looksLikeUrl(text) || !isNode()) return parseSafetensors(await fetchBytes(text)); // a browser resolves a relative path against the page
    return parseSafetensors(await readPath(text));
  }
  throw new InvalidArgumentError({
    where: 'loadSafetensors',
    argument: 'source',
    expected: 'an ArrayBuffer, Uint8Array, Response, Blob, URL, or a path/URL string',
    given: describe(source),
  });
}
