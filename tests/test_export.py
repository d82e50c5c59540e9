"""`export --format pytorch-v3|bmf`: the documented layouts, and values that read back as saved."""

import json

import jsonschema
import pytest

from kernel_lib import export
from kernel_lib.records import Record
from tests import fakes

# The PyTorch OSS benchmark database v3 row (pytorch/test-infra,
# clickhouse_db_schema/oss_ci_benchmark_v3/schema.sql), the parts a benchmark writes.
V3_BENCHMARK = {"name", "mode", "dtype", "extra_info"}
V3_MODEL = {"name", "type", "backend", "origins", "extra_info"}
V3_METRIC = {"name", "benchmark_values", "target_value", "extra_info"}
V3_RUNNER = {
    "name": str, "type": str, "cpu_info": str, "cpu_count": int, "mem_info": str,
    "avail_mem_in_gb": int, "gpu_info": str, "gpu_count": int, "gpu_mem_info": str,
    "avail_gpu_mem_in_gb": int, "extra_info": dict,
}  # fmt: skip
V3_DEPENDENCY = {"repo", "branch", "sha", "version", "extra_info"}
# Bencher Metric Format JSON schema, as published at https://bencher.dev/bmf.json
BMF_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema",
    "type": "object",
    "patternProperties": {
        ".+": {
            "type": "object",
            "patternProperties": {
                ".+": {
                    "type": "object",
                    "properties": {
                        "value": {"type": "number"},
                        "lower_value": {"type": "number"},
                        "upper_value": {"type": "number"},
                    },
                    "required": ["value"],
                }
            },
        }
    },
}


def rec(case, *, status="ok", ms=None, mode="forward", **fields):
    """moe/<case>/dispatch on a GPU, timed at `ms` (4 samples, p90 at 1.2 of it) or untimed."""
    timing = {}
    if ms is not None:
        timing = dict(
            p90_ms=ms * 1.2,
            reps=4,
            samples=(ms * 0.8, ms * 0.95, ms * 1.05, ms * 1.3),
            tflops=2.0 / ms,
            check={"rel_error": 1e-3, "pass": True},
            metrics={},
        )
    return fakes.record(
        case,
        ms,
        topic="moe",
        implementation="dispatch",
        device="Test GPU",
        backend="cuda",
        dtype="bfloat16",
        shape={"T": 128, "E": 8},
        mode=mode,
        status=status,
        reason="" if status == "ok" else "on purpose",
        **timing,
        **fields,
    )


RECORDS = [
    rec("fwd", ms=1.5),
    rec("train", ms=4.0, mode="forward_backward"),
    rec("facts"),  # ok but untimed: not a timing
    rec("absent", status="skipped"),
    rec("broken", status="failed"),
]


H100 = {
    "backend": "cuda",
    "name": "NVIDIA H100 80GB HBM3",
    "memory_GiB": 79.1,
    "compute_units": "132 SMs",
    "torch": "2.13.0",
    "triton": "3.7.1",
}


@pytest.fixture
def write_run(make_run):
    """`write_run(folder, records=RECORDS, run_id="r1", scale=1.0)`: a run of the moe notebook on
    an H100, its times scaled by `scale`; returns the records as saved."""

    def write(folder, records=RECORDS, run_id="r1", scale=1.0):
        if scale != 1.0:
            records = [
                Record(**{**r.__dict__, "median_ms": r.median_ms * scale}) if r.median_ms else r
                for r in records
            ]
        run = {"run_id": run_id, "platform": "h100", "environment": H100, "notebooks": []}
        make_run(folder, records, name="moe", **run)
        return json.loads((folder / "moe.results.json").read_text())

    return write


def timed_rows(rows):
    return {r["record_id"]: r for r in rows if r["status"] == "ok" and r["median_ms"]}


