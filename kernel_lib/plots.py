"""Figures drawn from records DataFrames (`records.to_frame`); one function, one figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogFormatter

from kernel_lib.platform import DeviceFacts, datasheet_for
from kernel_lib.records import shape_text

# Axis labels: the quantity and its unit, never a raw column name.
LABELS = {
    "median_ms": "median time (ms)",
    "min_ms": "fastest call (ms)",
    "tflops": "TFLOP/s",
    "gbps": "GB/s",
    "fraction_of_peak": "fraction of the measured ceiling",
    "fraction_of_datasheet": "fraction of the datasheet peak",
    "ratio_vs_baseline": "speed-up over the baseline (x, > 1 is faster)",
    "peak_mem_bytes": "peak memory (bytes)",
    "shape.N": "matrix size n (n x n x n)",
    "shape.MiB": "size (MiB)",
    "shape.T": "tokens T",
    "shape.E": "experts E",
    "shape.K": "experts per token (top-k K)",
    "shape.imbalance": "routing imbalance (logit skew per expert)",
    "shape.D": "hidden size D",
    "shape.seq_len": "sequence length S (tokens)",
    "shape.window": "window (tokens)",
    "metrics.dense_tflops": "dense-equivalent TFLOP/s",
    "median_row_sqnr_db": "median per-row SQNR (dB)",
    "sqnr_db": "SQNR (dB)",
}
# Rates are work / median time: their interval follows from the time's p10/p90.
RATES = ("tflops", "gbps", "metrics.dense_tflops")


def axis_label(column: str) -> str:
    """A readable label with its unit for a records column (`LABELS`), else the bare name."""
    if column in LABELS:
        return LABELS[column]
    return column.split(".", 1)[-1].replace("_", " ")


def measured_at(frame: pd.DataFrame) -> str:
    """What every record of `frame` was measured at: its dtype(s) and each shape field with one
    value among them ('float32 batch=1,head_dim=64,heads=4'); what varies is on an axis or in
    the legend."""
    if frame.empty:
        return ""
    fixed = {
        c: frame[c].iloc[0]
        for c in frame
        if c.startswith("shape.") and frame[c].nunique(dropna=False) == 1
    }
    dtypes = frame["dtype"].dropna().astype(str).unique() if "dtype" in frame else []
    return " ".join(p for p in (" and ".join(sorted(dtypes)), shape_text(pd.Series(fixed))) if p)


def subtitled(title: str, at: str) -> str:
    """`title`, then on a second line what it was measured at, where that is known."""
    return f"{title}\n{at}" if at else title


def titled(title: str, frame: pd.DataFrame) -> str:
    """`title` with what its records were measured at (`measured_at`)."""
    return subtitled(title, measured_at(frame))


def tensor_text(x) -> str:
    """What a figure drawn from one tensor was measured at: 'float32 512x512'."""
    return f"{str(x.dtype).removeprefix('torch.')} {'x'.join(map(str, x.shape))}"


def interval(frame: pd.DataFrame, column: str) -> tuple[pd.Series, pd.Series] | None:
    """(low, high) around `column`: p10/p90 for times, the same spread carried to a rate (work /
    time), the 95 % interval for a ratio; None where the records have none. Missing ends are the
    value itself (no whisker)."""
    value = frame[column]
    if column == "median_ms" and {"p10_ms", "p90_ms"} <= set(frame):
        low, high = frame["p10_ms"], frame["p90_ms"]
    elif column in RATES and {"median_ms", "p10_ms", "p90_ms"} <= set(frame):
        low = value * frame["median_ms"] / frame["p90_ms"]
        high = value * frame["median_ms"] / frame["p10_ms"]
    elif column == "ratio_vs_baseline" and {"ratio_low", "ratio_high"} <= set(frame):
        low, high = frame["ratio_low"], frame["ratio_high"]
    else:
        return None
    finite = [b.astype(float).replace([np.inf, -np.inf], np.nan) for b in (low, high)]
    return finite[0].fillna(value), finite[1].fillna(value)


def whiskers(frame: pd.DataFrame, column: str) -> np.ndarray | None:
    """`interval` as matplotlib's asymmetric error array: [[value - low], [high - value]]."""
    bounds = interval(frame, column)
    if bounds is None:
        return None
    value = frame[column].to_numpy(float)
    low, high = (b.to_numpy(float) for b in bounds)
    return np.clip(np.vstack([value - low, high - value]), 0, None)


def grouped_bars(
    frame: pd.DataFrame,
    *,
    index: str,
    columns: str,
    values: str,
    horizontal: bool = False,
    ax=None,
    **kwargs,
):
    """Bars of `values` per `index` (one per `columns` value), with `interval` whiskers."""
    table = frame.pivot_table(index=index, columns=columns, values=values, sort=False)
    error = None
    bounds = interval(frame, values)
    if bounds is not None:
        spread = frame.assign(_low=bounds[0], _high=bounds[1])
        low, high = (
            spread.pivot_table(index=index, columns=columns, values=v, sort=False).reindex_like(
                table
            )
            for v in ("_low", "_high")
        )
        error = np.clip(
            np.stack([(table - low).T.to_numpy(), (high - table).T.to_numpy()], 1), 0, None
        )
    plot = table.plot.barh if horizontal else table.plot.bar
    ax = plot(
        ax=ax,
        **({"xerr" if horizontal else "yerr": error} if error is not None else {}),
        capsize=2,
        **kwargs,
    )
    return ax, table


def place_legend(ax, *, title: str | None = None, outside: bool | None = None, **kwargs):
    """The legend where it hides no data: outside, right, for bar charts (`outside=True`) and more
    than four entries; else 'best' inside."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    if outside or (outside is None and len(handles) > 4):
        kwargs = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), **kwargs}
    else:
        kwargs = {"loc": "best", **kwargs}
    return ax.legend(handles, labels, title=title, fontsize="small", **kwargs)


def plain_log_ticks(ax, axis: str = "y") -> None:
    """Tick labels of a log axis as plain numbers (2, 5, 10) instead of 2 x 10^0."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))


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
    xlabel: str | None = None,
    ylabel: str | None = None,
    ax=None,
):
    """One line per `hue` value of `y` against `x` (ok records only), with `interval` whiskers
    where the records have one; axes labelled by `axis_label`; says so when nothing ran."""
    ax = ax or plt.subplots(figsize=(7, 4))[1]
    data = ok_records(frame)
    if data.empty or x not in data or y not in data:
        return nothing_measured(ax, f"{title}: nothing measured (see skipped records)")
    for key, group in data.sort_values(x).groupby(hue):
        ax.errorbar(
            group[x], group[y], yerr=whiskers(group, y), marker="o", capsize=3, label=str(key)
        )
    ax.set(
        xlabel=xlabel or axis_label(x), ylabel=ylabel or axis_label(y), title=titled(title, data)
    )
    if logx:
        ax.set_xscale("log", base=2)
        plain_log_ticks(ax, "x")
    if logy:
        ax.set_yscale("log")
        plain_log_ticks(ax)
    if y == "ratio_vs_baseline":
        ax.axhline(1.0, color="k", lw=0.8, ls=":")
    ax.grid(True, alpha=0.3)
    place_legend(ax, title=axis_label(hue) if hue != "implementation" else None)
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
        title=titled(f"Roofline: {facts.name} (measured bandwidth {bw:.0f} GB/s)", gemm),
    )
    ax.grid(True, which="both", alpha=0.3)
    place_legend(ax)
    return ax
