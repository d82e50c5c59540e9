"""The committed reports keep the contract: matchable ids, and no time without a passing check."""

import json
from pathlib import Path

import pytest

from kernel_lib.params import ROOT
from kernel_lib.records import LOCAL_RESULTS_DIR, RESULTS_SUFFIX

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
