"""`python -m kernel_lib compare A... -- B...`: did report(s) B get slower than report(s) A?

Each side is one or more report folders (`outputs/<platform>/` of `python -m kernel_lib run`); a
folder holding `run-<k>/` subfolders counts as those runs. Records are matched by `record_id`
without its leading platform (`topic/case/implementation/dtype/mode/shape`). A notebook that the
runner marked `stale_results` (it failed and the report kept an earlier run's records) is left out.

Same device (every run on both sides has one platform and one device name):
- Per record and side, the per-run medians (each run's `median_ms`). `ratio` = median of B's run
  medians / median of A's (> 1: B is slower).
- `apart` = the ratio between the closest runs of the two sides, in the direction of `ratio`:
  fastest B run / slowest A run when B is slower (slowest B / fastest A when faster).
- `slower` / `faster`: the ratio is beyond the factor (> f or < 1/f; f: see below) AND, with at
  least 3 runs a side, an exact permutation test on the per-run medians says p <= 0.05 AND, with
  fewer than 5 runs on a side, the runs are apart by the factor (`apart` beyond f too: every run
  of B is more than f times slower, or faster, than every run of A).
- With fewer than 3 runs a side (a single run each: a cron job's `run`), the test cannot speak;
  the raw samples of the runs (each record keeps its `samples_ms`) decide instead: `slower` /
  `faster` when the ratio and `apart` are beyond the factor AND so is the whole 95 % bootstrap
  interval of the ratio (`low`, `high`: BOOTSTRAP_DRAWS resamplings of each side's samples,
  pooled over its runs, seeded; the ratio of their medians, its 2.5 and 97.5 percentiles), AND
  no run of either side was made on a busy machine (the runner's `busy` in run.json: the 1-min
  load above the core count, or CPU steal). Why the last: the samples of one run cannot tell
  the code from the machine. Measured on this 2-core VM under a load of 9-13 (other jobs), runs
  of one frozen revision of the `ci` fp8 notebook (57 timed records), one run against another:
  with 2 torch threads records 100-3000x apart with tight intervals (threads waiting for their
  time slice), 60 `slower` in 3 A/A pairs; with 1 thread, 30 `slower` and 22 `faster` in 10
  pairs (speed states 1.1-1.4x apart, intervals +-1 %), while a 30 % slowdown injected into
  `bf16_linear` was `slower` in 34 of 35 record pairs. Without the busy rule one run cannot be
  told from its machine; with it: 0 verdicts in those A/As (and, here, the injected one too).
- `unconfirmed`: beyond the factor, but the test is not significant, (fewer than 5 runs on a
  side) some runs of the two sides lie within the factor of each other, or (fewer than 3 runs a
  side) the bootstrap interval reaches within the factor, or a run kept too few samples.
- `same`: within the factor.
- `lost`: ok in A, failed/skipped/wrong in B (a side's status is `ok` only if every run has it ok);
  `recovered`: the reverse; `not run`: not ok on either side; `untimed`: ok on both sides but
  without a time (device facts, probes); `new` / `gone`: the id is only in B / only in A.
- Correctness figures that changed (`check.*` errors and pass, and numeric `metrics.*` that are
  not timing-derived: SQNR, errors, drop counts, losses, ...) are listed separately from timings.

The permutation test. Statistic: the difference of the means of the per-run medians, mean(B) -
mean(A). Every one of the C(n+m, n) relabellings of the pooled run medians into groups of n and m
is enumerated (exact; beyond 200 000 relabellings a seeded sample of 100 000 is drawn instead,
p = (hits + 1) / (draws + 1)). The test is ONE-SIDED, in the direction of the observed ratio (B
slower: P(stat >= observed); B faster: P(stat <= observed)). Why: with 3 runs a side the smallest
exact p is 1/C(6, 3) = 1/20 = 0.05 one-sided, but 2/20 = 0.10 two-sided, so a two-sided test at
0.05 could never confirm anything with 3 runs. The price: choosing the side after looking makes
this a two-sided test at 0.10 in effect (a record with no change passes the test, in one
direction or the other, up to 10 % of the time). The factor gates are what keep noise out. Why
`apart` as well as `ratio`: on a shared VM the machine's speed for a kernel sits in one of two
states for seconds to minutes while two threads work, and each run meets one (measured here: a
small MLP at 0.48 or 0.63 ms, fp32 GEMMs 10-20 % apart, from one process to the next; not the
process's memory layout, thread pinning, malloc arenas or huge pages: README). With 3 runs a
side the test's smallest p is its threshold, so it confirms complete separation and nothing
finer; the runs of one side all land in the slow state 1 time in 20 by chance, the medians
then differ by the gap between the states, and with tens of records compared at once some
record does so in most A/A comparisons (2 real A/A pairs of backend_cpu + fp8, 38
timed records: 3 and 6 `slower` without this gate, 1 and 0 with it). A real change moves every
run of a side; asking that the runs themselves be apart by the factor keeps a change smaller than
the run-to-run spread `unconfirmed`. From 5 runs a side the test resolves on its own (smallest p
1/252) and the gate would only cost power: one slow outlier among 5 runs would veto a real 20 %
slowdown (measured with `sensitivity`: 8 of 10 trials instead of 10). For a strict two-sided 5 %
test use >= 4 runs a side (min p = 2/70). What no test on the runs can see: the machine's own drift
between two reports made one after the other (a section 10-35 % apart in every run; full-workbook
A/As here: 1-3 verdicts of 313-333 records in each of six sequential pairs, 0 and 1 in two with
the runs of the two sides interleaved). Interleave the runs of the two sides when comparing
revisions: `python -m kernel_lib ab` (docs/revisions.md).

The factor f: `--factor` when given. Else, with a noise floor at hand (`--noise-floor FILE`: what
an A/A of `python -m kernel_lib ab REV REV` measured, its noise-floor.json or the folder holding it;
`ab` finds the one it stored) that was measured on the same platform and device with >= 5 runs a
side: twice as far from 1 as the A/A's widest ratio w = max(high, 1/low), f = 1 + 2 (w - 1), and
never below 1.05. Else 1.1. Why not always 1.1: a slowdown of exactly 10 % sits on the factor 1.1
and is called about as often as not (measured: 1.093 `same`, p 0.004). Why twice: one A/A does not
show the tails; at `cpu` sizes here the A/A's ratios stayed within 0.964-1.025 (w 1.038, f 1.076)
and a later trial's untouched records reached 0.939 (1.065). At the small `ci` sizes the A/A ranged
0.819-1.137 (f 1.443). What a verdict rests on is printed with it: the runs of each side,
the factor and where it came from, the noise floor; per record, the run medians of both sides
(`a_run_ms`, `b_run_ms`).

Different devices (platform or device name differ between runs): no verdict words at all. The
table shows the ratio of medians with a spread interval [min over B's runs of p10 / max over A's
runs of p90, max over B's runs of p90 / min over A's runs of p10]: the ratio between the fast tail
of one side and the slow tail of the other, so it covers within-run spread and run-to-run spread
(it is a range, not a confidence interval; it is defined with one run a side). The declared
headline records (records with `headline`) of both sides are shown side by side, by label.

Exit codes: 0 nothing slower or lost (always 0 across devices), 1 something slower or lost, 2 bad
input (one line: a missing folder, a folder that is not a report, a damaged run.json or results
file, no records in common, no `--`).
"""

