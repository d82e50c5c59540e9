"""What the MoE notebook shows beside its records: the dispatch candidates and the seed-style
comparisons as tables, the load histograms' rows and the plots' titles."""

from __future__ import annotations

import dataclasses

import pandas as pd

from kernel_lib import records as rec
from kernel_lib.moe.bench import SEED_CASES, case_of
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.metrics import load_metrics
from kernel_lib.platform import DeviceFacts


def load_text(cfg: MoEBenchConfig) -> str:
    """What the load histograms count: the routing of the first shape's tokens (plot titles)."""
    shape = cfg.shapes[0]
    return f"T={shape.tokens},E={shape.experts},K={shape.top_k}"


def balance_text(cfg: MoEBenchConfig) -> str:
    """What the load-over-steps plot routes: the preset, its tokens a step, the bias update's
    step size and the skew of the logits (plot titles)."""
    return (
        f"{cfg.balance_preset} T={cfg.preset_tokens},"
        f"gamma={cfg.balance_gamma},zipf={cfg.preset_zipf}"
    )


def load_rows(cfg: MoEBenchConfig, facts: DeviceFacts) -> list[dict]:
    """Tokens per expert at each imbalance (one row per expert), for the load histograms."""
    rows = []
    for imbalance in cfg.imbalance:
        shape = dataclasses.replace(cfg.shapes[0], imbalance=imbalance)
        routing = case_of(cfg, facts, shape).routing
        metrics = load_metrics(routing)
        rows += [
            {"imbalance": imbalance, "expert": e, "tokens": n, "cv": round(metrics["cv"], 3)}
            for e, n in enumerate(metrics["tokens_per_expert"])
        ]
    return rows


def variant_table(records: list[rec.Record]) -> pd.DataFrame:
    """The dispatch candidates of a throughput section side by side, for this machine: time,
    ratio against the dense pair with its interval, which one is used here (`variant`, and
    whether this run measured or reused the cached choice) and any flag (a tuned strategy
    slower than the plain comparator). Skipped and wrong candidates with their reason."""
    rows = [
        {
            "case": r.case,
            "D": r.shape.get("D"),
            "implementation": r.implementation,
            "status": r.status,
            "median_ms": r.median_ms,
            "ratio_vs_dense": r.ratio_vs_baseline,
            "ratio_low": r.ratio_low,
            "ratio_high": r.ratio_high,
            "chosen": r.variant is not None and r.implementation == r.variant,
            "choice": r.metrics.get("variant_source"),
            "flags_or_reason": "; ".join(r.flags) or (r.reason or ""),
        }
        for r in records
        if r.implementation.startswith("dispatch_")
    ]
    return pd.DataFrame(rows).round(3)


def baseline_table(records: list[rec.Record]) -> pd.DataFrame:
    """The seed-style comparisons: speed, ratio against the seed with its interval and verdict,
    and what each implementation dropped (dropless strategies drop nothing)."""
    rows = [
        {
            "case": r.case,
            "implementation": r.implementation,
            "dtype": r.dtype,
            "tokens_per_s": r.metrics.get("tokens_per_s"),
            "ratio_vs_seed_style": r.ratio_vs_baseline,
            "ratio_low": r.ratio_low,
            "ratio_high": r.ratio_high,
            "verdict": r.verdict,
            "drop_rate": r.metrics.get("drop_rate", 0.0),
            "reported_dropped": r.metrics.get("reported_dropped", 0),
        }
        for r in records
        if r.case in SEED_CASES and r.status == "ok"
    ]
    return pd.DataFrame(rows).round(3)
