"""`python -m kernel_lib bench device`: the backend notebooks' measurements without a notebook."""

from __future__ import annotations

from kernel_lib.backends.roofline import bandwidth, gemm_sweep, with_ceilings
from kernel_lib.platform import device_facts
from kernel_lib.records import Record


def suite(params: dict, *, progress: bool = False) -> list[Record]:
    """GEMM sweep and memory bandwidth on the detected device, as fractions of their ceilings."""
    facts = device_facts()
    records = gemm_sweep(facts, sizes=params["gemm_sizes"], dtypes=params["gemm_dtypes"],
                         min_time_s=params["min_time_s"], progress=progress)
    records += bandwidth(facts, mib=params["bandwidth_mib"], min_time_s=params["min_time_s"], progress=progress)
    return with_ceilings(records, facts)
