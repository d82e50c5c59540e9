"""The fp8 notebook's parameters as one frozen, validated config (fields: names without `fp8_`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from kernel_lib.config import (
    from_params,
    largest_needs,
    param,
    parse_choice,
    positive,
    positive_list,
    require,
    seeds,
)
from kernel_lib.fp8.block_scaled import BLOCK_RECIPES
from kernel_lib.fp8.formats import FORMATS
from kernel_lib.fp8.linear import ALIGN, GRAD_DTYPES
from kernel_lib.fp8.quantize import MX_FORMATS
from kernel_lib.fp8.scaling import BLOCK, GRANULARITIES, RECIPES
from kernel_lib.fp8.shapes import GemmShape, GroupedGemmShape
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
    "block_recipes",
    "block_check_sizes",
    "block_sizes",
    "weight_only_decode_rows",
    "weight_only_prefill_rows",
    "weight_only_dims",
    "weight_only_expert_dims",
)
_MX_FORMATS = tuple(f.value for f in MX_FORMATS)


def _any_of(names) -> str:
    return ", ".join(names)


def _check_bytes(n: int) -> int:
    """One `GemmShape.ragged(n)` GEMM check (checks.py): fp32 operands and their fp64, bf16 and
    fp8 copies; fp64 product, fp64 FP8 reference, fp32 and bf16 outputs."""
    s = GemmShape.ragged(n)
    return (s.m + s.n) * s.k * (4 + 8 + 2 + 1) + s.m * s.n * (8 + 8 + 4 + 2)


_SIZES = f"a non-empty list of multiples of {ALIGN} > 0"
_BLOCK_SIZES = f"a non-empty list of multiples of {BLOCK} > 0"


@dataclass(frozen=True)
class Fp8BenchConfig:
    PARAM_PREFIX = "fp8_"  # of the notebook's parameter names (not a field)

    formats: tuple = param(
        ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"),
        f"rows of the numerics tables; a non-empty list of {_any_of(FORMATS)}",
    )
    granularities: tuple = param(
        ("tensorwise", "rowwise", "blockwise"),
        f"scalings compared in the numerics tables; a non-empty list of {_any_of(GRANULARITIES)}",
    )
    error_rows: int = param(
        512, "rows (and columns) of the error tables' seeded input; an int > 0"
    )
    check_sizes: tuple = param((32, 64), f"n of the (n+5) x 2n x n _scaled_mm checks; {_SIZES}")
    gemm_sizes: tuple = param((256, 512, 1024), f"n of the n x n x n linear speed sweep; {_SIZES}")
    recipes: tuple = param(
        ("tensorwise_dynamic", "rowwise_dynamic"),
        f"recipes of the speed sweep (the first: inference); a non-empty list of {_any_of(RECIPES)}",
    )
    linear_format: str = param(
        "e4m3fn",
        f"forward operands of the FP8 linears (e4m3fnuz on MI300); one of {_any_of(FORMATS)}",
    )
    grad_format: str = param(
        "e5m2",
        f"gradients in training (bfloat16: bf16 backward GEMMs); one of {_any_of(GRAD_DTYPES)}",
    )
    quant_mib: tuple = param(
        (64,),
        "fp32 input sizes (MiB) of the quantisation bandwidth; a non-empty list of numbers > 0",
    )
    quant_granularities: tuple = param(
        ("tensorwise", "rowwise"),
        f"granularities timed for bandwidth; a non-empty list of {_any_of(GRANULARITIES)}",
    )
    model_dim: int = param(32, f"width D of the teacher-student MLP; a multiple of {ALIGN} > 0")
    model_ffn: int = param(64, f"its hidden width F; a multiple of {ALIGN} > 0")
    model_layers: int = param(1, "its blocks (Linear, GELU, Linear); an int > 0")
    model_seq: int = param(16, "rows per step are fp8_train_batch x fp8_model_seq; an int > 0")
    train_batch: int = param(16, "sequences per step; an int > 0")
    train_steps: int = param(
        40,
        "optimiser steps per training run (CPU: oneDNN's FP8 GEMMs are slow: keep it short); an int > 0",
    )
    train_recipes: tuple = param(
        ("tensorwise_dynamic", "tensorwise_delayed"),
        f"FP8 training runs beside bf16; a non-empty list of {_any_of(RECIPES)}",
    )
    train_seeds: int = param(
        3, "seeds fp8_seed, fp8_seed + 1, ..., each its own teacher, data and init; an int > 0"
    )
    error_format: str = param(
        "e4m3fn",
        "element format of the per-recipe error table (MX defines e4m3fn and e5m2 only); "
        f"one of {_any_of(_MX_FORMATS)}",
    )
    block_recipes: tuple = param(
        tuple(BLOCK_RECIPES),
        "block-scaled GEMMs checked and timed (blockwise: x 1x128, W 128x128; mxfp8: 1x32 e8m0); "
        f"a non-empty list of {_any_of(BLOCK_RECIPES)}",
    )
    block_check_sizes: tuple = param(
        (128,),
        "n of the (n+5) x 2n x n block-scaled GEMM checks (one rowwise _scaled_mm per K block on "
        f"CPUs); {_BLOCK_SIZES}",
    )
    block_sizes: tuple = param(
        (256, 512),
        f"n of the n x n x n block-scaled linear speed sweep; {_BLOCK_SIZES}",
    )
    grouped_experts: int = param(
        8, "experts E of the FP8 grouped GEMM (the last is routed no rows); an int >= 2"
    )
    grouped_tokens: int = param(
        256, "routed rows T of the grouped GEMM, spread over experts by Zipf weights; an int > 0"
    )
    grouped_dim: int = param(256, f"its K (model width); a multiple of {ALIGN} > 0")
    grouped_ffn: int = param(512, f"its N (expert hidden width); a multiple of {ALIGN} > 0")
    weight_only_decode_rows: tuple = param(
        (1, 4, 16),
        "rows M of the weight-only FP8 (W8A16) decode cases of the projection (the first: the "
        "headline, and the expert's); a non-empty list of ints > 0",
    )
    weight_only_prefill_rows: tuple = param(
        (512,), "rows M of its prefill cases (the projection only); a non-empty list of ints > 0"
    )
    weight_only_dims: tuple = param(
        (4096, 4096),
        "K, N of the W8A16 projection (Llama-style, per-output-channel scales); two ints > 0",
    )
    weight_only_expert_dims: tuple = param(
        (7168, 2048),
        "K, N of a MoE expert's W8A16 projection (DeepSeek-V3: 128 x 128 block scales), at the "
        "first decode row count; two ints > 0",
    )
    min_time_s: float = param(
        0.2, "timed seconds per candidate and case, over all rounds; a finite number > 0"
    )
    seed: int = param(0, "seed of every input and model; an int >= 0")

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
            "block_recipes": BLOCK_RECIPES,
        }
        for name, registry in choices.items():
            for value in getattr(self, name):
                parse_choice(value, registry, param=f"fp8_{name}")
        parse_choice(self.linear_format, FORMATS, param="fp8_linear_format")
        parse_choice(self.grad_format, GRAD_DTYPES, param="fp8_grad_format")
        parse_choice(self.error_format, _MX_FORMATS, param="fp8_error_format")
        if "mx" in self.granularities:
            for fmt in self.formats:
                parse_choice(fmt, _MX_FORMATS, param="fp8_formats (with mx in fp8_granularities)")
        for name in ("check_sizes", "gemm_sizes", "quant_mib"):
            positive_list(getattr(self, name), f"fp8_{name}")
        for name in ("weight_only_decode_rows", "weight_only_prefill_rows"):
            for m in getattr(self, name):
                require(isinstance(m, int) and m > 0, f"fp8_{name}", m, "an int > 0")
        for name in ("weight_only_dims", "weight_only_expert_dims"):
            dims = getattr(self, name)
            require(
                len(dims) == 2 and all(isinstance(d, int) and d > 0 for d in dims),
                f"fp8_{name}",
                list(dims),
                "two ints > 0 (K, N)",
            )
        for name in ("check_sizes", "gemm_sizes"):
            for n in getattr(self, name):
                require(
                    isinstance(n, int) and n % ALIGN == 0,
                    f"fp8_{name}",
                    n,
                    f"an integer multiple of {ALIGN} (torch._scaled_mm needs it)",
                )
        for name in ("block_check_sizes", "block_sizes"):
            for n in getattr(self, name):
                require(
                    isinstance(n, int) and n > 0 and n % BLOCK == 0,
                    f"fp8_{name}",
                    n,
                    f"an integer multiple of {BLOCK} (whole K blocks)",
                )
        for name in ("model_dim", "model_ffn", "grouped_dim", "grouped_ffn"):
            require(
                getattr(self, name) % ALIGN == 0,
                f"fp8_{name}",
                getattr(self, name),
                f"a multiple of {ALIGN} (torch._scaled_mm needs it)",
            )
        for f in fields(self):
            if f.type == "int" and f.name != "seed":
                positive(getattr(self, f.name), f"fp8_{f.name}")
        positive(self.min_time_s, "fp8_min_time_s")
        require(
            self.grouped_experts >= 2, "fp8_grouped_experts", self.grouped_experts, "an int >= 2"
        )
        # seed, seed + 1, ... (train_seeds) and each teacher's seed + 1000 (fp8/training.py)
        seeds(self.seed, "fp8_seed", self.train_seeds + 1000)

    @classmethod
    def from_params(cls, params: dict) -> Fp8BenchConfig:
        """The config of a notebook's `fp8_*` globals (or a parameter file's values)."""
        return from_params(cls, params, prefix=cls.PARAM_PREFIX)

    def memory_needs(self) -> dict[str, float]:
        """Notebook parameter -> estimated peak bytes of the largest case it sets the size of."""
        mib = 2**20
        cases = [  # quantisation bandwidth: fp32 input x, the copy's fp32 dst, the fp8 output and
            # the fp64 copy of x the reference quantises: 4 + 4 + 1 + 8 bytes per element of x
            (size * (mib // 4) * (4 + 4 + 1 + 8), ("quant_mib",))
            for size in self.quant_mib
        ]
        cases += [  # linear sweep: bf16 x, W and output, fp8 x and W, fp64 x, W and output
            (n * n * (3 * 2 + 2 * 1 + 3 * 8), ("gemm_sizes",)) for n in self.gemm_sizes
        ]
        cases += [  # block-scaled sweep: as the linear sweep
            (n * n * (3 * 2 + 2 * 1 + 3 * 8), ("block_sizes",)) for n in self.block_sizes
        ]
        t, k, f, e = self.grouped_tokens, self.grouped_dim, self.grouped_ffn, self.grouped_experts
        # grouped GEMM: fp32 x and weights, their fp8 and fp64 copies, fp64 and bf16 outputs
        cases.append((
            (t * k + e * f * k) * (4 + 1 + 8) + t * f * (8 + 2),
            ("grouped_tokens", "grouped_dim", "grouped_ffn", "grouped_experts"),
        ))  # fmt: skip
        rows = max(self.weight_only_decode_rows + self.weight_only_prefill_rows)
        for name in ("weight_only_dims", "weight_only_expert_dims"):
            k, n = getattr(self, name)
            cases.append((  # W8A16: fp32 W and its FP8, bf16 and fp64 copies, the bf16 copy's
                # destination; bf16 and fp64 x, fp64 reference and bf16 outputs
                n * k * (4 + 1 + 2 + 8 + 2) + rows * (k + n) * (2 + 8),
                ("weight_only_decode_rows", "weight_only_prefill_rows", name),
            ))  # fmt: skip
        n = self.error_rows  # error tables: four (n, n) fp32 samples, one's fp8 codes, and the
        # fp64 reference and dequantised copy its errors are computed from
        cases.append((n * n * (4 * 4 + 1 + 2 * 8), ("error_rows",)))
        cases += [(_check_bytes(n), ("check_sizes",)) for n in self.check_sizes]
        cases += [(_check_bytes(n), ("block_check_sizes",)) for n in self.block_check_sizes]
        r, d, f = self.train_batch * self.model_seq, self.model_dim, self.model_ffn
        layers = self.model_layers
        weights, activations = layers * (2 * d * f + d + f), layers * r * (2 * f + d)
        cases.append((  # training.py draws every step's batch at once: inputs, the teacher's
            # stacked outputs and their normalised copy, (steps, R, D) fp32 each; the student's
            # fp32 weights, gradients and AdamW moments, and the teacher's weights; one step's
            # activations (per block (R, F) twice and (R, D)) in fp32 and bf16, and gradients
            12 * self.train_steps * r * d + 5 * 4 * weights + 2 * (4 + 2) * activations,
            ("train_steps", "train_batch", "model_seq", "model_dim", "model_ffn", "model_layers"),
        ))  # fmt: skip
        return largest_needs(cases, "fp8_")

    @property
    def grouped_shape(self) -> GroupedGemmShape:
        """The grouped GEMM's shape (fp8_grouped_tokens, _dim, _ffn, _experts)."""
        return GroupedGemmShape(
            self.grouped_tokens, self.grouped_dim, self.grouped_ffn, self.grouped_experts
        )

    @property
    def weight_only_cases(self) -> list[tuple[GemmShape, str]]:
        """(shape, scaling) of each W8A16 case: the projection per output channel at the decode
        and prefill rows, then the expert per 128 x 128 block at the first decode row count."""
        (k, n), (ke, ne) = self.weight_only_dims, self.weight_only_expert_dims
        rows = self.weight_only_decode_rows + self.weight_only_prefill_rows
        expert = GemmShape(self.weight_only_decode_rows[0], ke, ne)
        return [(GemmShape(m, k, n), "channel") for m in rows] + [(expert, "block")]

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