def test_pytorch_v3_layout(tmp_path, write_run):
    write_run(tmp_path / "rep")
    objs = export.export(tmp_path / "rep", "pytorch-v3")
    assert len(objs) == 2  # only the ok, timed records
    for obj in objs:
        assert {"benchmark", "model", "metric", "runners"} <= set(obj)
        assert set(obj) <= {"benchmark", "model", "metric", "runners", "inputs", "dependencies"}
        assert set(obj["benchmark"]) == V3_BENCHMARK
        assert obj["benchmark"]["mode"] in ("training", "inference")
        assert set(obj["model"]) == V3_MODEL and isinstance(obj["model"]["origins"], list)
        assert set(obj["metric"]) == V3_METRIC
        values = obj["metric"]["benchmark_values"]
        assert values and all(isinstance(v, float) for v in values)
        assert isinstance(obj["metric"]["target_value"], (int, float))
        for runner in obj["runners"]:
            assert set(runner) == set(V3_RUNNER)
            for key, kind in V3_RUNNER.items():
                assert isinstance(runner[key], kind), key
                if kind is int:
                    assert runner[key] >= 0  # UInt32
        assert obj["runners"][0]["gpu_info"] == "NVIDIA H100 80GB HBM3"
        assert obj["runners"][0]["avail_gpu_mem_in_gb"] == 79
        for name, dep in obj["dependencies"].items():
            assert set(dep) == V3_DEPENDENCY, name
        for name, inp in obj["inputs"].items():
            assert set(inp) == {"dtype", "extra_info"}, name
        maps = [obj["benchmark"], obj["model"], obj["metric"], *obj["runners"]]
        maps += list(obj["inputs"].values()) + list(obj["dependencies"].values())
        for m in maps:  # Map(String, String)
            assert all(isinstance(v, str) for v in m["extra_info"].values())
    modes = {o["benchmark"]["extra_info"]["mode"]: o["benchmark"]["mode"] for o in objs}
    assert modes == {"forward": "inference", "forward_backward": "training"}


def test_pytorch_v3_round_trip(tmp_path, write_run):
    rows = write_run(tmp_path / "rep")
    out = tmp_path / "v3.json"
    from kernel_lib import __main__ as cli

    assert (
        cli.main(["export", "--format", "pytorch-v3", str(tmp_path / "rep"), "--out", str(out)])
        == 0
    )
    back = json.loads(out.read_text())
    saved = timed_rows(rows)
    assert {o["benchmark"]["extra_info"]["record_id"] for o in back} == set(saved)
    for obj in back:
        r = saved[obj["benchmark"]["extra_info"]["record_id"]]
        assert obj["metric"]["benchmark_values"] == r["samples_ms"]
        assert float(obj["metric"]["extra_info"]["median_ms"]) == r["median_ms"]
        assert obj["benchmark"]["dtype"] == r["dtype"]
        assert obj["model"]["name"] == f"{r['topic']}/{r['case']}/{r['implementation']}"
        shape = {k: int(v) for k, v in obj["inputs"]["shape"]["extra_info"].items()}
        assert shape == r["shape"]


def test_bmf_layout_and_round_trip(tmp_path, write_run):
    rows = write_run(tmp_path / "rep")
    data = export.export(tmp_path / "rep", "bmf")
    jsonschema.validate(data, BMF_SCHEMA)
    back = json.loads(json.dumps(data))
    saved = timed_rows(rows)
    assert set(back) == set(saved)
    for rid, measures in back.items():
        r = saved[rid]
        assert set(measures) == {"latency", "tflops"}
        latency = measures["latency"]  # Bencher's latency measure is in nanoseconds
        assert latency["value"] / 1e6 == pytest.approx(r["median_ms"], rel=1e-12)
        assert latency["lower_value"] / 1e6 == pytest.approx(r["p10_ms"], rel=1e-12)
        assert latency["upper_value"] / 1e6 == pytest.approx(r["p90_ms"], rel=1e-12)
        assert measures["tflops"] == {"value": pytest.approx(r["tflops"])}


def test_bmf_over_several_runs(tmp_path, write_run):
    for k, scale in enumerate((1.0, 1.1, 0.9)):
        write_run(tmp_path / "rep" / f"run-{k + 1}", run_id=f"r{k}", scale=scale)
    data = export.export(tmp_path / "rep", "bmf")
    latency = data["h100/moe/fwd/dispatch/bfloat16/forward/E=8,T=128"]["latency"]
    assert latency["value"] == pytest.approx(1.5e6)  # median of the run medians
    assert (latency["lower_value"], latency["upper_value"]) == pytest.approx((1.35e6, 1.65e6))
    assert len(export.export(tmp_path / "rep", "pytorch-v3")) == 6  # 2 records x 3 runs


def test_export_bad_input_exits_2(tmp_path, capsys):
    from kernel_lib import __main__ as cli

    assert cli.main(["export", "--format", "bmf", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
