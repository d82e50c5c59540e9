"""FP8 figures, one function per figure, drawn from DataFrames (records, error tables, losses)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from kernel_lib.plots import (
    axis_label,
    nothing_measured,
    ok_records,
    place_legend,
    subtitled,
    titled,
    whiskers,
)


def _ax(ax, size=(7, 4)):
    return ax or plt.subplots(figsize=size)[1]


def error_histogram(errors: pd.DataFrame, *, title: str = "", at: str = "", ax=None):
    """Histogram of log10 per-element relative error, one outline per format. errors: columns
    format, rel_error (nonzero inputs only; exact results sit at the 1e-6 floor, flushed ones at 0);
    `at`: the input it was measured on (`tensor_text`)."""
    ax = _ax(ax)
    bins = np.linspace(-6, 0.5, 66)
    for fmt, group in errors.groupby("format", sort=False):
        ax.hist(
            np.log10(group["rel_error"].clip(lower=1e-6)), bins=bins, histtype="step", label=fmt
        )
    ax.set(
        xlabel="relative error per element (log10)",
        ylabel="elements",
        title=subtitled(title, at),
    )
    place_legend(ax)
    return ax


def sqnr_bars(
    table: pd.DataFrame,
    *,
    metric: str = "median_row_sqnr_db",
    title: str = "",
    at: str = "",
    ax=None,
):
    """`metric` (dB) bars: formats on x, one bar per granularity (from `quantization_error_table`);
    `at`: the input it was measured on (`tensor_text`)."""
    ax = _ax(ax)
    pivot = table.pivot(index="format", columns="granularity", values=metric).loc[
        table["format"].unique()
    ]
    pivot.plot.bar(ax=ax, rot=0)
    ax.set(xlabel="FP8 format", ylabel=f"{axis_label(metric)}, higher is better")
    ax.set_title(subtitled(title or axis_label(metric), at))
    ax.grid(True, axis="y", alpha=0.3)
    place_legend(ax, title="scale granularity", outside=True)
    return ax


def bandwidth_bars(frame: pd.DataFrame, *, ax=None):
    """GB/s of each quantiser per size beside the copy timed with it in one compare
    (dashed line: copy; the label gives each bar's fraction of it)."""
    ax = _ax(ax)
    ok = ok_records(frame)
    timed = ok[ok["case"] == "quantize"]
    quant = timed[timed["implementation"] != "copy"]
    copy = timed[timed["implementation"] == "copy"]["gbps"]
    if quant.empty or copy.empty:
        return nothing_measured(ax, "nothing measured (see skipped records)")
    labels = (
        quant["implementation"].str.replace("_", "\n", n=-1)
        + "\n"
        + quant["shape.MiB"].astype(str)
        + " MiB"
    )
    bars = ax.bar(range(len(quant)), quant["gbps"], yerr=whiskers(quant, "gbps"), capsize=3)
    ax.bar_label(
        bars, labels=[f"{f:.2f}x copy" for f in quant["fraction_of_peak"]], fontsize="small"
    )
    ax.axhline(copy.max(), ls="--", color="k", label=f"copy {copy.max():.1f} GB/s")
    ax.set_xticks(range(len(quant)), labels, fontsize="x-small")
    ax.set(
        ylabel="GB/s (x read + FP8 written; whiskers p10 to p90)",
        title=titled("Quantisation bandwidth vs copy", quant),
    )
    place_legend(ax)
    return ax


def training_curves(losses: pd.DataFrame, *, smooth: int = 5, at: str = "", ax=None):
    """Loss per step per run (rolling mean over `smooth` steps). losses: columns step, run, loss;
    `at`: the model and run sizes (`bench.training_text`)."""
    ax = _ax(ax)
    styles = ["-", "--", ":", "-."]  # the runs should overlap: dashes keep each visible
    for i, (run, group) in enumerate(losses.groupby("run", sort=False)):
        ax.plot(
            group["step"],
            group["loss"].rolling(smooth, min_periods=1).mean(),
            styles[i % 4],
            label=run,
        )
    ax.set(
        xlabel="step",
        ylabel=f"training loss (rolling mean of {smooth})",
        title=subtitled("bf16 vs FP8 training", at),
    )
    ax.grid(True, alpha=0.3)
    place_legend(ax)
    return ax


def recipe_error_bars(frame: pd.DataFrame):
    """SQNR (dB, higher is better) and max relative error (log scale, lower is better) of each
    granularity on each tensor, side by side (from the `recipe_error` records)."""
    ok = ok_records(frame)
    errors = ok[ok["case"] == "recipe_error"]
    tensors, grans = errors["shape.tensor"].unique(), errors["implementation"].unique()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, metric, better in zip(axes, ("sqnr_db", "max_rel_error"), ("higher", "lower")):
        pivot = errors.pivot(
            index="shape.tensor", columns="implementation", values=f"metrics.{metric}"
        )
        pivot.loc[tensors, grans].plot.bar(ax=ax, rot=0, legend=False)
        ax.set(xlabel="input tensor", ylabel=f"{axis_label(metric)}, {better} is better")
        ax.grid(True, axis="y", alpha=0.3)
    axes[1].set_yscale("log")
    place_legend(axes[1], title="scale granularity", outside=True)
    fig.suptitle(titled("Quantisation error per scaling recipe, same tensors", errors))
    return axes
