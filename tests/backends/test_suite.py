"""The backend notebooks' plans and `bench device` (their suite on the detected device), and the
five notebooks' parameters."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import papermill
import pytest

from kernel_lib.backends import allocation, suite, xla
from kernel_lib.backends.config import BackendBenchConfig
from kernel_lib.backends.target import ACCEPTS
from kernel_lib.params import HAND_RUN_ONLY, SHARED
from kernel_lib.records import STATUSES

from .conftest import TINY

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ("cpu", "nvidia", "amd", "tpu", "xpu")
SPECIFIC = {
    "cpu": {"allocators", "allocator_shape", "allocator_rounds"},
    "nvidia": {"tf32_size"},
    "amd": {"blas_size"},
    "tpu": {"xla_seq_lens", "xla_bucket", "xla_precision_size"},
}
ALL_SPECIFIC = set().union(*SPECIFIC.values())


def _parameters(backend: str) -> dict:
    """The notebook's config parameters (not `results_dir` nor `plugins`, every notebook's,
    tested elsewhere)."""
    params = papermill.inspect_notebook(str(ROOT / "notebooks" / f"backend_{backend}.ipynb"))
    return {k: v for k, v in params.items() if k not in HAND_RUN_ONLY + SHARED}


@pytest.mark.slow
def test_suite_runs_every_section_on_the_detected_cpu(monkeypatch, cpu_target):
    monkeypatch.setattr(suite, "detect_backend", lambda: "cpu")
    monkeypatch.setattr(suite, "find_target", lambda name: cpu_target)  # also in the XLA venv
    # the allocator section's rounds in this process, not six fresh ones (~2 s each): its
    # processes are test_allocation's, `bench device`'s and the backend_cpu notebook's
    monkeypatch.setattr(allocation, "_run_child", lambda name, request: allocation._child(request))
    records = suite.run_suite(TINY)
    cases = [r.case for r in records]
    assert cases[0] == "facts"
    assert {"probe", "gemm", "copy", "triad", "launch_latency", "mlp"} <= set(cases)
    assert {r.status for r in records} <= set(STATUSES) - {"failed", "wrong"}
    assert [r.headline for r in records if r.headline] == [
        "backend.bf16_gemm_vs_fp32",
        "backend.compiled_mlp_vs_eager",
    ]


@pytest.mark.parametrize("backend", ["nvidia", "amd", "xpu", "tpu"])
def test_suite_for_an_absent_backend_records_only_skips(monkeypatch, backend, absent):
    monkeypatch.setattr(suite, "detect_backend", lambda: backend)
    monkeypatch.setattr(suite, "find_target", absent)
    assert {r.status for r in suite.run_suite(TINY)} == {"skipped"}


def test_each_plan_runs_the_common_sections_then_its_backends_own():
    assert set(suite.SUITES) == set(ACCEPTS)
    assert set(suite.NOTEBOOK_BACKEND.values()) == set(ACCEPTS)  # each detected backend: a suite
    assert suite.NOTEBOOK_BACKEND["xla"] == "tpu"  # torch_xla on XLA:CPU runs the TPU notebook
    common = ("facts", "capabilities", "roofline", "overheads", "mlp")
    for backend, backend_suite in suite.SUITES.items():
        assert backend_suite.topic == f"backend_{backend}"
        assert backend_suite.names[: len(common)] == common
    assert suite.SUITES["xpu"].names == common


def test_setup_gives_the_notebooks_context(monkeypatch, cpu_target):
    monkeypatch.setattr(suite, "find_target", lambda backend: cpu_target)  # also in the XLA venv
    with pd.option_context("display.max_colwidth", 50):
        ctx = suite.setup("cpu", {**TINY, "In": [], "Out": {}})  # a notebook's globals()
        assert pd.get_option("display.max_colwidth") == 120
    assert ctx.config == suite.Setup(cpu_target, BackendBenchConfig.from_params(TINY))
    assert ctx.facts is cpu_target.facts and ctx.progress and ctx.records == []


def test_a_bad_parameter_is_one_line_before_any_device_is_looked_for(monkeypatch):
    """(`bench` and the runner validate a platform file first: a ParameterError naming it.)"""
    monkeypatch.setattr(suite, "find_target", None)  # never called
    with pytest.raises(ValueError) as err:
        suite.setup("cpu", {**TINY, "gemm_sizes": [16, 0]})
    assert "gemm_sizes" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("backend", "calls"), [("tpu", 1), ("cpu", 0)])
def test_only_the_tpu_context_sets_full_fp32_matmuls(monkeypatch, absent, backend, calls):
    seen = []
    monkeypatch.setattr(suite, "find_target", absent)
    monkeypatch.setattr(xla, "use_full_fp32", seen.append)
    ctx = suite.context(backend, TINY)
    assert seen == [ctx.config.target] * calls


def test_the_five_notebooks_share_their_common_parameters():
    cpu = _parameters("cpu")
    shared = {n: p["inferred_type_name"] for n, p in cpu.items() if n not in SPECIFIC["cpu"]}
    assert set(shared) == set(TINY) - ALL_SPECIFIC
    for backend in BACKENDS[1:]:
        params = _parameters(backend)
        assert {n: params[n]["inferred_type_name"] for n in shared} == shared, backend


def test_each_notebook_has_the_common_parameters_plus_its_own():
    for backend in BACKENDS:
        names = set(_parameters(backend))
        assert names == set(TINY) - ALL_SPECIFIC | SPECIFIC.get(backend, set()), backend


@pytest.mark.slow
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
        "--inject-output-path",  # the results go beside out.ipynb
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    records = json.loads((tmp_path / "backend_xpu.results.json").read_text())
    assert records and {r["status"] for r in records} == {"skipped"}
    assert all(r["reason"].startswith("no xpu device") for r in records)
