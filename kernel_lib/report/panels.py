"""Headline panels: one small figure per headline key, one horizontal bar per platform (and per
shape where a platform measured the key at several), drawn as what the figure is: a ratio against
a baseline coloured by its verdict with a line at 1, or a fraction of a ceiling (0-1, one neutral
colour, the ceiling named), with its 95 % interval as whiskers. A platform whose headline did not
run shows why in place of its bar. Under the bars, where the results store holds the key from two
runs or more, its trend over the runs (kernel_lib.report.trends). Laid out as small multiples by
`pages`."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import pandas as pd
from matplotlib.figure import Figure

from kernel_lib.report.findings import figure_text, measured_at, number
from kernel_lib.report.markup import plain
from kernel_lib.report.trends import draw_trend

COLOURS = {"faster": "#2a7f3f", "slower": "#b33a3a", "no clear difference": "#8c8c8c"}
CEILING_COLOUR = "#3b6ea8"


@dataclass(frozen=True)
class Panel:
    key: str
    title: str
    figure: Figure
    bars: int  # bars drawn (an `ok` figure each)
    platforms: int  # platforms with an `ok` figure for this key
    caption: list[str]  # per bar: 'platform: implementation dtype shape'; then the trend's marks
    trend_points: int = 0  # points of its trend over the runs (0: none drawn)


def _fields(row: pd.Series) -> dict:
    """A headline row's dtype and shape parameters, by name."""
    return {"dtype": row["dtype"], **row["shape"]}


def _labels(rows: pd.DataFrame) -> list[str]:
    """Each row's bar label: its platform, and where one platform has several rows, the dtype or
    shape parameters that tell them apart."""
    labels = []
    for _, row in rows.iterrows():
        mine = [_fields(r) for _, r in rows[rows["platform"] == row["platform"]].iterrows()]
        own = _fields(row)
        differ = [k for k in own if len({m.get(k) for m in mine}) > 1]
        labels.append(
            " ".join([row["platform"], ",".join(f"{k}={own[k]}" for k in differ)]).strip()
        )
    return labels


def bar(ax, y: float, row: pd.Series) -> float:
    """Draw a headline row's figure (status ok) as a horizontal bar at `y`: a ratio coloured by
    its verdict, a ceiling's fraction in blue, its 95 % interval as whiskers, its value beside it.
    Returns where the bar and its whisker end."""
    value, low, high = number(row["value"]), number(row["low"]), number(row["high"])
    colour = CEILING_COLOUR if row["kind"] == "ceiling" else COLOURS.get(row["verdict"])
    error = None
    if low is not None and high is not None:
        error = [[max(value - low, 0)], [max(high - value, 0)]]
    ax.barh(y, value, xerr=error, color=colour or CEILING_COLOUR, capsize=2, height=0.6)
    ax.text(max(value, high or value), y, f" {value:.2f}", va="center", fontsize=7)
    return max(value, high or value)


def panel(rows: pd.DataFrame, trend: pd.DataFrame | None = None) -> Panel:
    """The panel of one headline key from its rows (`findings.headline_rows`, any platforms),
    with its trend (`trends.trend_rows` of the key) under the bars when it spans two runs."""
    first = rows.iloc[0]
    ceiling = first["kind"] == "ceiling"
    labels = _labels(rows)
    height = 0.95 + 0.34 * len(rows)
    drawn = trend is not None and trend["date"].nunique() > 1
    fig = Figure(figsize=(4.6, height + (1.6 if drawn else 0)), layout="constrained")
    if drawn:
        ax, below = fig.subplots(2, 1, height_ratios=[height, 1.6])
    else:
        ax = fig.subplots()
    top, caption = 1.0, []
    for y, ((_, row), label) in enumerate(zip(rows.iterrows(), labels)):
        if row["status"] != "ok" or number(row["value"]) is None:
            ax.text(
                0.02, y, plain(textwrap.shorten(figure_text(row), 60)), va="center", fontsize=7
            )
            continue
        top = max(top, bar(ax, y, row))
        caption.append(f"{label}: {measured_at(row)}")
    ax.axvline(1.0, color="k", lw=1, ls="--")
    ax.set_xlim(0, top * 1.25)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first row on top
    ax.set_yticks(range(len(rows)), [plain(label) for label in labels], fontsize=7)
    fig.suptitle(plain(textwrap.fill(first["title"], 70)), x=0.01, ha="left", fontsize=8)
    if ceiling:
        against = textwrap.fill(f"fraction of {first['against']} (1 = at it)", 60)
        ax.set_xlabel(plain(against), fontsize=7)
    else:
        ax.set_xlabel("speed-up over the baseline (x, > 1 faster)", fontsize=7)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(True, axis="x", alpha=0.3)
    bars = len(ax.patches)
    if drawn:
        caption += draw_trend(below, trend)
    ok = rows[rows["status"] == "ok"]
    return Panel(
        key=first["key"],
        title=first["title"],
        figure=fig,
        bars=bars,
        platforms=ok["platform"].nunique(),
        caption=caption,
        trend_points=len(trend) if drawn else 0,
    )


def panels(
    rows: pd.DataFrame, platforms: list[str], trends: pd.DataFrame | None = None
) -> dict[str, list[Panel]]:
    """Per topic, a panel per headline key, its rows in `platforms` order; with `trends`
    (`trends.trend_rows`), each key's trend under its bars."""
    order = {p: i for i, p in enumerate(platforms)}
    rows = rows.assign(_order=rows["platform"].map(order)).sort_values("_order", kind="stable")
    by_key = dict(tuple(trends.groupby("key"))) if trends is not None else {}
    return {
        str(topic): [
            panel(group, by_key.get(key)) for key, group in topic_rows.groupby("key", sort=False)
        ]
        for topic, topic_rows in rows.groupby("topic", sort=False)
    }
