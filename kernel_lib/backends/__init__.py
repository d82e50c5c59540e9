"""Device characterisation shared by the backend notebooks: facts, capability probes, roofline,
costs, and one small module per backend for what differs (nvidia, amd, xla, xpu)."""

from kernel_lib.backends.costs import (
    check_mlp_modes,
    launch_latency,
    mlp_modes,
    small_mlp,
    transfer,
)
from kernel_lib.backends.probes import probe, probe_table
from kernel_lib.backends.roofline import (
    bandwidth,
    check_gemm,
    gemm_error,
    gemm_sweep,
    torch_dtype,
    with_ceilings,
)
from kernel_lib.backends.target import Target, facts_record, facts_table, find_target

__all__ = [
    # which device, and its facts
    "Target", "find_target", "facts_record", "facts_table",
    # capability probes
    "probe", "probe_table",
    # roofline
    "check_gemm", "gemm_error", "gemm_sweep", "bandwidth", "with_ceilings", "torch_dtype",
    # costs
    "launch_latency", "transfer", "small_mlp", "check_mlp_modes", "mlp_modes",
]  # fmt: skip
