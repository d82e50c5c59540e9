"""Fake records, runs and report folders for the tests, and the constants they share.

Tests take `record` and `report` as the `make_record` and `make_run` fixtures (tests/conftest.py);
they are plain functions here for what is built when a test module is imported (a parametrize
table, a hypothesis strategy)."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Iterable
from pathlib import Path

import nbformat

from kernel_lib.records import RESULTS_SUFFIX, Record, stamp, to_dicts

RESULTS = f"bench{RESULTS_SUFFIX}"  # the results file of the fake `bench` notebook
# A check that passed, as kernel_lib.checks.Check.as_dict() saves it.
PASSED = {"reference": "fp64", "rel_error": 1e-6, "tolerance": 1e-3, "pass": True}
# A name from outside (a folder from `cloud collect`, a plug-in's name) that runs a script where a
# page shows it unescaped.
MARKUP = "x<img src=x onerror=document.body.dataset.pwned=1>"
HEADLINE = "moe.forward_vs_dense"  # a headline declared in kernel_lib.headlines
MACHINE = {"cores": 2, "load_start": [0.1, 0.1, 0.1], "load_end": [0.2, 0.1, 0.1]}
# run.json of run r1 of the `bench` notebook on the cpu platform, as the runner writes it.
RUN = {
    "platform": "cpu",
    "parameters": "parameters/cpu.yaml",
    "description": "",
    "started_utc": "2026-01-01T00:00:00+00:00",
    "finished_utc": "2026-01-01T00:01:00+00:00",
    "run_id": "r1",
    "git": "abc1234",
    "command": "python -m kernel_lib run",
    "environment": {"backend": "cpu", "name": "Test CPU", "memory_GiB": 16.0, "torch": "2.13"},
    "notebooks": [
        {
            "notebook": "bench",
            "status": "ok",
            "detail": "",
            "seconds": 1.5,
            "run_id": "r1",
            "git": "abc1234",
            "started_utc": "2026-01-01T00:00:00+00:00",
            "stale_results": "",
            "machine": MACHINE,
        }
    ],
}


def record(
    case: str = "small",
    ms: float | None = 1.0,
    *,
    topic: str = "gemm",
    implementation: str = "torch_mm",
    device: str = "Test CPU",
    backend: str = "cpu",
    dtype: str | None = "float32",
    shape: dict | None = None,
    samples: Iterable[float] | None = None,
    status: str = "ok",
    reason: str = "",
    **fields,
) -> Record:
    """A record of `case` timed at `ms` and checked, as kernel_lib.measure leaves one: p10, p90
    and min at 0.9, 1.1 and 0.8 of the median, 3 reps, `samples` (default: p10, median, p90), a
    passed check (PASSED), 1/ms TFLOP/s and an SQNR of 40 dB; shape n=64 in rows. Any other field
    of Record by keyword (headline, ratio_vs_baseline, ratio_low, ratio_high, baseline, flags,
    check, metrics, ...), each overriding the default. `ms=None`, or a status other than ok (with
    its `reason`, default '<status> on purpose'): untimed and unchecked, its fields only."""
    identity = {
        "topic": topic,
        "case": case,
        "implementation": implementation,
        "device": device,
        "backend": backend,
        "dtype": dtype,
        "shape": dict({"n": 64, "layout": "rows"} if shape is None else shape),
    }
    if status != "ok":
        reason = reason or f"{status} on purpose"
        return Record(**identity, status=status, reason=reason, **fields)
    if ms is None:
        return Record(**identity, reason=reason, **fields)
    timed = {
        "median_ms": ms,
        "p10_ms": ms * 0.9,
        "p90_ms": ms * 1.1,
        "min_ms": ms * 0.8,
        "reps": 3,
        "method": "test",
        "samples_ms": tuple(samples) if samples is not None else (ms * 0.9, ms, ms * 1.1),
        "tflops": 1.0 / ms,
        "check": dict(PASSED),
        "metrics": {"sqnr_db": 40.0},
    }
    return Record(**identity, reason=reason, **{**timed, **fields})


def default_records() -> list[Record]:
    """The `bench` notebook's records in a default report: `small` (1 ms), `large` (4 ms, a flag
    of a measurement problem) and `huge`, skipped."""
    return [
        record("small", 1.0),
        record("large", 4.0, flags=("fraction_of_peak 1.20 > 1: on purpose",)),
        record("huge", status="skipped", reason="no", dtype=None, shape={}),
    ]


def rows(saved: Iterable[Record], run_id: str = "r1", platform: str = "cpu") -> list[dict]:
    """Records as a results file holds them: stamped (`stamp`) and as dicts (`to_dicts`)."""
    return to_dicts(stamp(saved, run_id=run_id, platform=platform))


ROWS = rows(default_records())  # RESULTS of the default report, as saved


def notebook(name: str = "bench", run_id: str = "r1", **fields) -> dict:
    """A notebook's entry in run.json (RUN's, named `name`, of run `run_id`), `fields` changed."""
    return {**copy.deepcopy(RUN["notebooks"][0]), "notebook": name, "run_id": run_id, **fields}


def run_json(
    *,
    run_id: str = RUN["run_id"],
    platform: str = RUN["platform"],
    started_utc: str = RUN["started_utc"],
    git: str = RUN["git"],
    environment: dict | None = None,
    notebooks: Iterable[str | dict] = ("bench",),
    entry: dict | None = None,
    **fields,
) -> dict:
    """run.json of a run as the runner writes it (RUN): its parameter file the platform's, each of
    `notebooks` a name (its entry `notebook(name, run_id, **entry)`) or an entry as given; `fields`
    added or changed (repeat, budget_s, ...)."""
    return {
        **RUN,
        "platform": platform,
        "parameters": f"parameters/{platform}.yaml",
        "run_id": run_id,
        "started_utc": started_utc,
        "git": git,
        "environment": copy.deepcopy(RUN["environment"] if environment is None else environment),
        "notebooks": [
            notebook(n, run_id, **(entry or {})) if isinstance(n, str) else n for n in notebooks
        ],
        **fields,
    }


def measured_run(platform: str, facts, notebooks: Iterable[str], **fields) -> dict:
    """run.json of run r-<platform> whose records were measured on `facts` (records.measured):
    its environment the facts' (a locked one), each of `notebooks` ok in 1 s."""
    run_id = f"r-{platform}"
    entries = [
        {"notebook": nb, "status": "ok", "detail": "", "seconds": 1.0, "run_id": run_id}
        for nb in notebooks
    ]
    environment = {**facts.as_dict(), "lock": "cpu 0123456789ab, locked"}
    return run_json(
        run_id=run_id, platform=platform, environment=environment, notebooks=entries, **fields
    )


