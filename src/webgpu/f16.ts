// float32 ⇄ float16 lives in util/f16.ts (one implementation for the whole package); re-exported here for the GPU modules' imports.
export { fromF16, toF16 } from '../util/f16.ts';
