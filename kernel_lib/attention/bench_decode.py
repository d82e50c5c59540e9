"""Inference attention benchmarks: GQA/MQA decode, multi-token decode and cross-attention
through compiled flex and each SDPA backend, a paged KV cache against the same flex call on a
contiguous cache, and a KV-length sweep of decode, each `attention.forward` plug-in beside
them (eager): fn(q, k, v, shape) in a decode case (`pattern` its DecodeShape: `mask`, `docs`),
fn(q, k_pool, v_pool, cache) in the paged one (`pattern` the PagedCache: `block_table`,
`page_size`, `kv_len`). Every candidate is checked against the fp64 reference at its timed
shape, then timed interleaved (`measure.check_then_time`); returns records only.

Legend: B batch, Hq / Hkv query / key-value heads, Lq query positions, Lk (L) key positions,
D head dim. Decode and paged flex use `page_size` as the key tile, so the paged and contiguous
calls differ only in where the keys are. Each new (Lq, Lk) is one more flex compile (static
shapes): its count is metrics.new_graphs of the flex record.
"""

from __future__ import annotations

import dataclasses
from functools import partial

from tqdm import tqdm

from kernel_lib import records as rec
from kernel_lib.attention import bench
from kernel_lib.attention.baselines import SDPA_BACKENDS, sdpa_attention
from kernel_lib.attention.candidates import FLEX, TOPIC, plugin_candidates
from kernel_lib.attention.checks import tolerance
from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.attention.decode import (
    DecodeShape,
    block_sparsity,
    dense_mask,
    flex_decode,
    flops,
    kv_bytes,
    make_inputs,
    sdpa_kwargs,
)
from kernel_lib.attention.flex import compiled_graphs
from kernel_lib.attention.paged import flex_paged, gather, page_cache
from kernel_lib.attention.reference import gqa_reference
from kernel_lib.checks import against
from kernel_lib.measure import Candidate, Case, check_then_time
from kernel_lib.platform import DeviceFacts

FLEX_PAGED = "flex_attention_compiled_paged"
FLEX_GATHERED = "flex_attention_compiled_gathered"  # gather the pages, then the contiguous call
DECODE_HEADLINE = "flex.gqa_decode_vs_sdpa"  # kernel_lib.headlines
PAGED_HEADLINE = "flex.paged_vs_contiguous"


def decode_shapes(cfg: AttentionBenchConfig) -> dict[str, DecodeShape]:
    """Case name -> shape: one-token GQA and MQA decode, multi-token GQA decode (bottom-right
    causal), cross-attention without a mask and over num_docs packed documents."""
    common = {"batch": 1, "heads": cfg.decode_heads, "head_dim": cfg.decode_head_dim}
    common["dtype"] = cfg.decode_dtype
    gqa = {**common, "kv_heads": cfg.decode_kv_heads}
    L, Lq, Lk = cfg.decode_kv_len, cfg.cross_q_len, cfg.cross_kv_len
    n = min(cfg.num_docs, Lq)
    docs = tuple(zip(_split(Lq, n), _split(Lk, n)))
    return {
        "gqa_decode": DecodeShape(**gqa, q_len=1, kv_len=L),
        "mqa_decode": DecodeShape(**common, kv_heads=1, q_len=1, kv_len=L),
        f"gqa_decode_q{cfg.decode_q_len}": DecodeShape(**gqa, q_len=cfg.decode_q_len, kv_len=L),
        "cross_attention": DecodeShape(**gqa, q_len=Lq, kv_len=Lk, mask="none"),
        "cross_document": DecodeShape(**gqa, q_len=Lq, kv_len=Lk, mask="document", docs=docs),
    }


def _split(total: int, count: int) -> list[int]:
    base = total // count
    return [base] * (count - 1) + [total - base * (count - 1)]


def decode_check(shape: DecodeShape, q, k, v):
    """Check of a (B, Hq, Lq, D) output on q, k, v against the fp64 GQA reference."""
    return against(
        lambda: gqa_reference(q, k, v, mask=dense_mask(shape)),
        reference=f"fp64 dense {shape.mask} mask, KV heads repeated (all rows)",
        tolerance=tolerance("forward", shape.dtype),
    )


