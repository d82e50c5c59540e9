"""Failure isolation: one notebook per outcome, all in one run, each classified; reports survive."""

import io
import json
import os

import nbformat
import pandas as pd
import pytest
from tqdm import tqdm

from kernel_lib.locks import lock_state
from kernel_lib.params import load_plan
from kernel_lib.results import outdir
from kernel_lib.run.execute import _saved_status
from kernel_lib.run.machine import machine_load
from kernel_lib.run.render import to_html
from kernel_lib.run.runner import run_plan, run_repeated

pytestmark = pytest.mark.slow  # executes notebooks


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
    results = {r.notebook: r for r in run_plan(load(workbook), out, progress=False)}
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


def test_a_raising_cell_does_not_stop_the_cells_after_it(report):
    _, out, results = report
    assert results["raises"].detail.endswith("(and 1 more cells raised)")
    assert "\n" not in results["raises"].detail  # one line, whatever the message
    assert (out / "raises.results.json").exists()  # the last cell still ran and saved
    nb = nbformat.read(out / "raises.ipynb", as_version=4)
    # the first cell links the cells that raised, the first first (papermill's marker: the last)
    top = nb.cells[0].source
    assert top.index("In [4]</a> ValueError") < top.index("In [5]</a> NameError")
    assert sum("the cells after it ran on" in c.source for c in nb.cells) == 2


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
    assert (out / "good.results.json").exists()  # the runner hands the notebook its report folder


def test_only_replaces_one_notebook_and_keeps_the_rest(report):
    wb, out, _ = report
    run_plan(load(wb, only=["good"]), out, progress=False)
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


def test_saved_records_carry_the_run_id_platform_and_lock(report):
    _, out, _ = report
    run = json.loads((out / "run.json").read_text())
    (row,) = json.loads((out / "absent.results.json").read_text())
    assert row["platform"] == "all" and row["record_id"].startswith("all/t/c/i/")
    assert row["lock"] == run["environment"]["lock"] == lock_state().label
    assert row["run_id"] == next(
        r["run_id"] for r in run["notebooks"] if r["notebook"] == "absent"
    )


def test_interrupted_run_leaves_the_previous_report(report, monkeypatch):
    wb, out, _ = report
    before = sorted(p.name for p in out.iterdir())

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("kernel_lib.run.runner.execute", interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_plan(load(wb), out, progress=False)
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
    run_plan(good, out, progress=False)
    saved = (out / "nb.results.json").read_text()
    bad = load_plan("p", parameters_dir=prm, notebooks_dir=nbs, overrides={"n": -4})
    (result,) = run_plan(bad, out, progress=False)
    assert result.status == "failed" and "showing the results of run" in result.stale_results
    assert (out / "nb.results.json").read_text() == saved  # the good results survive
    assert (out / "nb.failed.ipynb").exists() and "STALE" in (out / "SUMMARY.md").read_text()
    (result,) = run_plan(good, out, progress=False)
    assert result.stale_results == "" and not (out / "nb.failed.ipynb").exists()


def test_a_killed_run_leaves_no_staging_behind(tmp_path):
    out = tmp_path / "out"
    dead = tmp_path / ".staging-out-999999999"  # no such process
    dead.mkdir()
    alive = tmp_path / f".staging-out-{os.getpid()}"  # a run in progress is left alone
    alive.mkdir()
    outdir.clean_after_killed_runs(out)
    assert not dead.exists() and alive.exists()
    previous = tmp_path / ".previous-out-999999999"  # killed mid-swap: the old report comes back
    previous.mkdir()
    outdir.clean_after_killed_runs(out)
    assert out.exists() and not previous.exists()


TIMED = """import os, random
from kernel_lib.platform import device_facts
from kernel_lib.records import measured, save_records
from kernel_lib.timing import Timing
ms = random.uniform(1.0, 2.0)
t = Timing(ms, ms * 0.9, ms * 1.1, ms * 0.8, 5, "made up", None)
save_records([measured("t", "c", "i", t, facts=device_facts())], "timed")
print("kernel pid", os.getpid())"""


def _kernel_pid(path) -> str:
    nb = json.loads(path.read_text())
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    return text.split("kernel pid")[-1].strip()


def test_repeat_keeps_every_run_and_aggregates_them(tmp_path, one_notebook_plan):
    plan = one_notebook_plan(TIMED)
    out = tmp_path / "outputs" / "p"
    results = run_repeated(plan, out, 2, progress=False)
    assert [r.status for r in results] == ["ok", "ok"]
    assert results[0].run_id.endswith("-run-1") and results[1].run_id.endswith("-run-2")
    runs = [out / "run-1", out / "run-2"]
    for run in runs:  # each run is a full report folder
        for name in ("timed.ipynb", "timed.html", "timed.results.json", "index.html", "run.json"):
            assert (run / name).exists(), run / name
    assert _kernel_pid(runs[0] / "timed.ipynb") != _kernel_pid(runs[1] / "timed.ipynb")
    run = json.loads((out / "run.json").read_text())
    assert run["repeat"] == 2 and [r["folder"] for r in run["runs"]] == ["run-1", "run-2"]
    medians = [json.loads((r / "timed.results.json").read_text())[0]["median_ms"] for r in runs]
    (row,) = pd.read_csv(out / "results.csv").to_dict("records")
    assert row["median_ms"] == pytest.approx(sum(medians) / 2)  # the median of two
    assert (row["median_ms_min"], row["median_ms_max"]) == pytest.approx(sorted(medians))
    assert row["run_ids"] == " ".join(f"run-{i + 1}:{r.run_id}" for i, r in enumerate(results))
    index = (out / "index.html").read_text()
    assert 'href="run-1/timed.html"' in index and 'href="run-2/timed.html"' in index
    assert "Records across runs" in index and "Correctness: checks per notebook" in index
    assert 'href="p/index.html"' in (out.parent / "index.html").read_text()  # the gallery
    run_repeated(plan, out, 1, progress=False, replace=True)  # back to one run (--replace)
    assert not list(out.glob("run-*")) and (out / "timed.html").exists()
    assert "repeat" not in json.loads((out / "run.json").read_text())


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", "51", "100000"])
def test_bad_repeat_exits_2_with_one_line(value, capsys, tmp_path):
    from kernel_lib import __main__ as cli

    argv = ["run", "--platform", "ci", "--repeat", value, "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: --repeat must be an integer from 1 to 50") and err.count("\n") == 1
    )
    assert not (tmp_path / "o").exists()


