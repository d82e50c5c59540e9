"""Benchmarks of attention-gym's families: its further mask patterns (patterns.GYM_PATTERNS,
through bench.forward_case like every pattern), and those that have their own flex call:
multi-head latent attention (mla.py), Sparse VideoGen's spatial/temporal heads
(temporal_heads.py), attention with an activation instead of softmax (activation.py), JetSpec's
draft tree and draft training masks (Lq != Lk: jetspec.py, rectangular.py) and video sparse
attention (its block mask chosen from the data: vsa.py). Each candidate is checked against its fp64 reference at the timed shape
(all query rows up to reference.FULL_CHECK_MAX_SEQ_LEN, a fixed sample above), then timed
interleaved (`measure.check_then_time`); returns records only.

Legend: B batch, H heads, S sequence length, D head dim, Lq / Lk query / key lengths; MLA's
letters in mla.py. Ratios are over the fastest SDPA backend that runs the case, or over the
naive materialised attention where SDPA cannot express it (activation attention).
"""

from __future__ import annotations

from functools import partial

from tqdm import tqdm

from kernel_lib import records as rec
from kernel_lib.attention import activation, bench, mla, temporal_heads, vsa
from kernel_lib.attention.baselines import SDPA_BACKENDS, sdpa_attention
from kernel_lib.attention.candidates import FLEX, NAIVE, TOPIC, raise_unsupported
from kernel_lib.attention.checks import rows_check
from kernel_lib.attention.config import GYM_KERNELS, AttentionBenchConfig
from kernel_lib.attention.flex import FlexVariant
from kernel_lib.attention.patterns import SPEC_PATTERNS
from kernel_lib.attention.plain import check_score_memory
from kernel_lib.attention.rectangular import block_sparsity, flex_rectangular
from kernel_lib.attention.reference import (
    activation_reference,
    attention_reference,
    dense_mask,
    mla_reference,
    output_rows,
    reference_output,
    reference_rows,
    temporal_heads_mask,
    vsa_reference,
)
from kernel_lib.attention.shapes import AttentionShape, attention_flops, make_qkv
from kernel_lib.measure import Candidate, Case, check_then_time, with_baseline
from kernel_lib.platform import DeviceFacts

FLEX_MLA = "flex_mla"
FLEX_MLA_ABSORBED = "flex_mla_absorbed"
FLEX_TEMPORAL_HEADS = "flex_temporal_heads"
FLEX_ACTIVATION = "flex_activation"
FLEX_VSA = "flex_vsa"
NAIVE_ACTIVATION = "activation_naive"


def time_gym_patterns(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, variant: FlexVariant, progress: bool = False
) -> list[rec.Record]:
    """Forward of each of cfg.gym_patterns at the pattern sections' shape (bench.forward_case:
    flex, SDPA backends with the dense mask, naive), section `gym_patterns`."""
    out = []
    for name in tqdm(cfg.gym_patterns, desc="gym patterns", disable=not progress):
        out += bench.forward_case(
            cfg,
            cfg.pattern(name),
            cfg.shape(),
            facts=facts,
            variant=variant,
            case=name,
            section="gym_patterns",
            progress=progress,
        )
    return out


def _sdpa_mla(inputs: mla.MLAInputs, *, backend: str):
    return sdpa_attention(*mla.expand(inputs), backend=backend, sdpa_kwargs={"is_causal": True})


def time_mla(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, block_size: int, progress: bool = False
) -> list[rec.Record]:
    """Causal MLA from the latent: expanded and absorbed compiled flex, and every SDPA backend on
    the expanded q, k, v (is_causal), checked against the fp64 reference; section `mla`."""
    shape = cfg.mla_shape()
    inputs = mla.make_inputs(shape, device=facts.device, seed=0)
    rows = reference_rows(shape.seq_len)
    check = rows_check(
        lambda: mla_reference(inputs, rows=rows), rows, name="MLA", dtype=shape.dtype
    )
    work = {"flops": mla.flops(shape)}
    flex = {"block_size": block_size}
    candidates = [
        Candidate(FLEX_MLA, partial(mla.flex_mla, inputs, **flex), check, metrics=flex, **work),
        Candidate(
            FLEX_MLA_ABSORBED,
            partial(mla.flex_mla_absorbed, inputs, **flex),
            check,
            metrics=flex,
            **work,
        ),
    ]
    candidates += [
        Candidate(b, partial(_sdpa_mla, inputs, backend=b), check, **work) for b in SDPA_BACKENDS
    ]
    this = Case(TOPIC, "mla", shape.as_dict(), shape.dtype, bench.FORWARD)
    out = check_then_time(
        this, candidates, facts=facts, **bench.timing_options(cfg, progress, this.case)
    )
    return bench.with_metrics(bench.vs_best_sdpa(out), section="mla")


