import pytest

from kernel_lib.backends import target as target_mod
from kernel_lib.backends.target import facts_record, facts_table, find_target, is_lazy


def test_cpu_target_is_present_with_this_hosts_facts(cpu_target):
    assert cpu_target.present and cpu_target.reason == ""
    assert cpu_target.facts.backend == "cpu" and cpu_target.facts.device == "cpu"


@pytest.mark.parametrize("backend", ["nvidia", "amd", "xpu"])
def test_missing_device_gives_a_target_that_skips_with_the_reason(backend):
    target = find_target(backend)
    assert not target.present
    assert target.reason.startswith(f"no {backend} device")
    record = target.absent("gemm", "torch_mm")
    assert record.status == "skipped" and record.reason == target.reason


def test_tpu_without_torch_xla_names_the_requirements_file(monkeypatch):
    monkeypatch.setattr(target_mod, "detect_backend", lambda: "cpu")
    monkeypatch.setattr(target_mod.importlib.util, "find_spec", lambda name: None)
    assert "requirements-tpu.txt" in find_target("tpu").reason


@pytest.mark.parametrize("detected", ["tpu", "xla"])
def test_tpu_notebook_accepts_a_tpu_and_xla_on_cpu(monkeypatch, cpu_facts, detected):
    monkeypatch.setattr(target_mod, "detect_backend", lambda: detected)
    monkeypatch.setattr(target_mod, "device_facts", lambda backend: cpu_facts)
    assert find_target("tpu").present


def test_an_amd_gpu_is_not_an_nvidia_device(monkeypatch, cpu_facts):
    monkeypatch.setattr(target_mod, "detect_backend", lambda: "amd")
    target = find_target("nvidia")
    assert not target.present and target.reason == "no nvidia device (this machine: amd)"


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="backend='cuda'"):
        find_target("cuda")


def test_facts_record_keeps_facts_and_labels_the_datasheet(cpu_target):
    record = facts_record(cpu_target, {"extra": 1})
    assert record.status == "ok" and record.metrics["extra"] == "1"
    assert record.metrics["datasheet"] == "unknown (no datasheet)"
    assert facts_table(record)["backend"] == "cpu"


def test_facts_record_of_an_absent_device_is_skipped(absent):
    record = facts_record(absent("nvidia"))
    assert record.status == "skipped"
    assert facts_table(record)["status"].startswith("skipped: no nvidia device")


def test_only_xla_is_lazy():
    assert is_lazy("xla:0") and not is_lazy("cuda:0") and not is_lazy("cpu")
