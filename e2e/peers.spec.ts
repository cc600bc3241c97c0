// The benchmark's peer systems in a real browser: the naive per-head WebGPU loop, TensorFlow.js
// (WebGPU backend) and ONNX Runtime Web (WebGPU EP), and on the CPU this engine's 'wasm' backend,
// ONNX Runtime Web's WASM EP and TensorFlow.js's WASM backend (1 thread each; TF.js's two backends
// take turns on one page), each against the float64 CPU reference, the same gate the benchmark
// applies before it times anything. A system that cannot load or prepare fails its tests with its
// error; nothing here ever skips.
//
// All tests share one page (e2e/peers.html), like e2e/correctness.spec.ts: each library loads once
// and keeps its device, as it would in the demo.

import { type TestInfo, test as base, expect } from '@playwright/test';
import { expectNoPageProblems, expectOutputClose, LoggedPage, sharedPage } from './helpers.ts';
import type { PeerCase, PeerId, PeerResult } from './peers.ts';

class PeersPage extends LoggedPage {
  /** What window.preloadPeers() said on the final attempt: null per module that loaded, else its error. */
  preload: Record<string, string | null> = {};
  /** Page loads it took (Vite may re-optimize dependencies and invalidate the first one). */
  attempts = 0;
  /** The event log's length when the page that the tests use had loaded. */
  readyMark = 0;

  runPeer(c: PeerCase): Promise<PeerResult> {
    return this.page.evaluate((p) => window.runPeer(p), c);
  }
}

/**
 * Opens the page and imports every system and library once. Vite's dev server pre-bundles bare
 * imports (TensorFlow.js, ONNX Runtime Web, protobufjs); one it meets for the first time at run time
 * makes it re-optimize, which reloads the page or fails that import with "Outdated Optimize Dep".
 * A fresh page load after that gets the new bundles, so a failed preload is retried twice; what
 * still fails then is a real load failure, reported by the tests below.
 */
async function openPeersPage(peers: PeersPage): Promise<void> {
  const { page } = peers;
  let lastError = '';
  for (peers.attempts = 1; peers.attempts <= 3; peers.attempts++) {
    try {
      await page.goto('/e2e/peers.html');
      await page.waitForFunction(() => window.peersReady === true, undefined, { timeout: 30_000 });
      peers.readyMark = peers.mark();
      peers.preload = await page.evaluate(() => window.preloadPeers());
      lastError = '';
      if (Object.values(peers.preload).every((e) => e === null)) return;
    } catch (e) {
      // "Execution context was destroyed": the page reloaded itself mid-preload.
      lastError = (e as Error).message;
    }
    await page.waitForTimeout(1_000);
  }
  if (lastError) {
    throw new Error(`e2e/peers.html did not load after 3 attempts. Last error: ${lastError}\nPage events:\n${peers.eventLines()}`);
  }
}

const test = base.extend<object, { peers: PeersPage }>({
  peers: [
    sharedPage((page) => new PeersPage(page), openPeersPage),
    // Three page loads at most, each importing TF.js and ORT (whose 26 MB .wasm compiles on first use).
    { scope: 'worker', timeout: 180_000 },
  ],
});

/**
 * The comparison. Every system is held to the engine's own rule, f32Tolerance([E, S, E]):
 * 16·√(E + S + E)·2⁻²³ absolute and relative, for the three chained float32 reductions of a layer
 * (QKV over E, scores and P·V over S, output projection over E) against the float64 reference.
 * They all compute the same sums in float32 in some order (TF.js and ORT tile and vectorise theirs,
 * the naive kernels run plain loops), so no peer gets a looser bound: an error above it is a bug.
 */
function expectMatchesReference(r: PeerResult, c: PeerCase, testInfo: Pick<TestInfo, 'annotations'>) {
  expect(r.thrown, `${c.system} threw during ${r.stage}: ${r.thrown}`).toBeNull();
  const n = c.batchSize * c.seqLen * c.embedDim;
  expect(r.reference.length, 'reference output length').toBe(n);
  expect(r.output?.length, `${c.system} output length (B·S·E)`).toBe(n);
  return expectOutputClose(r.output!, r.reference, c, [c.system, 'reference'], testInfo);
}

