import warnings

import pytest
import torch

from kernel_lib.backends import probes
from kernel_lib.backends.probes import probe, probe_table


@pytest.fixture(scope="module")
def cpu_probes():
    from kernel_lib.backends.target import Target
    from kernel_lib.platform import device_facts

    target = Target("cpu", device_facts("cpu"), present=True)
    return {(r.implementation, r.dtype): r for r in probe(target, compile=False)}


def test_every_probe_gives_one_record(cpu_probes):
    names = {name for name, _ in cpu_probes}
    assert {
        "matmul",
        "cast",
        "_scaled_mm",
        "_grouped_mm",
        "sdpa_math",
        "sdpa_flash",
        "sdpa_efficient",
        "sdpa_cudnn",
        "torch_compile",
        "triton",
        "flex_attention",
    } == names
    assert len(cpu_probes) == 18


def test_cpu_runs_fp32_and_bf16_matmul_and_math_attention(cpu_probes):
    for key in [("matmul", "float32"), ("matmul", "bfloat16"), ("sdpa_math", "bfloat16")]:
        assert cpu_probes[key].metrics["supported"] == "yes", cpu_probes[key].metrics


def test_cpu_has_no_cuda_only_attention_kernels(cpu_probes):
    record = cpu_probes[("sdpa_cudnn", "bfloat16")]
    assert record.metrics["supported"] == "no" and "RuntimeError" in record.metrics["detail"]


def test_compile_probes_are_skipped_when_asked(cpu_probes):
    for name in probes.COMPILE_PROBES:
        record = cpu_probes[(name, "float32")]
        assert record.status == "skipped" and "probe_compile=False" in record.reason


def test_an_expected_error_becomes_a_no_with_its_message():
    def boom():
        raise RuntimeError("no kernel image is available\nsecond line")

    assert probes._run(boom) == (False, "RuntimeError: no kernel image is available")


def test_a_wrong_answer_is_a_no():
    ok, detail = probes._verdict(0.5, 1e-3)
    assert not ok and detail.startswith("wrong result")


def test_runtime_warnings_go_into_the_detail_not_stderr(recwarn):
    def noisy():
        warnings.warn("flash attention was not compiled in", UserWarning, stacklevel=1)
        return True, "ran"

    assert probes._run(noisy) == (True, "ran [warning: flash attention was not compiled in]")
    assert len(recwarn) == 0


def test_unexpected_errors_are_not_swallowed():
    def bug():
        raise KeyError("a bug in the probe")

    with pytest.raises(KeyError):
        probes._run(bug)


def test_torch_compile_failure_is_reported(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("backend 'inductor' failed: no C++ compiler")

    monkeypatch.setattr(torch, "compile", refuse)
    ok, detail = probes._run(lambda: probes._torch_compile("cpu"))
    assert not ok and "no C++ compiler" in detail


def test_known_crashes_are_answered_without_running(monkeypatch, cpu_target):
    monkeypatch.setitem(probes.CRASHES, ("cpu", "_grouped_mm"), "not run: would crash")
    monkeypatch.setattr(probes, "_grouped_mm", lambda device: pytest.fail("ran a crashing probe"))
    records = probe(cpu_target, compile=False)
    grouped = next(r for r in records if r.implementation == "_grouped_mm")
    assert grouped.metrics == {"supported": "no", "detail": "not run: would crash"}


def test_absent_device_gives_one_skipped_probe_row(absent):
    table = probe_table(probe(absent("amd")))
    assert table.to_dict("records") == [
        {
            "capability": "all",
            "dtype": None,
            "supported": "skipped",
            "detail": "no amd device (this machine: cpu)",
        }
    ]


def test_compile_backend_follows_the_device():
    assert probes.compile_backend("xla:0") == "openxla"
    assert probes.compile_backend("cuda:0") == "inductor"
