"""FP8 linear layer: real nn.Parameter weights, forward and backward GEMMs through torch._scaled_mm.

Letters: M rows of the flattened input (batch x seq), K in_features, N out_features.
`torch._scaled_mm(a, b, scale_a, scale_b)` computes (a * scale_a) @ (b * scale_b): it wants the
*dequantisation* scales 1 / s, shapes () or (M, 1) and (1, N); b column-major (cuBLASLt's TN layout).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from kernel_lib.fp8.formats import Fp8Format, fp8_format
from kernel_lib.fp8.matmul import raw_scaled_mm
from kernel_lib.fp8.quantize import Fp8Tensor, quantize
from kernel_lib.fp8.scaling import (
    Granularity,
    ScalingMode,
    ScalingRecipe,
    cast_stats,
    delayed_scale,
    push_amax,
    scaling_recipe,
)  # fmt: skip
from kernel_lib.profiling.phases import phase

ALIGN = 16  # cuBLASLt FP8 GEMMs need K and N divisible by 16 (pytorch/pytorch#106844)
GRAD_DTYPES = ("e5m2", "e5m2fnuz", "e4m3fn", "e4m3fnuz", "bfloat16")
QUANTIZERS = ("torch", "triton")


@dataclass(frozen=True)
class Fp8LinearConfig:
    """How an Fp8Linear quantises its operands."""

    recipe: ScalingRecipe = field(default_factory=ScalingRecipe)  # for input, weight and grad
    fmt: Fp8Format = Fp8Format.E4M3FN  # forward operands (e4m3fnuz on MI300)
    # FP8 name: both backward GEMMs in FP8 with grads in that format ("e5m2": range for gradients;
    # "e4m3fn": torchao's rowwise recipe, as rowwise GEMM kernels may reject e5m2); "bfloat16": bf16
    grad_dtype: str = "e5m2"
    nonfinite: str = "nan"  # NaN/inf inputs become NaN in the output ("raise": error, host sync)
    track_stats: bool = (
        False  # count saturation/underflow per cast into .last_stats (extra passes)
    )
    quantizer: str = (
        "torch"  # "torch": reference ops, any device; "triton": fused kernel (GPU, dynamic)
    )

    def __post_init__(self):
        object.__setattr__(self, "fmt", fp8_format(self.fmt))
        if self.grad_dtype not in GRAD_DTYPES:
            raise ValueError(f"grad_dtype={self.grad_dtype!r} must be one of {list(GRAD_DTYPES)}")
        if self.nonfinite not in ("raise", "nan"):
            raise ValueError(f"nonfinite={self.nonfinite!r} must be one of ['raise', 'nan']")
        if self.quantizer not in QUANTIZERS:
            raise ValueError(f"quantizer={self.quantizer!r} must be one of {list(QUANTIZERS)}")
        if self.quantizer == "triton" and (
            self.recipe.mode is ScalingMode.DELAYED
            or self.recipe.granularity not in (Granularity.TENSORWISE, Granularity.ROWWISE)
        ):
            raise NotImplementedError(
                "quantizer='triton' is built for dynamic tensorwise/rowwise only"
            )

    @classmethod
    def from_recipe_name(cls, name: str, **kwargs) -> Fp8LinearConfig:
        """A config whose scaling is the preset `name` (see scaling.RECIPES)."""
        return cls(recipe=scaling_recipe(name), **kwargs)


@functools.cache
def cpu_scaled_mm_error() -> str | None:
    """oneDNN's reason it cannot run `torch._scaled_mm` on this CPU, or None. Some builds and ISAs
    have no FP8 matmul primitive (Xeons before Sapphire Rapids, or oneDNN held to AVX2 or
    AVX512_CORE there: 'could not create a primitive descriptor'), and one AMX Xeon held to an
    older ISA refused only ragged shapes; probed once at 16 x 32 x 16 and at the check tables'
    37 x 64 x 32 (odd M), tensorwise and rowwise, bf16 and fp32 out."""
    try:
        for m, k, n in ((16, 32, 16), (37, 64, 32)):
            a = torch.ones(m, k).to(torch.float8_e4m3fn)
            b = torch.ones(n, k).to(torch.float8_e4m3fn).t()
            for scale_a, scale_b in (
                (torch.tensor(1.0),) * 2,
                (torch.ones(m, 1), torch.ones(1, n)),
            ):
                for out_dtype in (torch.bfloat16, torch.float32):
                    torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)
    except (RuntimeError, NotImplementedError) as err:
        return (str(err).splitlines() or [type(err).__name__])[0][:160]
    return None


def fp8_matmul_support(device: torch.device | str) -> str:
    """'native' where FP8 tensor cores run _scaled_mm (NVIDIA sm_89+, AMD gfx942/gfx950), 'onednn'
    on a CPU whose oneDNN runs it (its speed is measured like any other), 'unsupported'
    elsewhere (e.g. sm_86, or a CPU where the probe raised)."""
    device = torch.device(device)
    if device.type == "cpu":
        return "unsupported" if cpu_scaled_mm_error() else "onednn"
    if device.type == "cuda":
        if torch.version.hip:
            arch = torch.cuda.get_device_properties(device).gcnArchName
            return "native" if arch.startswith(("gfx942", "gfx950")) else "unsupported"
        return "native" if torch.cuda.get_device_capability(device) >= (8, 9) else "unsupported"
    return "unsupported"


def scaled_mm_unsupported(device: torch.device | str) -> str | None:
    """Why torch._scaled_mm cannot run on `device` ('unsupported: ...'), or None where it runs
    (on FP8 matrix units or a CPU's oneDNN)."""
    device = torch.device(device)
    if fp8_matmul_support(device) != "unsupported":
        return None
    if device.type == "cpu" and (error := cpu_scaled_mm_error()):
        return f"unsupported: torch._scaled_mm raised on this CPU ({error})"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return f"unsupported: torch._scaled_mm needs FP8 matrix units, which {name} lacks"


def check_fp8_dims(in_features: int, out_features: int) -> str | None:
    """Why a (in_features -> out_features) layer cannot use _scaled_mm, or None if it can."""
    for name, value in (("in_features", in_features), ("out_features", out_features)):
        if value % ALIGN:
            return f"{name}={value} is not a multiple of {ALIGN} (torch._scaled_mm needs it)"
    return None


def scaled_mm(
    a: Fp8Tensor, b: Fp8Tensor, *, out_dtype: torch.dtype, use_fast_accum: bool = False
) -> torch.Tensor:
    """a @ b.T via torch._scaled_mm with the inverse scales. a: (M, K), b: (N, K) -> (M, N).
    use_fast_accum: Hopper's FP8 accumulation without periodic fp32 promotion (faster, less
    exact), as `_scaled_mm` takes it; False: fp32 accumulation."""
    scale_b = b.inverse_scale
    if b.granularity is Granularity.ROWWISE:
        scale_b = scale_b.t()  # (N, 1) -> (1, N)
    # Rowwise scaling on CUDA only produces bf16; cast afterwards.
    mm_dtype = torch.bfloat16 if a.granularity is Granularity.ROWWISE else out_dtype
    out = raw_scaled_mm(
        a.data, b.data.t(), a.inverse_scale, scale_b, out_dtype=mm_dtype,
        use_fast_accum=use_fast_accum,
    )  # fmt: skip
    return out.to(out_dtype)


def dynamic_quantize(
    t: torch.Tensor, config: Fp8LinearConfig, *, fmt: Fp8Format | None = None
) -> Fp8Tensor:
    """Cast t with a scale from its own amax, by the config's quantizer (no fallback between them)."""
    fmt = fmt or config.fmt
    gran, margin = config.recipe.granularity, config.recipe.margin
    if config.quantizer == "triton":
        from kernel_lib.fp8.quantize_triton import fused_quantize  # lazily: GPU path only

        return fused_quantize(
            t,
            fmt=fmt,
            granularity=gran,
            margin=margin,
            check_nonfinite=config.nonfinite == "raise",
        )
    return quantize(t, fmt=fmt, granularity=gran, margin=margin, nonfinite=config.nonfinite)


class _Operand:
    """Quantises one operand (input, weight or grad) by the layer's recipe, updating its history."""

    def __init__(self, layer: Fp8Linear, name: str, fmt: Fp8Format):
        self.layer, self.name, self.fmt = layer, name, fmt

    def __call__(self, t: torch.Tensor) -> Fp8Tensor:
        config = self.layer.config
        recipe = config.recipe
        if recipe.mode is ScalingMode.DELAYED:
            history = getattr(self.layer, f"amax_history_{self.name}")
            finite = torch.where(torch.isfinite(t), t, 0.0)
            now = finite.abs().max().float()
            scale = delayed_scale(history, now, self.fmt, margin=recipe.margin)
            push_amax(history, now)
            q = quantize(
                t,
                fmt=self.fmt,
                granularity=recipe.granularity,
                scale=scale,
                nonfinite=config.nonfinite,
            )
        else:
            q = dynamic_quantize(t, config, fmt=self.fmt)
        if config.track_stats:
            self.layer.last_stats[self.name] = cast_stats(t, q.scale, self.fmt, recipe.granularity)
        return q


def _pad_rows(t: torch.Tensor, multiple: int) -> torch.Tensor:
    return F.pad(t, (0, 0, 0, -t.shape[0] % multiple))


class _Fp8MatmulFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, layer):  # x: (M, K), weight: (N, K)
        with phase("quantise activation"):
            qx = layer._q_x(x)
        with phase("quantise weight"):
            qw = layer._q_w(weight)
        ctx.layer = layer
        ctx.save_for_backward(x, weight)
        ctx.qx, ctx.qw = qx, qw
        with phase("GEMM"):
            return scaled_mm(qx, qw, out_dtype=x.dtype)

    @staticmethod
    def backward(ctx, grad):  # grad: (M, N)
        x, weight = ctx.saved_tensors
        layer = ctx.layer
        config = layer.config
        if config.grad_dtype == "bfloat16":
            g = grad.to(torch.bfloat16)
            grad_x = (g @ weight.to(torch.bfloat16)).to(x.dtype)
            grad_w = (g.t() @ x.to(torch.bfloat16)).to(weight.dtype)
            return grad_x, grad_w, None
        rowwise = config.recipe.granularity is Granularity.ROWWISE
        # grad_x (M, K) = grad (M, N) @ weight (N, K): contraction over N.
        qg = layer._q_g(grad.contiguous())
        qw_t = layer._q_w(weight.t().contiguous()) if rowwise else _transposed(ctx.qw)
        grad_x = scaled_mm(qg, qw_t, out_dtype=x.dtype)
        # grad_w (N, K) = grad.T (N, M) @ x (M, K): contraction over M, zero-padded to 16.
        if rowwise:  # scales run along M now, so both operands are quantised afresh
            qg_t = layer._q_g(_pad_rows(grad, ALIGN).t().contiguous())
            qx_t = layer._q_x(_pad_rows(x, ALIGN).t().contiguous())
        else:  # one scale per tensor: reuse the casts, transposed and padded with FP8 zeros
            qg_t, qx_t = _transposed(qg, pad=True), _transposed(ctx.qx, pad=True)
        grad_w = scaled_mm(qg_t, qx_t, out_dtype=weight.dtype)
        return grad_x, grad_w, None


