"""The cold-compile record: a fresh process with an empty Inductor cache (the process mocked by
running its main in this one), its output checked, skips and failures with reasons."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_lib.attention import bench, candidates, cold_compile
from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.attention.flex import FlexVariant

from .conftest import FLEX_BLOCK, flex_bench_config

CFG = flex_bench_config(block_sizes=(FLEX_BLOCK,))
VARIANT = FlexVariant(FLEX_BLOCK)


def _fake_process(monkeypatch, *, change=None, stdout=None, returncode=0):
    """The fresh process replaced by the child's main run here (its compile is warm: this tests the
    protocol, not the time). Records what it was started with."""
    seen = {}

    def run(argv, env):
        seen.update(argv=argv, env=env)
        cache = Path(env["TORCHINDUCTOR_CACHE_DIR"])
        seen["fresh"] = not cache.exists() or not any(cache.iterdir())
        result = cold_compile._main(json.loads(argv[-2]), argv[-1])
        if change is not None:
            change(argv[-1])
        text = json.dumps(result) if stdout is None else stdout
        return subprocess.CompletedProcess(argv, returncode, text + "\n", "Traceback\nBoom")

    monkeypatch.setattr(cold_compile, "_run", run)
    return seen


def test_cold_compile_record_is_timed_once_checked_and_labelled(monkeypatch, cpu_facts):
    seen = _fake_process(monkeypatch)
    [record] = bench.cold_compile_case(CFG, facts=cpu_facts, variant=VARIANT)
    assert seen["argv"][:3] == [sys.executable, "-m", "kernel_lib.attention.cold_compile"]
    assert seen["fresh"] and seen["env"]["TORCHINDUCTOR_CACHE_DIR"] != cold_compile.os.environ.get(
        "TORCHINDUCTOR_CACHE_DIR"
    )
    assert (record.mode, record.case, record.implementation) == (
        "cold_compile",
        "causal",
        candidates.FLEX,
    )
    assert record.status == "ok" and record.reps == 1 and record.check["pass"], record.reason
    assert record.metrics["section"] == "compile" and record.metrics["block_size"] == FLEX_BLOCK
    assert record.variant == candidates.variant_name(VARIANT)


def test_a_wrong_output_from_the_fresh_process_is_wrong(monkeypatch, cpu_facts):
    def corrupt(path):
        out = cold_compile.torch.load(path)
        cold_compile.torch.save(out.flip(-2), path)

    _fake_process(monkeypatch, change=corrupt)
    [record] = bench.cold_compile_case(CFG, facts=cpu_facts, variant=VARIANT)
    assert record.status == "wrong" and record.median_ms is None


@pytest.mark.parametrize("stdout, returncode, status, reason", [
    ('{"unsupported": "no kernel here"}', 0, "skipped", "no kernel here"),
    ("", 1, "failed", "exited 1: Boom"),
])  # fmt: skip
def test_unsupported_is_skipped_and_a_crash_failed(
    monkeypatch, cpu_facts, stdout, returncode, status, reason
):
    _fake_process(monkeypatch, stdout=stdout, returncode=returncode)
    [record] = bench.cold_compile_case(CFG, facts=cpu_facts, variant=VARIANT)
    assert record.status == status and reason in record.reason


def test_off_by_parameter(cpu_facts):
    cfg = AttentionBenchConfig(cold_compile=False)
    assert bench.cold_compile_case(cfg, facts=cpu_facts, variant=VARIANT) == []
