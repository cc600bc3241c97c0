#!/usr/bin/env node
// Prints where the time went (the slowest test files and tests of each report, with their share of
// the run) and one closing line for the whole run, "N passed, N failed", from the JSON reports of
// vitest and Playwright. Exits non-zero when a report is missing, a test failed, or no test ran at all.
// `--top N` sets how many files and tests are listed (default 8; 0: none). Each failed test is named
// last, with the first lines of its error, so that a log's tail says what failed.
import { existsSync, readFileSync } from 'node:fs';
import { relative } from 'node:path';

const args = process.argv.slice(2);
const topAt = args.indexOf('--top');
const top = topAt >= 0 ? Number(args.splice(topAt, 2)[1]) : 8;
const [vitestFile, playwrightFile] = args;
let passed = 0;
let failed = 0;
const problems = [];
/** [name, error's first lines] of each failed test, printed last. */
const failures = [];
const firstLines = (text, n = 6) =>
  String(text ?? '')
    .replace(new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, 'g'), '') // colour codes
    .split('\n')
    .filter((l) => l.trim() !== '' && !/node_modules|node:internal|new Promise/.test(l))
    .slice(0, n)
    .join('\n      ');

const seconds = (ms) => `${(ms / 1000).toFixed(1)} s`;

/** Lists the `top` largest of `rows` ([name, ms]) with their share of `total` ms. */
function slowest(title, rows, total) {
  if (top <= 0 || rows.length === 0) return;
  console.log(`  ${title} (of ${seconds(total)}):`);
  for (const [name, ms] of rows.sort((a, b) => b[1] - a[1]).slice(0, top)) {
    console.log(`    ${seconds(ms).padStart(8)} ${((100 * ms) / Math.max(total, 1)).toFixed(0).padStart(3)}%  ${name}`);
  }
}

if (existsSync(vitestFile)) {
  const r = JSON.parse(readFileSync(vitestFile, 'utf8'));
  passed += r.numPassedTests;
  failed += r.numFailedTests + (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0);
  console.log(`vitest:     ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${r.numPendingTests ?? 0} skipped`);
  const files = r.testResults.map((f) => [relative(process.cwd(), f.name), f.endTime - f.startTime]);
  const tests = r.testResults.flatMap((f) => f.assertionResults.map((t) => [`${relative(process.cwd(), f.name)} > ${t.fullName}`, t.duration ?? 0]));
  for (const f of r.testResults) {
    const name = relative(process.cwd(), f.name);
    for (const t of f.assertionResults) if (t.status === 'failed') failures.push([`vitest ${name} > ${t.fullName}`, firstLines(t.failureMessages?.[0])]);
    // A file that failed outside its tests (an import, a hook) has no failed test to name it.
    if (f.status === 'failed' && !f.assertionResults.some((t) => t.status === 'failed')) failures.push([`vitest ${name}`, firstLines(f.message)]);
  }
  const total = files.reduce((a, [, ms]) => a + ms, 0);
  slowest('slowest files', files, total);
  slowest('slowest tests', tests, total);
} else problems.push(`no vitest report at ${vitestFile}`);

if (existsSync(playwrightFile)) {
  const report = JSON.parse(readFileSync(playwrightFile, 'utf8'));
  const s = report.stats;
  passed += s.expected;
  failed += s.unexpected + s.flaky + s.skipped;
  console.log(`playwright: ${s.expected} passed, ${s.unexpected} failed, ${s.flaky} flaky, ${s.skipped} skipped`);
  const tests = [];
  const walk = (suite, file) => {
    for (const spec of suite.specs ?? []) {
      for (const t of spec.tests) {
        tests.push([`${spec.file ?? file} > ${spec.title}`, t.results.reduce((a, x) => a + (x.duration ?? 0), 0)]);
        if (t.status === 'unexpected' || t.status === 'flaky') {
          const error = t.results.find((x) => x.status !== 'passed' && x.status !== 'skipped');
          failures.push([`playwright ${spec.file ?? file} > ${spec.title} (${t.status})`, firstLines(error?.error?.message ?? error?.errors?.[0]?.message)]);
        }
      }
    }
    for (const child of suite.suites ?? []) walk(child, suite.file ?? file);
  };
  for (const suite of report.suites ?? []) walk(suite, suite.file);
  const byFile = new Map();
  for (const [name, ms] of tests) byFile.set(name.split(' > ')[0], (byFile.get(name.split(' > ')[0]) ?? 0) + ms);
  slowest('slowest spec files', [...byFile], s.duration ?? 0);
  slowest('slowest tests', tests, s.duration ?? 0);
} else problems.push(`no Playwright report at ${playwrightFile}`);

for (const [name, error] of failures) console.log(`FAILED ${name}\n      ${error}`);
for (const p of problems) console.log(p);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 || passed === 0 || problems.length > 0 ? 1 : 0);
