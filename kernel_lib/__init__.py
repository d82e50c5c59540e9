"""kernel-workbook: kernels, their references, one timing harness and one records schema."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository (checkout) root
OUTPUTS = ROOT / "outputs"  # the report folders and the gallery


def _inductor_cache_per_isa() -> None:
    """One torch.compile cache per ATEN_CPU_CAPABILITY: Inductor's cache key leaves it out, yet
    kernels cached in a process held to avx2 corrupt the heap when loaded by one that is not
    (torch 2.13, measured here). Inductor reads TORCHINDUCTOR_CACHE_DIR when it first compiles."""
    isa = os.environ.get("ATEN_CPU_CAPABILITY")
    if isa:
        base = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        if base is None:
            from torch._inductor.runtime.cache_dir_utils import default_cache_dir

            base = default_cache_dir()
        if not base.rstrip("/").endswith(f"-{isa}"):
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{base.rstrip('/')}-{isa}"


_inductor_cache_per_isa()