Records = Iterable[Record] | dict[str, Iterable[Record]]


def report(
    folder: Path,
    records: Records | Callable[[int], Records] | None = None,
    *,
    name: str = "bench",
    run_id: str = RUN["run_id"],
    platform: str = RUN["platform"],
    notebooks: Iterable[str | dict] | None = None,
    repeat: int = 1,
    run_ids: Iterable[str] | None = None,
    **run,
) -> Path:
    """A report folder as the runner leaves it; returns `folder`.

    One run: each notebook's results file (`records` stamped with `run_id` and `platform`, as
    save_records writes them: `<name>.results.json`; a dict of name -> records for several
    notebooks; default `default_records()`, as ROWS) and run.json (`run_json` of `run`:
    started_utc, git, environment, entry, ...; its notebooks those of the results files unless
    `notebooks` are given).
    `repeat=N`: run-1/ ... run-N/, each such a run (of `records(k)` where `records` is a function
    of k; run ids `run_ids` or `<run_id>-run-<k>`), and their aggregate run.json, as `run --repeat
    N` leaves them."""
    if repeat > 1:
        from kernel_lib.report.aggregate import write_aggregate_run

        ids = list(run_ids) if run_ids is not None else []
        for k in range(1, repeat + 1):
            report(
                folder / f"run-{k}",
                records(k) if callable(records) else records,
                name=name,
                run_id=ids[k - 1] if ids else f"{run_id}-run-{k}",
                platform=platform,
                notebooks=notebooks,
                **run,
            )
        base = run_json(run_id=run_id, platform=platform, **run)
        del base["notebooks"]
        write_aggregate_run(folder, {**base, "repeat": repeat})
        return folder
    if callable(records):
        records = records(1)
    if records is None:
        records = default_records()
    by_name = records if isinstance(records, dict) else {name: records}
    folder.mkdir(parents=True, exist_ok=True)
    for notebook_name, saved in by_name.items():
        text = json.dumps(rows(saved, run_id, platform), indent=1)
        (folder / f"{notebook_name}{RESULTS_SUFFIX}").write_text(text)
    run_file = run_json(
        run_id=run_id,
        platform=platform,
        notebooks=list(by_name) if notebooks is None else notebooks,
        **run,
    )
    (folder / "run.json").write_text(json.dumps(run_file, indent=1))
    return folder


def fake_execute(notebook, output, parameters, **options):
    """`kernel_lib.run.runner.execute` of a notebook run in no time: an empty executed notebook."""
    from kernel_lib.run.execute import NotebookResult

    nbformat.write(nbformat.v4.new_notebook(), str(output))
    return NotebookResult(notebook.stem, "ok", "", 0.0)


@functools.cache
def another_device() -> str:
    """A platform file for a device this machine is not: a TPU's here, an H100's on a TPU."""
    from kernel_lib.platform import device_facts, device_of_platform, is_device

    return next(
        p for p in ("gcp-tpu-v5e", "h100") if not is_device(device_facts(), device_of_platform(p))
    )
