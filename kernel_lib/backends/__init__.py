"""Device characterisation: roofline measurements shared by every backend notebook."""

from kernel_lib.backends.roofline import bandwidth, gemm_error, gemm_sweep, torch_dtype, with_ceilings

__all__ = ["bandwidth", "gemm_error", "gemm_sweep", "torch_dtype", "with_ceilings"]
