"""The `history` command (compare.history) on the results store: the runs and a headline's
trend, `--add` of a report made elsewhere or of an `ab` run; compare's names for the store's runs
(`cpu@latest`). Its `regressions` command: test_regressions.py."""

import io

import pandas as pd

from kernel_lib.results import store
from tests.fakes import HEADLINE as KEY


def test_history_lists_both_runs_and_a_headlines_trend(tmp_path, two_stored_runs, cli_run):
    path = two_stored_runs(tmp_path)
    code, out, _ = cli_run("history", "--store", path)
    assert code == 0 and "r1" in out and "r2" in out and "def5678" in out
    assert f"{KEY} 1.5x" in out
    code, out, _ = cli_run("history", "--store", path, "--key", KEY, "--csv")
    trend = pd.read_csv(io.StringIO(out))
    assert code == 0 and list(trend["run_id"]) == ["r1", "r2"]
    assert list(trend["value"]) == [1.5, 1.5] and list(trend["git"]) == ["abc1234", "def5678"]
    assert cli_run("history", "--store", path, "--key", "no.such")[0] == 2


def test_an_imported_report_folder_adds_its_runs(
    tmp_path, two_stored_runs, make_dated_run, cli_run
):
    """`history --add`: a report made elsewhere (a colleague's, a copied folder) joins the store;
    a folder that is not a report is one line, exit 2, and nothing is added."""
    path = two_stored_runs(tmp_path)
    theirs = make_dated_run(tmp_path / "theirs" / "cpu", "t1", 3, repeat=2)
    code, out, err = cli_run("history", "--store", path, "--add", theirs, tmp_path / "nothing")
    assert code == 2 and not out and err.count("\n") == 1 and "nothing" in err, err
    assert len(store.runs(path)) == 2
    code, out, _ = cli_run("history", "--store", path, "--add", theirs)
    assert code == 0 and "added 2 run(s)" in out
    assert [r["report"] for r in store.runs(path)] == ["r1", "r2", "t1", "t1"]


def test_history_add_takes_an_ab_run_as_ab_adds_it(tmp_path, make_ab_run, cli_run):
    """`history --add .cache/ab/<run>` (docs/history.md): each side as one report,
    `ab:<run>/<side>`; one side by its folder; a side slowed by --slow-b left out."""
    path = tmp_path / store.STORE_NAME
    code, out, err = cli_run(
        "history", "--store", path, "--add", make_ab_run(tmp_path / "x-y-cpu")
    )
    assert code == 0 and "added 2 run(s)" in out, err
    assert [r["report"] for r in store.runs(path)] == ["ab:x-y-cpu/A", "ab:x-y-cpu/B"]
    slowed = make_ab_run(tmp_path / "slow", slow_b="bf16_linear=0.5")
    assert cli_run("history", "--store", path, "--add", slowed)[1].endswith(
        f"added 1 run(s) of {slowed}\n"
    )
    assert cli_run("history", "--store", path, "--add", slowed / "A")[0] == 0
    code, out, err = cli_run("history", "--store", path, "--add", slowed / "B")
    assert code == 2 and err.count("\n") == 1 and "slowed by --slow-b" in err, err
    assert len(store.runs(path)) == 3


def test_compare_names_runs_from_the_store(tmp_path, monkeypatch, two_stored_runs, cli_run):
    monkeypatch.setenv(store.STORE_ENV, str(two_stored_runs(tmp_path, repeat=3, scale=1.5)))
    code, out, _ = cli_run("compare", "cpu@previous", "--", "cpu@latest")
    assert code == 1 and "gemm/large" in out and "slower" in out, out
    code, out, _ = cli_run("compare", "r1-run-1", "--", "r2-run-1")  # one run a side: samples
    assert code == 1 and "gemm/large" in out, out
    for name in ("cpu@earliest", "gpu@latest", "no-such-run"):
        code, out, err = cli_run("compare", "cpu@latest", "--", name)
        assert code == 2 and err.count("\n") == 1 and name in err, err
