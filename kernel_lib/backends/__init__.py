"""Device characterisation shared by the backend notebooks: facts, capability probes, roofline,
costs, one small module per backend for what differs (nvidia, amd, xla, xpu), and each notebook's
suite (kernel_lib.backends.suite)."""

from kernel_lib.backends.config import BackendBenchConfig
from kernel_lib.backends.costs import launch_latency, mlp_modes, small_mlp, transfer
from kernel_lib.backends.probes import probe, probe_table
from kernel_lib.backends.roofline import bandwidth, gemm_check, gemm_sweep, with_ceilings
from kernel_lib.backends.suite import SUITES, Setup, context, setup
from kernel_lib.backends.target import Target, facts_record, facts_table, find_target

__all__ = [
    # configuration, and which device
    "BackendBenchConfig", "Target", "find_target", "facts_record", "facts_table",
    # each notebook's suite and its context (kernel_lib.backends.suite)
    "SUITES", "Setup", "context", "setup",
    # capability probes
    "probe", "probe_table",
    # roofline
    "gemm_check", "gemm_sweep", "bandwidth", "with_ceilings",
    # costs
    "launch_latency", "transfer", "small_mlp", "mlp_modes",
]  # fmt: skip
