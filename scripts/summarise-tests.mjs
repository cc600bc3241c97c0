#!/usr/bin/env node
// Prints one closing line for the whole run, "N passed, N failed", from the JSON reports of vitest
// and Playwright. Exits non-zero when a report is missing, a test failed, or no test ran at all.
import { existsSync, readFileSync } from 'node:fs';

const [vitestFile, playwrightFile] = process.argv.slice(2);
let passed = 0;
let failed = 0;
const problems = [];

if (existsSync(vitestFile)) {
  const r = JSON.parse(readFileSync(vitestFile, 'utf8'));
  passed += r.numPassedTests;
  failed += r.numFailedTests + (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0);
  console.log(`vitest:     ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${r.numPendingTests ?? 0} skipped`);
} else problems.push(`no vitest report at ${vitestFile}`);

if (existsSync(playwrightFile)) {
  const s = JSON.parse(readFileSync(playwrightFile, 'utf8')).stats;
  passed += s.expected;
  failed += s.unexpected + s.flaky + s.skipped;
  console.log(`playwright: ${s.expected} passed, ${s.unexpected} failed, ${s.flaky} flaky, ${s.skipped} skipped`);
} else problems.push(`no Playwright report at ${playwrightFile}`);

for (const p of problems) console.log(p);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 || passed === 0 || problems.length > 0 ? 1 : 0);
