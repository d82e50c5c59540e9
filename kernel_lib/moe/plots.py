"""MoE figures from records DataFrames (`records.to_frame`) and load rows; one figure each."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from kernel_lib.plots import (
    grouped_bars,
    nothing_measured,
    ok_records,
    place_legend,
    subtitled,
    titled,
)


def strategy_bars(frame: pd.DataFrame, *, case: str = "forward", ax=None):
    """TFLOP/s of each implementation for one case, grouped by hidden size (ok records only;
    whiskers: the rate at the p90 and p10 times)."""
    ax = ax or plt.subplots(figsize=(8, 4))[1]
    data = ok_records(frame[frame["case"] == case])
    if data.empty:
        return nothing_measured(ax, f"{case}: nothing measured (see skipped records)")
    order = data.groupby("implementation")["tflops"].first().sort_values().index
    data = data.set_index("implementation").loc[order].reset_index()
    grouped_bars(
        data, index="implementation", columns="shape.D", values="tflops", horizontal=True, ax=ax
    )
    title = titled(f"MoE {case}, by hidden size D", data)
    ax.set(xlabel="TFLOP/s (executed expert FLOPs)", ylabel="", title=title)
    ax.grid(True, axis="x", alpha=0.3)
    place_legend(ax, title="hidden size D", outside=True)
    return ax


def expert_load(rows: list[dict], *, at: str = "", ax=None):
    """Tokens per expert, one group of bars per routing imbalance (with its CV in the legend);
    `at`: the routing counted (`tables.load_text`)."""
    ax = ax or plt.subplots(figsize=(8, 4))[1]
    frame = pd.DataFrame(rows)
    table = frame.pivot(index="expert", columns="imbalance", values="tokens")
    cv = frame.groupby("imbalance")["cv"].first()
    table.columns = [f"imbalance {c} (CV {cv[c]})" for c in table.columns]
    table.plot.bar(ax=ax, rot=0)
    title = subtitled("Expert load", at)
    ax.set(xlabel="expert", ylabel="assignments (tokens x top-k)", title=title)
    place_legend(ax)
    return ax


def load_over_steps(frame: pd.DataFrame, *, at: str = "", ax=None):
    """Busiest and idlest expert's load over the mean at each step, one colour per balancing
    (balancing.load_over_steps rows); 1 is a perfectly balanced step. `at`: what was routed
    (`tables.balance_text`)."""
    ax = ax or plt.subplots(figsize=(8, 4))[1]
    for (balancing, data), color in zip(frame.groupby("balancing", sort=False), ("C3", "C0")):
        ax.plot(data["step"], data["max_over_mean"], color=color, label=f"{balancing}: busiest")
        ax.plot(
            data["step"], data["min_over_mean"], color=color, ls="--", label=f"{balancing}: idlest"
        )
    ax.axhline(1, color="grey", lw=0.8)
    title = subtitled("Expert load over steps", at)
    ax.set(xlabel="step (batch)", ylabel="expert load / mean load", title=title)
    place_legend(ax)
    return ax
