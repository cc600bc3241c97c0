// Arguments of the measuring scripts (scripts/*.ts run with node scripts/run-ts.mjs): node:util's
// parseArgs with --help / -h, whose text is the script's own header comment (what it measures and its
// usage line), and a bad argument reported as one line with exit code 2 instead of a stack trace.

import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ParseArgsConfig, parseArgs } from 'node:util';

type Options = NonNullable<ParseArgsConfig['options']>;

/** The leading `//` comment of the file at `url`, without the slashes. */
export function headerComment(url: string): string {
  const lines: string[] = [];
  for (const line of readFileSync(fileURLToPath(url), 'utf8').split('\n')) {
    if (!line.startsWith('//')) break;
    lines.push(line.replace(/^\/\/ ?/, ''));
  }
  return lines.join('\n');
}

/**
 * `parseArgs({ options })` for the script at `url` (its import.meta.url): with --help or -h, prints its
 * header comment and exits 0; an unknown or malformed argument prints what is wrong and exits 2.
 */
export function parseCli<const O extends Options>(url: string, options: O): ReturnType<typeof parseArgs<{ options: O; strict: true }>> {
  const all = parseArgsOrExit(basename(fileURLToPath(url)), { options: { ...options, help: { type: 'boolean', short: 'h', default: false } }, strict: true });
  if ((all.values as { help?: boolean }).help === true) {
    console.log(headerComment(url));
    process.exit(0);
  }
  delete (all.values as { help?: boolean }).help;
  return all as never;
}

/** parseArgs(config), an unknown or malformed argument printed as one line (`name: what is wrong`) with exit status 2. */
export function parseArgsOrExit<const C extends ParseArgsConfig>(name: string, config: C): ReturnType<typeof parseArgs<C>> {
  try {
    return parseArgs(config);
  } catch (e) {
    console.error(`${name}: ${(e as Error).message} (--help lists the arguments)`);
    process.exit(2);
  }
}