from __future__ import annotations

import itertools
import math
import random
import statistics

import numpy as np

ALPHA = 0.05
MIN_RUNS = 3  # runs a side before the permutation test can confirm a verdict
RESOLVED_RUNS = 5  # runs a side from which the test alone confirms (below: the runs must be apart)
DEFAULT_FACTOR = 1.1  # without a noise floor at hand
FLOOR_MARGIN = 2.0  # a factor taken from a noise floor: this many times its widest excursion
MIN_FACTOR = 1.05  # and never below this
EXACT_LIMIT = 200_000  # relabellings enumerated exactly; beyond it, a seeded random sample
SAMPLED_RELABELLINGS = 100_000
BOOTSTRAP_DRAWS = 2000  # resamplings of the raw samples, with fewer than MIN_RUNS runs a side
MIN_SAMPLES = 5  # raw samples a side below which a bootstrap interval says nothing
VERDICT_WORDS = (
    "slower", "faster", "unconfirmed", "same", "lost", "recovered", "not run", "untimed", "new",
    "gone",
)  # fmt: skip


def permutation_p(a: list[float], b: list[float], *, alternative: str = "two-sided") -> float:
    """p-value of an exact permutation test of mean(b) - mean(a) over all C(n+m, n) relabellings
    of the pooled values (a seeded sample of them beyond EXACT_LIMIT). `alternative`: 'greater'
    (b larger), 'less' (b smaller) or 'two-sided' (|difference| at least as large)."""
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative={alternative!r}")
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        raise ValueError("a permutation test needs values on both sides")
    pooled = [float(v) for v in (*a, *b)]
    total = sum(pooled)

    def diff(sum_a: float) -> float:
        return (total - sum_a) / m - sum_a / n

    observed = diff(sum(pooled[:n]))
    slack = 1e-12 * max(1.0, *(abs(v) for v in pooled))  # equal sums up to rounding are ties

    def extreme(d: float) -> bool:
        if alternative == "greater":
            return d >= observed - slack
        if alternative == "less":
            return d <= observed + slack
        return abs(d) >= abs(observed) - slack

    if math.comb(n + m, n) <= EXACT_LIMIT:
        labellings = itertools.combinations(range(n + m), n)
        hits = count = 0
        for idx in labellings:
            hits += extreme(diff(sum(pooled[i] for i in idx)))
            count += 1
        return hits / count
    rng = random.Random(0)
    hits = sum(extreme(diff(sum(rng.sample(pooled, n)))) for _ in range(SAMPLED_RELABELLINGS))
    return (hits + 1) / (SAMPLED_RELABELLINGS + 1)


