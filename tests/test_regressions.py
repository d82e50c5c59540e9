"""`regressions` on single runs (a cron job's `run`): each record held against its own factor, at
least the single-run factor of quiet or busy runs, raised by its history's spread, so that an A/A
does not cry wolf and a slowdown beyond the record's factor is named."""

import json
import shutil

from kernel_lib.compare import regressions
from kernel_lib.results import store
from tests import test_damaged_reports
from tests.test_damaged_reports import RESULTS
from tests.test_store import cli_run, write_report

LARGE = "gemm/large/torch_mm"
STEADY = (1.0, 1.05, 1.02, 1.01, 1.03)  # a history within 1.05x: its factor is compare's 1.1


def runs(tmp_path, *scales: float) -> tuple[int, str]:
    """One single run per scale of the large record's time, into outputs/cpu one after another
    (each added by the runners' hook; the last is the latest); `regressions`' exit code and
    output."""
    report = tmp_path / "outputs" / "cpu"
    for day, scale in enumerate(scales, 1):
        shutil.rmtree(report, ignore_errors=True)
        write_report(report, f"r{day}", day, scale=scale)
        store.remember(report)
    code, out, _ = cli_run("regressions", "--store", tmp_path / "outputs" / store.STORE_NAME)
    return code, out


def slower_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("slower")]


def test_an_a_a_within_the_records_spread_is_quiet(tmp_path):
    code, out = runs(tmp_path, 1.0, 1.06, 0.97, 1.02, 1.04, 0.98)
    assert code == 0 and not slower_lines(out) and "faster" not in out, out
    factor = regressions.QUIET_SINGLE_RUN_FACTOR
    assert "2 same; factor 1.1 (" in out and f"2 at {factor:g} (single-run factor)" in out, out


def test_a_record_slowed_beyond_the_single_run_factor_is_named(tmp_path):
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


def test_a_noisy_record_slowed_within_its_spread_is_not_confirmed(tmp_path):
    """Teeth for the history's factor: the record's history 2x apart (factor 3) and 3x of its
    fastest earlier run: `unconfirmed`; slowed beyond 3x its slowest earlier run: named."""
    noisy = (1.0, 2.0, 1.1, 1.5, 1.3)
    code, out = runs(tmp_path, *noisy, 3.0)
    assert code == 0 and "1 unconfirmed" in out and "1 at 3 (history)" in out, out
    code, out = runs(tmp_path / "beyond", *noisy, 6.5)
    assert code == 1 and LARGE in slower_lines(out)[0] and "2.000x apart" in out, out


def test_one_earlier_run_takes_the_single_run_factor(tmp_path):
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


def test_busy_runs_confirm_only_on_one_thread(tmp_path, monkeypatch):
    """compare's busy rule stands for runs of several threads (or none said): a 5x slowdown after
    busy runs is `unconfirmed`; on one torch thread the busy single-run factor (4) decides it."""
    busy = "1-min load 9.0 at its start > 2 cores"
    for units, verdict in (("2 threads", "1 unconfirmed"), ("1 threads", "1 slower")):
        env = {**test_damaged_reports.RUN["environment"], "compute_units": units}
        monkeypatch.setitem(test_damaged_reports.RUN, "environment", env)
        report = tmp_path / units / "outputs" / "cpu"
        for day, scale in enumerate((1.0, 5.0), 1):
            shutil.rmtree(report, ignore_errors=True)
            write_report(report, f"r{day}", day, scale=scale, busy=busy)
            store.remember(report)
        code, out, _ = cli_run("regressions", "--store", report.parent / store.STORE_NAME)
        assert code == (verdict == "1 slower") and verdict in out, out


def test_a_platform_with_no_record_in_common_is_one_line_and_the_others_go_on(tmp_path):
    """A fresh clone's `history --rebuild` (outputs/reference: its results are not committed, so
    its run has no record) and one ci run: ci has nothing to compare (one line), and cpu's
    slowdown after it is still named (exit 1)."""
    for day, name in enumerate(("reference", "ci"), 1):
        report = write_report(tmp_path / name, name, day)
        run = json.loads((report / "run.json").read_text())
        (report / "run.json").write_text(json.dumps({**run, "platform": "ci"}))
        if name == "reference":
            (report / RESULTS).unlink()
        store.add_report(report, tmp_path / "outputs" / store.STORE_NAME)
    code, out = runs(tmp_path, 1.0, 5.0)  # cpu's, into the same store
    (ci,) = [line for line in out.splitlines() if line.startswith("ci ")]
    assert "no record in common: nothing to compare" in ci, out
    assert code == 1 and LARGE in slower_lines(out)[0], out
