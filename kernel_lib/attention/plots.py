"""Figures for the FlexAttention notebook, each drawn from records (`records.to_frame`).

Legend: B batch, H heads, S sequence length, D head dim.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from kernel_lib.attention.patterns import PatternConfig, materialise
from kernel_lib.plots import (
    grouped_bars,
    nothing_measured,
    ok_records,
    place_legend,
    plain_log_ticks,
    titled,
    whiskers,
)

FLEX = "flex_attention_compiled"


def _ok(frame: pd.DataFrame, section: str) -> pd.DataFrame:
    return ok_records(frame[frame["metrics.section"] == section])


def _nothing(what: str):
    """The figure of a section where nothing ran here: says so instead of raising."""
    fig, ax = plt.subplots(figsize=(7, 1.5))
    nothing_measured(ax, f"{what}: nothing measured (see skipped records)")
    return fig


def plot_masks(
    configs: list[PatternConfig], *, seq_len: int, num_heads: int, max_seq_len: int = 2048
):
    """One panel per pattern at the benchmark's S (at most `max_seq_len`, to bound the dense
    S x S images): attended pairs dark; a bias coloured (head 0). Large S is averaged down to the
    panel's pixels, so fine structure (dilation) shows as grey.
    """
    seq_len = min(seq_len, max_seq_len)
    cols = min(4, len(configs))
    rows = math.ceil(len(configs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 3 * rows), squeeze=False)
    for ax, config in zip(axes.flat, configs):
        mask, bias = materialise(config, seq_len=seq_len, num_heads=num_heads)
        if bias is None:
            ax.imshow(mask.float().numpy(), cmap="Blues", vmin=0, vmax=1)
        else:
            ax.imshow(bias[0].masked_fill(~mask, float("nan")).numpy(), cmap="viridis")
        ax.set_title(config.name, fontsize=9)
        ax.set_xlabel("key position", fontsize=8)
        ax.set_ylabel("query position", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(configs) :]:
        ax.axis("off")
    fig.suptitle(f"Attention patterns at S={seq_len} (colour: bias of head 0 where present)")
    fig.tight_layout()
    return fig


def plot_pattern_times(frame: pd.DataFrame):
    """Forward time per pattern, one bar per implementation that ran (log scale; whiskers p10 to
    p90 of the timed calls)."""
    data = _ok(frame, "patterns")
    if data.empty:
        return _nothing("forward time per pattern")
    ax, _ = grouped_bars(
        data,
        index="case",
        columns="implementation",
        values="median_ms",
        figsize=(12, 4),
        logy=True,
        width=0.8,
        rot=30,
    )
    plain_log_ticks(ax)
    ax.set_ylabel("forward time, median (ms, log;\nwhiskers p10 to p90)")
    ax.set_xlabel("pattern")
    ax.set_title(titled("Forward time per pattern and implementation, lower is better", data))
    plt.setp(ax.get_xticklabels(), ha="right")
    place_legend(ax, title="implementation", outside=True)
    ax.figure.tight_layout()
    return ax.figure


def plot_pattern_tflops(frame: pd.DataFrame):
    """TFLOP/s per pattern: each implementation on the pattern's needed work, and flex's
    dense-equivalent rate (what the same time would mean if all S^2 pairs were computed)."""
    ok = _ok(frame, "patterns")
    if ok.empty:
        return _nothing("throughput per pattern")
    flex = ok[ok["implementation"] == FLEX]
    dense = flex.assign(
        implementation=f"{FLEX} (dense-equivalent)",
        tflops=flex["metrics.dense_tflops"],
    )
    ax, _ = grouped_bars(
        pd.concat([ok, dense]),
        index="case",
        columns="implementation",
        values="tflops",
        figsize=(12, 4),
        width=0.8,
        rot=30,
    )
    ax.set_ylabel("TFLOP/s (whiskers: at the\np90 and p10 times)")
    ax.set_xlabel("pattern")
    ax.set_title(
        titled("Throughput per pattern: needed work (bars) and flex dense-equivalent", ok)
    )
    plt.setp(ax.get_xticklabels(), ha="right")
    place_legend(ax, title="implementation", outside=True)
    ax.figure.tight_layout()
    return ax.figure


def plot_window_speedup(frame: pd.DataFrame):
    """Flex causal-sliding-window speedup over causal flex (interleaved ratio, 95 % interval)
    vs window, with the FLOP-ratio ideal."""
    data = _ok(frame, "window_sweep")
    data = data[data["implementation"] == FLEX].dropna(subset=["ratio_vs_baseline"])
    if data.empty:
        return _nothing("speedup from sparsity")
    data = data.sort_values("metrics.window")
    ratio = data["ratio_vs_baseline"]
    spread = [ratio - data["ratio_low"].fillna(ratio), data["ratio_high"].fillna(ratio) - ratio]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(data["metrics.window"], ratio, yerr=spread, fmt="o-", capsize=3, label="measured")
    ax.plot(
        data["metrics.window"], data["metrics.ideal_speedup"], "k--", label="ideal (FLOP ratio)"
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    plain_log_ticks(ax, "x")
    plain_log_ticks(ax)
    ax.set_xlabel("window (tokens)")
    ax.set_ylabel("speed-up over causal flex (x, 95 % interval)")
    ax.set_title(titled("Speedup from sparsity: causal sliding window vs causal", data))
    place_legend(ax)
    fig.tight_layout()
    return fig


def plot_flex_variants(frame: pd.DataFrame):
    """Forward time of each flex variant beside the plain compiled attention, per tuned pattern
    and dtype (whiskers p10 to p90 of the timed calls); the title names the causal choice of
    each dtype here."""
    data = _ok(frame, "flex_variants")
    if data.empty:
        return _nothing("flex forward variants")
    seq_len = data["shape.seq_len"].astype(int).astype(str)
    tuned_on = data["case"] + ", S=" + seq_len + ", " + data["dtype"]
    wide = bool(data["median_ms"].max() > 10 * data["median_ms"].min())  # log: all stay visible
    ax, _ = grouped_bars(
        data.assign(
            implementation=data["implementation"].str.removeprefix(f"{FLEX}_"), case=tuned_on
        ),
        index="implementation",
        columns="case",
        values="median_ms",
        figsize=(10, 4),
        logy=wide,
        rot=30,
    )
    if wide:
        plain_log_ticks(ax)
    plt.setp(ax.get_xticklabels(), ha="right")
    place_legend(ax, title="tuned on", outside=True)
    ax.set_ylabel(f"forward time, median (ms{', log' if wide else ''};\nwhiskers p10 to p90)")
    ax.set_xlabel("flex variant (block tile, compute dtype) or plain comparator")
    chosen = data[data["case"] == "causal"].dropna(subset=["variant"]).groupby("dtype")["variant"]
    choice = ", ".join(
        f"{variant.removeprefix(f'{FLEX}_')} ({dtype})"
        for dtype, variant in chosen.first().items()
    )
    title = f"Flex forward variants, lower is better; chosen here: {choice or 'none ran'}"
    ax.set_title(titled(title, data))
    ax.figure.tight_layout()
    return ax.figure


def plot_compile_times(frame: pd.DataFrame):
    """Seconds of each flex first call (compile + one run), then the cold compile (a fresh
    process, empty Inductor cache); label = graphs it compiled."""
    data = _ok(frame, "compile")
    if data.empty:
        return _nothing("flex first calls")
    labels = [
        " ".join([c, i.removeprefix(FLEX).lstrip("_"), f"S={s}", m.replace("first_call", "")])
        for c, i, s, m in zip(
            data["case"], data["implementation"], data["shape.seq_len"], data["mode"]
        )
    ]
    fig, ax = plt.subplots(figsize=(10, 4))
    bars = ax.bar(np.arange(len(data)), data["median_ms"] / 1e3)
    ax.bar_label(bars, labels=[f"{int(g)}" for g in data["metrics.new_graphs"]], fontsize=7)
    ax.set_xticks(np.arange(len(data)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("first call: compile + one run (s)")
    ax.set_title(
        titled("Flex first calls in call order, then a cold compile (label: new graphs)", data)
    )
    fig.tight_layout()
    return fig


def plot_seq_sweep(frame: pd.DataFrame):
    """Forward time vs sequence length, one line per implementation (log-log)."""
    data = _ok(frame, "seq_sweep")
    data = data[data["mode"] == "forward"]
    if data.empty:
        return _nothing("causal attention vs sequence length")
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, group in data.groupby("implementation", sort=False):
        group = group.sort_values("shape.seq_len")
        ax.errorbar(
            group["shape.seq_len"],
            group["median_ms"],
            yerr=whiskers(group, "median_ms"),
            fmt="o-",
            capsize=3,
            label=name,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    plain_log_ticks(ax)
    plain_log_ticks(ax, "x")
    ax.set_xlabel("sequence length S (tokens)")
    ax.set_ylabel("forward time, median (ms; whiskers p10 to p90)")
    ax.set_title(titled("Causal attention vs sequence length", data))
    place_legend(ax)
    fig.tight_layout()
    return fig