def _transposed(q: Fp8Tensor, *, pad: bool = False) -> Fp8Tensor:
    """A tensorwise-scaled operand transposed (its one scale still holds), rows optionally
    zero-padded to a multiple of 16 first (bit pattern 0 is +0 in every FP8 format)."""
    bits = q.data.view(torch.uint8)
    if pad:
        bits = _pad_rows(bits, ALIGN)
    return Fp8Tensor(
        bits.t().contiguous().view(q.data.dtype), q.scale, q.amax, q.fmt, q.granularity
    )


class Fp8Linear(nn.Module):
    """y = x @ W.T + b with x and W cast to FP8 every call (W stays a high-precision nn.Parameter
    that the optimiser updates). x: (..., K) -> (..., N), in x's dtype; bias added in x's dtype.
    ValueError if K or N is not a multiple of 16."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        config: Fp8LinearConfig | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        reason = check_fp8_dims(in_features, out_features)
        if reason:
            raise ValueError(reason)
        self.in_features, self.out_features = in_features, out_features
        self.config = config or Fp8LinearConfig()
        self.weight = nn.Parameter(
            torch.empty(out_features, in_features, device=device, dtype=dtype)
        )
        self.bias = (
            nn.Parameter(torch.empty(out_features, device=device, dtype=dtype)) if bias else None
        )
        self.reset_parameters()
        if self.config.recipe.mode is ScalingMode.DELAYED:
            for name in ("x", "w", "g"):
                self.register_buffer(
                    f"amax_history_{name}",
                    torch.zeros(self.config.recipe.history_len, device=device),
                )
        grad_fmt = (
            self.config.fmt
            if self.config.grad_dtype == "bfloat16"
            else fp8_format(self.config.grad_dtype)
        )
        self._q_x, self._q_w = (
            _Operand(self, "x", self.config.fmt),
            _Operand(self, "w", self.config.fmt),
        )
        self._q_g = _Operand(self, "g", grad_fmt)
        self.last_stats: dict = {}

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # as nn.Linear
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features)
            nn.init.uniform_(self.bias, -bound, bound)

    @classmethod
    def from_linear(cls, linear: nn.Linear, config: Fp8LinearConfig | None = None) -> Fp8Linear:
        """An Fp8Linear holding `linear`'s own weight and bias Parameters (same tensors)."""
        layer = cls(
            linear.in_features,
            linear.out_features,
            linear.bias is not None,
            config=config,
            device=linear.weight.device,
            dtype=linear.weight.dtype,
        )
        layer.weight = linear.weight
        layer.bias = linear.bias
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"x.shape[-1]={x.shape[-1]} must equal in_features={self.in_features}"
            )
        out = _Fp8MatmulFn.apply(x.reshape(-1, self.in_features), self.weight, self)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        r = self.config.recipe
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, {r.granularity.value} {r.mode.value}, "
            f"fmt={self.config.fmt.value}, grad={self.config.grad_dtype}"
        )
