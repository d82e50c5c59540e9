"""What an executed notebook found, put where a reader starts: a markdown cell after its title,
led by a line per slot of the user's own kernels where it timed any (`report.plugins`), with the
notebook's declared headlines (value, interval, baseline or ceiling, implementation, dtype and
shape) and one plot of them. The runner inserts it from the records the notebook saved."""

from __future__ import annotations

import textwrap

import nbformat
import pandas as pd
from matplotlib.figure import Figure

from kernel_lib.records import shape_key
from kernel_lib.report.findings import figure_text, headline_rows, measured_at, number
from kernel_lib.report.markup import markdown_text, plain, png_data_uri
from kernel_lib.report.panels import bar
from kernel_lib.report.phases import findings_phases
from kernel_lib.report.plugins import plugin_markdown

TAG = "kernel-workbook-findings"  # the inserted cell's tag: replaced, never duplicated


def findings_figure(rows: pd.DataFrame) -> Figure:
    """One bar per headline that ran: a ratio coloured by its verdict, a fraction of a ceiling in
    blue, each with its 95 % interval, against one line at 1 (the baseline, or the ceiling)."""
    ok = rows[(rows["status"] == "ok") & rows["value"].map(lambda v: number(v) is not None)]
    fig = Figure(figsize=(8, 0.8 + 0.32 * max(len(ok), 1)), layout="constrained")
    ax = fig.subplots()
    for y, (_, row) in enumerate(ok.iterrows()):
        bar(ax, y, row)
    labels = [
        plain(textwrap.shorten(f"{t} · {shape_key(s)}", 75))
        for t, s in zip(ok["title"], ok["shape"])
    ]
    ax.set_yticks(range(len(ok)), labels, fontsize=7)
    ax.set_ylim(len(ok) - 0.5, -0.5)
    ax.axvline(1.0, color="k", lw=1, ls="--")
    ax.set_xlabel(
        "ratio vs its baseline (> 1 faster), or fraction of its ceiling (blue; 1 = at it)",
        fontsize=8,
    )
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def findings_markdown(records: pd.DataFrame, platform: str) -> str:
    """The cell's text: the user's kernels (`plugin_markdown`, where any ran), then a table of
    the declared headlines and their plot (embedded)."""
    rows, yours = headline_rows(records, platform), plugin_markdown(records)
    if rows.empty:
        return (
            f"## What this notebook found\n\n{yours}No headline was declared (see the records "
            "below)."
        )
    table = pd.DataFrame(
        {
            "headline": rows["title"].map(markdown_text),
            "figure": rows.apply(figure_text, axis=1).map(markdown_text),
            "measured at": rows.apply(measured_at, axis=1).map(markdown_text),
        }
    )
    return (
        f"## What this notebook found ({markdown_text(platform)})\n\n"
        + yours
        + table.to_markdown(index=False)
        + f"\n\n![the declared headlines]({png_data_uri(findings_figure(rows))})\n\n"
        + findings_phases(records)
        + "\n\nEvery figure is checked before it is timed; the parameters, the correctness tables "
        "and every record follow."
    )


def with_findings(nb, records: pd.DataFrame, platform: str):
    """`nb` with the findings cell after its first (title) cell, replacing an earlier one."""
    cells = [c for c in nb.cells if TAG not in c.get("metadata", {}).get("tags", [])]
    cell = nbformat.v4.new_markdown_cell(
        findings_markdown(records, platform), metadata={"tags": [TAG]}
    )
    nb.cells = cells[:1] + [cell] + cells[1:]
    return nb
