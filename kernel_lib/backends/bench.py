"""`python -m kernel_lib bench device`: the backend notebooks' sections without a notebook, for
the detected backend, in the notebooks' order (the same calls as the notebooks)."""

from __future__ import annotations

from kernel_lib.backends import amd, nvidia, sections, xla
from kernel_lib.backends.config import BackendConfig
from kernel_lib.backends.target import Target, find_target
from kernel_lib.platform import detect_backend
from kernel_lib.records import Record

# detected backend -> the backend notebook that measures it
NOTEBOOK_BACKEND = {
    "nvidia": "nvidia",
    "amd": "amd",
    "tpu": "tpu",
    "xla": "tpu",
    "xpu": "xpu",
    "cpu": "cpu",
}


def specifics(target: Target, cfg: BackendConfig) -> list[sections.Section]:
    """Section 5, what differs per backend (XPU has none beyond the shared sections)."""
    if target.backend == "cpu":
        return [sections.allocators(target, cfg)]
    if target.backend == "nvidia":
        return [sections.show(nvidia.tf32_effect(target, cfg))]
    if target.backend == "amd":
        return [sections.show(amd.blas_libraries(target, cfg))]
    if target.backend == "tpu":
        return [
            sections.show(xla.compile_phases(target, cfg)),
            sections.show(xla.recompiles(target, cfg)),
            sections.show(xla.matmul_precision(target, cfg)),
        ]
    return []


def suite(params: dict, *, progress: bool = False) -> list[Record]:
    """Facts, probes, roofline, costs and backend specifics on the detected device."""
    cfg = BackendConfig.from_params(params)
    target = find_target(NOTEBOOK_BACKEND[detect_backend()])
    if target.backend == "tpu":
        xla.use_full_fp32(target)
    shared = [
        sections.facts(target),
        sections.capabilities(target, cfg),
        sections.roof(target, cfg, progress=progress),
        sections.overheads(target, cfg, progress=progress),
        sections.mlp(target, cfg),
    ]
    return sections.summary(cfg, *shared, *specifics(target, cfg)).records