def _ratio(a: list[float], b: list[float]) -> float:
    ma, mb = statistics.median(a), statistics.median(b)
    if ma > 0:
        return mb / ma
    return math.inf if mb > 0 else math.nan


def apart(a: list[float], b: list[float]) -> float:
    """The ratio between the closest runs of the two sides, in the direction of the ratio of the
    medians: min(B) / max(A) when B is slower, max(B) / min(A) when faster."""
    if _ratio(a, b) >= 1:
        return min(b) / max(a) if max(a) > 0 else math.nan
    return max(b) / min(a) if min(a) > 0 else math.nan


def timing_verdict(
    a: list[float], b: list[float], factor: float = DEFAULT_FACTOR
) -> tuple[str, float, float | None]:
    """(verdict, ratio B/A of the medians of the run medians, p or None) for one record's per-run
    medians: see the module docstring."""
    ratio = _ratio(a, b)
    p = None
    if len(a) >= MIN_RUNS and len(b) >= MIN_RUNS:
        direction = "greater" if ratio >= 1 else "less"
        p = permutation_p(a, b, alternative=direction)
    if not (ratio > factor or ratio < 1 / factor):  # within the factor (or undefined)
        return "same", ratio, p
    slower = ratio > factor
    gap = apart(a, b)
    separated = gap > factor if slower else gap < 1 / factor
    if p is None or p > ALPHA or (min(len(a), len(b)) < RESOLVED_RUNS and not separated):
        return "unconfirmed", ratio, p
    return "slower" if slower else "faster", ratio, p


