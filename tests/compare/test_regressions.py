"""`regressions` (compare.regressions) of the results store's latest run against the earlier ones,
with compare's rules: repeated runs a side by compare's test, single runs (a cron job's `run`)
each record held against its own factor, at least the single-run factor of quiet or busy runs,
raised by its history's spread, so that an A/A does not cry wolf and a slowdown beyond the
record's factor is named."""

import json
import shutil

import pytest

from kernel_lib.compare import ab_layout, comparison, regressions
from kernel_lib.results import store
from tests.fakes import RESULTS, RUN

LARGE = "gemm/large/torch_mm"
STEADY = (1.0, 1.05, 1.02, 1.01, 1.03)  # a history within 1.05x: its factor is compare's 1.1


@pytest.fixture
def runs(make_dated_run, cli_run):
    """`runs(tmp_path, *scales)`: one single run per scale of the large record's time, into
    outputs/cpu one after another (each added by the runners' hook; the last is the latest);
    `regressions`' exit code and output."""

    def run(tmp_path, *scales: float) -> tuple[int, str]:
        report = tmp_path / "outputs" / "cpu"
        for day, scale in enumerate(scales, 1):
            shutil.rmtree(report, ignore_errors=True)
            make_dated_run(report, f"r{day}", day, scale=scale)
            store.remember(report)
        code, out, _ = cli_run("regressions", "--store", tmp_path / "outputs" / store.STORE_NAME)
        return code, out

    return run


def slower_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("slower")]


def test_regressions_names_an_injected_slowdown(tmp_path, two_stored_runs, cli_run):
    path = two_stored_runs(tmp_path, repeat=3, scale=1.5)
    code, out, _ = cli_run("regressions", "--store", path)
    (line,) = [line for line in out.splitlines() if line.startswith("slower")]
    assert code == 1 and "gemm/large/torch_mm" in line and "small" not in line, out


def test_regressions_of_an_a_a_is_quiet(tmp_path, two_stored_runs, cli_run):
    path = two_stored_runs(tmp_path, repeat=3)
    code, out, _ = cli_run("regressions", "--store", path, "--platform", "cpu")
    assert code == 0 and "slower" not in out and "2 same" in out, out


def test_regressions_rests_on_compares_factor(tmp_path, monkeypatch, two_stored_runs, cli_run):
    """Teeth: with compare's factor rule made blind to a 50 % change, the slowdown goes
    unreported: the verdict is compare's, not the store's own."""
    path = two_stored_runs(tmp_path, repeat=3, scale=1.5)
    monkeypatch.setattr(comparison, "chosen_factor", lambda *args: (2.0, "broken on purpose"))
    assert cli_run("regressions", "--store", path)[0] == 0


def test_one_run_a_side_the_raw_samples_decide(tmp_path, two_stored_runs, cli_run):
    """A plain `run` twice (a cron job's): the A/A is quiet; a slowdown of the second run beyond
    the single-run factor (5x) exits 1 naming the record and its samples' bootstrap interval."""
    code, out, _ = cli_run("regressions", "--store", two_stored_runs(tmp_path / "aa"))
    assert code == 0 and "slower" not in out and "2 same" in out, out
    code, out, _ = cli_run("regressions", "--store", two_stored_runs(tmp_path, scale=5.0))
    (line,) = [line for line in out.splitlines() if line.startswith("slower")]
    assert code == 1 and "gemm/large/torch_mm" in line and "5.000x [4.9" in line, out


def test_one_run_a_side_whose_samples_straddle_the_factor_is_unconfirmed(
    tmp_path, two_stored_runs, cli_run
):
    """Teeth: the same 50 % slowdown with samples spread +-80 %: the bootstrap interval reaches
    within the factor, so nothing is confirmed from one run (and the line says how to)."""
    code, out, _ = cli_run(
        "regressions", "--store", two_stored_runs(tmp_path, scale=1.5, spread=0.8)
    )
    assert code == 0 and "1 unconfirmed" in out and "--repeat 3" in out, out


def test_regressions_takes_the_noise_floor_ab_kept_for_the_platform(
    tmp_path, monkeypatch, two_stored_runs, cli_run
):
    """An A/A of `ab` on this platform and device spread to 1.3x: its factor, 1.6, is what a
    single run's 50 % slowdown is held against (without it: 1.1, and exit 1)."""
    monkeypatch.setattr(ab_layout, "CACHE", tmp_path / "ab")
    floor = {
        "platform": "cpu", "device": "Test CPU", "git": "abc1234", "runs_a_side": 5,
        "factor": 1.1, "records": 2, "ratio_low": 0.8, "ratio_high": 1.3, "ratio_p05": 0.9,
        "ratio_p95": 1.1, "verdicts": {"slower": 0},
    }  # fmt: skip
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "noise-floor-cpu.json").write_text(json.dumps(floor))
    code, out, _ = cli_run("regressions", "--store", two_stored_runs(tmp_path, scale=1.5))
    assert code == 0 and "factor 1.6 (from the noise floor" in out and "2 same" in out, out


def test_one_run_a_side_on_a_busy_machine_confirms_nothing(tmp_path, two_stored_runs, cli_run):
    """The same 50 % slowdown in a run the runner flagged busy (load above the cores): one run's
    samples cannot tell the code from the machine, so it is unconfirmed, and the line says why."""
    path = two_stored_runs(tmp_path, scale=1.5, busy="1-min load 9.5 at its start > 2 cores")
    code, out, _ = cli_run("regressions", "--store", path)
    assert code == 0 and "1 unconfirmed" in out and "busy: r2" in out, out


