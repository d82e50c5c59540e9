"""compare's rules for one record (compare.verdict): the permutation test, the runs apart by the
factor, the raw samples' bootstrap interval with one run a side, and the factor chosen from a
noise floor."""

import pytest

from kernel_lib import compare


def test_permutation_test_against_hand_computed_example():
    # pooled 1..6, A = {1, 2, 4}: mean(B) - mean(A) = (21 - 2 sum(A')) / 3 for a relabelling A'.
    # observed 7/3; sum(A') <= 7 only for {1,2,3}, {1,2,4}: 2 of C(6,3) = 20 -> 0.10 one-sided;
    # |.| >= 7/3 adds {3,5,6}, {4,5,6}: 4/20 two-sided; <= 7/3 is all but {1,2,3}: 19/20.
    a, b = [1.0, 2.0, 4.0], [3.0, 5.0, 6.0]
    assert compare.permutation_p(a, b, alternative="greater") == pytest.approx(2 / 20)
    assert compare.permutation_p(a, b) == pytest.approx(4 / 20)
    assert compare.permutation_p(a, b, alternative="less") == pytest.approx(19 / 20)
    # full separation with 3 a side: the smallest p there is, 1/20 one-sided, 2/20 two-sided
    assert compare.permutation_p([1, 2, 3], [4, 5, 6], alternative="greater") == 1 / 20
    assert compare.permutation_p([1, 2, 3], [4, 5, 6]) == 2 / 20
    assert compare.permutation_p([4, 5, 6], [1, 2, 3], alternative="less") == 1 / 20
    assert compare.permutation_p([1.0] * 3, [1.0] * 3) == 1.0  # all ties


def test_permutation_test_samples_beyond_the_exact_limit(monkeypatch):
    monkeypatch.setattr(compare.verdict, "EXACT_LIMIT", 1)
    monkeypatch.setattr(compare.verdict, "SAMPLED_RELABELLINGS", 4000)
    p = compare.permutation_p([1, 2, 3], [4, 5, 6], alternative="greater")
    assert p == pytest.approx(1 / 20, abs=0.015) and p != 1 / 20  # (hits + 1) / 4001: sampled


def test_timing_verdict_rules():
    a = [1.0, 1.02, 0.98]
    assert compare.timing_verdict(a, [2.0, 2.04, 1.96])[0] == "slower"
    assert compare.timing_verdict(a, [0.5, 0.51, 0.49])[0] == "faster"
    assert compare.timing_verdict(a, [1.05, 1.0, 1.02])[0] == "same"  # within the factor
    assert compare.timing_verdict([1.0], [2.0])[0] == "unconfirmed"  # too few runs
    # beyond the factor but overlapping runs: the test does not confirm it
    assert compare.timing_verdict([1.0, 3.0, 1.1], [1.5, 1.2, 3.2])[:1] == ("unconfirmed",)
    verdict, ratio, p = compare.timing_verdict(a, [2.0, 2.04, 1.96])
    assert ratio == pytest.approx(2.0) and p == pytest.approx(0.05)


def test_runs_not_apart_by_the_factor_are_unconfirmed():
    # a real A/A pair (fp32 2048^3 GEMM run medians, ms, same revision, backend_cpu on the AMD
    # EPYC): every B run slower than every A run (p = 1/20) and the medians 1.13x apart, but the
    # closest runs only 1.065x apart: inside the run-to-run spread, not a verdict
    a, b = [101.659, 97.086, 101.889], [118.746, 115.19, 108.457]
    assert compare.permutation_p(a, b, alternative="greater") == pytest.approx(0.05)
    assert compare.apart(a, b) == pytest.approx(108.457 / 101.889)
    assert compare.timing_verdict(a, b) == ("unconfirmed", pytest.approx(1.133, abs=1e-3), 0.05)
    assert compare.timing_verdict(a, b, factor=1.05)[0] == "slower"  # apart by 1.05
    # the same gate the other way: faster
    assert compare.apart(b, a) == pytest.approx(101.889 / 108.457)
    assert compare.timing_verdict(b, a)[0] == "unconfirmed"
    assert compare.timing_verdict(b, a, factor=1.05)[0] == "faster"


