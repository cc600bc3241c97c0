// Reading a model file at offsets, so that a loader reads its header and then only the tensors it is
// asked for: in Node, a path or file: URL through a file handle (opened for each read, so nothing stays
// open between reads). Shared by loadGguf and openSafetensors.

import { importNodeOnly } from '../node-only.ts';
import { WeightFileError } from './safetensors.ts';

/** Bytes [offset, offset + length) of a file (fewer at its end). */
export type ReadAt = (offset: number, length: number) => Promise<Uint8Array>;

interface NodeFileHandle {
  stat(): Promise<{ size: number }>;
  read(buffer: Uint8Array, offset: number, length: number, position: number): Promise<{ bytesRead: number }>;
  close(): Promise<void>;
}

function readError(where: string, path: string | URL, fix: string): WeightFileError {
  return new WeightFileError({ where, argument: 'source', expected: 'a readable file', given: JSON.stringify(String(path)), fix, problem: 'read' });
}

/** A file in Node: its size, and reads at offsets. Throws WeightFileError (problem 'read') naming the path. */
export async function nodeFileAt(path: string | URL, where: string): Promise<{ readAt: ReadAt; size: number }> {
  const fs = (await importNodeOnly('node:fs/promises')) as { open: (p: string | URL, flags: string) => Promise<NodeFileHandle> };
  const open = async () => {
    try {
      return await fs.open(path, 'r');
    } catch (e) {
      const code = (e as { code?: string }).code;
      throw readError(
        where,
        path,
        code === 'ENOENT'
          ? `There is no such file (relative paths are resolved against the current directory, ${process.cwd()}).`
          : `Opening it failed: ${(e as Error).message}.`,
      );
    }
  };
  const readAt: ReadAt = async (at, n) => {
    const handle = await open();
    try {
      const buffer = new Uint8Array(n);
      let done = 0;
      while (done < n) {
        const { bytesRead } = await handle.read(buffer, done, n - done, at + done);
        if (bytesRead === 0) break;
        done += bytesRead;
      }
      return done === n ? buffer : buffer.subarray(0, done);
    } catch (e) {
      throw readError(where, path, `Reading it failed: ${(e as Error).message}.`);
    } finally {
      await handle.close();
    }
  };
  const handle = await open();
  try {
    return { readAt, size: (await handle.stat()).size };
  } finally {
    await handle.close();
  }
}
