"""`python -m kernel_lib export --format pytorch-v3|bmf DIR [--out FILE]`: a report's timings in
the formats benchmark dashboards ingest.

Only `ok` records with a time are exported (skipped, failed and wrong records, and untimed ones
such as device facts, are not timings). A folder holding `run-<k>/` subfolders exports every run.

- `pytorch-v3`: the PyTorch OSS benchmark database v3 record (pytorch/test-infra,
  `clickhouse_db_schema/oss_ci_benchmark_v3/schema.sql`): a JSON list of objects with `benchmark`
  {name, mode, dtype, extra_info}, `model` {name, type, backend, origins, extra_info}, `inputs`,
  `dependencies`, `metric` {name, benchmark_values, target_value, extra_info} and `runners`
  [{name, type, cpu_info, cpu_count, mem_info, avail_mem_in_gb, gpu_info, gpu_count,
  gpu_mem_info, avail_gpu_mem_in_gb, extra_info}]. One object per record and run; the metric is
  `latency_ms` and `benchmark_values` holds every timed call (`samples_ms`) of that run.
  `extra_info` maps hold strings only (the table's type is Map(String, String)). The upload step
  of a CI job adds the fields about the change (repo, head_sha, workflow_id, job_id, timestamp).
  `benchmark.mode` is the schema's "training" (our `forward_backward`) or "inference" (anything
  else); our own `mode` is kept in `benchmark.extra_info.mode`.
- `bmf`: the Bencher Metric Format (https://bencher.dev/docs/reference/bencher-metric-format):
  {benchmark name: {measure: {value, lower_value, upper_value}}}, benchmark name = `record_id`.
  Measure `latency` (Bencher's built-in measure, in nanoseconds): value = median, lower/upper =
  p10/p90 of the calls; with several runs value = median of the run medians and lower/upper = the
  smallest/largest run median. Measures `tflops` and `gbps` (value only) where the record has them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from kernel_lib.compare import CompareError, runs_with_records
from kernel_lib.params import ParameterError
from kernel_lib.records import RESULTS_SUFFIX
from kernel_lib.results.files import read_results, read_run
from kernel_lib.results.folders import RUN_FILE
from kernel_lib.results.writes import output_file, write_text

FORMATS = ("pytorch-v3", "bmf")
BENCHMARK_NAME = "kernel-workbook"
V3_METRIC = "latency_ms"
NS_PER_MS = 1e6


def timed_records(folder: str | Path) -> list[dict]:
    """The ok records with a time of one run folder, as saved."""
    rows = []
    for path in sorted(Path(folder).glob(f"*{RESULTS_SUFFIX}")):
        rows += read_results(path)
    return [r for r in rows if r.get("status") == "ok" and r.get("median_ms") is not None]


def _run_meta(folder: Path) -> dict:
    path = folder / RUN_FILE
    return read_run(path) if path.exists() else {}


def _strings(mapping: dict) -> dict[str, str]:
    """A Map(String, String): values as text (JSON for lists and dicts), None left out."""
    out = {}
    for key, value in mapping.items():
        if value is None:
            continue
        out[str(key)] = json.dumps(value) if isinstance(value, (dict, list, tuple)) else str(value)
    return out


def _gib(value) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return 0


def _leading_int(text) -> int:
    head = str(text or "").split(" ", 1)[0]
    return int(head) if head.isdigit() else 0


def _runner(meta: dict, row: dict) -> dict:
    """The v3 runner entry from run.json's environment (the device the records were timed on)."""
    env = meta.get("environment") or {}
    backend = env.get("backend") or row.get("backend") or ""
    name = env.get("name") or row.get("device") or ""
    on_cpu = backend == "cpu"
    memory = _gib(env.get("memory_GiB"))
    return {
        "name": name,
        "type": meta.get("platform") or row.get("platform") or "",
        "cpu_info": name if on_cpu else "",
        "cpu_count": _leading_int(env.get("compute_units")) if on_cpu else 0,
        "mem_info": "",
        "avail_mem_in_gb": memory if on_cpu else 0,
        "gpu_info": "" if on_cpu else name,
        "gpu_count": 0 if on_cpu else 1,
        "gpu_mem_info": "",
        "avail_gpu_mem_in_gb": 0 if on_cpu else memory,
        "extra_info": _strings(
            {k: env.get(k) for k in ("backend", "arch", "compute_units", "os", "python")}
        ),
    }


