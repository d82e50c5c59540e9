"""A report's pages (report.pages): index.html, SUMMARY.md and results.csv built from its records
and run.json, a failed notebook and flagged records shown. The headlines: test_findings.py."""

import dataclasses
import json

from kernel_lib.records import measured, save_records, skipped
from kernel_lib.report.pages import build_report
from kernel_lib.timing import Timing

T = Timing(2.0, 1.9, 2.2, 1.8, 10, "perf_counter + cpu synchronize", None)


def test_index_summary_and_csv_come_from_records(tmp_path, cpu_facts):
    save_records(
        [
            measured(
                "device",
                "gemm",
                "torch_mm",
                T,
                facts=cpu_facts,
                dtype="bfloat16",
                shape={"N": 64},
                flops=4e9,
            ),
            skipped(
                "device", "gemm", "torch_mm", "out of memory", facts=cpu_facts, shape={"N": 2**20}
            ),
        ],
        "nb",
        tmp_path,
    )
    run = {
        "platform": "cpu",
        "parameters": "parameters/cpu.yaml",
        "description": "",
        "started_utc": "s",
        "finished_utc": "f",
        "git": "abc",
        "command": "python -m kernel_lib run",
        "environment": cpu_facts.as_dict(),
        "notebooks": [
            {"notebook": "nb", "status": "ok", "detail": "", "seconds": 3.21},
            {
                "notebook": "gone",
                "status": "failed",
                "detail": "cell 3: ValueError: x",
                "seconds": None,
            },
        ],
    }
    (tmp_path / "run.json").write_text(json.dumps(run))
    index = build_report(tmp_path).read_text()
    summary = (tmp_path / "SUMMARY.md").read_text()
    assert '<a href="nb.html">html</a>' in index and "failed: cell 3: ValueError: x" in index
    assert "TFLOP/s" not in summary  # nothing was declared a headline: none is picked
    assert "1 ok, 1 skipped" in summary
    assert len((tmp_path / "results.csv").read_text().splitlines()) == 3


def test_flagged_records_are_listed_in_the_index(tmp_path, cpu_facts):
    slow = measured("fp8", "quantize", "tuned", T, facts=cpu_facts, flops=8e9)
    slow = dataclasses.replace(slow, flags=("slower than plain compiled plain: 0.8x",))
    save_records([slow], "nb", tmp_path)
    run = {
        "platform": "cpu",
        "parameters": "p",
        "description": "",
        "started_utc": "s",
        "finished_utc": "f",
        "git": "abc",
        "command": "c",
        "environment": cpu_facts.as_dict(),
        "notebooks": [{"notebook": "nb", "status": "ok", "detail": "", "seconds": 1.0}],
    }
    (tmp_path / "run.json").write_text(json.dumps(run))
    index = build_report(tmp_path).read_text()
    assert "<h2>Flags</h2>" in index and "slower than plain compiled plain" in index
