"""`history --rebuild` (results.rebuild): the store built again from the report folders equals
what the runners' hook added, every run it cannot find is kept with the store before it beside
it, and a writer meanwhile waits for it."""

import contextlib
import shutil
import sqlite3
import threading

from kernel_lib.results import rebuild, store


def test_rebuild_from_the_folders_equals_what_the_hooks_added(tmp_path, make_dated_run, cli_run):
    outputs = tmp_path / "outputs"
    store.remember(make_dated_run(outputs / "cpu", "r1", 1))
    store.remember(make_dated_run(outputs / "h100", "r2", 2, repeat=2))
    hooked = outputs / store.STORE_NAME
    rebuilt = tmp_path / "rebuilt.sqlite"
    assert cli_run("history", "--store", rebuilt, "--rebuild", "--outputs", outputs)[0] == 0

    def dump(path):
        with contextlib.closing(sqlite3.connect(path)) as con:
            return [sorted(con.execute(f"SELECT * FROM {t}")) for t in ("runs", "records")]

    assert dump(rebuilt) == dump(hooked) and len(dump(hooked)[0]) == 3


def test_rebuild_keeps_every_run_it_cannot_find_and_the_store_before(
    tmp_path, two_stored_runs, make_dated_run, make_ab_run, cli_run
):
    """A store of 6 runs (two of outputs/cpu, the first's report replaced since; an `ab` run's
    two; an imported report's two) rebuilt from outputs/: all 6 kept, the one found read again,
    and the store as it was beside it, byte for byte."""
    path = two_stored_runs(tmp_path)
    theirs = make_dated_run(tmp_path / "theirs", "t1", 5, repeat=2)
    assert (
        cli_run("history", "--store", path, "--add", make_ab_run(tmp_path / "ab"), theirs)[0] == 0
    )
    ids, before = [r["run_id"] for r in store.runs(path)], path.read_bytes()
    assert len(ids) == 6
    code, out, _ = cli_run("history", "--rebuild", "--store", path, "--outputs", path.parent)
    (backup,) = path.parent.glob(f"{store.STORE_NAME}.*.bak")
    assert code == 0 and "1 run(s); 5 run(s) not found there kept" in out and str(backup) in out
    assert [r["run_id"] for r in store.runs(path)] == ids and backup.read_bytes() == before
    assert cli_run("history", "--rebuild", "--store", path, "--outputs", path.parent)[0] == 0
    assert len(list(path.parent.glob(f"{store.STORE_NAME}.*.bak"))) == 2  # none replaced


def test_a_writer_during_rebuild_waits_and_keeps_its_run(
    tmp_path, monkeypatch, two_stored_runs, make_dated_run
):
    """--rebuild holds the store's lock: a run added meanwhile waits for it, then is added."""
    path = two_stored_runs(tmp_path)
    late = make_dated_run(tmp_path / "late", "late", 9)
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
