// The headers that make a page cross-origin isolated (crossOriginIsolated true, SharedArrayBuffer
// defined), for every Vite server and preview of the project's pages (vite.config.ts, the e2e server;
// vite.demo.config.ts, `npm start`): the 'wasm' backend then runs threads in the page (Web Workers on
// a shared WebAssembly memory), and so does ONNX Runtime Web's WASM peer. With require-corp every
// cross-origin subresource would need a Cross-Origin-Resource-Policy; the pages load only their own.
export const CROSS_ORIGIN_ISOLATED = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};
