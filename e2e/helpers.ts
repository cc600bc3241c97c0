// What the browser specs share: one page per worker whose console messages, page errors and crashes
// are all logged (and must stay clean), a ready-wait that reports that log when the page does not
// load, what to check when the browser has no WebGPU, and the [B, S, E] output comparison.

import { type Browser, type BrowserContextOptions, type Page, type TestInfo, type WorkerInfo, expect } from '@playwright/test';
import { checkOutput, type OutputShape } from './output-check.ts';

export interface PageEvent {
  kind: 'console' | 'pageerror' | 'crash';
  type: string;
  text: string;
}

/** A page with a log of every console message, page error and crash it had, in order. */
export class LoggedPage {
  readonly events: PageEvent[] = [];

  constructor(readonly page: Page) {
    page.on('console', (m) => this.events.push({ kind: 'console', type: m.type(), text: m.text() }));
    page.on('pageerror', (e) => this.events.push({ kind: 'pageerror', type: 'error', text: e.stack ?? e.message }));
    page.on('crash', () => this.events.push({ kind: 'crash', type: 'error', text: 'the page crashed' }));
  }

  /** A position in the event log; see problemsSince. */
  mark(): number {
    return this.events.length;
  }

  /** Console errors, uncaught page errors and crashes since `mark`. */
  problemsSince(mark: number): string[] {
    return this.events
      .slice(mark)
      .filter((e) => e.kind !== 'console' || e.type === 'error')
      .map((e) => `${e.kind}${e.kind === 'console' ? `.${e.type}` : ''}: ${e.text}`);
  }

  /** The whole log, an indented line per event ('  (none)' when empty), for load-failure messages. */
  eventLines(): string {
    return this.events.map((ev) => `  ${ev.kind} ${ev.type}: ${ev.text}`).join('\n') || '  (none)';
  }

  /**
   * Opens `url` and waits until `ready()` holds in the page; if it does not within `timeout` ms, fails
   * with `what`, the page's events so far and the wait's error.
   */
  async open(url: string, ready: () => boolean, timeout: number, what: string): Promise<void> {
    await this.page.goto(url);
    try {
      await this.page.waitForFunction(ready, undefined, { timeout });
    } catch (e) {
      throw new Error(`${what}. Page events:\n${this.eventLines()}\n${(e as Error).message}`);
    }
  }
}

/**
 * A worker fixture: one page in a fresh context (the project's baseURL, plus `contextOptions`),
 * wrapped by `make`, opened by `open`, shared by the worker's tests and closed after them.
 */
export function sharedPage<T extends LoggedPage>(
  make: (page: Page, browser: Browser, workerInfo: WorkerInfo) => T,
  open: (logged: T) => Promise<void>,
  contextOptions: BrowserContextOptions = {},
) {
  return async ({ browser }: { browser: Browser }, use: (logged: T) => Promise<void>, workerInfo: WorkerInfo): Promise<void> => {
    const context = await browser.newContext({ baseURL: workerInfo.project.use.baseURL, ...contextOptions });
    const logged = make(await context.newPage(), browser, workerInfo);
    await open(logged);
    await use(logged);
    await context.close();
  };
}

/** Fails listing the console errors, page errors and crashes since `mark`, if there are any. */
export function expectNoPageProblems(logged: LoggedPage, mark: number): void {
  const problems = logged.problemsSince(mark);
  expect(problems, `console errors / page errors during this test:\n${problems.join('\n')}`).toEqual([]);
}

/** What to check when the browser gives no WebGPU adapter (one line an item). */
export const WEBGPU_CHECKLIST = [
  `What to check: Chromium at CHROMIUM_PATH (default /usr/bin/chromium; Debian: apt-get install chromium);`,
  `the --enable-unsafe-webgpu flag (without it Linux Chromium's requestAdapter() resolves null: "No available adapters.");`,
  `on a GPU-less machine the adapter is SwiftShader, which ships inside Debian's chromium package.`,
];

/**
 * Compares the output [B, S, E] of case `c` (printed in the message) with its reference under
 * f32Tolerance([E, S, E]) (e2e/output-check.ts) and annotates the test with the largest errors, pass
 * or fail; on failure lists the first mismatches by (b, s, e), the values named `names` (actual,
 * reference). Returns the comparison.
 */
export function expectOutputClose(
  actual: ArrayLike<number>,
  reference: ArrayLike<number>,
  c: OutputShape,
  names: [actual: string, reference: string],
  testInfo: Pick<TestInfo, 'annotations'>,
) {
  const check = checkOutput(actual, reference, c, names);
  testInfo.annotations.push({ type: 'max error', description: check.summary });
  expect(check.ok, check.failure).toBe(true);
  return check;
}
