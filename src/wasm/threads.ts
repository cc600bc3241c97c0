// Threads for the 'wasm' backend: N − 1 workers, each with an instance of the shared-memory module
// per kernel instance of the engine (opened by id on the same WebAssembly.Memory), and the calling
// thread as the N-th: never more busy threads than asked for. A pass is a set of lists of kernel calls
// (rows or column panels of a GEMM, heads of the attention; a few lists a thread) that write disjoint
// parts of the memory; every thread taking part claims the next list not yet claimed (an Atomics.add
// on a shared counter) and runs it, until none is left. A thread that runs slowly (its core shared with
// another process, or a worker still waking up) thus takes fewer lists, and the pass does not wait for
// it beyond the list it is running: with threads: 2 and one CPU-bound process beside the engine, the
// passes still end sooner than on one thread. Each list is computed as one thread would compute it, so
// the results do not depend on who ran what.
// The workers (worker.ts) are Node's worker_threads, or in a browser Web Workers, where the page is
// cross-origin isolated (SharedArrayBuffer); elsewhere one thread, and resolveThreads says why
// (thread-support.ts: threadSupport) in the engine's threadsNote.
//
// How a pass reaches a worker: through shared memory. The caller writes the pass into the job area and
// offers it to every worker (OFFER = seq, and a notify); a worker waiting in memory (for LINGER_MS after
// its last pass, in Atomics.wait) takes it by compare-exchange (OFFER → −seq). One back in its event loop
// gets a 'join' message, and takes the offer when it handles it, if it is still there. When no list is
// left, the caller revokes every offer not taken (OFFER seq → 0: the same compare-exchange, so exactly one
// of take and revoke wins) and waits for the workers that took it to finish (their DONE): a worker that
// was not ready in time costs the pass nothing. The caller waits for DONE in memory (Atomics.wait where
// the thread may block, a spin on a browser's main thread) up to a bound, then by message. Messages
// (open, close, names) go first: a worker handles them in its event loop and comes back to listen.

import { AttentionError, DisposedError } from '../errors.ts';
import { AREA, AWAY, DONE, FAILED, HANDLED, OFFER, SENT, SLOT, SPIN_MS, START_TIMEOUT_MS, STATE, startWorker, type ThreadPort, WAITING } from './worker.ts';

export type { ThreadPort };

/** One call of a kernel export: its name and its arguments. */
export type KernelCall = [name: string, ...args: number[]];

/** The longest the caller waits for a worker's DONE in memory (blocking, or spinning on a browser's main thread) before it waits by message. */
const MAX_WAIT_MS = 5;

const DISPOSED = 'the engine was disposed';

export class ThreadPool {
  private seq = 0;
  private readonly pending = new Map<number, { resolve: () => void; reject: (e: Error) => void }>();
  /** Errors a worker sent before the caller asked for its answer. */
  private readonly early = new Map<number, string>();
  private busy = 0;
  /** Why the pool can run nothing more (a worker died, or the engine was disposed); null while it can. */
  private broken: string | null = null;
  /** Resolves when every worker has said it is ready; rejects if one fails first. */
  private readonly started: Promise<void>;
  /** The control block: a slot of SLOT int32s a worker (see STATE … OFFER), then the claim counter. */
  private readonly ctl: Int32Array;
  /** The index of the claim counter in ctl. */
  private readonly claim: number;
  /** The job area, shared by all workers. */
  private readonly area: Float64Array;
  /** The export names of the calls, by index (the workers hold the same list). */
  private readonly names: string[] = [];
  private readonly nameIndex = new Map<string, number>();
  /** The pass now running, if any: passes run one at a time. */
  private tail: Promise<void> = Promise.resolve();
  /**
   * How passes went, counted per worker offer: taken by a worker waiting in memory, taken after a 'join'
   * message, revoked (no list left when the worker came), and answered by message (the caller stopped
   * waiting for DONE in memory); `lists` counts the lists the workers ran. Diagnostics and tests.
   */
  readonly handoffs = { taken: 0, joined: 0, revoked: 0, answeredByMessage: 0, lists: 0 };
  /** The kernel exports the workers have run (diagnostics, tests). */
  readonly workerKernels = new Set<string>();

  private constructor(private readonly workers: ThreadPort[]) {
    let ready = 0;
    let failed: (why: string) => void = () => {};
    this.claim = SLOT * workers.length;
    this.ctl = new Int32Array(new SharedArrayBuffer(4 * (SLOT * workers.length + SLOT)));
    this.area = new Float64Array(new SharedArrayBuffer(8 * AREA));
    this.started = new Promise<void>((resolve, reject) => {
      failed = (why) => reject(new Error(why));
      if (workers.length === 0) resolve();
      for (const w of workers) {
        w.listen(
          (m) => {
            if ('ready' in m) {
              if (++ready === workers.length) resolve();
            } else this.settle(m.seq, m.error);
          },
          (why) => {
            failed(why);
            this.break(why);
          },
        );
      }
    });
    this.started.catch(() => {}); // create() reports it
    for (let t = 0; t < workers.length; t++) this.send(t, { type: 'control', control: this.ctl.buffer, area: this.area.buffer, slot: t, claim: this.claim });
  }