// ---------------------------------------------------------------------------------------------------
// (a) Every system module and library loads.

test('every peer module and library loads (TF.js, ONNX Runtime Web, protobufjs, the systems)', async ({ peers }, testInfo) => {
  testInfo.annotations.push({ type: 'page loads', description: String(peers.attempts) });
  const failed = Object.entries(peers.preload).filter(([, e]) => e !== null);
  expect(
    failed.map(([name, e]) => `${name}: ${e}`),
    'modules that failed to import',
  ).toEqual([]);
});

// ---------------------------------------------------------------------------------------------------
// (b) Each peer against the CPU reference.

const PEERS: PeerId[] = ['naive', 'tfjs', 'ort', 'wasm', 'ort-wasm', 'tfjs-wasm'];
// Dh = 8 with a sequence shorter than any tile; Dh = 16 with S one past 32 and B = 2 (batch offsets);
// Dh = 8 with a single row (S = 1: causal and full agree) and B = 3.
const SHAPES = [
  { batchSize: 1, seqLen: 7, embedDim: 16, numHeads: 2 },
  { batchSize: 2, seqLen: 33, embedDim: 64, numHeads: 4 },
  { batchSize: 3, seqLen: 1, embedDim: 32, numHeads: 4 },
];
// 'ort' picks its ONNX graph per adapter (demo/bench/systems/ort.ts); each graph is also run forced,
// so both model builders are checked on any adapter. ORT 1.30's fused Attention is wrong from S = 32
// on when subgroups have fewer than 8 lanes (SwiftShader: 4), so on such an adapter the forced
// 'attention' graph runs the shapes below 32 only.
const NARROW_SUBGROUP_SAFE = SHAPES.filter((s) => s.seqLen < 32);
const GRID: { system: PeerId; shapes: typeof SHAPES }[] = [
  ...PEERS.map((system) => ({ system, shapes: SHAPES })),
  { system: 'ort-standard', shapes: SHAPES },
  { system: 'ort-attention', shapes: NARROW_SUBGROUP_SAFE },
];

let seed = 4000;
for (const { system, shapes } of GRID) {
  test.describe(system, () => {
    for (const shape of shapes) {
      for (const isCausal of [false, true]) {
        const c: PeerCase = { system, ...shape, isCausal, seed: seed++ };
        test(`B=${shape.batchSize} S=${shape.seqLen} E=${shape.embedDim} H=${shape.numHeads} ${isCausal ? 'causal' : 'full'}`, async ({ peers }, testInfo) => {
          const mark = peers.mark();
          const r = await peers.runPeer(c);
          if (r.label) testInfo.annotations.push({ type: 'system', description: r.label });
          testInfo.annotations.push({ type: 'times', description: `prepare ${r.prepareMs.toFixed(0)} ms, run ${r.runsMs.map((t) => t.toFixed(0)).join(', ')} ms` });
          expectMatchesReference(r, c, testInfo);
          expectNoPageProblems(peers, mark);
        });
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------------
// (c) A mid-sized layer, correct and timed: the first run (shader compilation included) and two more.

test.describe('B=1 S=128 E=256 H=4 full, timed', () => {
  for (const system of [...PEERS, 'engine'] as PeerId[]) {
    test(system, async ({ peers }, testInfo) => {
      test.setTimeout(180_000);
      const mark = peers.mark();
      const c: PeerCase = { system, batchSize: 1, seqLen: 128, embedDim: 256, numHeads: 4, isCausal: false, seed: 77, runs: 3 };
      const r = await peers.runPeer(c);
      const times = `prepare ${r.prepareMs.toFixed(0)} ms; runs ${r.runsMs.map((t) => t.toFixed(0)).join(', ')} ms`;
      testInfo.annotations.push({ type: 'system', description: r.label ?? system });
      testInfo.annotations.push({ type: 'times', description: times });
      const cmp = expectMatchesReference(r, c, testInfo);
      console.log(`[peers timing] ${r.label ?? system}: ${times}; max |err| ${cmp.maxAbs.toExponential(2)}`);
      expectNoPageProblems(peers, mark);
    });
  }
});

test('no console errors or page errors over the run', async ({ peers }) => {
  expectNoPageProblems(peers, peers.readyMark);
});
