"""The MoE notebook's model-preset section: each preset's routing on its (scaled) shape, every
dispatch strategy against the dense GEMM pair with the same FLOPs, as records.

Legend: T tokens, D model, F ffn, E experts, K top-k. Routing is the preset's own (scores,
groups, renormalisation, scaling; gpt-oss's gate bias) on router logits x @ gate plus
zipf_offsets(moe_preset_zipf); the dispatch candidates and the dense pair are candidates.py's,
checked against the fp64 loop over experts on that routing, and so are the `moe.dispatch`
plug-ins (kernel_lib.plugins), timed in the same compare. Only routed experts are timed: a
shared expert is one dense FFN on every token, the baseline's own kind of work.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from kernel_lib import records as rec
from kernel_lib.headlines import key as headline_key
from kernel_lib.measure import Case, check_then_time
from kernel_lib.moe.balancing import zipf_offsets
from kernel_lib.moe.bench import TOPIC, WARMUP, chosen_headline, memory_reason, with_plain
from kernel_lib.moe.candidates import (
    DENSE,
    PLAIN,
    dense_candidate,
    plugin_candidates,
    plugins_unsupported,
    strategy_candidate,
)  # fmt: skip
from kernel_lib.moe.cases import make_case, reference
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.presets import MoEPreset, preset, router_logits
from kernel_lib.moe.shapes import MoEShape
from kernel_lib.platform import DeviceFacts

# gpt-oss's w_in is scaled by this in its case: pre-activations ~N(0, 16), about 8% of them past
# the clamp's limit 7 (N(0, 1) ones never reach it, and the check could not see the clamp).
CLAMP_REACH = 4.0


def preset_shape(cfg: MoEBenchConfig, model: MoEPreset) -> MoEShape:
    """A preset case's shape: moe_preset_tokens and the preset's D, F, E, K (dropless; its
    routing, not `imbalance`, sets the load)."""
    return MoEShape(cfg.preset_tokens, model.hidden, model.ffn, model.num_experts, model.top_k)


def preset_case(cfg: MoEBenchConfig, facts: DeviceFacts, model: MoEPreset):
    """make_case's seeded inputs with the routing replaced by `model`'s own: logits x @ gate
    (+ a seeded N(0, 1) gate bias for biased gates) + Zipf offsets, no selection bias; a
    clamped SwiGLU's w_in times CLAMP_REACH."""
    shape = preset_shape(cfg, model)
    case = make_case(shape, dtype=cfg.dtype, activation=model.activation, device=facts.device)
    if model.activation == "swiglu_clamped":
        case.feedforward.w_in.data.mul_(CLAMP_REACH)
    gen = torch.Generator().manual_seed(1)
    gate_bias = torch.randn(model.num_experts, generator=gen) if model.router_bias else None
    skew = zipf_offsets(model.num_experts, cfg.preset_zipf)
    logits = router_logits(case.x.cpu(), case.gate.cpu(), gate_bias) + skew
    return dataclasses.replace(case, routing=model.route(logits.to(case.x.device)))


def preset_record_shape(cfg: MoEBenchConfig, model: MoEPreset) -> dict:
    """The record shape of a preset case (numbers only): its MoEShape's and what sets its
    routing's load: size factor, Zipf exponent, groups, groups used, shared experts."""
    return preset_shape(cfg, model).as_dict() | {
        "size_factor": model.size_factor, "zipf": cfg.preset_zipf,
        "groups": model.num_groups, "top_groups": model.top_groups,
        "shared_experts": model.shared_experts,
    }  # fmt: skip


def preset_metrics(model: MoEPreset) -> dict:
    """The preset's name, score function and expert activation."""
    return {"preset": model.name, "score": model.score, "activation": model.activation}


def section_presets(cfg: MoEBenchConfig, facts: DeviceFacts) -> list[rec.Record]:
    """Per preset in moe_presets, scaled by moe_preset_scale: the dense pair and each of
    moe_preset_strategies (eager forward, the plain loop among them) and the `moe.dispatch`
    plug-ins in one interleaved compare against `dense_gemm` (case `preset_<name>`); the
    dispatch chosen here (bench.chosen_headline) against it is the preset's headline."""
    out, strategies = [], with_plain(cfg.preset_strategies)
    for name in cfg.presets:
        model = preset(name).scaled(cfg.preset_scale)
        names = [DENSE] + [f"dispatch_{s}" for s in strategies]
        record_shape = preset_record_shape(cfg, model)
        what = Case(TOPIC, f"preset_{name}", record_shape, cfg.dtype, "forward")
        reason = memory_reason(preset_shape(cfg, model), cfg.dtype, facts)
        if reason:
            ident = {"facts": facts, "dtype": what.dtype, "shape": what.shape, "mode": what.mode}
            candidates = [rec.skipped(TOPIC, what.case, n, reason, **ident) for n in names]
            candidates += plugins_unsupported(reason)
        else:
            case = preset_case(cfg, facts, model)
            ref = functools.cache(functools.partial(reference, case))
            candidates = [dense_candidate(case)]
            candidates += [strategy_candidate(s, case, ref=ref) for s in strategies]
            candidates += plugin_candidates(case, ref=ref)
        records = check_then_time(
            what,
            candidates,
            facts=facts,
            baseline=DENSE,
            min_time_s=cfg.min_time_s,
            warmup=WARMUP,
        )
        records = [
            dataclasses.replace(r, metrics={**r.metrics, **preset_metrics(model)}) for r in records
        ]
        comparator = f"dispatch_{PLAIN}"
        key = headline_key("moe.preset.{preset}", preset=name)
        out += chosen_headline(records, what, facts, comparator=comparator, key=key)
    return out
