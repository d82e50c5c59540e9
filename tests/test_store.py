"""The results store (results.store): every run kept, `history` lists them and a headline's
trend, `regressions` calls a slowdown of the latest run with compare's rules; a damaged store, a
newer schema and two writers at once are one line each, and nothing is lost."""

import contextlib
import dataclasses
import io
import itertools
import json
import os
import re
import shutil
import sqlite3
import threading
from pathlib import Path

import pandas as pd

from kernel_lib import __main__ as cli
from kernel_lib import params
from kernel_lib.compare import ab_layout, comparison
from kernel_lib.records import stamp, to_dicts
from kernel_lib.report import trends
from kernel_lib.report.aggregate import write_aggregate_run
from kernel_lib.report.gallery import build_gallery
from kernel_lib.results import rebuild, store
from tests.test_damaged_reports import RESULTS, RUN, _timed
from tests.test_run_safety import fake_execute

KEY = "moe.forward_vs_dense"
OTHER = "moe.seed_same_dtype"  # the headline of a second notebook
LOCK = "cpu 1a2b3c4d5e6f, locked"


def samples(ms: float, spread: float) -> tuple[float, ...]:
    """20 raw samples around `ms`, within +-`spread` of it (deterministic)."""
    return tuple(ms * (1 + spread * ((i * 7) % 11 - 5) / 5) for i in range(20))


def write_run(
    folder: Path, run_id: str, started: str, scale=1.0, git="abc1234", spread=0.02, busy=""
):
    """One run as the runner leaves it: a results file (a headline, a timed record with 20 raw
    samples within +-`spread`) and its run.json; `scale` multiplies the large case's times (an
    injected slowdown); `busy`: the runner's reason to distrust its timings ('' if none)."""
    folder.mkdir(parents=True)
    large = _timed("large", 4.0 * scale)
    records = [
        _timed("small", 1.0, headline=KEY, ratio_vs_baseline=1.5, ratio_low=1.4, ratio_high=1.6),
        dataclasses.replace(large, samples_ms=samples(large.median_ms, spread)),
    ]
    rows = to_dicts(stamp(records, run_id=run_id, platform="cpu"))
    (folder / RESULTS).write_text(json.dumps(rows))
    notebooks = [
        {**nb, "run_id": run_id, "machine": {**nb["machine"], "busy": busy}}
        for nb in RUN["notebooks"]
    ]
    run = {**RUN, "run_id": run_id, "started_utc": started, "git": git, "notebooks": notebooks}
    (folder / "run.json").write_text(json.dumps(run))


def write_report(
    folder: Path, run_id: str, day: int, *, repeat=1, scale=1.0, git="abc1234", spread=0.02,
    busy="",
):  # fmt: skip
    """A report of one run, or of `repeat` runs (run-<k>/) and their aggregate run.json."""
    started = f"2026-01-{day:02d}T00:00:00+00:00"
    if repeat == 1:
        write_run(folder, run_id, started, scale, git, spread, busy)
        return folder
    for k in range(1, repeat + 1):
        # the runs of one side within 2 % of each other, as on a quiet machine
        write_run(folder / f"run-{k}", f"{run_id}-run-{k}", started, scale * (1 + k / 100), git)
    base = {key: value for key, value in RUN.items() if key != "notebooks"}
    write_aggregate_run(
        folder, {**base, "run_id": run_id, "started_utc": started, "repeat": repeat}
    )
    return folder


