"""Which backend and device this is, its facts, and a labelled table of datasheet peaks."""

from __future__ import annotations

import importlib.util
import os
import platform as _py_platform
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kernel_lib import allocator

BACKENDS = ("nvidia", "amd", "tpu", "xla", "xpu", "mps", "cpu")


@dataclass(frozen=True)
class DeviceFacts:
    """What a report needs to say about the device every number was measured on."""

    backend: str  # one of BACKENDS; "xla" is torch_xla on a non-TPU PJRT device (e.g. XLA:CPU)
    device: str  # torch device string: "cuda:0", "xla:0", "cpu"
    name: str
    arch: str | None = None  # sm_90, gfx942, TPU v5e, ISA flags on CPU
    memory_bytes: int | None = None
    compute_units: int | None = None
    compute_unit_kind: str | None = None  # "SMs", "CUs", "threads", "cores"
    versions: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "backend": self.backend,
            "device": self.device,
            "name": self.name,
            "arch": self.arch,
            "memory_GiB": round(self.memory_bytes / 2**30, 1) if self.memory_bytes else None,
            "compute_units": f"{self.compute_units} {self.compute_unit_kind}"
            if self.compute_units
            else None,
            **self.versions,
        }


def _has_torch_xla() -> bool:
    return importlib.util.find_spec("torch_xla") is not None


def detect_backend() -> str:
    """The best accelerator this process can use, else 'cpu'."""
    if torch.cuda.is_available():
        return "amd" if torch.version.hip else "nvidia"
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu"
    if _has_torch_xla():
        import torch_xla.runtime as xr

        return "tpu" if xr.device_type() == "TPU" else "xla"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def _versions() -> dict:
    versions = {"python": _py_platform.python_version(), "torch": torch.__version__}
    if torch.version.cuda:
        versions["cuda"] = torch.version.cuda
    if torch.version.hip:
        versions["hip"] = torch.version.hip
    for module in ("triton", "torch_xla"):
        if importlib.util.find_spec(module) is not None:
            versions[module] = _dist_version(module)
    return versions


def _dist_version(module: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module.replace("_", "-"))
    except PackageNotFoundError:
        return "unknown"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _py_platform.processor() or _py_platform.machine()