def video_layout(cfg: AttentionBenchConfig) -> temporal_heads.VideoLayout:
    """The video of attn_seq_len tokens: a prompt of attn_prefix_len (plus the remainder),
    attn_temporal_frames frames, windows attn_temporal_width frames wide."""
    return temporal_heads.VideoLayout.fit(
        cfg.seq_len,
        prompt_len=cfg.prefix_len,
        frames=cfg.temporal_frames,
        width=cfg.temporal_width,
    )


def _naive_masked(q, k, v, mask):
    """Materialised attention under a dense mask, in the input dtype (skipped over the score
    memory limit, as the pattern sections' naive)."""
    check_score_memory(q)
    return attention_reference(q, k, v, mask=mask, compute_dtype=q.dtype)


def _masked_candidates(q, k, v, mask, check, flops: float) -> list[Candidate]:
    """Every SDPA backend with `mask` as its attn_mask, and naive under it (mask: bool, (Lq, Lk)
    or (1, H, Lq, Lk), on q's device)."""
    kwargs = {"attn_mask": mask}
    candidates = [
        Candidate(
            b, partial(sdpa_attention, q, k, v, backend=b, sdpa_kwargs=kwargs), check, flops=flops
        )
        for b in SDPA_BACKENDS
    ]
    naive = partial(_naive_masked, q, k, v, mask)
    return candidates + [Candidate(NAIVE, naive, check, flops=flops)]


def time_temporal_heads(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, block_size: int, progress: bool = False
) -> list[rec.Record]:
    """Forward of the per-head spatial/temporal mask at the pattern sections' shape: compiled
    flex (per-head BlockMask), every SDPA backend with the (1, H, S, S) bool mask, and naive;
    checked against the fp64 reference; section `temporal_heads`."""
    shape, layout = cfg.shape(), video_layout(cfg)
    q, k, v = make_qkv(shape, device=facts.device, seed=0)
    mask = temporal_heads_mask(layout, shape.heads)
    rows = reference_rows(shape.seq_len)
    row_mask = mask if rows is None else mask[:, rows]
    check = rows_check(
        lambda: attention_reference(output_rows(q, rows), k, v, mask=row_mask),
        rows,
        name="temporal heads",
        dtype=shape.dtype,
    )
    pairs = float(mask.sum()) * shape.batch * shape.head_dim * 4.0  # 2 matmuls, per head's pairs
    sparsity = temporal_heads.block_sparsity(
        layout, shape.heads, block_size=block_size, device=facts.device
    )
    candidates = [
        Candidate(
            FLEX_TEMPORAL_HEADS,
            partial(temporal_heads.flex_temporal_heads, q, k, v, layout, block_size=block_size),
            check,
            flops=pairs,
            metrics={"block_size": block_size, "block_sparsity_%": sparsity},
        )
    ]
    candidates += _masked_candidates(q, k, v, mask[None].to(q.device), check, pairs)
    this = Case(
        TOPIC, "temporal_heads", {**shape.as_dict(), **layout.as_dict()}, shape.dtype,
        bench.FORWARD,
    )  # fmt: skip
    out = check_then_time(
        this, candidates, facts=facts, **bench.timing_options(cfg, progress, this.case)
    )
    return bench.with_metrics(bench.vs_best_sdpa(out), section="temporal_heads")


def time_activations(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, block_size: int, progress: bool = False
) -> list[rec.Record]:
    """Causal attention with each of cfg.activations instead of softmax: compiled flex (log-space
    score_mod, lse undone) and the naive materialised form, checked against the fp64 reference;
    SDPA recorded skipped (it always normalises with softmax). Ratios over naive; section
    `activation`."""
    shape = cfg.shape()
    q, k, v = make_qkv(shape, device=facts.device, seed=0)
    rows = reference_rows(shape.seq_len)
    needed, _ = attention_flops(cfg.pattern("causal"), shape)
    no_sdpa = "SDPA always normalises with softmax: it has no hook for another activation"
    out = []
    for name in cfg.activations:
        fn = activation.activation_function(name)
        check = rows_check(
            lambda fn=fn: activation_reference(q, k, v, activation=fn, rows=rows),
            rows,
            name=f"{name} attention",
            dtype=shape.dtype,
        )
        calls = {
            FLEX_ACTIVATION: partial(
                activation.flex_activation, q, k, v, activation=name, block_size=block_size
            ),
            NAIVE_ACTIVATION: partial(activation.activation_naive, q, k, v, activation=name),
            **{b: partial(raise_unsupported, no_sdpa) for b in SDPA_BACKENDS},
        }
        candidates = [Candidate(i, call, check, flops=needed) for i, call in calls.items()]
        this = Case(TOPIC, f"activation_{name}", shape.as_dict(), shape.dtype, bench.FORWARD)
        records = check_then_time(
            this, candidates, facts=facts, **bench.timing_options(cfg, progress, this.case)
        )
        ran = any(r.implementation == NAIVE_ACTIVATION and r.status == "ok" for r in records)
        out += with_baseline(records, NAIVE_ACTIVATION) if ran else records
    return bench.with_metrics(out, section="activation")


