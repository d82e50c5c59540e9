"""Will it fit: buffers are sized against free memory before they are allocated, so a size too
big for this device becomes `skipped: needs X GiB, Y GiB free` instead of a crash."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import torch

from kernel_lib.checks import Unsupported

HEADROOM = 0.9  # leave a tenth of free memory to the allocator, workspaces and the runtime
T = TypeVar("T")


def free_bytes(device: str) -> int | None:
    """Free memory of `device` now; None where the runtime does not say (XLA)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.mem_get_info(torch.device(device))[0]
    if kind == "xpu" and hasattr(torch.xpu, "mem_get_info"):
        return torch.xpu.mem_get_info(torch.device(device))[0]
    if kind == "cpu":
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # not a POSIX host
            return None
    return None


def allocate(make: Callable[[], T], *, nbytes: float, device: str) -> T:
    """make(), after checking that `nbytes` fit in free memory; Unsupported (a skip reason) when
    they do not or when the allocation runs out of memory anyway."""
    free = free_bytes(device)
    if free is not None and nbytes > HEADROOM * free:
        raise Unsupported(
            f"out of memory: needs {nbytes / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
        )
    try:
        return make()
    except torch.OutOfMemoryError as err:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        raise Unsupported("out of memory: " + str(err).splitlines()[0][:160]) from None
