"""Is one method faster than another? Times to target over seeds, a speed-up, its interval and a p-value.

A seed's time to target is its held grok step, or infinity when it did not grok within the
budget. A row's time to target is the median over its seeds (AlgoPerf's rule), and the speed-up
of a row against its baseline is baseline's median / the row's. Both rows' seeds are few, and a
failed seed is infinite, so the uncertainty comes from resampling the seeds, not from a formula:

- interval: a percentile bootstrap (95%, 10,000 resamples of the seeds, numpy's PCG64 seeded with
  0, so a table is the same on every machine). Paired when both rows ran the same seeds of one
  problem (same task settings, so seed i trained on the same data in both): the resample draws seed
  indices and takes both rows' times of each; otherwise each row is resampled on its own.
  Resamples where neither row reached the target count as a speed-up of 1 (a tie).
- p-value: an exact permutation test, two-sided, on ranks (so infinite times need no special
  value): paired, the Wilcoxon signed-rank statistic of log(baseline / row) over the sign flips
  of the pairs (seeds where both failed are ties and drop out); unpaired, the Mann-Whitney rank
  sum over every relabelling of the pooled seeds. The null distributions are counted exactly
  (the number of subsets of ranks with each sum), not sampled.
- verdict: "faster" when the interval's low end is above 1 AND p < ALPHA (0.05) AND the test
  points the same way (the row's times rank lower: rank_test's `favours`), with 5 seeds or more in
  each row; "slower" when its high end is below 1, p < ALPHA and the test points to the baseline,
  likewise; else "not resolved (n = k)". So the word never contradicts either number printed beside
  it, and a verdict is a two-sided test at 5%, per row (a board's many rows are not adjusted
  together; holm() adjusts a family). The interval
  alone would not do: with 5 pairs it lies off 1 only when all 5 per-seed ratios do (a resample
  holding one seed 3 times or more, 5.8% of them, gives that seed's ratio; 5 seeds all one way
  keep every resample's medians in that order), so "the interval excludes 1" meant "5 of 5 seeds
  one way", a sign test at 2/32 = 6.25%. The smallest p of k pairs is 2/2^k: 5 pairs never carry
  a verdict (p >= 0.0625), 6 can; unpaired, 5 seeds against 5 can (p >= 2/252), 3 against 3
  cannot (p >= 0.10). With more seeds the two still test different things (the interval the ratio
  of the medians, the rank test the per-seed ratios) and need not agree; with a real effect the
  interval is usually the stricter, and the verdict takes whichever is.
- pooled: one method against its baseline over several problems, one verdict: the geometric mean of
  the problems' speed-ups with a bootstrap interval (seeds resampled within each problem) and an exact
  sign test over every paired seed, which points the way more seeds went. holm() adjusts the p-values
  of a family (the methods of a board) before verdict() reads them again.
- equivalence: "no difference" is a claim of its own. With the margin m declared before the runs
  (EQUIVALENCE_MARGIN, for every board), "equivalent within m" when the 90% bootstrap interval of
  the speed-up lies inside [1 / (1 + m), 1 + m] (two one-sided tests at 5% each, as an interval)
  and both rows have 5 seeds or more; else "not shown equivalent (n = k)". Here a resample where
  neither row reached the target counts as outside the margin, not as a tie: two rows that both
  fail are not shown to take the same time. An interval that merely contains 1 is absence of
  evidence, and says nothing of equivalence.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import binomtest, rankdata

RESAMPLES = 10_000
LEVEL = 0.95
ALPHA = 0.05  # a verdict's level: its p must be below this as well as its interval off 1
MIN_SEEDS = 5
EQUIVALENCE_MARGIN = 0.10  # declared in leaderboards/README.md before the runs it first judged
EQUIVALENCE_LEVEL = 0.90  # two one-sided tests at 5%


def median_time(times) -> float:
    return float(np.median(np.asarray(times, dtype=float)))


def ratio(baseline: np.ndarray | float, row: np.ndarray | float, both_failed: float = 1.0):
    """baseline / row for times that may be infinite: both infinite is `both_failed` (a tie, 1, unless
    said otherwise), a row at 0 is infinitely faster unless the baseline is at 0 too."""
    b, r = np.asarray(baseline, dtype=float), np.asarray(row, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(np.isinf(b) & np.isinf(r), both_failed, b / np.where(r == 0, 1.0, r))
    out = np.where(r == 0, np.where(b == 0, 1.0, math.inf), out)
    return float(out) if out.ndim == 0 else out


def speedup_interval(
    baseline: list[float], row: list[float], paired: bool, level: float = LEVEL, both_failed: float = 1.0
) -> tuple[float, float]:
    """The bootstrap interval of median(baseline) / median(row); paired: the lists are aligned by seed;
    both_failed: what a resample where neither median is finite counts as (ratio's)."""
    rng = np.random.default_rng(0)
    b, r = np.asarray(baseline, dtype=float), np.asarray(row, dtype=float)
    if paired:
        idx = rng.integers(0, len(b), (RESAMPLES, len(b)))
        b_med, r_med = np.median(b[idx], axis=1), np.median(r[idx], axis=1)
    else:
        b_med = np.median(b[rng.integers(0, len(b), (RESAMPLES, len(b)))], axis=1)
        r_med = np.median(r[rng.integers(0, len(r), (RESAMPLES, len(r)))], axis=1)
    tail = (1 - level) / 2
    lo, hi = np.quantile(ratio(b_med, r_med, both_failed), [tail, 1 - tail], method="inverted_cdf")
    return float(lo), float(hi)


def median_interval(times: list[float]) -> tuple[float, float]:
    """The bootstrap interval of the median time over the seeds (as speedup_interval's)."""
    t = np.asarray(times, dtype=float)
    medians = np.median(t[np.random.default_rng(0).integers(0, len(t), (RESAMPLES, len(t)))], axis=1)
    tail = (1 - LEVEL) / 2
    lo, hi = np.quantile(medians, [tail, 1 - tail], method="inverted_cdf")
    return float(lo), float(hi)


def rank_test(baseline: list[float], row: list[float], paired: bool) -> tuple[float, int]:
    """Exact two-sided p-value of 'the row and its baseline take the same time' (see the module), and
    the way the ranks point: favours = 1 where the row's times rank lower (it is faster), -1 where
    the baseline's do, 0 at the centre of the null distribution."""
    b, r = np.asarray(baseline, dtype=float), np.asarray(row, dtype=float)
    if paired:
        with np.errstate(invalid="ignore", divide="ignore"):
            d = np.where(b == r, 0.0, np.log(b) - np.log(r))  # inf - inf is a tie, not nan
        d = d[d != 0]
        if not len(d):
            return 1.0, 0
        ranks = _doubled(rankdata(np.abs(d)))
        observed = ranks[d > 0].sum()  # the ranks of the seeds the row was faster on
        counts = _subset_sums(ranks, size=None)
        sign = 1
    else:
        ranks = _doubled(rankdata(np.concatenate([b, r])))
        observed = ranks[len(b) :].sum()  # the row's ranks: low when its times are short
        counts = _subset_sums(ranks, size=len(r))
        sign = -1
    sums = np.arange(len(counts))
    centre = (counts * sums).sum() / counts.sum()
    extreme = np.abs(sums - centre) >= abs(observed - centre) - 1e-9
    favours = 0 if abs(observed - centre) < 1e-9 else sign * int(np.sign(observed - centre))
    return float(counts[extreme].sum() / counts.sum()), favours


def _doubled(ranks: np.ndarray) -> np.ndarray:
    """Ranks (mid-ranks for ties, so halves) times two: integers, to count sums exactly."""
    return np.rint(2 * ranks).astype(int)


def _subset_sums(values: np.ndarray, size: int | None) -> np.ndarray:
    """counts[s] = how many subsets of values (of `size` elements; of any size for None) sum to s.
    Float counts are exact up to 2^53 (about 50 seeds a row)."""
    total = int(values.sum())
    if size is None:
        counts = np.zeros(total + 1)
        counts[0] = 1
        for v in values:
            counts[v:] = counts[v:] + counts[: len(counts) - v].copy()
        return counts
    table = np.zeros((size + 1, total + 1))
    table[0, 0] = 1
    for v in values:
        table[1:, v:] = table[1:, v:] + table[:-1, : total + 1 - v].copy()
    return table[size]


def verdict(low: float, high: float, p: float, n: int, favours: int) -> str:
    """low, high: the speed-up's 95% interval; p: the two-sided p printed beside it (Holm-adjusted
    where it is one of a family); n: the seeds of the smaller of the two rows (of the smallest problem);
    favours: the way the test behind p points (rank_test's; pooled's sign test)."""
    resolved = n >= MIN_SEEDS and p < ALPHA
    if resolved and low > 1 and favours > 0:
        return "faster"
    if resolved and high < 1 and favours < 0:
        return "slower"
    return f"not resolved (n = {n})"


def holm(pvalues: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given: the i-th smallest of m is multiplied by
    m - i + 1, then made monotone in that order and capped at 1. A nan (no test) stays nan and is
    not counted in m."""
    p = np.asarray(pvalues, dtype=float)
    adjusted = np.full(len(p), math.nan)
    tested = np.flatnonzero(~np.isnan(p))
    largest = 0.0
    for i, index in enumerate(tested[np.argsort(p[tested], kind="stable")]):
        largest = max(largest, min(1.0, (len(tested) - i) * p[index]))
        adjusted[index] = largest
    return adjusted.tolist()


def pooled(problems: list[tuple[list[float], list[float]]]) -> dict:
    """One method against its baseline over several problems, each problem (baseline times, method
    times) aligned by seed. speedup: the geometric mean over the problems of the ratio of medians; low,
    high: its 95% percentile bootstrap, the seeds resampled within each problem, both rows' times of a
    seed together; wins / losses / ties: the paired seeds of every problem where the method took less /
    more / the same time (both failed is a tie); p: the exact two-sided sign test of wins against
    losses (ties dropped), favours: 1 / -1 where wins / losses are more, 0 at equal counts; n: the seeds
    of the smallest problem; verdict: verdict() with that p, n and favours."""
    pairs = [(np.asarray(b, dtype=float), np.asarray(r, dtype=float)) for b, r in problems]
    if any(len(b) != len(r) for b, r in pairs):
        raise ValueError("pooled() takes each problem's baseline and method times aligned by seed")
    rng = np.random.default_rng(0)
    base_medians, row_medians = [], []  # per problem, one median per resample
    for b, r in pairs:
        idx = rng.integers(0, len(b), (RESAMPLES, len(b)))
        base_medians.append(np.median(b[idx], axis=1))
        row_medians.append(np.median(r[idx], axis=1))
    tail = (1 - LEVEL) / 2
    resampled = _geometric_mean_ratio(np.array(base_medians), np.array(row_medians))
    low, high = np.quantile(resampled, [tail, 1 - tail], method="inverted_cdf")
    base, row = np.concatenate([b for b, _ in pairs]), np.concatenate([r for _, r in pairs])
    wins, losses = int((row < base).sum()), int((row > base).sum())
    p = binomtest(wins, wins + losses).pvalue if wins + losses else 1.0
    favours = int(np.sign(wins - losses))
    n = min(len(b) for b, _ in pairs)
    medians = np.array([[np.median(b), np.median(r)] for b, r in pairs])
    speedup = _geometric_mean_ratio(medians[:, 0], medians[:, 1])
    return {
        "speedup": float(speedup),
        "low": float(low),
        "high": float(high),
        "wins": wins,
        "losses": losses,
        "ties": len(base) - wins - losses,
        "p": float(p),
        "favours": favours,
        "n_pairs": len(base),
        "n": n,
        "verdict": verdict(float(low), float(high), float(p), n, favours),
    }


def _geometric_mean_ratio(base: np.ndarray, row: np.ndarray) -> np.ndarray:
    """The geometric mean over axis 0 (the problems) of base / row, as ratio() takes a problem's: a
    failure is one time L beyond any budget, so a problem only the baseline reached contributes 1/L,
    one only the method reached L, and the two cancel rather than make 0 x inf = nan. Leftover powers
    of L give inf (more problems only the method reached) or 0."""
    base_failed, row_failed = np.isinf(base), np.isinf(row)
    powers_of_l = base_failed.sum(axis=0) - row_failed.sum(axis=0)
    logs = np.where(base_failed, 0.0, np.log(base)) - np.where(row_failed, 0.0, np.log(row))
    finite = np.exp(logs.mean(axis=0))
    return np.where(powers_of_l > 0, math.inf, np.where(powers_of_l < 0, 0.0, finite))


def equivalence(
    baseline: list[float], row: list[float], paired: bool, margin: float = EQUIVALENCE_MARGIN
) -> tuple[float, float, str]:
    """The speed-up's EQUIVALENCE_LEVEL interval and the equivalence verdict (see the module)."""
    low, high = speedup_interval(baseline, row, paired, EQUIVALENCE_LEVEL, both_failed=math.inf)
    n = min(len(baseline), len(row))
    inside = n >= MIN_SEEDS and 1 / (1 + margin) <= low and high <= 1 + margin
    return low, high, f"equivalent within {margin:.0%}" if inside else f"not shown equivalent (n = {n})"