def time_jetspec(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, block_size: int, progress: bool = False
) -> list[rec.Record]:
    """Forward of JetSpec's draft tree and draft training masks: attn_jetspec_q_len draft
    queries over attn_seq_len keys (the context, then the drafts), at the pattern sections' B,
    H, D and dtype: compiled flex (an (Lq, Lk) BlockMask), every SDPA backend with the (Lq, Lk)
    bool mask, and naive; checked against the fp64 reference of the mask built from its
    definition; section `jetspec`."""
    shape = cfg.shape()
    Lq, Lk = cfg.jetspec_q_len, shape.seq_len
    queries = AttentionShape(shape.batch, shape.heads, Lq, shape.head_dim, shape.dtype)
    q = make_qkv(queries, device=facts.device, seed=0)[0]
    _, k, v = make_qkv(shape, device=facts.device, seed=0)
    rows = reference_rows(Lq)
    sizes = {"batch": shape.batch, "heads": shape.heads, "q_len": Lq, "kv_len": Lk}
    sizes["head_dim"] = shape.head_dim
    out = []
    for name in SPEC_PATTERNS:
        config = cfg.pattern(name)
        mask = dense_mask(config, Lq, Lk).to(q.device)
        check = rows_check(
            lambda config=config: reference_output(q, k, v, config, rows=rows),
            rows,
            name=name,
            dtype=shape.dtype,
        )
        pairs = float(mask.sum()) * shape.batch * shape.heads * shape.head_dim * 4.0
        tiles = {
            "block_size": block_size,
            "block_sparsity_%": block_sparsity(
                config, Lq, Lk, block_size=block_size, device=facts.device
            ),
        }
        flex = partial(flex_rectangular, q, k, v, config, block_size=block_size)
        candidates = [Candidate(FLEX, flex, check, flops=pairs, metrics=tiles)]
        candidates += _masked_candidates(q, k, v, mask, check, pairs)
        this = Case(TOPIC, name, sizes, shape.dtype, bench.FORWARD)
        out += bench.vs_best_sdpa(
            check_then_time(
                this, candidates, facts=facts, **bench.timing_options(cfg, progress, name)
            )
        )
    return bench.with_metrics(out, section="jetspec", q_len=Lq, kv_len=Lk)


def time_vsa(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, block_size: int, progress: bool = False
) -> list[rec.Record]:
    """Forward of video sparse attention at the pattern sections' shape, tiles of `block_size`
    tokens, each query tile keeping k = vsa.kept_tiles(S, block_size, attn_vsa_keep) key tiles:
    every timed call runs the coarse pass on its inputs, then compiled flex over a BlockMask of
    the chosen tiles, or each SDPA backend and naive over them as a (B, H, S, S) bool mask;
    checked against the fp64 reference (its own pooling and choice); section `vsa`."""
    shape = cfg.shape()
    q, k, v = make_qkv(shape, device=facts.device, seed=0)
    S, tile = shape.seq_len, block_size
    top_k = vsa.kept_tiles(S, tile, cfg.vsa_keep)
    rows = reference_rows(S)
    check = rows_check(
        lambda: vsa_reference(q, k, v, tile=tile, top_k=top_k, rows=rows),
        rows,
        name="VSA",
        dtype=shape.dtype,
    )
    chosen = vsa.select_tiles(q, k, tile=tile, top_k=top_k)
    pairs = vsa.attended_pairs(chosen, S, tile) * shape.head_dim * 4.0
    tiles = -(-S // tile)
    metrics = {"block_size": tile, "block_sparsity_%": 100.0 * (1.0 - top_k / tiles)}
    choice = {"tile": tile, "top_k": top_k}
    calls = {
        FLEX_VSA: partial(vsa.flex_vsa, q, k, v, **choice),
        **{b: partial(vsa.sdpa_vsa, q, k, v, **choice, backend=b) for b in SDPA_BACKENDS},
        NAIVE: partial(vsa.naive_vsa, q, k, v, **choice),
    }
    candidates = [
        Candidate(name, call, check, flops=pairs, metrics=metrics if name == FLEX_VSA else {})
        for name, call in calls.items()
    ]
    this = Case(TOPIC, "vsa", {**shape.as_dict(), **choice}, shape.dtype, bench.FORWARD)
    out = check_then_time(
        this, candidates, facts=facts, **bench.timing_options(cfg, progress, this.case)
    )
    return bench.with_metrics(bench.vs_best_sdpa(out), section="vsa")


SECTIONS = {
    "mla": time_mla,
    "temporal_heads": time_temporal_heads,
    "activation": time_activations,
    "jetspec": time_jetspec,
    "vsa": time_vsa,
}
assert tuple(SECTIONS) == GYM_KERNELS, "a gym kernel without its section"


def gym_kernels(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, block_size: int, progress: bool = False
) -> list[rec.Record]:
    """The sections of cfg.gym_kernels, in that order."""
    out = []
    for name in cfg.gym_kernels:
        out += SECTIONS[name](cfg, facts=facts, block_size=block_size, progress=progress)
    return out
