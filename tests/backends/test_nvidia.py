import pytest
import torch

from kernel_lib.backends import nvidia
from kernel_lib.backends.nvidia import nvidia_facts, tensor_core_generation, tf32_effect
from kernel_lib.platform import DeviceFacts, detect_backend, detect_platform, device_facts


@pytest.mark.parametrize(
    ("cc", "generation"),
    [
        ((6, 1), "none (before sm_70)"),
        ((7, 0), "1st gen (Volta)"),
        ((8, 0), "3rd gen (Ampere)"),
        ((8, 9), "4th gen (Ada)"),
        ((9, 0), "4th gen (Hopper)"),
        ((10, 0), "5th gen (Blackwell)"),
        ((11, 5), "unknown for sm_115"),
    ],
)
def test_tensor_core_generation_from_compute_capability(cc, generation):
    assert tensor_core_generation(*cc) == generation


def test_nvidia_facts_from_fake_h100_properties(monkeypatch, fake_cuda, gpu_properties):
    fake_cuda(gpu_properties("NVIDIA H100 80GB HBM3", 9, 0))
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91002)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 5))

    def no_nvml(device=None):
        raise ModuleNotFoundError(
            "nvidia-ml-py does not seem to be installed or it can't be imported."
        )

    monkeypatch.setattr(torch.cuda, "clock_rate", no_nvml)
    facts = nvidia_facts()
    assert facts["compute_capability"] == "9.0" and facts["tensor_cores"] == "4th gen (Hopper)"
    assert facts["L2_MiB"] == 50.0 and facts["cudnn"] == 91002
    assert facts["sm_clock"].startswith("not readable: nvidia-ml-py does not seem to be installed")
    assert facts["nccl"] == "2.27.5"


def test_device_facts_and_platform_of_a_fake_h100(fake_cuda, gpu_properties):
    fake_cuda(gpu_properties("NVIDIA H100 80GB HBM3", 9, 0))
    assert detect_backend() == "nvidia"
    facts = device_facts()
    assert (facts.arch, facts.compute_units, facts.compute_unit_kind) == ("sm_90", 132, "SMs")
    assert detect_platform(facts) == "h100"


@pytest.mark.parametrize(
    ("backend", "name", "platform"),
    [
        ("nvidia", "NVIDIA H100 80GB HBM3", "h100"),
        ("nvidia", "NVIDIA H100 PCIe", "h100"),
        ("nvidia", "NVIDIA H200", "h200"),
        ("nvidia", "NVIDIA L4", "gcp-l4"),
        ("nvidia", "NVIDIA A10G", "aws-a10g"),
        ("amd", "AMD Instinct MI300X", "amd-mi300x"),
        ("xpu", "Intel(R) Data Center GPU Max 1550", "intel-max1550"),
        ("tpu", "XLA:TPU v5litepod-8", "gcp-tpu-v5e"),
        ("xla", "XLA:CPU", "xla-cpu"),
        ("cpu", "AMD EPYC", "cpu"),
    ],
)
def test_detect_platform_maps_devices_to_parameter_files(backend, name, platform):
    assert detect_platform(DeviceFacts(backend=backend, device="x", name=name)) == platform


def test_an_unlisted_gpu_asks_for_a_platform_name():
    with pytest.raises(ValueError, match="PLATFORM="):
        detect_platform(
            DeviceFacts(backend="nvidia", device="cuda:0", name="NVIDIA A100-SXM4-80GB")
        )


def test_tf32_modes_are_interleaved_and_checked(cpu_target, tiny):
    ieee, tf32 = tf32_effect(cpu_target, tiny)  # on a CPU both modes run the fp32 GEMM
    assert (ieee.implementation, tf32.implementation) == ("ieee", "tf32")
    assert ieee.check["pass"] and tf32.check["tolerance"] > ieee.check["tolerance"]
    assert tf32.baseline == "ieee" and tf32.ratio_vs_baseline > 0


def test_a_gemm_outside_its_bound_is_recorded_wrong(monkeypatch, cpu_target, tiny):
    monkeypatch.setattr(nvidia, "mm_at", lambda mode, a, b: (a @ b) * 1.01)
    assert [r.status for r in tf32_effect(cpu_target, tiny)] == ["wrong", "wrong"]


def test_tf32_on_an_absent_device_is_skipped(absent, tiny):
    assert [r.status for r in tf32_effect(absent("nvidia"), tiny)] == ["skipped", "skipped"]


def test_fp32_precision_is_restored(monkeypatch):
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    with nvidia.fp32_precision("tf32"):
        assert matmul.fp32_precision == "tf32"
    assert matmul.fp32_precision == before
