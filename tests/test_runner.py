"""Failure isolation: one notebook per outcome, all in one run, each classified; reports survive."""

import json
import os

import pytest

from kernel_lib import runner
from kernel_lib.params import load_plan


def load(workbook, **kwargs):
    return load_plan(
        "all",
        parameters_dir=workbook / "parameters",
        notebooks_dir=workbook / "notebooks",
        **kwargs,
    )


@pytest.fixture(scope="module")
def report(workbook):
    out = workbook / "outputs" / "all"
    results = {r.notebook: r for r in runner.run_plan(load(workbook), out, progress=False)}
    return workbook, out, results


def test_each_outcome_is_classified(report):
    _, _, results = report
    assert {n: r.status for n, r in results.items()} == {
        "good": "ok",
        "raises": "failed",
        "sleeps": "timed out",
        "exits": "kernel died",
        "absent": "skipped",
        "wrong": "failed",
    }
    assert results["wrong"].detail == "1 records failed their check: c/broken_kernel"
    assert "ValueError: broken on purpose" in results["raises"].detail
    assert results["raises"].detail.startswith(
        "cell 4"
    )  # In [4]: parameters, injected, x = 1, raise
    assert results["absent"].detail == "no device here"


def test_every_notebook_still_gets_its_reports(report):
    _, out, _ = report
    for name in ("good", "raises", "sleeps", "exits", "absent"):
        assert (out / f"{name}.ipynb").exists() and (out / f"{name}.html").exists(), name
    for name in ("index.html", "SUMMARY.md", "results.csv", "run.json"):
        assert (out / name).exists()
    assert "<img" in (out / "good.html").read_text() or "print" in (out / "good.html").read_text()


def test_parameters_were_injected_with_the_working_dir_set(report):
    _, out, _ = report
    nb = json.loads((out / "good.ipynb").read_text())
    assert nb["metadata"]["papermill"]["parameters"] == {"n": 21}
    assert (out / "good.results.json").exists()  # written by the notebook into its cwd


def test_only_replaces_one_notebook_and_keeps_the_rest(report):
    wb, out, _ = report
    runner.run_plan(load(wb, only=["good"]), out, progress=False)
    run = json.loads((out / "run.json").read_text())
    assert sorted(r["notebook"] for r in run["notebooks"]) == [
        "absent",
        "exits",
        "good",
        "raises",
        "sleeps",
        "wrong",
    ]
    assert (out / "raises.html").exists()
    by_name = {r["notebook"]: r for r in run["notebooks"]}
    assert (
        by_name["good"]["run_id"] == run["run_id"] != by_name["absent"]["run_id"]
    )  # kept rows keep their run


def test_saved_records_carry_the_run_id_and_platform(report):
    _, out, _ = report
    run = json.loads((out / "run.json").read_text())
    (row,) = json.loads((out / "absent.results.json").read_text())
    assert row["platform"] == "all" and row["record_id"].startswith("all/t/c/i/")
    assert row["run_id"] == next(
        r["run_id"] for r in run["notebooks"] if r["notebook"] == "absent"
    )


def test_interrupted_run_leaves_the_previous_report(report, monkeypatch):
    wb, out, _ = report
    before = sorted(p.name for p in out.iterdir())

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "execute", interrupt)
    with pytest.raises(KeyboardInterrupt):
        runner.run_plan(load(wb), out, progress=False)
    assert sorted(p.name for p in out.iterdir()) == before
    assert not [p for p in out.parent.iterdir() if p.name.startswith((".staging", ".previous"))]


def test_a_failed_rerun_keeps_the_good_results_and_marks_them_stale(tmp_path, write_notebook):
    nbs, prm = tmp_path / "notebooks", tmp_path / "parameters"
    nbs.mkdir(), prm.mkdir()
    write_notebook(
        nbs / "nb.ipynb",
        "assert n > 0, 'n must be positive'",
        "from kernel_lib.records import save_records\nsave_records([], 'nb')",
    )
    (prm / "p.yaml").write_text("workbook: {notebooks: [nb]}\n")
    out = tmp_path / "out"
    good = load_plan("p", parameters_dir=prm, notebooks_dir=nbs)
    runner.run_plan(good, out, progress=False)
    saved = (out / "nb.results.json").read_text()
    bad = load_plan("p", parameters_dir=prm, notebooks_dir=nbs, overrides={"n": -4})
    (result,) = runner.run_plan(bad, out, progress=False)
    assert result.status == "failed" and "showing the results of run" in result.stale_results
    assert (out / "nb.results.json").read_text() == saved  # the good results survive
    assert (out / "nb.failed.ipynb").exists() and "STALE" in (out / "SUMMARY.md").read_text()
    (result,) = runner.run_plan(good, out, progress=False)
    assert result.stale_results == "" and not (out / "nb.failed.ipynb").exists()


def test_a_killed_run_leaves_no_staging_behind(tmp_path):
    out = tmp_path / "out"
    dead = tmp_path / ".staging-out-999999999"  # no such process
    dead.mkdir()
    alive = tmp_path / f".staging-out-{os.getpid()}"  # a run in progress is left alone
    alive.mkdir()
    runner._clean_after_killed_runs(out)
    assert not dead.exists() and alive.exists()
    previous = tmp_path / ".previous-out-999999999"  # killed mid-swap: the old report comes back
    previous.mkdir()
    runner._clean_after_killed_runs(out)
    assert out.exists() and not previous.exists()
