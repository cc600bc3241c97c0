// The demo page as the specs drive it: one page per worker (demo/index.html on the e2e dev server),
// shared by a spec's tests in order, with its log of console and page errors and the WebGPU errors
// the page lists (#gpu-errors), a wait for a panel to settle, and the WebGPU requirement.

import { test as base, expect } from '@playwright/test';
import { LoggedPage, sharedPage, WEBGPU_CHECKLIST } from './helpers.ts';

export class DemoPage extends LoggedPage {
  /** The WebGPU errors the page caught on its engine's device (uncapturederror, device lost). */
  async gpuErrors(): Promise<string[]> {
    return this.page.locator('#gpu-error-list li').allTextContents();
  }

  async expectClean(mark: number): Promise<void> {
    const problems = this.problemsSince(mark);
    expect(problems, `console errors / page errors:\n${problems.join('\n')}`).toEqual([]);
    const gpu = await this.gpuErrors();
    expect(gpu, `uncaptured WebGPU errors shown by the page:\n${gpu.join('\n')}`).toEqual([]);
  }

  /** Waits until a panel's data-state leaves 'running' (and is not 'idle'); returns it. */
  async settled(panelId: string, timeout = 60_000): Promise<string> {
    // The state as the page saw it when it settled (read in the same evaluation: a second read could
    // meet a run that a later event started).
    const state = await this.page.waitForFunction(
      (id) => {
        const s = document.getElementById(id)?.dataset.state;
        return s === 'done' || s === 'error' ? s : false;
      },
      panelId,
      { timeout },
    );
    return String(await state.jsonValue());
  }

  /**
   * Loads the page again: each spec file starts from the page as a new visitor sees it (the worker's
   * page is shared across files, and a file's tests leave its panels as they drove them).
   */
  async fresh(): Promise<void> {
    await openDemo(this);
  }

  async requireWebGPU(): Promise<void> {
    const backend = await this.page.locator('body').getAttribute('data-backend');
    if (backend !== 'webgpu') {
      const reason = await this.page
        .locator('#backend-status')
        .textContent()
        .catch(() => '(no #backend-status)');
      throw new Error(
        [
          `The demo runs on the "${backend}" backend, not WebGPU; these tests need WebGPU.`,
          `  page says: ${reason}`,
          ...WEBGPU_CHECKLIST,
          'The flag is set in playwright.config.ts.',
        ].join('\n'),
      );
    }
  }
}

/** Opens demo/index.html and waits until every panel is mounted, the first maps drawn and the first correctness run done. */
function openDemo(demo: DemoPage): Promise<void> {
  return demo.open('/demo/index.html', () => document.body.dataset.ready === 'true', 90_000, 'demo/index.html did not become ready');
}

export const test = base.extend<object, { demo: DemoPage }>({
  demo: [
    sharedPage(
      (page) => new DemoPage(page),
      // Ready: every panel mounted, the first attention maps drawn and the first correctness run done.
      openDemo,
      { viewport: { width: 1200, height: 900 }, acceptDownloads: true },
    ),
    { scope: 'worker', timeout: 120_000 },
  ],
});
