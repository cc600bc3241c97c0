// JSON fixtures written by the scripts in scripts/ (PyTorch outputs and the like), read at collection
// time so that each fixture gets tests of its own. A folder that cannot be read, or a file that does
// not parse, does not abort collection: the error is kept for a test to report (expectFixturesPresent),
// with the command that regenerates the files.

import { readdirSync, readFileSync } from 'node:fs';
import { expect } from 'vitest';

/** A fixture file's contents, with its file name less `.json` as `name`. */
export type Named<T> = { name: string } & T;

export interface FixtureSet<T extends object> {
  /** The folder the files are read from. */
  readonly dir: URL;
  /** The fixtures, sorted by name; empty when `error` is set. */
  readonly fixtures: Named<T>[];
  /** Why the fixtures could not be read, naming the folder or file and how to regenerate them. */
  readonly error: Error | null;
  /** How to regenerate the files, e.g. 'Regenerate them with `…`.' */
  readonly regenerate: string;
}

/**
 * Reads `names` (file names less `.json`) from `dir`, or every `*.json` in it when `names` is left
 * out, and parses them. Never throws: a failure is kept in the set's `error`.
 */
export function loadJsonFixtures<T extends object>(dir: URL, regenerate: string, names?: readonly string[]): FixtureSet<T> {
  const set = (fixtures: Named<T>[], error: Error | null): FixtureSet<T> => ({ dir, fixtures, error, regenerate });
  let files: string[];
  if (names) {
    files = names.map((n) => `${n}.json`);
  } else {
    try {
      files = readdirSync(dir)
        .filter((f) => f.endsWith('.json'))
        .sort();
    } catch (e) {
      return set([], new Error(`cannot read ${dir.pathname}: ${(e as Error).message}. ${regenerate}`));
    }
  }
  const fixtures: Named<T>[] = [];
  for (const file of files) {
    const url = new URL(file, dir);
    let text: string;
    try {
      text = readFileSync(url, 'utf8');
    } catch (e) {
      return set([], new Error(`cannot read ${url.pathname}: ${(e as Error).message}. ${regenerate}`));
    }
    let parsed: T;
    try {
      parsed = JSON.parse(text) as T;
    } catch (e) {
      return set([], new Error(`cannot parse ${url.pathname}: ${(e as Error).message}. ${regenerate}`));
    }
    fixtures.push({ name: file.replace(/\.json$/, ''), ...parsed });
  }
  return set(fixtures, null);
}

/** Fails with the set's load error, or when the folder holds no fixture. */
export function expectFixturesPresent(set: FixtureSet<object>): void {
  if (set.error) throw set.error;
  expect(set.fixtures.length, `no *.json in ${set.dir.pathname}. ${set.regenerate}`).toBeGreaterThan(0);
}
