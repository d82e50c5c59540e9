import json

from kernel_lib.records import measured, save_records, skipped
from kernel_lib.report import build_report, headlines
from kernel_lib.records import to_frame
from kernel_lib.timing import Timing


def test_index_summary_and_csv_come_from_records(tmp_path, cpu_facts):
    t = Timing(2.0, 1.9, 2.2, 1.8, 10, "perf_counter + cpu synchronize", None)
    save_records([measured("device", "gemm", "torch_mm", t, facts=cpu_facts, dtype="bfloat16",
                           shape={"N": 64}, flops=4e9),
                  skipped("device", "gemm", "torch_mm", "out of memory", facts=cpu_facts)], "nb", tmp_path)
    run = {"platform": "cpu", "parameters": "parameters/cpu.yaml", "description": "",
           "started_utc": "s", "finished_utc": "f", "git": "abc", "command": "python -m kernel_lib run",
           "environment": cpu_facts.as_dict(),
           "notebooks": [{"notebook": "nb", "status": "ok", "detail": "", "seconds": 3.21},
                         {"notebook": "gone", "status": "failed", "detail": "cell 3: ValueError: x", "seconds": None}]}
    (tmp_path / "run.json").write_text(json.dumps(run))
    index = build_report(tmp_path).read_text()
    summary = (tmp_path / "SUMMARY.md").read_text()
    assert '<a href="nb.html">html</a>' in index and "failed: cell 3: ValueError: x" in index
    assert "best TFLOP/s: 2 TFLOP/s (gemm torch_mm bfloat16 N=64)" in summary
    assert "1 ok, 1 skipped" in summary
    assert len((tmp_path / "results.csv").read_text().splitlines()) == 3


def test_headlines_of_nothing_measured(cpu_facts):
    assert headlines(to_frame([skipped("t", "c", "i", "no GPU", facts=cpu_facts)])) == []
