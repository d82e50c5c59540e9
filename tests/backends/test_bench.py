import json
import subprocess
import sys
from pathlib import Path

import papermill
import pytest

from kernel_lib.backends import bench
from kernel_lib.records import STATUSES

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ("cpu", "nvidia", "amd", "tpu", "xpu")
TINY = {
    "gemm_sizes": [16],
    "gemm_dtypes": ["float32"],
    "bandwidth_mib": [1],
    "transfer_mib": [1],
    "mlp_batch": 2,
    "mlp_dim": 8,
    "mlp_dtype": "float32",
    "compile_mlp": False,
    "probe_compile": False,
    "min_time_s": 0.001,
}


def _parameters(backend: str) -> dict:
    return papermill.inspect_notebook(str(ROOT / "notebooks" / f"backend_{backend}.ipynb"))


def test_suite_runs_every_section_on_the_detected_cpu(monkeypatch):
    monkeypatch.setattr(bench, "detect_backend", lambda: "cpu")
    records = bench.suite(TINY)
    cases = [r.case for r in records]
    assert cases[0] == "facts" and {
        "probe",
        "gemm",
        "copy",
        "triad",
        "launch_latency",
        "mlp",
    } <= set(cases)
    assert {r.status for r in records} <= set(STATUSES) and "failed" not in {
        r.status for r in records
    }


@pytest.mark.parametrize("backend", ["nvidia", "amd", "xpu"])
def test_suite_for_an_absent_backend_records_only_skips(monkeypatch, backend):
    monkeypatch.setattr(bench, "detect_backend", lambda: backend)
    monkeypatch.setattr(bench, "find_target", lambda name: _absent_target(name))
    params = {**TINY, "tf32_size": 8, "blas_size": 8}
    assert {r.status for r in bench.suite(params)} == {"skipped"}


def _absent_target(backend):
    from kernel_lib.backends.target import Target
    from kernel_lib.platform import DeviceFacts

    return Target(
        backend,
        DeviceFacts(backend=backend, device="none", name="none"),
        False,
        f"no {backend} device",
    )


def test_the_five_notebooks_share_their_common_parameters():
    shared = {name: p["inferred_type_name"] for name, p in _parameters("cpu").items()}
    assert set(TINY) == set(shared)
    for backend in BACKENDS[1:]:
        params = _parameters(backend)
        assert {n: params[n]["inferred_type_name"] for n in shared} == shared, backend


def test_suite_reads_only_parameters_its_notebook_has():
    for backend in BACKENDS:
        names = set(_parameters(backend))
        specific = {
            "nvidia": {"tf32_size"},
            "amd": {"blas_size"},
            "tpu": {"xla_seq_lens", "xla_bucket", "xla_precision_size"},
        }.get(backend, set())
        assert names == set(TINY) | specific, backend


def test_a_backend_notebook_without_its_device_finishes_with_every_record_skipped(tmp_path):
    """What nbval and the runner see on this CPU machine: clean execution, all records skipped."""
    command = [
        sys.executable,
        "-m",
        "papermill",
        str(ROOT / "notebooks" / "backend_xpu.ipynb"),
        str(tmp_path / "out.ipynb"),
        "-k",
        "kernel-workbook",
        "--cwd",
        str(tmp_path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    records = json.loads((tmp_path / "backend_xpu.results.json").read_text())
    assert records and {r["status"] for r in records} == {"skipped"}
    assert all(r["reason"].startswith("no xpu device") for r in records)