def to_pytorch_v3(rows: list[dict], meta: dict) -> list[dict]:
    """One v3 object per timed record of one run (`meta`: that run's run.json)."""
    env = meta.get("environment") or {}
    dependencies = {
        "torch": {
            "repo": "pytorch/pytorch",
            "branch": "",
            "sha": "",
            "version": env.get("torch") or "",
            "extra_info": {},
        }
    }
    if env.get("triton"):
        dependencies["triton"] = {
            "repo": "triton-lang/triton",
            "branch": "",
            "sha": "",
            "version": env["triton"],
            "extra_info": {},
        }
    out = []
    for r in rows:
        out.append(
            {
                "benchmark": {
                    "name": BENCHMARK_NAME,
                    "mode": "training" if r.get("mode") == "forward_backward" else "inference",
                    "dtype": r.get("dtype") or "",
                    "extra_info": _strings(
                        {
                            "record_id": r.get("record_id"),
                            "platform": r.get("platform"),
                            "run_id": r.get("run_id"),
                            "git": meta.get("git"),
                            "topic": r.get("topic"),
                            "case": r.get("case"),
                            "mode": r.get("mode"),
                            "headline": r.get("headline"),
                        }
                    ),
                },
                "model": {
                    "name": f"{r['topic']}/{r['case']}/{r['implementation']}",
                    "type": "kernel",
                    "backend": r.get("backend") or "",
                    "origins": [BENCHMARK_NAME],
                    "extra_info": _strings(
                        {
                            "implementation": r.get("implementation"),
                            "variant": r.get("variant"),
                            "baseline": r.get("baseline"),
                        }
                    ),
                },
                "inputs": {
                    "shape": {"dtype": r.get("dtype") or "", "extra_info": _strings(r["shape"])}
                }
                if r.get("shape")
                else {},
                "dependencies": dependencies,
                "metric": {
                    "name": V3_METRIC,
                    "benchmark_values": [float(v) for v in r.get("samples_ms") or ()]
                    or [float(r["median_ms"])],
                    "target_value": 0,
                    "extra_info": _strings(
                        {
                            "unit": "ms",
                            "median_ms": r.get("median_ms"),
                            "p10_ms": r.get("p10_ms"),
                            "p90_ms": r.get("p90_ms"),
                            "min_ms": r.get("min_ms"),
                            "reps": r.get("reps"),
                            "method": r.get("method"),
                            "tflops": r.get("tflops"),
                            "gbps": r.get("gbps"),
                            "ratio_vs_baseline": r.get("ratio_vs_baseline"),
                            "ratio_low": r.get("ratio_low"),
                            "ratio_high": r.get("ratio_high"),
                            "check_rel_error": (r.get("check") or {}).get("rel_error"),
                        }
                    ),
                },
                "runners": [_runner(meta, r)],
            }
        )
    return out


def to_bmf(runs: list[list[dict]]) -> dict:
    """Bencher Metric Format over one or more runs' timed records, keyed by record_id."""
    by_id: dict[str, list[dict]] = {}
    for rows in runs:
        for r in rows:
            by_id.setdefault(r["record_id"], []).append(r)
    out = {}
    for rid, rs in by_id.items():
        medians = [float(r["median_ms"]) for r in rs]
        if len(rs) == 1:
            r = rs[0]
            low, high = r.get("p10_ms"), r.get("p90_ms")
            low = medians[0] if low is None else low
            high = medians[0] if high is None else high
        else:
            low, high = min(medians), max(medians)
        measures = {
            "latency": {
                "value": statistics.median(medians) * NS_PER_MS,
                "lower_value": float(low) * NS_PER_MS,
                "upper_value": float(high) * NS_PER_MS,
            }
        }
        for rate in ("tflops", "gbps"):
            values = [float(r[rate]) for r in rs if r.get(rate) is not None]
            if values:
                measures[rate] = {"value": statistics.median(values)}
        out[rid] = measures
    return out


def export(folder: str | Path, fmt: str):
    """The records of report folder `folder` (every run of it) in format `fmt`."""
    if fmt not in FORMATS:
        raise CompareError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    runs = runs_with_records(folder)
    if fmt == "bmf":
        return to_bmf([timed_records(run) for run in runs])
    return [obj for run in runs for obj in to_pytorch_v3(timed_records(run), _run_meta(run))]


def cli(args: argparse.Namespace) -> int:
    """The `export` command: write the export to --out (whole or not at all) or stdout (no --out,
    or `--out -`). One line and 2 on bad input (a damaged report file, --out into a missing
    folder or onto any report's own file: kernel_lib.results.writes), 1 when the disk fails."""
    try:
        out = output_file(args.out, "--out") if args.out else None
        data = export(args.dir, args.format)
    except ParameterError as err:  # a CompareError, or a damaged report file
        print(f"error: {err}", file=sys.stderr)
        return 2
    text = json.dumps(data, indent=1) + "\n"
    if out is None:
        sys.stdout.write(text)
        return 0
    try:
        write_text(out, text)
    except OSError as err:
        print(f"error: --out {args.out}: {err.strerror or err}", file=sys.stderr)
        return 1
    noun = "records" if args.format == "pytorch-v3" else "benchmarks"
    print(f"{args.format}: {len(data)} {noun} -> {args.out}")
    return 0
