"""The results store (results.store): every run kept (by the runners' hook, `cloud collect` and
`history --add`), a damaged store, a newer schema and two writers at once one line each, nothing
lost; the gallery's trends from it. The `history` command: tests/compare/test_history.py; the
rebuild: test_rebuild.py; `regressions`: tests/compare/test_regressions.py."""

import contextlib
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
import pytest

from kernel_lib import params
from kernel_lib.report import trends
from kernel_lib.report.gallery import build_gallery
from kernel_lib.results import store
from tests import fakes
from tests.fakes import HEADLINE as KEY
from tests.fakes import RESULTS

OTHER = "moe.seed_same_dtype"  # the headline of a second notebook
LOCK = "cpu 1a2b3c4d5e6f, locked"


def test_adding_a_run_again_replaces_it(tmp_path, two_stored_runs):
    path = two_stored_runs(tmp_path)
    store.remember(tmp_path / "outputs" / "cpu")
    assert [r["run_id"] for r in store.runs(path)] == ["r1", "r2"]
    assert len(store.records(path, ["r2"])) == 2


def test_a_repeated_report_adds_each_run(tmp_path, two_stored_runs):
    path = two_stored_runs(tmp_path, repeat=3)
    rows = store.runs(path)
    assert [r["run_id"] for r in rows][-3:] == ["r2-run-1", "r2-run-2", "r2-run-3"]
    assert {r["report"] for r in rows} == {"r1", "r2"}


def one_line_refusal(cli_run, path: Path, *words: str) -> None:
    before = path.read_bytes()
    for command in ("history", "regressions"):
        code, out, err = cli_run(command, "--store", path)
        assert code == 2 and not out and err.count("\n") == 1 and str(path) in err, err
        assert all(word in err for word in words), err
    assert path.read_bytes() == before


def test_a_damaged_store_is_one_line_and_rebuild_never_replaces_it(
    tmp_path, two_stored_runs, cli_run
):
    """A store that is not one is refused by every command, `--rebuild` too (it may be someone's
    file): left byte for byte; moved aside, `--rebuild` builds a new one from the report."""
    path = two_stored_runs(tmp_path)
    path.write_bytes(b"not a database, a note someone saved here" * 100)
    one_line_refusal(
        cli_run, path, "not a results store", "move it aside, then", "history --rebuild"
    )
    with contextlib.closing(sqlite3.connect(path.with_name("empty.sqlite"))) as con:
        con.execute("PRAGMA user_version = 1")  # the version, but no tables
    one_line_refusal(
        cli_run, path.with_name("empty.sqlite"), "tables are missing", "move it aside"
    )
    before = path.read_bytes()
    code, out, err = cli_run("history", "--store", path, "--rebuild", "--outputs", path.parent)
    assert code == 2 and not out and err.count("\n") == 1 and path.read_bytes() == before, err
    path.rename(path.with_name("aside"))
    code, out, _ = cli_run("history", "--store", path, "--rebuild", "--outputs", path.parent)
    assert code == 0 and [r["run_id"] for r in store.runs(path)] == ["r2"]  # the kept report
    assert path.with_name("aside").read_bytes() == before