def _cpu_isa() -> str:
    """The matrix/vector ISA flags that decide CPU GEMM speed (Linux only; else machine name)."""
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "amx_int8")
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return " ".join(w for w in wanted if w in flags) or _py_platform.machine()
    except OSError:
        pass
    return _py_platform.machine()


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def last_level_cache_bytes(device: str = "cpu") -> int | None:
    """The last cache before `device`'s memory: a CUDA or ROCm GPU's L2 as its properties say
    (L2_cache_size), a CPU's largest cache of cpu0 as Linux reports it (sysfs); None where it is
    not known (another device, or a runtime that does not say)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or None
    if kind != "cpu":
        return None
    sizes = []
    for size in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        match = re.fullmatch(r"(\d+)([KMG]?)", size.read_text().strip())
        if match:
            sizes.append(int(match[1]) * 1024 ** " KMG".index(match[2] or " "))
    return max(sizes, default=None)


def threads_each(workers: int) -> int:
    """Torch threads for each of `workers` processes side by side: their share of the cores this
    process may use, at least one. Two notebooks of two threads each on two cores wait on each
    other's time slices: the reference check took 225 s so, 154 s with one thread each (its moe
    notebook 120 s against 20 s; AMD EPYC, 2 vCPU, empty Inductor cache)."""
    return max(1, len(os.sched_getaffinity(0)) // workers)


def device_facts(backend: str | None = None) -> DeviceFacts:
    """Facts of device 0 of `backend` (default: the detected one), read from the runtime."""
    backend = backend or detect_backend()
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} must be one of {BACKENDS}")
    versions = _versions()
    if backend in ("nvidia", "amd"):
        props = torch.cuda.get_device_properties(0)
        arch = getattr(props, "gcnArchName", None) if backend == "amd" else None
        return DeviceFacts(
            backend=backend,
            device="cuda:0",
            name=props.name,
            arch=arch or f"sm_{props.major}{props.minor}",
            memory_bytes=props.total_memory,
            compute_units=props.multi_processor_count,
            compute_unit_kind="CUs" if backend == "amd" else "SMs",
            versions=versions,
        )
    if backend == "xpu":
        props = torch.xpu.get_device_properties(0)
        return DeviceFacts(
            backend=backend,
            device="xpu:0",
            name=props.name,
            memory_bytes=props.total_memory,
            compute_units=getattr(props, "gpu_subslice_count", None),
            compute_unit_kind="Xe cores",
            versions=versions,
        )
    if backend in ("tpu", "xla"):
        import torch_xla
        import torch_xla.runtime as xr

        kind = xr.device_type()
        return DeviceFacts(
            backend=backend,
            device=str(torch_xla.device()),
            name=f"XLA:{kind}"
            + (
                f" {os.environ['TPU_ACCELERATOR_TYPE']}"
                if "TPU_ACCELERATOR_TYPE" in os.environ
                else ""
            ),
            arch=kind,
            compute_units=xr.global_runtime_device_count(),
            compute_unit_kind="devices",
            versions=versions,
        )
    if backend == "mps":
        return DeviceFacts(backend=backend, device="mps", name="Apple MPS", versions=versions)
    return DeviceFacts(
        backend="cpu",
        device="cpu",
        name=_cpu_name(),
        arch=_cpu_isa(),
        memory_bytes=_memory_bytes(),
        compute_units=torch.get_num_threads(),
        compute_unit_kind="threads",
        versions={**versions, "os": sys.platform, "allocator": allocator.in_effect()},
    )


def _names(needle: str, name: str) -> bool:
    """`needle` occurs in `name` as whole words."""
    return re.search(rf"(?<![\w]){re.escape(needle)}(?![\w])", name, re.IGNORECASE) is not None


@dataclass(frozen=True)
class Datasheet:
    """Vendor peak figures (dense, no sparsity). Never a measurement: always shown as 'datasheet'."""

    name: str
    bf16_tflops: float | None
    fp8_tflops: float | None
    fp32_tflops: float | None
    memory_gbps: float | None
    memory_gb: float | None
    source: str


# Matched by whole words of the device name, first match wins (so "H100 PCIe" precedes "H100").
# Sources: ../shared/research/perf_anchors.md section 0 and the vendors' datasheets it cites.
DATASHEETS = (
    Datasheet("H100 PCIe", 756, 1513, 51, 2000, 80, "NVIDIA H100 datasheet (PCIe), dense"),
    Datasheet("H100", 989, 1979, 67, 3350, 80, "NVIDIA H100 datasheet (SXM5), dense"),
    Datasheet("H200", 989, 1979, 67, 4800, 141, "NVIDIA H200 datasheet (SXM), dense"),
    Datasheet("A100", 312, None, 19.5, 2039, 80, "NVIDIA A100 datasheet (SXM 80GB), dense"),
    Datasheet("L4", 121, 242, 30, 300, 24, "NVIDIA L4 datasheet, dense (half the sparse figure)"),
    Datasheet("A10G", None, None, None, 600, 24, "AWS g5 A10G: memory only (no NVIDIA datasheet)"),
    Datasheet("MI300X", 1307, 2615, 163, 5300, 192, "AMD Instinct MI300X datasheet, dense"),
    Datasheet("v5litepod", 197, None, None, 819, 16, "Google Cloud TPU v5e documentation"),
    Datasheet("Max 1550", None, None, None, 3277, 128, "Intel Data Center GPU Max 1550 datasheet"),
)


def datasheet_for(device_name: str) -> Datasheet | None:
    """The datasheet whose name occurs in `device_name`, or None ("unknown", e.g. this CPU)."""
    for sheet in DATASHEETS:
        if _names(sheet.name, device_name):
            return sheet
    return None


# Device-name word(s) -> parameters/<platform>.yaml, per backend ("L4" must not match "L40S").
_PLATFORM_BY_NAME = {
    "nvidia": (("H200", "h200"), ("H100", "h100"), ("L4", "gcp-l4"), ("A10G", "aws-a10g")),
    "amd": (("MI300X", "amd-mi300x"),),
    "xpu": (("Max 1550", "intel-max1550"),),
    "tpu": (("v5litepod", "gcp-tpu-v5e"), ("v5e", "gcp-tpu-v5e")),
}


def device_of_platform(platform: str) -> tuple[str, str] | None:
    """(backend, a part of the device's name) that parameter file `platform` (or a variant of it,
    `<platform>-quick`) was written for; None for a file of any device (ci, cpu, ...)."""
    for backend, pairs in _PLATFORM_BY_NAME.items():
        for needle, name in pairs:
            if platform == name or platform.startswith(f"{name}-"):
                return backend, needle
    return None


def is_device(facts: DeviceFacts, device: tuple[str, str]) -> bool:
    """Whether this machine's `facts` are the `device` of `device_of_platform`."""
    return facts.backend == device[0] and _names(device[1], facts.name)


def detect_platform(facts: DeviceFacts | None = None) -> str:
    """The parameter file that matches this machine; ValueError naming the device if none does."""
    facts = facts or device_facts()
    if facts.backend == "cpu":
        return "cpu"
    if facts.backend == "xla":
        return "xla-cpu"
    for needle, platform in _PLATFORM_BY_NAME.get(facts.backend, ()):
        if _names(needle, facts.name):
            return platform
    raise ValueError(
        f"no parameter file matches {facts.backend} device {facts.name!r}; "
        "pass PLATFORM=<name> (see `python -m kernel_lib platforms`) or add parameters/<name>.yaml"
    )