def test_a_failed_html_export_keeps_the_run(tmp_path, monkeypatch, one_notebook_plan):
    """On an H100 with nbconvert's templates missing, the export raised and the run was lost."""
    plan = one_notebook_plan("x = 1")

    def no_templates(notebook):
        raise ValueError("No template sub-directory with name 'lab' found in:\n\t/usr/share")

    monkeypatch.setattr("kernel_lib.run.runner.to_html", no_templates)
    out = tmp_path / "out"
    (result,) = run_plan(plan, out, progress=False)
    assert result.status == "ok" and (out / "timed.ipynb").exists() and (out / "run.json").exists()
    assert (
        result.detail
        == "no HTML (ValueError: No template sub-directory with name 'lab' found in:)"
    )


def test_a_notebook_run_on_a_busy_machine_is_flagged(tmp_path, monkeypatch, one_notebook_plan):
    plan = one_notebook_plan(
        "from kernel_lib.records import save_records\nsave_records([], 'timed')",
    )
    busy = 4.0 * (os.cpu_count() or 1)
    monkeypatch.setattr(os, "getloadavg", lambda: (busy, 1.0, 1.0))
    out = tmp_path / "out"
    (result,) = run_plan(plan, out, progress=False)
    machine = json.loads((out / "run.json").read_text())["notebooks"][0]["machine"]
    assert machine["load_start"] == [busy, 1.0, 1.0] and machine["cores"] == os.cpu_count()
    assert "1-min load" in machine["busy"] and result.machine == machine
    summary = (out / "SUMMARY.md").read_text()
    assert "measured on a busy machine" in summary.split("## Flags")[1]
    assert "BUSY: 1-min load" in (out / "index.html").read_text()


def test_machine_load_reads_steal_over_the_run():
    start = {"loadavg": [0.5, 0.5, 0.5], "jiffies": (10, 1000)}
    end = {"loadavg": [0.7, 0.5, 0.5], "jiffies": (110, 2000)}
    machine = machine_load(start, end)
    assert machine["steal_fraction"] == pytest.approx(0.1)
    assert "steal 10%" in machine["busy"]
    calm = machine_load({**start, "jiffies": None}, end)
    assert calm["steal_fraction"] is None and calm["busy"] == ""


def test_html_drops_progress_bars_but_keeps_other_stderr(tmp_path):
    bar = io.StringIO()
    for _ in tqdm(range(3), desc="timing", file=bar, mininterval=0):
        pass
    cell = nbformat.v4.new_code_cell("run()")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text=bar.getvalue()),
        nbformat.v4.new_output("stream", name="stderr", text="\x1b[A"),
        nbformat.v4.new_output("stream", name="stderr", text="\n"),
        nbformat.v4.new_output("stream", name="stderr", text="UserWarning: keep me\n"),
        nbformat.v4.new_output("stream", name="stdout", text="result 42\n"),
    ]
    nb = nbformat.v4.new_notebook(cells=[cell])
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, str(path))
    page = to_html(path).read_text()
    assert "\r" not in page and "%|" not in page and "it/s" not in page and "timing" not in page
    assert "keep me" in page and "result 42" in page
    kept = nbformat.read(str(path), as_version=4).cells[0].outputs
    assert len(kept) == 5 and "\r" in kept[0]["text"]  # the .ipynb keeps them


def test_a_failed_candidate_fails_its_notebook(tmp_path):
    path = tmp_path / "nb.results.json"
    rows = [
        {"case": "c", "implementation": "ok_one", "status": "ok", "reason": ""},
        {"case": "c", "implementation": "triton", "status": "failed", "reason": "Error"},
    ]
    path.write_text(json.dumps(rows))
    assert _saved_status(path) == ("failed", "1 records raised: c/triton")