def cli_run(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def two_reports(tmp_path, *, repeat=1, scale=1.0, spread=0.02, busy="") -> Path:
    """Two runs into outputs/cpu, one after another, each added by the runners' hook: the
    second replaces the first report, the store keeps both; returns the store."""
    report = tmp_path / "outputs" / "cpu"
    write_report(report, "r1", 1, repeat=repeat, spread=spread)
    store.remember(report)
    shutil.rmtree(report)
    write_report(
        report, "r2", 2, repeat=repeat, scale=scale, git="def5678", spread=spread, busy=busy
    )
    store.remember(report)
    return tmp_path / "outputs" / store.STORE_NAME


def test_history_lists_both_runs_and_a_headlines_trend(tmp_path):
    path = two_reports(tmp_path)
    code, out, _ = cli_run("history", "--store", path)
    assert code == 0 and "r1" in out and "r2" in out and "def5678" in out
    assert f"{KEY} 1.5x" in out
    code, out, _ = cli_run("history", "--store", path, "--key", KEY, "--csv")
    trend = pd.read_csv(io.StringIO(out))
    assert code == 0 and list(trend["run_id"]) == ["r1", "r2"]
    assert list(trend["value"]) == [1.5, 1.5] and list(trend["git"]) == ["abc1234", "def5678"]
    assert cli_run("history", "--store", path, "--key", "no.such")[0] == 2


def test_adding_a_run_again_replaces_it(tmp_path):
    path = two_reports(tmp_path)
    store.remember(tmp_path / "outputs" / "cpu")
    assert [r["run_id"] for r in store.runs(path)] == ["r1", "r2"]
    assert len(store.records(path, ["r2"])) == 2


def test_a_repeated_report_adds_each_run(tmp_path):
    path = two_reports(tmp_path, repeat=3)
    rows = store.runs(path)
    assert [r["run_id"] for r in rows][-3:] == ["r2-run-1", "r2-run-2", "r2-run-3"]
    assert {r["report"] for r in rows} == {"r1", "r2"}


def test_regressions_names_an_injected_slowdown(tmp_path):
    path = two_reports(tmp_path, repeat=3, scale=1.5)
    code, out, _ = cli_run("regressions", "--store", path)
    (line,) = [line for line in out.splitlines() if line.startswith("slower")]
    assert code == 1 and "gemm/large/torch_mm" in line and "small" not in line, out


def test_regressions_of_an_a_a_is_quiet(tmp_path):
    path = two_reports(tmp_path, repeat=3)
    code, out, _ = cli_run("regressions", "--store", path, "--platform", "cpu")
    assert code == 0 and "slower" not in out and "2 same" in out, out


def test_regressions_rests_on_compares_factor(tmp_path, monkeypatch):
    """Teeth: with compare's factor rule made blind to a 50 % change, the slowdown goes
    unreported: the verdict is compare's, not the store's own."""
    path = two_reports(tmp_path, repeat=3, scale=1.5)
    monkeypatch.setattr(comparison, "chosen_factor", lambda *args: (2.0, "broken on purpose"))
    assert cli_run("regressions", "--store", path)[0] == 0


def test_one_run_a_side_the_raw_samples_decide(tmp_path):
    """A plain `run` twice (a cron job's): the A/A is quiet; a slowdown of the second run beyond
    the single-run factor (5x) exits 1 naming the record and its samples' bootstrap interval."""
    code, out, _ = cli_run("regressions", "--store", two_reports(tmp_path / "aa"))
    assert code == 0 and "slower" not in out and "2 same" in out, out
    code, out, _ = cli_run("regressions", "--store", two_reports(tmp_path, scale=5.0))
    (line,) = [line for line in out.splitlines() if line.startswith("slower")]
    assert code == 1 and "gemm/large/torch_mm" in line and "5.000x [4.9" in line, out


def test_one_run_a_side_whose_samples_straddle_the_factor_is_unconfirmed(tmp_path):
    """Teeth: the same 50 % slowdown with samples spread +-80 %: the bootstrap interval reaches
    within the factor, so nothing is confirmed from one run (and the line says how to)."""
    code, out, _ = cli_run("regressions", "--store", two_reports(tmp_path, scale=1.5, spread=0.8))
    assert code == 0 and "1 unconfirmed" in out and "--repeat 3" in out, out


def test_regressions_takes_the_noise_floor_ab_kept_for_the_platform(tmp_path, monkeypatch):
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
    code, out, _ = cli_run("regressions", "--store", two_reports(tmp_path, scale=1.5))
    assert code == 0 and "factor 1.6 (from the noise floor" in out and "2 same" in out, out


def test_one_run_a_side_on_a_busy_machine_confirms_nothing(tmp_path):
    """The same 50 % slowdown in a run the runner flagged busy (load above the cores): one run's
    samples cannot tell the code from the machine, so it is unconfirmed, and the line says why."""
    path = two_reports(tmp_path, scale=1.5, busy="1-min load 9.5 at its start > 2 cores")
    code, out, _ = cli_run("regressions", "--store", path)
    assert code == 0 and "1 unconfirmed" in out and "busy: r2" in out, out


def test_a_first_run_has_nothing_to_compare(tmp_path):
    report = write_report(tmp_path / "outputs" / "cpu", "r1", 1)
    store.remember(report)
    code, out, _ = cli_run("regressions", "--store", tmp_path / "outputs" / store.STORE_NAME)
    assert code == 0 and out.count("\n") == 1 and "no earlier run" in out


def one_line_refusal(path: Path, *words: str) -> None:
    before = path.read_bytes()
    for command in ("history", "regressions"):
        code, out, err = cli_run(command, "--store", path)
        assert code == 2 and not out and err.count("\n") == 1 and str(path) in err, err
        assert all(word in err for word in words), err
    assert path.read_bytes() == before


def test_a_damaged_store_is_one_line_and_rebuild_never_replaces_it(tmp_path):
    """A store that is not one is refused by every command, `--rebuild` too (it may be someone's
    file): left byte for byte; moved aside, `--rebuild` builds a new one from the report."""
    path = two_reports(tmp_path)
    path.write_bytes(b"not a database, a note someone saved here" * 100)
    one_line_refusal(path, "not a results store", "move it aside, then", "history --rebuild")
    with contextlib.closing(sqlite3.connect(path.with_name("empty.sqlite"))) as con:
        con.execute("PRAGMA user_version = 1")  # the version, but no tables
    one_line_refusal(path.with_name("empty.sqlite"), "tables are missing", "move it aside")
    before = path.read_bytes()
    code, out, err = cli_run("history", "--store", path, "--rebuild", "--outputs", path.parent)
    assert code == 2 and not out and err.count("\n") == 1 and path.read_bytes() == before, err
    path.rename(path.with_name("aside"))
    code, out, _ = cli_run("history", "--store", path, "--rebuild", "--outputs", path.parent)
    assert code == 0 and [r["run_id"] for r in store.runs(path)] == ["r2"]  # the kept report
    assert path.with_name("aside").read_bytes() == before


def test_a_store_of_a_newer_schema_is_one_line(tmp_path):
    path = two_reports(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    one_line_refusal(path, f"schema {store.SCHEMA_VERSION + 1}", "newer")


def test_a_failing_store_never_fails_the_run(tmp_path, capsys):
    report = write_report(tmp_path / "outputs" / "cpu", "r1", 1)
    (tmp_path / "outputs" / store.STORE_NAME).write_bytes(b"garbage" * 50)
    store.remember(report)  # no exception
    err = capsys.readouterr().err
    assert err.startswith("warning: run not added") and err.count("\n") == 1
    assert (report / "run.json").exists()


def test_two_writers_at_once_both_kept(tmp_path):
    """One writer holds the store's lock while another adds its run: the second waits on SQLite's
    busy timeout, and both runs are there afterwards."""
    path = tmp_path / store.STORE_NAME
    a = write_report(tmp_path / "a", "ra", 1)
    b = write_report(tmp_path / "b", "rb", 2)
    store.add_report(a, path)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as held:
        held.execute("BEGIN IMMEDIATE")  # a writer in the middle of its transaction
        writer = threading.Thread(target=store.add_report, args=(b, path))
        writer.start()
        writer.join(0.3)
        assert writer.is_alive()  # waiting for the lock, not failing
        held.execute("ROLLBACK")
    writer.join(10)
    assert [r["run_id"] for r in store.runs(path)] == ["ra", "rb"]
    assert len(store.records(path, ["ra", "rb"])) == 4


def test_rebuild_from_the_folders_equals_what_the_hooks_added(tmp_path):
    outputs = tmp_path / "outputs"
    store.remember(write_report(outputs / "cpu", "r1", 1))
    store.remember(write_report(outputs / "h100", "r2", 2, repeat=2))
    hooked = outputs / store.STORE_NAME
    rebuilt = tmp_path / "rebuilt.sqlite"
    assert cli_run("history", "--store", rebuilt, "--rebuild", "--outputs", outputs)[0] == 0

    def dump(path):
        with contextlib.closing(sqlite3.connect(path)) as con:
            return [sorted(con.execute(f"SELECT * FROM {t}")) for t in ("runs", "records")]

    assert dump(rebuilt) == dump(hooked) and len(dump(hooked)[0]) == 3


def test_the_runner_adds_every_run_and_each_run_of_a_repeat(tmp_path, write_notebook, monkeypatch):
    (tmp_path / "notebooks").mkdir(), (tmp_path / "parameters").mkdir()
    write_notebook(tmp_path / "notebooks" / "a.ipynb", "x = 1")
    (tmp_path / "parameters" / "p.yaml").write_text("workbook: {notebooks: [a]}\n")
    monkeypatch.setattr(params.platform_files, "PARAMETERS_DIR", tmp_path / "parameters")
    monkeypatch.setattr(params.notebooks, "NOTEBOOKS_DIR", tmp_path / "notebooks")
    monkeypatch.setattr("kernel_lib.run.runner.execute", fake_execute)
    ids = itertools.count(1)
    monkeypatch.setattr(os, "getpid", lambda: next(ids))  # run ids: distinct within a second
    out = tmp_path / "outputs" / "p"

    def run(*argv):
        return cli_run("run", "--platform", "p", "--no-progress", "--out", out, *argv)

    assert run()[0] == 0 and run()[0] == 0 and run("--repeat", "2", "--replace")[0] == 0
    rows = store.runs(tmp_path / "outputs" / store.STORE_NAME)
    assert len(rows) == 4 and len({r["report"] for r in rows}) == 3
    repeated = [r for r in rows if "-run-" in r["run_id"]]
    assert sorted(r["run_id"][-6:] for r in repeated) == ["-run-1", "-run-2"]
    assert {Path(r["folder"]) for r in repeated} == {
        out.resolve() / "run-1",
        out.resolve() / "run-2",
    }


def test_cloud_collect_adds_the_reports_it_installs(tmp_path):
    write_report(tmp_path / "bucket" / "cpu", "r1", 1, repeat=2)
    outputs = tmp_path / "outputs"
    assert cli_run("cloud", "collect", tmp_path / "bucket", "--out", outputs)[0] == 0
    rows = store.runs(outputs / store.STORE_NAME)
    assert [r["run_id"] for r in rows] == ["r1-run-1", "r1-run-2"]
    assert all(Path(r["folder"]).parent == (outputs / "cpu").resolve() for r in rows)


def test_an_imported_report_folder_adds_its_runs(tmp_path):
    """`history --add`: a report made elsewhere (a colleague's, a copied folder) joins the store;
    a folder that is not a report is one line, exit 2, and nothing is added."""
    path = two_reports(tmp_path)
    theirs = write_report(tmp_path / "theirs" / "cpu", "t1", 3, repeat=2)
    code, out, err = cli_run("history", "--store", path, "--add", theirs, tmp_path / "nothing")
    assert code == 2 and not out and err.count("\n") == 1 and "nothing" in err, err
    assert len(store.runs(path)) == 2
    code, out, _ = cli_run("history", "--store", path, "--add", theirs)
    assert code == 0 and "added 2 run(s)" in out
    assert [r["report"] for r in store.runs(path)] == ["r1", "r2", "t1", "t1"]


def test_compare_names_runs_from_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv(store.STORE_ENV, str(two_reports(tmp_path, repeat=3, scale=1.5)))
    code, out, _ = cli_run("compare", "cpu@previous", "--", "cpu@latest")
    assert code == 1 and "gemm/large" in out and "slower" in out, out
    code, out, _ = cli_run("compare", "r1-run-1", "--", "r2-run-1")  # one run a side: samples
    assert code == 1 and "gemm/large" in out, out
    for name in ("cpu@earliest", "gpu@latest", "no-such-run"):
        code, out, err = cli_run("compare", "cpu@latest", "--", name)
        assert code == 2 and err.count("\n") == 1 and name in err, err


def test_the_gallery_draws_a_trend_and_marks_a_torch_upgrade(tmp_path):
    outputs = tmp_path / "outputs"
    store.remember(write_report(outputs / "cpu", "r1", 1))
    run_file = write_report(tmp_path / "next", "r2", 2) / "run.json"
    run = json.loads(run_file.read_text())
    run["environment"]["torch"] = "2.14"
    run_file.write_text(json.dumps(run))
    shutil.rmtree(outputs / "cpu")
    shutil.move(tmp_path / "next", outputs / "cpu")
    store.remember(outputs / "cpu")
    page = build_gallery(outputs).read_text()
    (panel,) = re.findall(rf'<figure class="panel" data-key="{KEY}"[^>]*>.*?</figure>', page, re.S)
    assert 'data-trend-points="2"' in panel and "torch 2.13 -&gt; 2.14" in panel, panel
    shutil.move(outputs / store.STORE_NAME, tmp_path / "elsewhere.sqlite")  # a fresh clone's
    assert 'data-trend-points="0"' in build_gallery(outputs).read_text()


def add_notebook(folder: Path, name: str, run_id: str, rows: list[dict] | None = None) -> None:
    """A second notebook in the report `folder`: its results (`rows`, default one headline of
    OTHER) and its run.json entry, as run `run_id` saved them."""
    if rows is None:
        seed = _timed("seed", 2.0, headline=OTHER, ratio_vs_baseline=1.2)
        rows = to_dicts(stamp([seed], run_id=run_id, platform="cpu"))
    (folder / f"{name}{store.RESULTS_SUFFIX}").write_text(json.dumps(rows))
    run = json.loads((folder / "run.json").read_text())
    run["notebooks"].append({**RUN["notebooks"][0], "notebook": name, "run_id": run_id})
    (folder / "run.json").write_text(json.dumps(run))


def write_ab(out: Path, slow_b: str | None = None) -> Path:
    """An `ab` run as it leaves .cache/ab/<run>: ab.json and one finished run a side."""
    out.mkdir(parents=True)
    (out / ab_layout.STATE).write_text(json.dumps({"runs": 1, "factor": None, "slow_b": slow_b}))
    for day, side in enumerate(ab_layout.SIDES, 10):
        write_run(out / side / "run-1", f"{out.name}-{side}", f"2026-01-{day}T00:00:00+00:00")
    return out


def test_a_run_of_some_notebooks_holds_only_their_records(tmp_path):
    """`run --only bench` into a report that keeps notebook `other` from run r1: r2's rows are
    bench's alone, so OTHER's trend has r1's point and no point r2 never measured."""
    report = tmp_path / "outputs" / "cpu"
    write_report(report, "r1", 1)
    add_notebook(report, "other", "r1")
    store.remember(report)
    kept = (report / f"other{store.RESULTS_SUFFIX}").read_text()
    shutil.rmtree(report)
    write_report(report, "r2", 2)
    add_notebook(report, "other", "r1", json.loads(kept))  # as the runner keeps it
    store.remember(report)
    path = report.parent / store.STORE_NAME
    assert {r["notebook"] for r in store.records(path, ["r1"])} == {"bench", "other"}
    assert {r["notebook"] for r in store.records(path, ["r2"])} == {"bench"}
    code, out, _ = cli_run("history", "--store", path, "--key", OTHER, "--csv")
    assert code == 0 and list(pd.read_csv(io.StringIO(out))["run_id"]) == ["r1"], out


def test_a_record_id_saved_twice_in_a_run_is_refused_in_one_line(tmp_path, capsys):
    path = two_reports(tmp_path)
    before = path.read_bytes()
    theirs = write_report(tmp_path / "theirs", "t1", 3)
    add_notebook(theirs, "copy", "t1", json.loads((theirs / RESULTS).read_text()))
    code, out, err = cli_run("history", "--store", path, "--add", theirs)
    assert code == 2 and not out and err.count("\n") == 1, err
    assert "2 record id(s) more than once" in err and "bench, copy" in err, err
    assert path.read_bytes() == before
    store.remember(theirs, path=path)  # the runners' hook: one warning, the run not added
    assert capsys.readouterr().err.count("\n") == 1 and path.read_bytes() == before


def test_history_add_takes_an_ab_run_as_ab_adds_it(tmp_path):
    """`history --add .cache/ab/<run>` (docs/history.md): each side as one report,
    `ab:<run>/<side>`; one side by its folder; a side slowed by --slow-b left out."""
    path = tmp_path / store.STORE_NAME
    code, out, err = cli_run("history", "--store", path, "--add", write_ab(tmp_path / "x-y-cpu"))
    assert code == 0 and "added 2 run(s)" in out, err
    assert [r["report"] for r in store.runs(path)] == ["ab:x-y-cpu/A", "ab:x-y-cpu/B"]
    slowed = write_ab(tmp_path / "slow", slow_b="bf16_linear=0.5")
    assert cli_run("history", "--store", path, "--add", slowed)[1].endswith(
        f"added 1 run(s) of {slowed}\n"
    )
    assert cli_run("history", "--store", path, "--add", slowed / "A")[0] == 0
    code, out, err = cli_run("history", "--store", path, "--add", slowed / "B")
    assert code == 2 and err.count("\n") == 1 and "slowed by --slow-b" in err, err
    assert len(store.runs(path)) == 3


def test_rebuild_keeps_every_run_it_cannot_find_and_the_store_before(tmp_path):
    """A store of 6 runs (two of outputs/cpu, the first's report replaced since; an `ab` run's
    two; an imported report's two) rebuilt from outputs/: all 6 kept, the one found read again,
    and the store as it was beside it, byte for byte."""
    path = two_reports(tmp_path)
    theirs = write_report(tmp_path / "theirs", "t1", 5, repeat=2)
    assert cli_run("history", "--store", path, "--add", write_ab(tmp_path / "ab"), theirs)[0] == 0
    ids, before = [r["run_id"] for r in store.runs(path)], path.read_bytes()
    assert len(ids) == 6
    code, out, _ = cli_run("history", "--rebuild", "--store", path, "--outputs", path.parent)
    (backup,) = path.parent.glob(f"{store.STORE_NAME}.*.bak")
    assert code == 0 and "1 run(s); 5 run(s) not found there kept" in out and str(backup) in out
    assert [r["run_id"] for r in store.runs(path)] == ids and backup.read_bytes() == before
    assert cli_run("history", "--rebuild", "--store", path, "--outputs", path.parent)[0] == 0
    assert len(list(path.parent.glob(f"{store.STORE_NAME}.*.bak"))) == 2  # none replaced


def test_a_writer_during_rebuild_waits_and_keeps_its_run(tmp_path, monkeypatch):
    """--rebuild holds the store's lock: a run added meanwhile waits for it, then is added."""
    path = two_reports(tmp_path)
    late = write_report(tmp_path / "late", "late", 9)
    copying, go = threading.Event(), threading.Event()
    copy = shutil.copyfile

    def slow_copy(source, target):  # the backup, taken with the lock held
        copying.set()
        go.wait(10)
        return copy(source, target)

    monkeypatch.setattr(shutil, "copyfile", slow_copy)
    rebuilding = threading.Thread(target=rebuild.rebuild, args=(path.parent, path))
    rebuilding.start()
    assert copying.wait(10)
    writer = threading.Thread(target=store.add_report, args=(late, path))
    writer.start()
    writer.join(0.3)
    assert writer.is_alive()  # waiting for the lock
    go.set()
    rebuilding.join(10), writer.join(10)
    assert [r["run_id"] for r in store.runs(path)] == ["r1", "r2", "late"]


def test_the_environments_lock_is_stored_and_shown_beside_torch(tmp_path):
    report = write_report(tmp_path / "outputs" / "cpu", "r1", 1)
    run = json.loads((report / "run.json").read_text())
    run["environment"]["lock"] = LOCK
    (report / "run.json").write_text(json.dumps(run))
    store.remember(report)
    path = report.parent / store.STORE_NAME
    assert [r["lock"] for r in store.runs(path)] == [LOCK]
    code, out, _ = cli_run("history", "--store", path, "--csv")
    table = pd.read_csv(io.StringIO(out))
    assert code == 0 and list(table.columns[5:7]) == ["torch", "lock"]
    assert list(table["lock"]) == [LOCK]


def test_a_store_of_schema_1_is_migrated_and_keeps_its_runs(tmp_path):
    path = two_reports(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute("ALTER TABLE runs DROP COLUMN lock")  # as schema 1 made it
        con.execute("PRAGMA user_version = 1")
    code, out, _ = cli_run("history", "--store", path)
    assert code == 0 and "r1" in out and "r2" in out, out
    assert [r["lock"] for r in store.runs(path)] == [None, None]
    with contextlib.closing(sqlite3.connect(path)) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION


def test_a_change_of_lock_is_marked_in_the_trend_and_an_unrecorded_one_is_not():
    differ = "cpu 1a2b3c4d5e6f, 3 packages differ from the lock"
    line = pd.DataFrame(
        {"date": pd.date_range("2026-01-01", periods=3), "value": [1.0, 1.1, 1.2],
         "torch": "2.13", "device": "Test CPU", "allocator": None, "lock": [None, LOCK, differ]}
    )  # fmt: skip
    assert [what for _, _, what in trends.changes(line)] == [f"lock {LOCK} -> {differ}"]


def test_a_full_disk_is_exit_1_naming_the_store_and_loses_nothing(tmp_path, monkeypatch):
    path = two_reports(tmp_path)
    theirs = write_report(tmp_path / "theirs", "t1", 3, repeat=2)
    connect, before = sqlite3.connect, store.runs(path)

    def full(*args, **kwargs):  # the store cannot grow past the pages it has
        con = connect(*args, **kwargs)
        con.execute(f"PRAGMA max_page_count = {con.execute('PRAGMA page_count').fetchone()[0]}")
        return con

    monkeypatch.setattr(sqlite3, "connect", full)
    code, out, err = cli_run("history", "--store", path, "--add", theirs)
    assert code == 1 and not out and err.count("\n") == 1, err
    assert err.startswith(f"error: {path}: No space left on device"), err
    assert store.runs(path) == before
