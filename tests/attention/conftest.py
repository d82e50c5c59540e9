"""Input factories for the attention tests: seeded q, k, v, random pattern configs, and a block
mask with one tile dropped (the teeth of the block-sparse checks)."""

import hypothesis.strategies as st
import pytest
import torch
from torch._inductor.exc import InductorError
from torch.nn.attention.flex_attention import BlockMask

from kernel_lib.attention import flex
from kernel_lib.attention.patterns import PATTERNS, PatternConfig
from kernel_lib.attention.shapes import AttentionShape, make_qkv

# One odd shape shared by every compiled-flex test, so the process compiles each pattern once:
# S=200 is not a multiple of the block size (64), D=16 is the smallest head dim flex takes.
FLEX_SHAPE = AttentionShape(batch=2, heads=3, seq_len=200, head_dim=16)
FLEX_BLOCK = 64
# Documents at both edges: a one-token document first and last.
EDGE_DOCS = (1, 150, 48, 1)


@pytest.fixture
def refused_compile(monkeypatch) -> str:
    """Every compiled flex call refused by Inductor, as a GPU's Triton kernel refuses a key tile
    its BLOCK_N does not divide; returns Inductor's words."""
    words = "Q and KV block size must be divisible by BLOCK_M and BLOCK_N. KV_BLOCK_SIZE=32."

    def refuse(*args, **kwargs):
        raise InductorError(ValueError(words), None)

    monkeypatch.setattr(flex, "compiled_flex_attention", lambda: refuse)
    return words


@pytest.fixture
def flex_qkv():
    return make_qkv(FLEX_SHAPE, device="cpu", seed=0)


def flex_config(name: str) -> PatternConfig:
    """The config every compiled test uses for `name` (small window so the band is sparse)."""
    return PatternConfig(
        name,
        window=17,
        prefix_len=30,
        doc_lengths=EDGE_DOCS,
        num_global=5,
        max_distance=20,
        dilation=3,
    )


@st.composite
def doc_lengths(draw, seq_len: int):
    """Random document lengths summing to seq_len, often with 1-token documents at the edges."""
    cuts = sorted(draw(st.sets(st.integers(1, max(seq_len - 1, 1)), max_size=5)))
    cuts = [c for c in cuts if 0 < c < seq_len]
    if seq_len > 2 and draw(st.booleans()):
        cuts = sorted({1, seq_len - 1, *cuts})
    bounds = [0, *cuts, seq_len]
    return tuple(b - a for a, b in zip(bounds, bounds[1:]))


@st.composite
def pattern_cases(draw, max_seq_len: int = 97):
    """(config, seq_len, num_heads) with odd lengths and edge-case numbers."""
    seq_len = draw(st.integers(1, max_seq_len))
    config = PatternConfig(
        draw(st.sampled_from(list(PATTERNS))),
        window=draw(st.integers(1, seq_len + 3)),
        prefix_len=draw(st.integers(0, seq_len + 2)),
        doc_lengths=draw(doc_lengths(seq_len)),
        dilation=draw(st.integers(1, 5)),
        num_global=draw(st.integers(0, 6)),
        softcap=draw(st.floats(0.5, 50.0)),
        max_distance=draw(st.integers(1, 40)),
        seed=draw(st.integers(0, 3)),
    )
    return config, seq_len, draw(st.integers(1, 5))


def qkv_for(seq_len: int, num_heads: int, *, batch: int = 2, head_dim: int = 16, seed: int = 0):
    shape = AttentionShape(batch=batch, heads=num_heads, seq_len=seq_len, head_dim=head_dim)
    return make_qkv(shape, device="cpu", seed=seed)


def fp64(*tensors: torch.Tensor):
    return tuple(t.double() for t in tensors)


def flex_bench_config(**changes):
    """The attention config of the FLEX_SHAPE cases (window 17, flex_config's prefix), with
    `changes`."""
    from kernel_lib.attention.config import AttentionBenchConfig

    shape = {"batch": FLEX_SHAPE.batch, "heads": FLEX_SHAPE.heads}
    shape |= {"seq_len": FLEX_SHAPE.seq_len, "head_dim": FLEX_SHAPE.head_dim}
    windows = {"window": 17, "windows": (17,), "windows_seq_len": FLEX_SHAPE.seq_len}
    return AttentionBenchConfig(**shape, **windows | {"prefix_len": 30} | changes)


def _tiles(counts: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """(B, H, nq, nk) bool of one BlockMask list (counts, ordered indices)."""
    listed = torch.arange(indices.shape[-1]) < counts[..., None]
    hits = torch.zeros(indices.shape, dtype=torch.int64)
    return hits.scatter_add_(-1, indices.long(), listed.long()) > 0


def _ordered(tiles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    order = tiles.int().argsort(dim=-1, descending=True, stable=True)
    return tiles.sum(-1).int(), order.int()


def without_block(mask: BlockMask) -> BlockMask:
    """`mask` less one tile it visits: the last query block's first key block (of every batch
    and head), as a kernel that skipped a tile would compute."""
    partial = _tiles(mask.kv_num_blocks, mask.kv_indices)
    full = _tiles(mask.full_kv_num_blocks, mask.full_kv_indices)
    kv_block = int((partial | full)[0, 0, -1].int().argmax())
    partial[..., -1, kv_block] = full[..., -1, kv_block] = False
    return BlockMask.from_kv_blocks(
        *_ordered(partial), *_ordered(full), BLOCK_SIZE=mask.BLOCK_SIZE,
        mask_mod=mask.mask_mod, seq_lengths=mask.seq_lengths, compute_q_blocks=False,
    )  # fmt: skip
