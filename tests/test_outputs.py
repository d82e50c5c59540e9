"""The committed reports keep the contract: matchable ids, and no time without a passing check."""

import json
from pathlib import Path

import pytest

from kernel_lib.params import ROOT
from kernel_lib.records import LOCAL_RESULTS_DIR, RESULTS_SUFFIX
from kernel_lib.report import lead

# Report folders with saved records (outputs/reference/ keeps only its notebooks in git; the
# git-ignored outputs/local/ holds runs by hand, no report).
REPORTS = sorted(
    p
    for p in (ROOT / "outputs").iterdir()
    if p != LOCAL_RESULTS_DIR and any(p.glob(f"*{RESULTS_SUFFIX}"))
)
FILES = [f for report in REPORTS for f in sorted(report.glob(f"*{RESULTS_SUFFIX}"))]


def _rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())


@pytest.mark.parametrize("report", REPORTS, ids=lambda p: p.name)
def test_record_ids_are_unique_in_a_run(report):
    ids = [r["record_id"] for f in report.glob(f"*{RESULTS_SUFFIX}") for r in _rows(f)]
    assert ids and len(set(ids)) == len(ids)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_timed_ok_record_passed_its_check(path):
    for r in _rows(path):
        assert r["run_id"] and r["record_id"]
        if r["status"] == "ok" and r["median_ms"] is not None:
            assert r["check"] and r["check"]["pass"] is True, r["record_id"]
            assert len(r["samples_ms"]) == r["reps"], r["record_id"]


def _cells(path: Path) -> list[tuple[str, str]]:
    """A notebook's cells (type, source), without the findings cell the runner puts first and the
    parameters cell papermill injects."""
    cells = json.loads(path.read_text())["cells"]
    added = {lead.TAG, "injected-parameters"}
    return [
        (c["cell_type"], "".join(c["source"]))
        for c in cells
        if not added & set(c["metadata"].get("tags", []))
    ]


@pytest.mark.parametrize(
    "notebook", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem
)
def test_the_nbval_reference_notebooks_are_this_revisions(notebook):
    """`make test` re-executes outputs/reference/*.ipynb and reads the records they save: they must
    be the notebooks of this revision, or it would check an old one (after editing a notebook:
    `make reference`)."""
    assert _cells(ROOT / "outputs" / "reference" / notebook.name) == _cells(notebook)
