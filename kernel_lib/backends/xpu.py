"""Intel XPU specifics: what `torch.xpu` reports about device 0 (the sweeps are shared)."""

from __future__ import annotations

import torch

# torch.xpu device-property fields worth a line in a report, when this torch build exposes them.
XPU_FIELDS = (
    "driver_version",
    "platform_name",
    "gpu_eu_count",
    "gpu_subslice_count",
    "max_compute_units",
    "max_work_group_size",
    "sub_group_sizes",
    "has_fp16",
    "has_fp64",
    "has_atomic64",
)


def xpu_facts() -> dict:
    """XPU device 0 beyond DeviceFacts, plus the oneAPI/SYCL version torch was built with."""
    props = torch.xpu.get_device_properties(0)
    facts = {f: getattr(props, f) for f in XPU_FIELDS if hasattr(props, f)}
    return {"torch_xpu_build": getattr(torch.version, "xpu", None), **facts}
