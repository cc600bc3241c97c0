// Which compute pipelines a piece of work dispatched, by label: a kernel's own test proves that the call
// it makes through the public API really ran that kernel (a decode step over many keys runs the split-KV
// merge, a long linear-attention call the prefix sums, a GPU buffer of an odd size the row copy), so the
// test cannot pass on a path that skipped it.
//
// It records every setPipeline on any compute pass of any device while `work` runs (the pass
// encoder's prototype, found from a throwaway pass), so nothing in src/ needs a hook. Tests in a file
// run one at a time, so what it records is the work's own.

let passPrototype: { setPipeline(pipeline: GPUComputePipeline): void } | null = null;

function prototypeOf(device: GPUDevice): { setPipeline(pipeline: GPUComputePipeline): void } {
  if (passPrototype) return passPrototype;
  const encoder = device.createCommandEncoder({ label: 'dispatches.probe' });
  const pass = encoder.beginComputePass({ label: 'dispatches.probe' });
  passPrototype = Object.getPrototypeOf(pass) as { setPipeline(pipeline: GPUComputePipeline): void };
  pass.end();
  encoder.finish(); // never submitted
  return passPrototype;
}

/** Runs `work` and returns its result with the labels of the pipelines it dispatched, in order (repeats kept). */
export async function recordPipelines<T>(device: GPUDevice, work: () => Promise<T>): Promise<{ result: T; pipelines: string[] }> {
  const proto = prototypeOf(device);
  const original = proto.setPipeline;
  const pipelines: string[] = [];
  proto.setPipeline = function (this: GPUComputePassEncoder, pipeline: GPUComputePipeline) {
    pipelines.push(pipeline.label);
    return original.call(this, pipeline);
  };
  try {
    return { result: await work(), pipelines };
  } finally {
    proto.setPipeline = original;
  }
}
