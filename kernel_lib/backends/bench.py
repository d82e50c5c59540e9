"""`python -m kernel_lib bench device`: the backend notebooks' measurements without a notebook,
for the detected backend, in the notebooks' order."""

from __future__ import annotations

from kernel_lib.backends import amd, costs, nvidia, probes, roofline, xla, xpu
from kernel_lib.backends.target import Target, facts_record, find_target
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


def backend_facts(target: Target) -> Record:
    """The device-facts record, with the backend's own facts where it is present."""
    if not target.present:
        return facts_record(target)
    extra = {
        "nvidia": nvidia.nvidia_facts,
        "amd": amd.amd_facts,
        "tpu": xla.xla_facts,
        "xpu": xpu.xpu_facts,
    }.get(target.backend)
    return facts_record(target, extra() if extra else None)


def specifics(target: Target, params: dict) -> list[Record]:
    """Section 5, what differs per backend (CPU and XPU have none beyond the shared sections)."""
    if target.backend == "nvidia":
        return nvidia.tf32_effect(target, n=params["tf32_size"], min_time_s=params["min_time_s"])
    if target.backend == "amd":
        return amd.blas_libraries(target, n=params["blas_size"], min_time_s=params["min_time_s"])
    if target.backend == "tpu":
        return (
            xla.compile_phases(
                target,
                batch=params["mlp_batch"],
                dim=params["mlp_dim"],
                dtype=params["mlp_dtype"],
                min_time_s=params["min_time_s"],
            )
            + xla.recompiles(
                target,
                seq_lens=params["xla_seq_lens"],
                bucket=params["xla_bucket"],
                dim=params["mlp_dim"],
            )
            + xla.matmul_precision(
                target, n=params["xla_precision_size"], min_time_s=params["min_time_s"]
            )
        )
    return []


def suite(params: dict, *, progress: bool = False) -> list[Record]:
    """Facts, probes, roofline, costs and backend specifics on the detected device."""
    target = find_target(NOTEBOOK_BACKEND[detect_backend()])
    t = params["min_time_s"]
    records = [backend_facts(target)]
    if target.backend == "tpu":
        xla.use_full_fp32(target)
    records += probes.probe(target, compile=params["probe_compile"])
    records += roofline.gemm_sweep(
        target,
        sizes=params["gemm_sizes"],
        dtypes=params["gemm_dtypes"],
        min_time_s=t,
        progress=progress,
    )
    records += roofline.bandwidth(
        target, mib=params["bandwidth_mib"], min_time_s=t, progress=progress
    )
    records = roofline.with_ceilings(records, target.facts)
    records += costs.launch_latency(target, min_time_s=t)
    records += costs.transfer(target, mib=params["transfer_mib"], min_time_s=t, progress=progress)
    records += costs.mlp_modes(
        target,
        batch=params["mlp_batch"],
        dim=params["mlp_dim"],
        dtype=params["mlp_dtype"],
        compile=params["compile_mlp"],
        min_time_s=t,
    )
    return records + specifics(target, params)
