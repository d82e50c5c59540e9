"""The FlexAttention notebook's parameters as one frozen, validated config (attn_* without prefix).

Legend: B batch, H heads, S sequence length, D head dim.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_lib.attention.flex import valid_block_size
from kernel_lib.attention.patterns import PATTERNS, PatternConfig
from kernel_lib.attention.shapes import AttentionShape
from kernel_lib.config import (
    from_params,
    parse_choice,
    parse_dtype,
    positive,
    positive_list,
    require,
)
from kernel_lib.measure import MIN_ROUNDS

# Input dtypes flex_attention computes in (fp64 is the reference's).
DTYPES = ("float32", "bfloat16", "float16")
PREFIX = "attn_"  # of the notebook parameters, named in every error


@dataclass(frozen=True)
class AttentionConfig:
    """What the FlexAttention notebook measures: one shape, the patterns, two sweeps."""

    batch: int = 1  # B
    heads: int = 4  # H
    seq_len: int = 1024  # S of the pattern sections
    head_dim: int = 64  # D: any size flex_attention accepts (an unsupported one is skipped)
    dtype: str = "float32"
    patterns: tuple[str, ...] = tuple(PATTERNS)  # registry names, checked and timed in order
    window: int = 128  # band half-width of the window patterns
    prefix_len: int = 256  # prefix_lm: bidirectional prefix
    num_docs: int = 4  # document: packed documents per sequence
    dilation: int = 2  # dilated: stride between attended keys
    num_global: int = 16  # global_local: global tokens at the start
    softcap: float = 20.0  # softcap: tanh cap on scores
    block_size: int = 64  # flex BlockMask tile (tokens)
    windows: tuple[int, ...] = (32, 64, 128, 256, 512)  # window sweep (causal sliding window)
    seq_lens: tuple[int, ...] = (256, 512, 1024, 2048)  # sequence-length sweep (causal)
    reps: int = 10  # interleaved timing rounds per case
    min_time_s: float = 0.1  # timed seconds per implementation and case, over all rounds

    def __post_init__(self):
        p = PREFIX
        for name in (
            "batch",
            "heads",
            "seq_len",
            "head_dim",
            "window",
            "num_docs",
            "dilation",
            "reps",
            "softcap",
            "min_time_s",
        ):
            positive(getattr(self, name), p + name)
        for name in ("prefix_len", "num_global"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 0, p + name, value, "an integer >= 0")
        require(
            self.reps >= MIN_ROUNDS,
            p + "reps",
            self.reps,
            f">= {MIN_ROUNDS} (interleaved rounds: the fewest that give a ratio its 95 % interval)",
        )
        parse_dtype(self.dtype, param=p + "dtype", allowed=DTYPES)
        object.__setattr__(self, "patterns", tuple(self.patterns))
        object.__setattr__(self, "windows", tuple(self.windows))
        object.__setattr__(self, "seq_lens", tuple(self.seq_lens))
        require(len(self.patterns) > 0, p + "patterns", self.patterns, "a non-empty list")
        for name in self.patterns:
            parse_choice(name, PATTERNS, param=p + "patterns")
        require(
            self.window <= self.seq_len, p + "window", self.window, f"<= {p}seq_len={self.seq_len}"
        )
        positive_list(self.windows, p + "windows")
        for window in self.windows:
            require(
                window <= self.seq_len,
                p + "windows",
                self.windows,
                f"all <= {p}seq_len={self.seq_len}",
            )
        positive_list(self.seq_lens, p + "seq_lens")
        require(
            valid_block_size(self.block_size),
            p + "block_size",
            self.block_size,
            "a power of two >= 16",
        )

    @classmethod
    def from_params(cls, params: dict) -> AttentionConfig:
        """The config of a notebook's attn_* parameters (missing ones keep their defaults)."""
        return from_params(cls, params, prefix=PREFIX)

    def shape(self, seq_len: int | None = None) -> AttentionShape:
        """The (B, H, S, D) problem, at `seq_len` instead of S for the sequence sweep."""
        return AttentionShape(
            self.batch, self.heads, seq_len or self.seq_len, self.head_dim, self.dtype
        )

    def pattern(self, name: str, **overrides) -> PatternConfig:
        """PatternConfig of `name` with this config's numbers (`overrides` replace some)."""
        numbers = {
            "window": self.window,
            "prefix_len": self.prefix_len,
            "num_docs": self.num_docs,
            "dilation": self.dilation,
            "num_global": self.num_global,
            "softcap": self.softcap,
        }
        return PatternConfig(name, **{**numbers, **overrides})

    def pattern_configs(self) -> list[PatternConfig]:
        return [self.pattern(name) for name in self.patterns]
