"""Failure isolation: one notebook per outcome, all in one run, each classified; reports survive."""

import json

import pytest

from kernel_lib import runner
from kernel_lib.params import load_plan


def load(workbook, **kwargs):
    return load_plan("all", parameters_dir=workbook / "parameters", notebooks_dir=workbook / "notebooks", **kwargs)


@pytest.fixture(scope="module")
def report(workbook):
    out = workbook / "outputs" / "all"
    results = {r.notebook: r for r in runner.run_plan(load(workbook), out, progress=False)}
    return workbook, out, results


def test_each_outcome_is_classified(report):
    _, _, results = report
    assert {n: r.status for n, r in results.items()} == {
        "good": "ok", "raises": "failed", "sleeps": "timed out", "exits": "kernel died", "absent": "skipped",
    }
    assert "ValueError: broken on purpose" in results["raises"].detail
    assert results["raises"].detail.startswith("cell 4")  # In [4]: parameters, injected, x = 1, raise
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
    assert sorted(r["notebook"] for r in run["notebooks"]) == ["absent", "exits", "good", "raises", "sleeps"]
    assert (out / "raises.html").exists()


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
