// Tick labels of the scaling panel's log-log charts: which values get a label, and how close labels may sit.

/** Log-axis labels: 1, 2 and 5 times a power of ten when the axis spans decades, every tick when it spans less. */
export function logTick(value: number | string, _index: number, ticks: { value: number }[]): string {
  const v = Number(value);
  const span = ticks.length > 1 ? ticks[ticks.length - 1].value / ticks[0].value : 1;
  const m = v / 10 ** Math.floor(Math.log10(v) + 1e-9);
  const nice = span < 20 ? Math.abs(m - Math.round(m)) < 1e-6 : [1, 2, 5].some((k) => Math.abs(m - k) < 1e-6);
  return nice ? String(Number(v.toPrecision(3))) : '';
}

/**
 * Ticks of a vertical log axis no closer than `gap` px on its current height (a short chart on a
 * phone would otherwise stack 0.07, 0.08, 0.09 and 0.1 on top of each other): kept from the bottom up.
 */
export function spacedLogTicks<T extends { value: number }>(ticks: T[], axis: { min: number; max: number; height: number }, gap = 16): T[] {
  if (!(axis.height > 0) || !(axis.min > 0) || !(axis.max > axis.min)) return ticks;
  const perLog = axis.height / Math.log(axis.max / axis.min);
  const kept: T[] = [];
  for (const t of ticks) {
    const last = kept[kept.length - 1];
    if (!last || Math.log(t.value / last.value) * perLog >= gap) kept.push(t);
  }
  return kept;
}