def test_a_first_run_has_nothing_to_compare(tmp_path, make_dated_run, cli_run):
    report = make_dated_run(tmp_path / "outputs" / "cpu", "r1", 1)
    store.remember(report)
    code, out, _ = cli_run("regressions", "--store", tmp_path / "outputs" / store.STORE_NAME)
    assert code == 0 and out.count("\n") == 1 and "no earlier run" in out


def test_an_a_a_within_the_records_spread_is_quiet(tmp_path, runs):
    code, out = runs(tmp_path, 1.0, 1.06, 0.97, 1.02, 1.04, 0.98)
    assert code == 0 and not slower_lines(out) and "faster" not in out, out
    factor = regressions.QUIET_SINGLE_RUN_FACTOR
    assert "2 same; factor 1.1 (" in out and f"2 at {factor:g} (single-run factor)" in out, out


def test_a_record_slowed_beyond_the_single_run_factor_is_named(tmp_path, runs):
    """After a steady history the quiet single-run factor decides: 1.3x and 2x `unconfirmed`
    (one run cannot tell them from another state of the machine), 3x named."""
    factor = regressions.QUIET_SINGLE_RUN_FACTOR
    for scale in (1.3, 2.0):
        code, out = runs(tmp_path / str(scale), *STEADY, scale)
        assert code == 0 and "1 unconfirmed" in out and not slower_lines(out), out
    code, out = runs(tmp_path / "beyond", *STEADY, 1.25 * factor)
    (line,) = slower_lines(out)
    assert code == 1 and LARGE in line and f"factor {factor:g} (the single-run factor" in line
    assert "its history of 5 runs, 1.050x apart" in line, line


def test_a_noisy_record_slowed_within_its_spread_is_not_confirmed(tmp_path, runs):
    """Teeth for the history's factor: the record's history 2x apart (factor 3) and 3x of its
    fastest earlier run: `unconfirmed`; slowed beyond 3x its slowest earlier run: named."""
    noisy = (1.0, 2.0, 1.1, 1.5, 1.3)
    code, out = runs(tmp_path, *noisy, 3.0)
    assert code == 0 and "1 unconfirmed" in out and "1 at 3 (history)" in out, out
    code, out = runs(tmp_path / "beyond", *noisy, 6.5)
    assert code == 1 and LARGE in slower_lines(out)[0] and "2.000x apart" in out, out


def test_one_earlier_run_takes_the_single_run_factor(tmp_path, runs):
    """With one (or two) earlier runs: 1.3x and 2x are `unconfirmed` (faster ones too), and only
    a change beyond the single-run factor is named."""
    factor = regressions.QUIET_SINGLE_RUN_FACTOR
    for name, scales in {
        "slight": (1.0, 1.3),
        "double": (1.0, 2.0),
        "two": (1.0, 1.01, 2.0),
    }.items():
        code, out = runs(tmp_path / name, *scales)
        assert code == 0 and "1 unconfirmed" in out and f"2 at {factor:g} (single-run" in out, out
    code, out = runs(tmp_path / "beyond", 1.0, 1.25 * factor)
    (line,) = slower_lines(out)
    assert (
        code == 1 and LARGE in line and "factor 2.5 (the single-run factor of quiet runs" in line
    )
    code, out = runs(tmp_path / "faster", 1.0, 1 / 2.0)  # no spurious faster either
    assert code == 0 and "faster" not in out and "1 unconfirmed" in out, out
    code, out = runs(tmp_path / "quartered", 1.0, 0.8 / factor)
    assert code == 0 and "1 faster" in out, out


def test_busy_runs_confirm_only_on_one_thread(tmp_path, make_dated_run, cli_run):
    """compare's busy rule stands for runs of several threads (or none said): a 5x slowdown after
    busy runs is `unconfirmed`; on one torch thread the busy single-run factor (4) decides it."""
    busy = "1-min load 9.0 at its start > 2 cores"
    for units, verdict in (("2 threads", "1 unconfirmed"), ("1 threads", "1 slower")):
        env = {**RUN["environment"], "compute_units": units}
        report = tmp_path / units / "outputs" / "cpu"
        for day, scale in enumerate((1.0, 5.0), 1):
            shutil.rmtree(report, ignore_errors=True)
            make_dated_run(report, f"r{day}", day, scale=scale, busy=busy, environment=env)
            store.remember(report)
        code, out, _ = cli_run("regressions", "--store", report.parent / store.STORE_NAME)
        assert code == (verdict == "1 slower") and verdict in out, out


def test_a_platform_with_no_record_in_common_is_one_line_and_the_others_go_on(
    tmp_path, make_dated_run, runs
):
    """A fresh clone's `history --rebuild` (outputs/reference: its results are not committed, so
    its run has no record) and one ci run: ci has nothing to compare (one line), and cpu's
    slowdown after it is still named (exit 1)."""
    for day, name in enumerate(("reference", "ci"), 1):
        report = make_dated_run(tmp_path / name, name, day)
        run = json.loads((report / "run.json").read_text())
        (report / "run.json").write_text(json.dumps({**run, "platform": "ci"}))
        if name == "reference":
            (report / RESULTS).unlink()
        store.add_report(report, tmp_path / "outputs" / store.STORE_NAME)
    code, out = runs(tmp_path, 1.0, 5.0)  # cpu's, into the same store
    (ci,) = [line for line in out.splitlines() if line.startswith("ci ")]
    assert "no record in common: nothing to compare" in ci, out
    assert code == 1 and LARGE in slower_lines(out)[0], out