  /** A pool of `threads` threads in all (threads − 1 workers), once every worker has started. */
  static async create(threads: number, start: () => ThreadPort | Promise<ThreadPort> = startWorker): Promise<ThreadPool> {
    const workers: ThreadPort[] = [];
    try {
      for (let i = 1; i < threads; i++) workers.push(await start());
    } catch (e) {
      for (const w of workers) w.terminate();
      throw e;
    }
    const pool = new ThreadPool(workers);
    for (const w of workers) w.hold(true); // until they are ready (Node: the process waits for them)
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`they did not start within ${START_TIMEOUT_MS / 1000} s`)), START_TIMEOUT_MS);
    });
    try {
      await Promise.race([pool.started, timeout]);
    } catch (e) {
      pool.dispose();
      throw e;
    } finally {
      clearTimeout(timer);
      for (const w of workers) w.hold(false); // idle workers do not keep the process alive
    }
    return pool;
  }

  /** Threads in all, the caller's included. */
  get size(): number {
    return this.workers.length + 1;
  }

  /** Instantiates `module` on `memory` in every worker, as kernel instance `id`. */
  open(id: number, module: WebAssembly.Module, memory: WebAssembly.Memory): void {
    for (let t = 0; t < this.workers.length; t++) this.send(t, { type: 'open', id, module, memory });
  }

  close(id: number): void {
    for (let t = 0; t < this.workers.length; t++) this.send(t, { type: 'close', id });
  }

  /**
   * Runs every list (kernel instance `id`), each on one thread, `local` running those the caller
   * claims; resolves when all are done. Passes run one after another.
   */
  run(id: number, lists: KernelCall[][], local: (calls: KernelCall[]) => void): Promise<void> {
    const pass = this.tail.then(() => this.runNow(id, lists, local));
    this.tail = pass.catch(() => {});
    return pass;
  }

  private async runNow(id: number, lists: KernelCall[][], local: (calls: KernelCall[]) => void): Promise<void> {
    if (this.broken) throw this.failure(this.broken);
    const todo = lists.filter((calls) => calls.length > 0);
    if (todo.length <= 1 || this.workers.length === 0) {
      for (const calls of todo) local(calls);
      return;
    }
    this.register(todo);
    // Lists that do not fit in the area go in passes of those that do.
    let from = 0;
    while (from < todo.length) {
      const to = this.write(id, todo, from);
      if (to === from) {
        local(todo[from++]); // one list longer than the area: the caller runs it
        continue;
      }
      await this.pass(to - from, todo.slice(from, to), local);
      from = to;
    }
  }

  /** Offers the pass in the area (`n` lists) to every worker, claims lists with them, then settles each offer. */
  private async pass(n: number, lists: KernelCall[][], local: (calls: KernelCall[]) => void): Promise<void> {
    const ctl = this.ctl;
    this.seq = (this.seq % 0x3fffffff) + 1; // > 0: an offer
    const seq = this.seq;
    this.area[1] = seq;
    Atomics.store(ctl, this.claim, 0);
    for (let w = 0; w < this.workers.length; w++) {
      const i = w * SLOT;
      Atomics.store(ctl, i + WAITING, 0);
      Atomics.store(ctl, i + OFFER, seq);
      Atomics.notify(ctl, i + OFFER);
      if (Atomics.load(ctl, i + STATE) === AWAY) this.send(w, { type: 'join' }, false); // taken, if still there, when it handles this
    }
    let error: unknown = null;
    const mine = new Uint8Array(n);
    try {
      for (let i = Atomics.add(ctl, this.claim, 1); i < n; i = Atomics.add(ctl, this.claim, 1)) {
        mine[i] = 1;
        local(lists[i]);
      }
    } catch (e) {
      error = e; // the pass's error; the workers may still be writing: wait for them first
    }
    // Every list was claimed before the loop above ended: those the caller did not run, the workers did.
    for (let i = 0; i < n; i++) {
      if (mine[i]) continue;
      this.handoffs.lists++;
      for (const [name] of lists[i]) this.workerKernels.add(name);
    }
    const answers: Promise<void>[] = [];
    for (let w = 0; w < this.workers.length; w++) {
      const answer = this.settleWorker(w, seq);
      if (answer) answers.push(answer);
    }
    if (error) {
      for (const a of answers) a.catch(() => {});
      throw error;
    }
    await Promise.all(answers);
  }

  /** Worker w's part of pass seq: its offer revoked if not taken, else its DONE awaited (in memory up to a bound, then by message). */
  private settleWorker(w: number, seq: number): Promise<void> | null {
    const ctl = this.ctl;
    const i = w * SLOT;
    if (Atomics.compareExchange(ctl, i + OFFER, seq, 0) === seq) {
      this.handoffs.revoked++;
      return null;
    }
    this.handoffs.taken++;
    const t1 = performance.now();
    const until = t1 + MAX_WAIT_MS;
    for (let now = t1; Atomics.load(ctl, i + DONE) !== seq && now < until; now = performance.now()) {
      if (canBlock() && now > t1 + SPIN_MS) Atomics.wait(ctl, i + DONE, Atomics.load(ctl, i + DONE), until - now);
    }
    const done = Atomics.load(ctl, i + DONE) === seq;
    if (done && Atomics.load(ctl, i + FAILED) !== seq) return null;
    if (done) return this.answer(seq); // failed: its error comes by message
    // Still running: wait by message. The worker reads WAITING after storing DONE, and this reads DONE
    // after storing WAITING: one of them sees the other.
    const answer = this.answer(seq);
    this.handoffs.answeredByMessage++;
    Atomics.store(ctl, i + WAITING, 1);
    if (Atomics.load(ctl, i + DONE) === seq && Atomics.load(ctl, i + FAILED) !== seq) this.settle(seq);
    return answer;
  }

  /** Whether worker w waits in memory with every message handled: it would take the next pass at once (diagnostics, tests). */
  waitingInMemory(w: number): boolean {
    const i = w * SLOT;
    return Atomics.load(this.ctl, i + STATE) !== AWAY && Atomics.load(this.ctl, i + SENT) === Atomics.load(this.ctl, i + HANDLED);
  }

  /** Gives every export name the lists call an index, telling the workers of new ones (before the pass that needs them). */
  private register(lists: KernelCall[][]): void {
    let added = false;
    for (const calls of lists) {
      for (const [name] of calls) {
        if (this.nameIndex.has(name)) continue;
        this.nameIndex.set(name, this.names.push(name) - 1);
        added = true;
      }
    }
    if (added) for (let t = 0; t < this.workers.length; t++) this.send(t, { type: 'names', names: this.names });
  }

  /** Writes lists from, from + 1, … into the area, as many as fit; returns the index after the last written. */
  private write(id: number, lists: KernelCall[][], from: number): number {
    const area = this.area;
    let n = 0;
    let size = 3;
    for (let i = from; i < lists.length; i++) {
      let list = 2; // its start and its count
      for (const call of lists[i]) list += 1 + call.length;
      if (size + list > AREA) break;
      size += list;
      n++;
    }
    area[0] = id;
    area[2] = n;
    let at = 3 + n;
    for (let i = 0; i < n; i++) {
      area[3 + i] = at;
      const calls = lists[from + i];
      area[at++] = calls.length;
      for (const [name, ...args] of calls) {
        area[at] = this.nameIndex.get(name)!;
        area[at + 1] = args.length;
        area.set(args, at + 2);
        at += 2 + args.length;
      }
    }
    return from + n;
  }

  /** Posts a message to worker w, counted in SENT, and wakes it if it waits in memory (it then handles the message). */
  private send(w: number, message: { type: string; [key: string]: unknown }, wake = true): void {
    const i = w * SLOT;
    Atomics.add(this.ctl, i + SENT, 1);
    if (message.type === 'join') this.handoffs.joined++;
    this.workers[w].post(message);
    if (wake) Atomics.notify(this.ctl, i + OFFER);
  }

  /** Resolves when pass `seq` is answered by message (rejects if it failed or the pool broke). */
  private answer(seq: number): Promise<void> {
    if (this.busy++ === 0) for (const w of this.workers) w.hold(true); // keep the process alive while a pass runs
    const p = new Promise<void>((resolve, reject) => this.pending.set(seq, { resolve, reject }));
    if (this.broken) this.settle(seq, this.broken);
    else if (this.early.has(seq)) {
      const error = this.early.get(seq);
      this.early.delete(seq);
      this.settle(seq, error);
    }
    return p;
  }

  dispose(): void {
    this.break(DISPOSED);
    for (const w of this.workers) w.terminate();
  }

  /** Fails the passes in flight and every later one. */
  private break(why: string): void {
    this.broken ??= why;
    for (const seq of [...this.pending.keys()]) this.settle(seq, why);
  }

  private settle(seq: number, error?: string): void {
    const p = this.pending.get(seq);
    if (!p) {
      if (error) this.early.set(seq, error); // before answer(seq): kept for it
      return;
    }
    this.pending.delete(seq);
    if (--this.busy === 0) for (const w of this.workers) w.hold(false);
    if (error) p.reject(this.failure(error));
    else p.resolve();
  }

  private failure(why: string): AttentionError {
    return why === DISPOSED
      ? new DisposedError("AttentionEngine (backend 'wasm'): this engine", 'Create a new one with createAttentionEngine().')
      : new AttentionError(`'wasm' backend threads: ${why}. Create a new engine (threads: 1 runs without workers).`);
  }
}

/** Whether this thread may block in Atomics.wait (not a browser's main thread). */
let blocking: boolean | undefined;
function canBlock(): boolean {
  if (blocking === undefined) {
    try {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 1, 0); // "not-equal" at once where it may block; throws where it may not
      blocking = true;
    } catch {
      blocking = false;
    }
  }
  return blocking;
}