def decode_case(
    cfg: AttentionBenchConfig,
    shape: DecodeShape,
    *,
    facts: DeviceFacts,
    case: str,
    section: str,
    progress: bool = False,
) -> list[rec.Record]:
    """Compiled flex, every SDPA backend (enable_gqa; the mask as attn_mask where one is
    needed) and the plug-ins on one shape, checked against the fp64 reference, timed
    interleaved; ratios over the best SDPA backend."""
    q, k, v = make_inputs(shape, device=facts.device, seed=0)
    check = decode_check(shape, q, k, v)
    work = {"flops": flops(shape), "bytes": kv_bytes(shape)}
    sparsity = block_sparsity(shape, block_size=cfg.page_size, device=q.device)
    flex_metrics = {"block_size": cfg.page_size, "block_sparsity_%": sparsity}
    candidates = [
        Candidate(
            FLEX,
            partial(flex_decode, q, k, v, shape, block_size=cfg.page_size),
            check,
            metrics=flex_metrics,
            **work,
        )
    ]
    kwargs = sdpa_kwargs(shape, device=q.device)
    candidates += [
        Candidate(
            b, partial(sdpa_attention, q, k, v, backend=b, sdpa_kwargs=kwargs), check, **work
        )
        for b in SDPA_BACKENDS
    ]
    candidates += plugin_candidates((q, k, v), shape, check, **work)
    graphs = compiled_graphs()
    this = Case(TOPIC, case, shape.as_dict(), shape.dtype, bench.FORWARD)
    out = bench.vs_best_sdpa(
        check_then_time(this, candidates, facts=facts, **bench.timing_options(cfg, progress, case))
    )
    new_graphs = compiled_graphs() - graphs
    out = [
        dataclasses.replace(r, metrics={**r.metrics, "new_graphs": new_graphs})
        if r.implementation == FLEX
        else r
        for r in out
    ]
    return bench.with_metrics(out, section=section, kv_len=shape.kv_len, q_len=shape.q_len)


def time_decode(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, progress: bool = False
) -> list[rec.Record]:
    """Every decode_shapes case; declares the headline: flex one-token GQA decode."""
    out = []
    for case, shape in tqdm(decode_shapes(cfg).items(), desc="decode", disable=not progress):
        out += decode_case(cfg, shape, facts=facts, case=case, section="decode", progress=progress)
    return [bench.mark_headline(r, DECODE_HEADLINE, case="gqa_decode") for r in out]


def decode_sweep(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, progress: bool = False
) -> list[rec.Record]:
    """One-token GQA decode at each of cfg.decode_kv_lens (one flex compile each)."""
    base = decode_shapes(cfg)["gqa_decode"]
    out = []
    for kv_len in tqdm(cfg.decode_kv_lens, desc="decode KV lengths", disable=not progress):
        shape = dataclasses.replace(base, kv_len=kv_len)
        out += decode_case(
            cfg,
            shape,
            facts=facts,
            case=f"gqa_decode_kv{kv_len}",
            section="decode_sweep",
            progress=progress,
        )
    return out


def _gathered(q, cache, shape: DecodeShape, block_size: int):
    k, v = gather(cache)
    return flex_decode(q, k.contiguous(), v.contiguous(), shape, block_size=block_size)


def paged_case(
    cfg: AttentionBenchConfig, *, facts: DeviceFacts, progress: bool = False
) -> list[rec.Record]:
    """One-token GQA decode over a paged cache (pages shuffled in a pool with spare pages):
    flex over the pool through the block table, flex after gathering the pages, the same flex
    call on the contiguous cache (the baseline) and the plug-ins over the pool, all checked
    against the fp64 reference of the contiguous cache. Declares the headline: paged vs
    contiguous."""
    shape = decode_shapes(cfg)["gqa_decode"]
    q, k, v = make_inputs(shape, device=facts.device, seed=0)
    cache = page_cache(k, v, page_size=cfg.page_size)
    check = decode_check(shape, q, k, v)
    work = {"flops": flops(shape), "bytes": kv_bytes(shape)}
    pages = {"page_size": cfg.page_size, "pool_pages": cache.k_pool.shape[2] // cfg.page_size}
    candidates = [
        Candidate(FLEX_PAGED, partial(flex_paged, q, cache), check, metrics=pages, **work),
        Candidate(
            FLEX_GATHERED, partial(_gathered, q, cache, shape, cfg.page_size), check, **work
        ),
        Candidate(
            FLEX, partial(flex_decode, q, k, v, shape, block_size=cfg.page_size), check, **work
        ),
        *plugin_candidates((q, cache.k_pool, cache.v_pool), cache, check, **work),
    ]
    this = Case(TOPIC, "paged_gqa_decode", shape.as_dict(), shape.dtype, bench.FORWARD)
    out = check_then_time(
        this,
        candidates,
        facts=facts,
        baseline=FLEX,
        **bench.timing_options(cfg, progress, this.case),
    )
    out = bench.with_metrics(out, section="paged", kv_len=shape.kv_len, q_len=shape.q_len)
    return [
        bench.mark_headline(r, PAGED_HEADLINE, case=this.case, implementation=FLEX_PAGED)
        for r in out
    ]