def test_a_store_of_a_newer_schema_is_one_line(tmp_path, two_stored_runs, cli_run):
    path = two_stored_runs(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    one_line_refusal(cli_run, path, f"schema {store.SCHEMA_VERSION + 1}", "newer")


def test_a_failing_store_never_fails_the_run(tmp_path, capsys, make_dated_run):
    report = make_dated_run(tmp_path / "outputs" / "cpu", "r1", 1)
    (tmp_path / "outputs" / store.STORE_NAME).write_bytes(b"garbage" * 50)
    store.remember(report)  # no exception
    err = capsys.readouterr().err
    assert err.startswith("warning: run not added") and err.count("\n") == 1
    assert (report / "run.json").exists()


def test_two_writers_at_once_both_kept(tmp_path, make_dated_run):
    """One writer holds the store's lock while another adds its run: the second waits on SQLite's
    busy timeout, and both runs are there afterwards."""
    path = tmp_path / store.STORE_NAME
    a = make_dated_run(tmp_path / "a", "ra", 1)
    b = make_dated_run(tmp_path / "b", "rb", 2)
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


def test_the_runner_adds_every_run_and_each_run_of_a_repeat(
    tmp_path, write_notebook, monkeypatch, cli_run, fake_execute
):
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


def test_cloud_collect_adds_the_reports_it_installs(tmp_path, make_dated_run, cli_run):
    make_dated_run(tmp_path / "bucket" / "cpu", "r1", 1, repeat=2)
    outputs = tmp_path / "outputs"
    assert cli_run("cloud", "collect", tmp_path / "bucket", "--out", outputs)[0] == 0
    rows = store.runs(outputs / store.STORE_NAME)
    assert [r["run_id"] for r in rows] == ["r1-run-1", "r1-run-2"]
    assert all(Path(r["folder"]).parent == (outputs / "cpu").resolve() for r in rows)


def test_the_gallery_draws_a_trend_and_marks_a_torch_upgrade(tmp_path, make_dated_run):
    outputs = tmp_path / "outputs"
    store.remember(make_dated_run(outputs / "cpu", "r1", 1))
    run_file = make_dated_run(tmp_path / "next", "r2", 2) / "run.json"
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


@pytest.fixture
def add_notebook(make_record):
    """`add_notebook(folder, name, run_id, rows=None)`: a second notebook in the report `folder`:
    its results (`rows`, default one headline of OTHER) and its run.json entry, as run `run_id`
    saved them."""

    def add(folder: Path, name: str, run_id: str, rows: list[dict] | None = None) -> None:
        if rows is None:
            seed = make_record("seed", 2.0, headline=OTHER, ratio_vs_baseline=1.2)
            rows = fakes.rows([seed], run_id)
        (folder / f"{name}{store.RESULTS_SUFFIX}").write_text(json.dumps(rows))
        run = json.loads((folder / "run.json").read_text())
        run["notebooks"].append(fakes.notebook(name, run_id))
        (folder / "run.json").write_text(json.dumps(run))

    return add


def test_a_run_of_some_notebooks_holds_only_their_records(
    tmp_path, make_dated_run, cli_run, add_notebook
):
    """`run --only bench` into a report that keeps notebook `other` from run r1: r2's rows are
    bench's alone, so OTHER's trend has r1's point and no point r2 never measured."""
    report = tmp_path / "outputs" / "cpu"
    make_dated_run(report, "r1", 1)
    add_notebook(report, "other", "r1")
    store.remember(report)
    kept = (report / f"other{store.RESULTS_SUFFIX}").read_text()
    shutil.rmtree(report)
    make_dated_run(report, "r2", 2)
    add_notebook(report, "other", "r1", json.loads(kept))  # as the runner keeps it
    store.remember(report)
    path = report.parent / store.STORE_NAME
    assert {r["notebook"] for r in store.records(path, ["r1"])} == {"bench", "other"}
    assert {r["notebook"] for r in store.records(path, ["r2"])} == {"bench"}
    code, out, _ = cli_run("history", "--store", path, "--key", OTHER, "--csv")
    assert code == 0 and list(pd.read_csv(io.StringIO(out))["run_id"]) == ["r1"], out


def test_a_record_id_saved_twice_in_a_run_is_refused_in_one_line(
    tmp_path, capsys, two_stored_runs, make_dated_run, cli_run, add_notebook
):
    path = two_stored_runs(tmp_path)
    before = path.read_bytes()
    theirs = make_dated_run(tmp_path / "theirs", "t1", 3)
    add_notebook(theirs, "copy", "t1", json.loads((theirs / RESULTS).read_text()))
    code, out, err = cli_run("history", "--store", path, "--add", theirs)
    assert code == 2 and not out and err.count("\n") == 1, err
    assert "2 record id(s) more than once" in err and "bench, copy" in err, err
    assert path.read_bytes() == before
    store.remember(theirs, path=path)  # the runners' hook: one warning, the run not added
    assert capsys.readouterr().err.count("\n") == 1 and path.read_bytes() == before


def test_the_environments_lock_is_stored_and_shown_beside_torch(tmp_path, make_dated_run, cli_run):
    report = make_dated_run(tmp_path / "outputs" / "cpu", "r1", 1)
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


def test_a_store_of_schema_1_is_migrated_and_keeps_its_runs(tmp_path, two_stored_runs, cli_run):
    path = two_stored_runs(tmp_path)
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


def test_a_full_disk_is_exit_1_naming_the_store_and_loses_nothing(
    tmp_path, monkeypatch, two_stored_runs, make_dated_run, cli_run
):
    path = two_stored_runs(tmp_path)
    theirs = make_dated_run(tmp_path / "theirs", "t1", 3, repeat=2)
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
