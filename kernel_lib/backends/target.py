"""Which backend a notebook characterises, and whether this machine has that device."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import pandas as pd

from kernel_lib.platform import DeviceFacts, datasheet_for, detect_backend, device_facts
from kernel_lib.records import Record, skipped

TOPIC = "device"
# notebook backend -> the detected backends it measures ("xla" is torch_xla on XLA:CPU, used in CI
# to run the TPU notebook before anyone pays for a TPU VM).
ACCEPTS = {
    "nvidia": ("nvidia",),
    "amd": ("amd",),
    "tpu": ("tpu", "xla"),
    "xpu": ("xpu",),
    "cpu": ("cpu",),
}


@dataclass(frozen=True)
class Target:
    """The device a backend notebook measures; `present` False means every section records
    `skipped: <reason>` and the notebook finishes cleanly."""

    backend: str  # the notebook's backend: one of ACCEPTS
    facts: DeviceFacts  # the measured device, or a placeholder naming the missing one
    present: bool
    reason: str = ""  # why not present

    def absent(self, case: str, implementation: str, **kwargs) -> Record:
        """The skipped record a section gives instead of measuring; its shape names the missing
        backend, so the absent devices of one run (the reference runs all five) keep distinct
        record ids."""
        shape = {**(kwargs.pop("shape", None) or {}), "backend": self.backend}
        return self.skip(case, implementation, self.reason, shape=shape, **kwargs)

    def skip(self, case: str, implementation: str, reason: str, **kwargs) -> Record:
        """A skipped record of this device (kwargs: dtype, shape, mode)."""
        return skipped(TOPIC, case, implementation, reason, facts=self.facts, **kwargs)


def find_target(backend: str) -> Target:
    """The `backend` device if this process can use it, else a Target that is not present."""
    if backend not in ACCEPTS:
        raise ValueError(f"backend={backend!r} must be one of {sorted(ACCEPTS)}")
    detected = detect_backend()
    if detected in ACCEPTS[backend]:
        return Target(backend, device_facts(detected), present=True)
    reason = f"no {backend} device (this machine: {detected})"
    if backend == "tpu" and importlib.util.find_spec("torch_xla") is None:
        reason = f"no {backend} device (torch_xla not installed: see requirements-tpu.txt)"
    placeholder = DeviceFacts(backend=backend, device="none", name=f"no {backend} device")
    return Target(backend, placeholder, present=False, reason=reason)


# ISA flags that decide CPU GEMM speed per dtype: two CPU reports differ here first.
CPU_MATRIX_FLAGS = ("avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16")


def cpu_facts(facts: DeviceFacts) -> dict:
    """The CPU model and its ISA flags (DeviceFacts.arch), each matrix flag spelled out yes/no."""
    flags = set((facts.arch or "").split())
    return {
        "cpu_model": facts.name,
        "isa_flags": facts.arch,
        **{flag: "yes" if flag in flags else "no" for flag in CPU_MATRIX_FLAGS},
    }


def facts_record(target: Target, extra: dict | None = None) -> Record:
    """The device facts (plus backend-specific `extra`) as one record, so reports keep them."""
    if not target.present:
        return target.absent("facts", target.backend)
    sheet = datasheet_for(target.facts.name)
    facts = {
        **target.facts.as_dict(),
        **(extra or {}),
        "datasheet": f"datasheet: {sheet.source}" if sheet else "unknown (no datasheet)",
    }
    return Record(
        topic=TOPIC,
        case="facts",
        implementation=target.backend,
        device=target.facts.name,
        backend=target.facts.backend,
        metrics={k: str(v) for k, v in facts.items()},
    )


def facts_table(record: Record) -> pd.Series:
    """The facts record as a one-column table (its skip reason when the device is absent)."""
    if record.status != "ok":
        return pd.Series(
            {"status": f"{record.status}: {record.reason}"}, name=record.implementation
        )
    return pd.Series(record.metrics, name="device facts")


LAZY_DEVICES = ("xla",)  # device types that trace ops and run them only at the sync


def is_lazy(device: str) -> bool:
    """True where ops are traced and run as one compiled graph at the sync (torch_xla)."""
    return str(device).split(":")[0] in LAZY_DEVICES