def test_from_5_runs_a_side_the_test_confirms_without_the_runs_apart():
    # a 1.2x slowdown with one slow outlier run in A: not apart, but p = 2/252 with 5 a side
    a, b = [1.0, 1.01, 0.99, 1.02, 1.19], [1.2, 1.21, 1.19, 1.22, 1.2]
    assert compare.apart(a, b) < 1.1
    assert compare.permutation_p(a, b, alternative="greater") <= compare.ALPHA
    assert compare.timing_verdict(a, b)[0] == "slower"
    assert compare.timing_verdict(a[:3] + a[4:], b[:4])[0] == "unconfirmed"  # 4 a side: gated


def test_bootstrap_interval_of_the_ratio_is_seeded_and_covers_it():
    a = [1.0 + 0.01 * (i % 7) for i in range(40)]
    b = [1.3 * v for v in a]
    low, high = compare.bootstrap_interval(a, b)
    assert low <= 1.3 <= high and high - low < 0.1
    assert compare.bootstrap_interval(a, b) == (low, high)  # seeded: the same every time


def test_with_one_run_a_side_the_raw_samples_decide():
    a = [1.0 + 0.01 * (i % 7) for i in range(40)]
    slow = [1.5 * v for v in a]
    assert compare.samples_verdict([1.03], [1.545], a, slow)[0] == "slower"
    assert compare.samples_verdict([1.545], [1.03], slow, a)[0] == "faster"
    assert compare.samples_verdict([1.03], [1.03], a, a)[0] == "same"
    # the same medians, but the samples spread past the factor: not confirmed by one run
    wide = [v * (0.5 if i % 2 else 1.7) for i, v in enumerate(slow)]
    verdict, low, high = compare.samples_verdict([1.03], [1.545], a, wide)
    assert verdict == "unconfirmed" and low < 1.1 < high
    # a run on a busy machine: its samples cannot tell the code from the machine
    assert compare.samples_verdict([1.03], [1.545], a, slow, busy=True)[0] == "unconfirmed"
    assert compare.samples_verdict([1.03], [1.03], a, a, busy=True)[0] == "same"
    # too few samples to resample: the runs alone (one a side: unconfirmed)
    assert compare.samples_verdict([1.03], [1.545], a[:3], slow[:3])[0] == "unconfirmed"


FLOOR = {"platform": "cpu", "device": "Xeon", "runs_a_side": 5}


# --------------------------------------------------------------------------- the factor


@pytest.mark.parametrize(
    "low, high, factor",
    [
        (0.9636, 1.025, 1.076),  # this project's A/A at cpu sizes: widest 1/0.9636 = 1.0378
        (0.8187, 1.137, 1.443),  # at ci sizes: widest 1/0.8187 = 1.2215
        (1.0, 1.0, 1.05),  # never below MIN_FACTOR
        (0.99, 1.1, 1.2),  # exactly twice the excursion, not a rounding step above it
    ],
)
def test_the_default_factor_is_twice_the_noise_floors_widest_excursion(low, high, factor):
    floor = {**FLOOR, "ratio_low": low, "ratio_high": high}
    chosen, why = compare.chosen_factor(None, floor, "cpu", "Xeon")
    assert chosen == factor and why.startswith("from the noise floor")
    assert chosen - 1 >= 2 * (max(high, 1 / low) - 1) - 1e-9  # the A/A itself is far inside it


@pytest.mark.parametrize(
    "given, floor, why",
    [
        (1.3, FLOOR, "given"),
        (None, None, "no noise floor at hand"),
        (None, {**FLOOR, "device": "EPYC"}, "the noise floor is of cpu on EPYC"),
        (None, {**FLOOR, "platform": "ci"}, "the noise floor is of ci on Xeon"),
        (None, {**FLOOR, "runs_a_side": 3}, "3 run(s) a side, fewer than 5"),
    ],
)
def test_a_given_factor_wins_and_a_foreign_or_thin_noise_floor_leaves_the_default(
    given, floor, why
):
    floor = floor and {**floor, "ratio_low": 0.5, "ratio_high": 2.0}
    chosen, said = compare.chosen_factor(given, floor, "cpu", "Xeon")
    assert chosen == (given or compare.DEFAULT_FACTOR) and why in said
