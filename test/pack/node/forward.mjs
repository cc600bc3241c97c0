// A throwaway Node consumer of the packed tarball (scripts/pack-test.mjs copies it to a temp dir next
// to case.mjs and installs the tarball there, then `webgpu`, as the README's Install tells a Node
// user). WebGPU comes from that package (Dawn), which the engine imports on its own. Prints one JSON
// line; exits 1 on failure.
import * as lib from 'webgpu-attention';
import { runPackCase } from '../case.mjs';

process.env.XDG_RUNTIME_DIR ??= '/tmp'; // quiets Dawn's "XDG_RUNTIME_DIR is invalid or not set"

const result = await runPackCase(lib);

// Only the package root is exported: internal modules stay private.
try {
  await import('webgpu-attention/dist/engine.js');
  result.problems.push("'webgpu-attention/dist/engine.js' could be imported: exports should expose only the package root");
} catch (e) {
  if (e?.code !== 'ERR_PACKAGE_PATH_NOT_EXPORTED') {
    result.problems.push(`importing 'webgpu-attention/dist/engine.js' failed with ${e?.code ?? e}, not ERR_PACKAGE_PATH_NOT_EXPORTED`);
  }
}
result.ok = result.problems.length === 0;

console.log(`PACK_TEST_RESULT ${JSON.stringify(result)}`);
process.exit(result.ok ? 0 : 1);
