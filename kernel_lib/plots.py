"""Figures drawn from records DataFrames (`records.to_frame`); one function, one figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from kernel_lib.platform import DeviceFacts, datasheet_for


def ok_records(frame: pd.DataFrame) -> pd.DataFrame:
    """The measured rows of a records DataFrame (skipped and failed ones have nothing to plot)."""
    return frame[frame["status"] == "ok"] if "status" in frame else frame


def nothing_measured(ax, message: str):
    """An empty panel saying why, instead of a blank or misleading plot."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return ax


def sweep(
    frame: pd.DataFrame,
    *,
    x: str,
    y: str,
    hue: str = "implementation",
    title: str = "",
    logx: bool = True,
    logy: bool = False,
    ax=None,
):
    """One line per `hue` value of `y` against `x` (ok records only); says so when nothing ran."""
    ax = ax or plt.subplots(figsize=(7, 4))[1]
    data = ok_records(frame)
    if data.empty or x not in data or y not in data:
        return nothing_measured(ax, f"{title}: nothing measured (see skipped records)")
    for key, group in data.sort_values(x).groupby(hue):
        ax.plot(group[x], group[y], marker="o", label=str(key))
    ax.set(xlabel=x, ylabel=y, title=title)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return ax


def roofline(frame: pd.DataFrame, facts: DeviceFacts, ax=None):
    """GEMM points at their arithmetic intensity under the measured ceilings (solid) and the
    datasheet ceilings where known (dashed, labelled 'datasheet')."""
    ax = ax or plt.subplots(figsize=(7, 5))[1]
    data = ok_records(frame)
    gemm, mem = data[data["case"] == "gemm"], data[data["case"].isin(["copy", "triad"])]
    if gemm.empty or mem.empty:
        return nothing_measured(
            ax, "roofline: GEMM or bandwidth not measured (see skipped records)"
        )
    intensity = gemm["flops"] / gemm["bytes"]
    bw = mem["gbps"].max()
    ridge = gemm["tflops"].max() * 1e3 / bw  # FLOP/byte where the measured ceilings meet
    low, high = min(intensity.min(), ridge) / 8, max(intensity.max(), ridge) * 8
    xs = np.logspace(np.log10(low), np.log10(high), 200)
    for dtype, group in gemm.groupby("dtype"):
        peak = group["tflops"].max() * 1e3
        line = ax.plot(xs, np.minimum(peak, xs * bw), label=f"measured ceiling {dtype}")[0]
        ax.scatter(
            group["flops"] / group["bytes"],
            group["tflops"] * 1e3,
            color=line.get_color(),
            zorder=3,
        )
    sheet = datasheet_for(facts.name)
    if sheet and sheet.memory_gbps and sheet.bf16_tflops:
        ax.plot(
            xs,
            np.minimum(sheet.bf16_tflops * 1e3, xs * sheet.memory_gbps),
            "k--",
            label=f"datasheet bf16 ({sheet.source})",
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="arithmetic intensity (FLOP/byte)",
        ylabel="GFLOP/s",
        title=f"Roofline: {facts.name} (measured bandwidth {bw:.0f} GB/s)",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    return ax