def bootstrap_interval(
    a_samples: list[float], b_samples: list[float], *, draws: int = BOOTSTRAP_DRAWS
) -> tuple[float, float]:
    """The 95 % percentile bootstrap interval of median(B) / median(A): each side's samples
    resampled with replacement `draws` times (seeded: the same samples give the same interval)."""
    rng = np.random.default_rng(0)
    a, b = np.asarray(a_samples, dtype=float), np.asarray(b_samples, dtype=float)
    med_a = np.median(a[rng.integers(0, len(a), (draws, len(a)))], axis=1)
    med_b = np.median(b[rng.integers(0, len(b), (draws, len(b)))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        low, high = np.quantile(med_b / med_a, [0.025, 0.975])
    return float(low), float(high)


def samples_verdict(
    a: list[float],
    b: list[float],
    a_samples: list[float],
    b_samples: list[float],
    factor: float = DEFAULT_FACTOR,
    *,
    busy: bool = False,
) -> tuple[str, float, float]:
    """(verdict, low, high) of a record with fewer than MIN_RUNS runs a side, from the runs'
    medians `a`, `b` and their pooled raw samples (`busy`: a run of either side shared a busy
    machine): see the module docstring."""
    if min(len(a_samples), len(b_samples)) < MIN_SAMPLES:
        return timing_verdict(a, b, factor)[0], math.nan, math.nan
    low, high = bootstrap_interval(a_samples, b_samples)
    ratio, gap = _ratio(a, b), apart(a, b)
    if not (ratio > factor or ratio < 1 / factor):
        return "same", low, high
    if busy:
        return "unconfirmed", low, high
    if ratio > factor and gap > factor and low > factor:
        return "slower", low, high
    if ratio < 1 / factor and gap < 1 / factor and high < 1 / factor:
        return "faster", low, high
    return "unconfirmed", low, high


def record_verdict(
    a: list[float],
    b: list[float],
    a_samples: list[float],
    b_samples: list[float],
    factor: float = DEFAULT_FACTOR,
    *,
    busy: bool = False,
) -> tuple[str, float, float | None, float, float]:
    """(verdict, ratio, p or None, low, high) of one record from its runs' medians `a`, `b` and
    their pooled raw samples: the permutation test with >= MIN_RUNS runs a side (no interval:
    nan), else the raw samples (samples_verdict)."""
    verdict, ratio, p = timing_verdict(a, b, factor)
    if min(len(a), len(b)) >= MIN_RUNS:
        return verdict, ratio, p, math.nan, math.nan
    verdict, low, high = samples_verdict(a, b, a_samples, b_samples, factor, busy=busy)
    return verdict, ratio, p, low, high


def spread_interval(a_rows: list[dict], b_rows: list[dict]) -> tuple[float, float]:
    """[min_B p10 / max_A p90, max_B p90 / min_A p10] over the runs (a run without p10/p90 uses
    its median): the range of B/A between the tails of the two sides."""

    def tails(rows: list[dict]) -> tuple[list[float], list[float]]:
        lows = [r.get("p10_ms") or r["median_ms"] for r in rows]
        highs = [r.get("p90_ms") or r["median_ms"] for r in rows]
        return lows, highs

    a_low, a_high = tails(a_rows)
    b_low, b_high = tails(b_rows)
    low = min(b_low) / max(a_high) if max(a_high) > 0 else math.nan
    high = max(b_high) / min(a_low) if min(a_low) > 0 else math.nan
    return low, high


def widest_ratio(floor: dict) -> float:
    """How far the A/A's ratios strayed from 1, either way, as a factor (>= 1)."""
    return max(floor["ratio_high"], 1 / floor["ratio_low"], 1.0)


def spread_factor(widest: float) -> float:
    """The factor for ratios between runs of identical code that reached `widest` (>= 1) either
    way: FLOOR_MARGIN times as far from 1 (rounded up to 0.001), never below MIN_FACTOR."""
    return max(MIN_FACTOR, math.ceil(round((1 + FLOOR_MARGIN * (widest - 1)) * 1000, 6)) / 1000)


def chosen_factor(
    factor: float | None, floor: dict | None, platform: str, device: str
) -> tuple[float, str]:
    """The factor a comparison of runs on `platform` and `device` uses, and why: `factor` when
    given; else, with a noise floor of this platform and device measured at >= RESOLVED_RUNS runs a
    side, FLOOR_MARGIN times as far from 1 as the A/A's widest ratio (rounded up to 0.001), never
    below MIN_FACTOR; else DEFAULT_FACTOR."""
    if factor is not None:
        return factor, "given"
    if not floor:
        return DEFAULT_FACTOR, "the default: no noise floor at hand"
    if (floor["platform"], floor["device"]) != (platform, device):
        return DEFAULT_FACTOR, (
            f"the default: the noise floor is of {floor['platform']} on {floor['device']}"
        )
    if floor["runs_a_side"] < RESOLVED_RUNS:
        return DEFAULT_FACTOR, (
            f"the default: the noise floor has {floor['runs_a_side']} run(s) a side, fewer than "
            f"{RESOLVED_RUNS}"
        )
    widest = widest_ratio(floor)
    return spread_factor(widest), (
        f"from the noise floor: 1 + {FLOOR_MARGIN:g} x (its widest ratio {widest:.3f} - 1), at least "
        f"{MIN_FACTOR:g}"
    )
