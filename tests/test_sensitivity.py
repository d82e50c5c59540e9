"""The test-only slowdown knob and the sensitivity driver's tally of compare's verdicts."""

import json

import pytest
import torch

from kernel_lib import checks, measure, sensitivity
from kernel_lib.measure import (
    TEST_SLOWDOWN_ENV,
    Candidate,
    Case,
    check_then_time,
    injected_slowdown,
)
from kernel_lib.platform import device_facts
from kernel_lib.records import RESULTS_SUFFIX
from tests import fakes


class _Clock:
    """A fake perf_counter: each reading advances it by a microsecond."""

    now = 0.0

    def perf_counter(self) -> float:
        self.now += 1e-6
        return self.now


def test_the_knob_adds_its_fraction_of_each_calls_own_time(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(measure, "time", clock)

    def call():
        clock.now += 1.0
        return "out"

    start = clock.now
    assert measure._slowed(call, 0.1)() == "out"
    assert clock.now - start == pytest.approx(1.1, abs=1e-4)
    assert measure._slowed(call, 0.0) is call


def test_the_knob_names_one_implementation_and_flags_its_records(monkeypatch):
    monkeypatch.setenv(TEST_SLOWDOWN_ENV, "slowed=0.5")
    assert injected_slowdown("slowed") == 0.5 and injected_slowdown("plain") == 0.0
    check = checks.exact(torch.zeros(1), reference="zeros")
    plain, slowed = check_then_time(
        Case("t", "zeros", {"n": 1}),
        [Candidate(name, lambda: torch.zeros(1), check) for name in ("plain", "slowed")],
        facts=device_facts("cpu"),
        rounds=1,
        min_time_s=0.001,
    )
    assert "TEST ONLY" in slowed.flags[0] and not plain.flags


def test_two_knobs_slow_each_its_own_implementation_by_its_own_fraction(monkeypatch):
    monkeypatch.setenv(TEST_SLOWDOWN_ENV, "b=0.2,a=0.1")
    assert {n: injected_slowdown(n) for n in "abc"} == {"a": 0.1, "b": 0.2, "c": 0.0}
    fns = {name: lambda: torch.zeros(1) for name in "abc"}  # one function each, told apart
    slowed, real = {}, measure._slowed

    def spy(fn, fraction):
        slowed[next(n for n, f in fns.items() if f is fn)] = fraction
        return real(fn, fraction)

    monkeypatch.setattr(measure, "_slowed", spy)
    check = checks.exact(torch.zeros(1), reference="zeros")
    records = check_then_time(
        Case("t", "zeros", {"n": 1}),
        [Candidate(name, fn, check) for name, fn in fns.items()],
        facts=device_facts("cpu"),
        rounds=1,
        min_time_s=0.001,
    )
    assert slowed == {"a": 0.1, "b": 0.2, "c": 0.0}
    assert records[2].flags == ()
    assert "slowed by 10%" in records[0].flags[0] and "slowed by 20%" in records[1].flags[0]


@pytest.mark.parametrize("value", ["relu", "relu=", "=0.1", "relu=fast", "a=0.1,", "a=0.1;b=0.2"])
def test_a_malformed_knob_is_a_one_line_error_not_ignored(monkeypatch, value):
    monkeypatch.setenv(TEST_SLOWDOWN_ENV, value)
    with pytest.raises(ValueError, match=f"^{TEST_SLOWDOWN_ENV}=.* must look like") as err:
        injected_slowdown("other")
    assert "\n" not in str(err.value)


@pytest.fixture
def write_trials(make_record):
    """`write_trials(out, trials, runs)`: fake runs: relu 1 ms times (1 + level) on side B, add 1
    ms everywhere, a little noise; no raw samples (one run a side is never tested)."""

    def write(out, trials: int, runs: int, noise=(1.0, 1.01, 0.99, 1.02, 0.98)):
        at = {"topic": sensitivity.NAME, "case": "elementwise", "shape": {"n": 8}, "samples": ()}
        for t in range(1, trials + 1):
            for name, level in sensitivity.sides(sensitivity.LEVELS):
                for k in range(1, runs + 1):
                    folder = out / f"trial-{t}" / name / f"run-{k}"
                    folder.mkdir(parents=True)
                    jitter = noise[(k + t) % len(noise)]
                    records = [
                        make_record(implementation="relu", ms=(1 + level) * jitter, **at),
                        make_record(implementation="add", ms=jitter, **at),
                    ]
                    rows = fakes.rows(records, f"{t}{name}{k}", "sensitivity")
                    (folder / f"{sensitivity.NAME}{RESULTS_SUFFIX}").write_text(json.dumps(rows))

    return write


def test_the_tally_counts_compare_verdicts_per_level_and_runs_a_side(tmp_path, write_trials):
    write_trials(tmp_path, trials=2, runs=3)
    table = sensitivity.tally(tmp_path, trials=2, runs_a_side=(1, 3), factor=1.05)
    row = table.set_index(["comparison", "record", "runs_a_side"])
    assert row.loc[("A vs +20%", "relu (slowed)", 3), "slower"] == 2
    assert row.loc[("A vs +20%", "relu (slowed)", 1), "unconfirmed"] == 2  # 1 run: no test
    assert row.loc[("A vs +5%", "relu (slowed)", 3), "same"] == 2  # within the factor
    untouched = table[~table["record"].str.endswith("(slowed)")]
    assert (untouched["same"] == untouched["trials"]).all()
    assert sensitivity.smallest_detected(table) == {1: "none", 3: "+10%"}
