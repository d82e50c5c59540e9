"""Input factories for the fp8 tests: seeded tensors spanning many binades, with extremes."""

import pytest
import torch


def wide_tensor(shape, *, seed=0, binades=(-8, 4)):
    """N(0,1) times per-column magnitudes 10**lo .. 10**hi: normal, subnormal and underflowing values."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen)
    return x * torch.logspace(*binades, shape[-1])


def with_extremes(x):
    """x with +-0, a huge and a tiny value written into its first elements (x must have >= 6)."""
    flat = x.clone().reshape(-1)
    flat[:6] = torch.tensor([0.0, -0.0, 3e38, -1e-38, 1e-30, -5.0])
    return flat.reshape(x.shape)


def with_nonfinite(x):
    flat = x.clone().reshape(-1)
    flat[1], flat[-1], flat[len(flat) // 2] = float("nan"), float("inf"), -float("inf")
    return flat.reshape(x.shape)


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(1234)


ONEDNN_REFUSAL = "could not create a primitive descriptor for the matmul primitive"


def refuse_ragged(real):
    """torch._scaled_mm as an AMX Xeon held to an older ISA ran it: an odd M refused, the rest run."""

    def scaled_mm(a, *args, **kwargs):
        if a.shape[0] % 2:
            raise RuntimeError(ONEDNN_REFUSAL)
        return real(a, *args, **kwargs)

    return scaled_mm


@pytest.fixture
def refused_ragged(monkeypatch):
    """oneDNN refuses only ragged shapes; the probe runs again."""
    from kernel_lib.fp8 import linear

    monkeypatch.setattr(torch, "_scaled_mm", refuse_ragged(torch._scaled_mm))
    monkeypatch.setattr(linear, "cpu_scaled_mm_error", linear.cpu_scaled_mm_error.__wrapped__)


@pytest.fixture
def refused_scaled_mm(monkeypatch):
    """A CPU whose oneDNN has no FP8 matmul (a pre-AMX Xeon, or oneDNN held to AVX2/AVX512_CORE
    there): every torch._scaled_mm raises as it does there, and the probe runs again."""
    from kernel_lib.fp8 import block_scaled, linear

    def refuse(*args, **kwargs):
        raise RuntimeError(ONEDNN_REFUSAL)

    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    monkeypatch.setattr(linear, "cpu_scaled_mm_error", linear.cpu_scaled_mm_error.__wrapped__)
    monkeypatch.setattr(
        block_scaled,
        "block_scaled_mm_unsupported",
        block_scaled.block_scaled_mm_unsupported.__wrapped__,
    )


@pytest.fixture
def grouped_kernel_up_to_two_groups(monkeypatch):
    """A device whose `torch._scaled_grouped_mm` passes the 2-group probe and computes 2 groups
    right, but raises at more (as a kernel might at 128 experts): the probe runs again."""
    from kernel_lib.fp8 import grouped

    def fake(a, b, scale_a, scale_b, *, offs, out_dtype):
        if offs.numel() > 2:
            raise RuntimeError(f"grouped GEMM with {offs.numel()} groups is not supported")
        starts = [0, *offs.tolist()[:-1]]
        rows = [
            (a[s:e].float() * scale_a[s:e, None]) @ (b[g].float() * scale_b[g])
            for g, (s, e) in enumerate(zip(starts, offs.tolist()))
        ]
        return torch.cat(rows).to(out_dtype)

    monkeypatch.setattr(torch, "_scaled_grouped_mm", fake)
    monkeypatch.setattr(
        grouped,
        "scaled_grouped_mm_unsupported",
        grouped.scaled_grouped_mm_unsupported.__wrapped__,
    )
