"""The fp8 notebook's parameters as one frozen, validated config (fields: names without `fp8_`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from kernel_lib.config import from_params, parse_choice, positive, positive_list, require
from kernel_lib.fp8.formats import FORMATS
from kernel_lib.fp8.linear import ALIGN, GRAD_DTYPES
from kernel_lib.fp8.scaling import GRANULARITIES, RECIPES
from kernel_lib.fp8.training import TrainConfig

_LISTS = (
    "formats",
    "granularities",
    "check_sizes",
    "gemm_sizes",
    "recipes",
    "quant_mib",
    "quant_granularities",
    "train_recipes",
)


@dataclass(frozen=True)
class Fp8BenchConfig:
    formats: tuple = ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz")  # rows of the numerics tables
    granularities: tuple = GRANULARITIES  # scalings compared in the numerics tables
    error_rows: int = 512  # rows (and columns) of the error tables' seeded input
    check_sizes: tuple = (
        32,
        64,
    )  # n of the (n+5) x 2n x n _scaled_mm checks (CPU emulation is slow)
    gemm_sizes: tuple = (256, 512, 1024)  # n of the n x n x n linear speed sweep
    recipes: tuple = ("tensorwise_dynamic", "rowwise_dynamic")  # speed sweep; the first: inference
    linear_format: str = "e4m3fn"  # forward operands of the FP8 linears (e4m3fnuz on MI300)
    grad_format: str = "e5m2"  # gradients in training (or bfloat16: bf16 backward GEMMs)
    quant_mib: tuple = (64,)  # fp32 input sizes (MiB) of the quantisation bandwidth
    quant_granularities: tuple = ("tensorwise", "rowwise")  # granularities timed for bandwidth
    model_dim: int = 32  # D of the teacher-student MLP
    model_ffn: int = 64  # F of the teacher-student MLP
    model_layers: int = 1  # its blocks
    model_seq: int = 16  # rows per step are train_batch x model_seq
    train_batch: int = 16
    train_steps: int = 40  # CPU runs each FP8 GEMM in torch's emulation: keep it short
    train_recipes: tuple = ("tensorwise_dynamic", "tensorwise_delayed")  # FP8 runs beside bf16
    train_seeds: int = 3  # seeds seed, seed + 1, ... each with its own teacher, data and init
    min_time_s: float = 0.2  # timed seconds per candidate and round budget (compare)
    seed: int = 0

    def __post_init__(self):
        for name in _LISTS:
            value = getattr(self, name)
            require(
                isinstance(value, (list, tuple)) and len(value) > 0,
                f"fp8_{name}",
                value,
                "a non-empty list",
            )
            object.__setattr__(self, name, tuple(value))
        choices = {
            "formats": FORMATS,
            "granularities": GRANULARITIES,
            "recipes": RECIPES,
            "quant_granularities": GRANULARITIES,
            "train_recipes": RECIPES,
        }
        for name, registry in choices.items():
            for value in getattr(self, name):
                parse_choice(value, registry, param=f"fp8_{name}")
        parse_choice(self.linear_format, FORMATS, param="fp8_linear_format")
        parse_choice(self.grad_format, GRAD_DTYPES, param="fp8_grad_format")
        for name in ("check_sizes", "gemm_sizes", "quant_mib"):
            positive_list(getattr(self, name), f"fp8_{name}")
        for name in ("check_sizes", "gemm_sizes"):
            for n in getattr(self, name):
                require(
                    isinstance(n, int) and n % ALIGN == 0,
                    f"fp8_{name}",
                    n,
                    f"an integer multiple of {ALIGN} (torch._scaled_mm needs it)",
                )
        for name in ("model_dim", "model_ffn"):
            require(
                getattr(self, name) % ALIGN == 0,
                f"fp8_{name}",
                getattr(self, name),
                f"a multiple of {ALIGN} (every linear must convert to FP8)",
            )
        for f in fields(self):
            if f.type == "int" and f.name != "seed":
                positive(getattr(self, f.name), f"fp8_{f.name}")
        positive(self.min_time_s, "fp8_min_time_s")
        require(
            isinstance(self.seed, int) and self.seed >= 0, "fp8_seed", self.seed, "an int >= 0"
        )

    @classmethod
    def from_params(cls, params: dict) -> Fp8BenchConfig:
        """The config of a notebook's `fp8_*` globals (or a parameter file's values)."""
        return from_params(cls, params, prefix="fp8_")

    @property
    def seeds(self) -> list[int]:
        """The training check's seeds."""
        return list(range(self.seed, self.seed + self.train_seeds))

    def train_config(self) -> TrainConfig:
        """The teacher-student run of the first seed."""
        return TrainConfig(
            steps=self.train_steps,
            rows=self.train_batch * self.model_seq,
            dim=self.model_dim,
            ffn=self.model_ffn,
            layers=self.model_layers,
            seed=self.seed,
        )
