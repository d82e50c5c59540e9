"""The FlexAttention notebook's parameters as one frozen, validated config (attn_* without prefix).

Legend: B batch, H heads, S sequence length, D head dim.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_lib.attention.flex import valid_block_size
from kernel_lib.attention.patterns import PATTERNS, PatternConfig
from kernel_lib.attention.reference import CHUNK_BYTES, FULL_CHECK_MAX_SEQ_LEN
from kernel_lib.attention.shapes import AttentionShape
from kernel_lib.config import (
    from_params,
    largest_needs,
    param,
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

    PARAM_PREFIX = PREFIX  # of the notebook's parameter names (not a field)

    batch: int = param(1, "B, batch size; an int > 0")
    heads: int = param(4, "H, attention heads; an int > 0")
    seq_len: int = param(
        1024,
        f"S of the pattern sections (tokens); an int > 0, >= {PREFIX}window and {PREFIX}windows",
    )
    head_dim: int = param(
        64, "D, head dimension; an int > 0 (a size flex_attention rejects is skipped)"
    )
    dtype: str = param("float32", f"input dtype; one of {', '.join(DTYPES)}")
    patterns: tuple[str, ...] = param(
        tuple(PATTERNS),
        "patterns checked and timed, in order; a non-empty list of registered names (default: all)",
    )
    window: int = param(
        128, f"band half-width of the window patterns (tokens); 0 < window <= {PREFIX}seq_len"
    )
    prefix_len: int = param(256, "prefix_lm: bidirectional prefix (tokens); an int >= 0")
    num_docs: int = param(4, "document: packed documents per sequence; an int > 0")
    dilation: int = param(2, "dilated: stride between attended keys; an int > 0")
    num_global: int = param(16, "global_local: global tokens at the start; an int >= 0")
    softcap: float = param(20.0, "softcap: tanh cap on scores; a finite number > 0")
    block_size: int = param(64, "flex BlockMask tile (tokens); a power of two >= 16")
    windows: tuple[int, ...] = param(
        (32, 64, 128, 256, 512),
        f"window sweep (causal sliding window); a non-empty list, each 0 < w <= {PREFIX}seq_len",
    )
    seq_lens: tuple[int, ...] = param(
        (256, 512, 1024, 2048), "sequence-length sweep (causal); a non-empty list of ints > 0"
    )
    reps: int = param(
        10, f"interleaved timing rounds per case (after one warm-up); an int >= {MIN_ROUNDS}"
    )
    min_time_s: float = param(
        0.1, "timed seconds per implementation and case, over all rounds; a finite number > 0"
    )

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
        return from_params(cls, params, prefix=cls.PARAM_PREFIX)

    def memory_needs(self) -> dict[str, float]:
        """Notebook parameter -> estimated peak bytes of the largest case it sets the size of:
        the pattern sections at attn_seq_len (with the backward case), the sweep at attn_seq_lens."""
        sizes = ("batch", "heads", "head_dim", "dtype")
        cases = [(self._case_bytes(self.seq_len, backward=True), ("seq_len", *sizes))]
        cases += [(self._case_bytes(s), ("seq_lens", *sizes)) for s in self.seq_lens]
        return largest_needs(cases, PREFIX)

    def _case_bytes(self, seq_len: int, *, backward: bool = False) -> int:
        """One case's inputs and its fp64 reference. The reference never holds the whole
        (B, H, S, S) score matrix: it works in row chunks of about CHUNK_BYTES (reference.py)."""
        B, H, S, D = self.batch, self.heads, seq_len, self.head_dim
        item = parse_dtype(self.dtype).itemsize
        # q, k, v, out (backward: also grad_out, dq, dk, dv), each again in fp64 for the reference
        tensors = (8 if backward else 4) * B * H * S * D * (item + 8)
        row = 8 * B * H * S  # fp64 scores of one query row, every batch and head
        rows = S if backward or S <= FULL_CHECK_MAX_SEQ_LEN else 256  # else: a row sample
        scores = 3 * min(rows, max(1, CHUNK_BYTES // row)) * row  # scores, probs, masked copy
        masks = 2 * S * S  # the dense (S, S) bool mask and SDPA's copy of it
        if backward:  # pattern sections: SDPA's additive (1, H, S, S) bias, twice, and offsets
            masks += 2 * H * S * S * item + 8 * S * S
        return tensors + scores + masks

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
