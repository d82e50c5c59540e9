"""The FlexAttention notebook's parameters as one frozen, validated config (attn_* without prefix).

Legend: B batch, H heads, S sequence length, D head dim.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_lib.attention.activation import ACTIVATIONS
from kernel_lib.attention.flex import FlexVariant, valid_block_size
from kernel_lib.attention.memory import case_bytes, decode_bytes, mla_bytes, tiles
from kernel_lib.attention.mla import MLAShape
from kernel_lib.attention.patterns import GYM_PATTERNS, PATTERNS, SPEC_PATTERNS, PatternConfig
from kernel_lib.attention.shapes import AttentionShape
from kernel_lib.config import (
    from_params,
    largest_needs,
    param,
    parse_choice,
    parse_choices,
    parse_dtype,
    positive,
    positive_list,
    require,
)
from kernel_lib.measure import MIN_ROUNDS

# Input dtypes flex_attention computes in (fp64 is the reference's).
DTYPES = ("float32", "bfloat16", "float16")
PREFIX = "attn_"  # of the notebook parameters, named in every error
# attention-gym families with their own flex call (not registry patterns): bench_gym.py
GYM_KERNELS = ("mla", "temporal_heads", "activation", "jetspec", "vsa")
# list parameters kept as tuples (frozen, hashable)
TUPLES = ("causal_dtypes", "patterns", "windows", "seq_lens", "block_sizes", "gym_patterns")
TUPLES += ("decode_kv_lens",)


@dataclass(frozen=True)
class AttentionBenchConfig:
    """What the FlexAttention notebook measures: one shape, the patterns, two sweeps."""

    PARAM_PREFIX = PREFIX  # of the notebook's parameter names (not a field)

    batch: int = param(1, "B, batch size; an int > 0")
    heads: int = param(4, "H, attention heads; an int > 0")
    seq_len: int = param(
        1024,
        f"S of the pattern sections (tokens); an int > 0, >= {PREFIX}window",
    )
    head_dim: int = param(
        64, "D, head dimension; an int > 0 (a size flex_attention rejects is skipped)"
    )
    dtype: str = param("float32", f"input dtype; one of {', '.join(DTYPES)}")
    patterns: tuple[str, ...] = param(
        tuple(p for p in PATTERNS if p not in GYM_PATTERNS + SPEC_PATTERNS),
        "patterns checked and timed, in order; a non-empty list of registered names "
        f"(default: all but the attention-gym families of {PREFIX}gym_patterns and "
        f"{PREFIX}gym_kernels' jetspec)",
    )
    window: int = param(
        128, f"band half-width of the window patterns (tokens); 0 < window <= {PREFIX}seq_len"
    )
    prefix_len: int = param(256, "prefix_lm: bidirectional prefix (tokens); an int >= 0")
    num_docs: int = param(4, "document: packed documents per sequence; an int > 0")
    dilation: int = param(2, "dilated: stride between attended keys; an int > 0")
    num_global: int = param(16, "global_local: global tokens at the start; an int >= 0")
    softcap: float = param(20.0, "softcap: tanh cap on scores; a finite number > 0")
    block_sizes: tuple[int, ...] = param(
        (32, 64, 128, 256),
        "flex BlockMask tiles tried on causal (its fastest here runs every case) and on the "
        "causal sliding window (its sweep); a non-empty list of powers of two >= 16",
    )
    upcast: bool = param(
        True, "also try bf16/fp16 flex computed in fp32 (where tiles are tried); True or False"
    )
    causal_dtypes: tuple[str, ...] = param(
        ("float32", "bfloat16"),
        "dtypes flex causal forward is timed in against every SDPA backend, a headline each: "
        f"{PREFIX}dtype's is the pattern section's case, every other tunes its own variant "
        f"(section causal_dtypes); a list among {', '.join(DTYPES)}",
    )
    cold_compile: bool = param(
        True,
        "time one cold flex compile (fresh process, empty Inductor cache: tens of seconds on a "
        "CPU); True or False",
    )
    windows: tuple[int, ...] = param(
        (32, 64, 128, 256, 512),
        f"window sweep (causal sliding window); a non-empty list, each 0 < w <= "
        f"{PREFIX}windows_seq_len",
    )
    windows_seq_len: int = param(
        4096,
        "S of the window sweep (tokens; a window pays off on long sequences); an int >= "
        f"{PREFIX}window and each of {PREFIX}windows",
    )
    seq_lens: tuple[int, ...] = param(
        (256, 512, 1024, 2048), "sequence-length sweep (causal); a non-empty list of ints > 0"
    )
    gym_patterns: tuple[str, ...] = param(
        ("neighbourhood_2d", "shared_prefix", "sandwich"),
        "attention-gym families timed at the pattern shape (one flex compile each; block "
        f"sparsity is counted for all); a list of names among {', '.join(GYM_PATTERNS)}",
    )
    decode_heads: int = param(
        32, f"Hq, query heads of the decode cases; a multiple of {PREFIX}decode_kv_heads"
    )
    decode_kv_heads: int = param(8, "Hkv, key/value heads of GQA decode (MQA: 1); an int > 0")
    decode_head_dim: int = param(128, "D of the decode cases; an int > 0")
    decode_kv_len: int = param(8192, "KV-cache length of the decode cases (tokens); an int > 0")
    decode_q_len: int = param(
        4, f"query positions of the multi-token decode case; 0 < q_len <= {PREFIX}decode_kv_len"
    )
    decode_dtype: str = param("bfloat16", f"dtype of the decode cases; one of {', '.join(DTYPES)}")
    decode_kv_lens: tuple[int, ...] = param(
        (1024, 2048, 4096, 8192),
        "KV-length sweep of one-token GQA decode (one flex compile each); a list of ints > 0",
    )
    cross_q_len: int = param(
        200, f"cross-attention: query tokens (keys: {PREFIX}cross_kv_len); an int > 0"
    )
    cross_kv_len: int = param(
        1000,
        f"cross-attention: key tokens, split into {PREFIX}num_docs documents; an int >= "
        f"{PREFIX}num_docs",
    )
    page_size: int = param(
        128, "paged KV: tokens per page (and flex's key tile); a power of two >= 16"
    )
    gym_kernels: tuple[str, ...] = param(
        GYM_KERNELS,
        "attention-gym families outside the pattern registry, checked and timed in their own "
        "section (flex compiles: mla 2, temporal_heads 1, activation 1 per activation, jetspec 2, "
        f"vsa 1); a non-empty list among {', '.join(GYM_KERNELS)}",
    )
    mla_kv_lora_rank: int = param(
        128, "MLA: C, the latent width the KV cache holds (DeepSeek-V3: 512); an int > 0"
    )
    mla_nope_dim: int = param(
        64, "MLA: per-head q/k dims without RoPE (DeepSeek-V3: 128); an int > 0"
    )
    mla_rope_dim: int = param(
        32,
        "MLA: q/k dims with RoPE, the key part shared by all heads (DeepSeek-V3: 64); even, > 0",
    )
    mla_v_dim: int = param(64, "MLA: value head dim (DeepSeek-V3: 128); an int > 0")
    temporal_frames: int = param(
        8,
        f"temporal heads: video frames after a prompt of {PREFIX}prefix_len tokens; "
        f"0 < frames <= {PREFIX}seq_len - {PREFIX}prefix_len",
    )
    temporal_width: int = param(
        2, "temporal heads: window width in frames (Sparse VideoGen's width); an int > 0"
    )
    jetspec_q_len: int = param(
        64,
        f"JetSpec: Lq draft tokens (tree nodes; training positions) over {PREFIX}seq_len keys "
        f"(the context, then the drafts); 0 < q_len <= {PREFIX}seq_len",
    )
    vsa_keep: float = param(
        0.125,
        "VSA: share of key tiles each query tile keeps (ceil(keep x tiles), at least 1; "
        "1/8 is the paper's 87.5 % sparsity); 0 < keep <= 1",
    )
    activations: tuple[str, ...] = param(
        tuple(ACTIVATIONS),
        f"activation attention (softmax replaced): activations timed; a non-empty list among "
        f"{', '.join(ACTIVATIONS)}",
    )
    reps: int = param(
        10, f"interleaved timing rounds per case (after one warm-up); an int >= {MIN_ROUNDS}"
    )
    min_time_s: float = param(
        0.1, "timed seconds per candidate and case, over all rounds; a finite number > 0"
    )

    def __post_init__(self):
        for name in TUPLES:
            object.__setattr__(self, name, tuple(getattr(self, name)))
        self._check_sizes()
        self._check_patterns()
        self._check_decode()
        self._check_gym()
        for name in ("upcast", "cold_compile"):
            value = getattr(self, name)
            require(isinstance(value, bool), PREFIX + name, value, "True or False")

    def _check_sizes(self):
        """The pattern sections' shape, the pattern numbers, timing and dtypes."""
        p = PREFIX
        for name in (
            "batch",
            "heads",
            "seq_len",
            "windows_seq_len",
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
        for dtype in self.causal_dtypes:
            parse_dtype(dtype, param=p + "causal_dtypes", allowed=DTYPES)

    def _check_patterns(self):
        """The patterns, the window and its sweep, the sequence sweep and the flex tiles."""
        p = PREFIX
        require(len(self.patterns) > 0, p + "patterns", self.patterns, "a non-empty list")
        for name in self.patterns:
            parse_choice(name, PATTERNS, param=p + "patterns")
        require(
            self.window <= self.seq_len, p + "window", self.window, f"<= {p}seq_len={self.seq_len}"
        )
        positive_list(self.windows, p + "windows")
        for window in self.windows:
            require(
                window <= self.windows_seq_len,
                p + "windows",
                self.windows,
                f"all <= {p}windows_seq_len={self.windows_seq_len}",
            )
        require(
            self.window <= self.windows_seq_len,
            p + "window",
            self.window,
            f"<= {p}windows_seq_len={self.windows_seq_len} (the window sweep's tuning runs it)",
        )
        positive_list(self.seq_lens, p + "seq_lens")
        require(len(self.block_sizes) > 0, p + "block_sizes", self.block_sizes, "a non-empty list")
        require(
            all(valid_block_size(b) for b in self.block_sizes),
            p + "block_sizes",
            self.block_sizes,
            "powers of two >= 16",
        )

    def _check_decode(self):
        """The decode, cross-attention and paged cases."""
        p = PREFIX
        for name in (
            "decode_heads",
            "decode_kv_heads",
            "decode_head_dim",
            "decode_kv_len",
            "decode_q_len",
            "cross_q_len",
            "cross_kv_len",
        ):
            positive(getattr(self, name), p + name)
        require(
            self.decode_heads % self.decode_kv_heads == 0,
            p + "decode_heads",
            self.decode_heads,
            f"a multiple of {p}decode_kv_heads={self.decode_kv_heads}",
        )
        require(
            self.decode_q_len <= self.decode_kv_len,
            p + "decode_q_len",
            self.decode_q_len,
            f"<= {p}decode_kv_len={self.decode_kv_len}",
        )
        require(
            self.cross_kv_len >= self.num_docs,
            p + "cross_kv_len",
            self.cross_kv_len,
            f">= {p}num_docs={self.num_docs}",
        )
        parse_dtype(self.decode_dtype, param=p + "decode_dtype", allowed=DTYPES)
        positive_list(self.decode_kv_lens, p + "decode_kv_lens")
        require(
            valid_block_size(self.page_size),
            p + "page_size",
            self.page_size,
            "a power of two >= 16",
        )

    def _check_gym(self):
        """The attention-gym patterns and kernels, and the numbers of each kernel."""
        p = PREFIX
        for name in self.gym_patterns:
            parse_choice(name, GYM_PATTERNS, param=p + "gym_patterns")
        # Empty, these would leave section 11 (or its activation part) nothing to run. Empty
        # causal_dtypes and gym_patterns are fine: their sections' other cases still run.
        for name, choices in (("gym_kernels", GYM_KERNELS), ("activations", ACTIVATIONS)):
            object.__setattr__(
                self, name, parse_choices(getattr(self, name), choices, param=p + name)
            )
        for name in (
            "mla_kv_lora_rank",
            "mla_nope_dim",
            "mla_rope_dim",
            "mla_v_dim",
            "temporal_frames",
            "temporal_width",
        ):
            positive(getattr(self, name), p + name)
        require(self.mla_rope_dim % 2 == 0, p + "mla_rope_dim", self.mla_rope_dim, "even")
        require(  # only when the temporal-heads case runs: other cases take any prefix_len
            "temporal_heads" not in self.gym_kernels
            or self.temporal_frames <= self.seq_len - self.prefix_len,
            p + "temporal_frames",
            self.temporal_frames,
            f"<= {p}seq_len - {p}prefix_len = {self.seq_len - self.prefix_len}",
        )
        positive(self.jetspec_q_len, p + "jetspec_q_len")
        require(  # only when the JetSpec cases run
            "jetspec" not in self.gym_kernels or self.jetspec_q_len <= self.seq_len,
            p + "jetspec_q_len",
            self.jetspec_q_len,
            f"<= {p}seq_len={self.seq_len}",
        )
        positive(self.vsa_keep, p + "vsa_keep")
        require(self.vsa_keep <= 1, p + "vsa_keep", self.vsa_keep, "0 < keep <= 1")

    @classmethod
    def from_params(cls, params: dict) -> AttentionBenchConfig:
        """The config of a notebook's attn_* parameters (missing ones keep their defaults)."""
        return from_params(cls, params, prefix=cls.PARAM_PREFIX)

    def memory_needs(self) -> dict[str, float]:
        """Notebook parameter -> estimated peak bytes of the largest case it sets the size of
        (memory.py): the pattern sections at attn_seq_len (with the backward case), the window
        sweep at attn_windows_seq_len, the sequence sweep at attn_seq_lens, each tile's
        BlockMasks, the decode, paged and cross-attention cases and MLA."""
        sizes = ("batch", "heads", "head_dim", "dtype")
        cases = [(case_bytes(self.shape(), backward=True), ("seq_len", *sizes))]
        cases += [(case_bytes(self.shape(self.windows_seq_len)), ("windows_seq_len", *sizes))]
        cases += [(case_bytes(self.shape(s)), ("seq_lens", *sizes)) for s in self.seq_lens]
        cases += [  # create_block_mask pads the bool mask to whole tiles (per head: temporal)
            (
                self.heads * tiles(self.seq_len, b) ** 2 + tiles(self.windows_seq_len, b) ** 2,
                ("block_sizes", "heads", "seq_len", "windows_seq_len"),
            )
            for b in self.block_sizes
        ]
        decode = (
            "decode_heads",
            "decode_kv_heads",
            "decode_head_dim",
            "decode_dtype",
            "page_size",
        )
        cases.append((
            self._decode_bytes(self.decode_q_len, self.decode_kv_len, paged=True),
            ("decode_q_len", "decode_kv_len", *decode),
        ))  # fmt: skip
        cases += [
            (self._decode_bytes(1, n), ("decode_kv_lens", *decode)) for n in self.decode_kv_lens
        ]
        cases.append((
            self._decode_bytes(self.cross_q_len, self.cross_kv_len),
            ("cross_q_len", "cross_kv_len", *decode),
        ))  # fmt: skip
        if "vsa" in self.gym_kernels:  # its SDPA mask: a (B, H, S, S) bool from the data
            B, H, S = self.batch, self.heads, self.seq_len
            cases.append((case_bytes(self.shape()) + B * H * S * S, ("batch", "heads", "seq_len")))
        if "mla" in self.gym_kernels:
            mla = ("mla_kv_lora_rank", "mla_nope_dim", "mla_rope_dim", "mla_v_dim")
            cases.append(
                (mla_bytes(self.mla_shape()), (*mla, "batch", "heads", "seq_len", "dtype"))
            )
        return largest_needs(cases, PREFIX)

    def _decode_bytes(self, q_len: int, kv_len: int, *, paged: bool = False) -> int:
        return decode_bytes(
            heads=self.decode_heads,
            kv_heads=self.decode_kv_heads,
            head_dim=self.decode_head_dim,
            dtype=self.decode_dtype,
            q_len=q_len,
            kv_len=kv_len,
            page_size=self.page_size,
            paged=paged,
        )

    def shape(self, seq_len: int | None = None) -> AttentionShape:
        """The (B, H, S, D) problem, at `seq_len` instead of S for the sequence sweep."""
        return AttentionShape(
            self.batch, self.heads, seq_len or self.seq_len, self.head_dim, self.dtype
        )

    def mla_shape(self) -> MLAShape:
        """The MLA problem of the pattern sections' B, H, S and dtype with the attn_mla_* dims."""
        return MLAShape(
            self.batch,
            self.heads,
            self.seq_len,
            self.mla_kv_lora_rank,
            self.mla_nope_dim,
            self.mla_rope_dim,
            self.mla_v_dim,
            self.dtype,
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

    def flex_variants(self) -> list[FlexVariant]:
        """The flex candidates tuned on causal forward: each tile, and for bf16/fp16 inputs
        (when `upcast`) each tile again computing in fp32."""
        upcasts = (False, True) if self.upcast and self.dtype != "float32" else (False,)
        return [FlexVariant(b, u) for u in upcasts for b in self.block_sizes]

    def pattern_configs(self) -> list[PatternConfig]:
        return [self.pattern(name) for name in self.patterns]
