"""Where the time goes, as the reports show it: each headline's phases (profiled after it was
timed, kernel_lib.profiling) as a stacked bar of a profiled call: a segment per phase, `other`
for what no phase covers, each headline's trace linked. The findings cell shows a notebook's
headlines, a report page its own, the gallery a bar per platform for each headline key. A report
made before profiles (or with profiling off) says so."""

from __future__ import annotations

import html
import math
import textwrap
from urllib.parse import quote

import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from kernel_lib.profiling.phases import PHASES
from kernel_lib.report.findings import number
from kernel_lib.report.markup import href, markdown_text, plain, png_data_uri

PHASE_COLUMN = "profile.phases."
TRACE_COLUMN = "profile.trace"
OTHER = "other"
NONE = (
    "No profiles in this report: it was made before headlines were profiled, or with "
    "profiling off (`-p profile=off`)."
)
_PALETTE = colormaps["tab20"].colors
COLOURS = {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(PHASES)} | {OTHER: "#d9d9d9"}


def profiled(records: pd.DataFrame) -> pd.DataFrame:
    """The headline records that carry a profile (its trace), in report order."""
    if records.empty or TRACE_COLUMN not in records or "headline" not in records:
        return records.iloc[0:0]
    return records[records["headline"].notna() & records[TRACE_COLUMN].notna()]


def call_ms(row: pd.Series) -> float | None:
    """A profiled call's time in ms: the timed median times the profile's overhead."""
    median, overhead = number(row.get("median_ms")), number(row.get("profile.overhead"))
    return median * overhead if median and overhead else median


def split(row: pd.Series) -> dict[str, float]:
    """A profiled record's phases in ms per call, in PHASES order (names it does not declare
    after them), and `other`: the rest of a profiled call (`call_ms`)."""
    phases = {
        c.removeprefix(PHASE_COLUMN): number(row[c])
        for c in row.index
        if c.startswith(PHASE_COLUMN) and number(row[c]) is not None
    }
    order = [p for p in PHASES if p in phases] + [p for p in phases if p not in PHASES]
    out = {p: phases[p] for p in order}
    rest = (call_ms(row) or 0.0) - sum(out.values())
    return out | ({OTHER: rest} if rest > 0 else {})


def phases_figure(rows: pd.DataFrame, labels: list[str]) -> Figure:
    """One horizontal stacked bar per row: each phase's share of a profiled call (`other`: what
    no phase covers), so a busy machine's slower or faster profiled calls do not skew it."""
    fig = Figure(figsize=(8, 1.0 + 0.36 * max(len(rows), 1)), layout="constrained")
    ax = fig.subplots()
    shown = set()
    for y, (_, row) in enumerate(rows.iterrows()):
        whole, left = call_ms(row), 0.0
        for name, ms in split(row).items():
            if not whole or not math.isfinite(ms):
                continue
            label = None if name in shown else plain(name)
            ax.barh(y, ms / whole, left=left, color=COLOURS.get(name, "#444"), label=label)
            left += ms / whole
            shown.add(name)
    ax.set_yticks(range(len(rows)), [plain(textwrap.shorten(t, 60)) for t in labels], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("share of a profiled call (profiled after timing)", fontsize=8)
    if shown:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


def _label(row: pd.Series) -> str:
    return f"{row['headline']} · {row.get('implementation')}"


def _phase_text(row: pd.Series) -> str:
    """Each phase's ms per profiled call, and the profiled call's time over the timed median."""
    overhead = number(row.get("profile.overhead"))
    phases = ", ".join(f"{name} {ms:.3g} ms" for name, ms in split(row).items())
    return phases + (f" (profiled / timed: {overhead:.2f})" if overhead else "")


def findings_phases(records: pd.DataFrame) -> str:
    """Markdown for a notebook's findings cell: its headlines' phases as stacked bars and each
    trace linked (beside the notebook), or that the report has none."""
    rows = profiled(records)
    if rows.empty:
        return f"### Where the time goes\n\n{NONE}"
    lines = [
        f"- {markdown_text(r['headline'])} ({markdown_text(r.get('implementation'))}): "
        f"{markdown_text(_phase_text(r))}; [trace]({quote(str(r[TRACE_COLUMN]))}) "
        "(Perfetto, chrome://tracing)"
        for _, r in rows.iterrows()
    ]
    figure = phases_figure(rows, [_label(r) for _, r in rows.iterrows()])
    return (
        "### Where the time goes\n\n"
        + f"![each headline's phases]({png_data_uri(figure)})\n\n"
        + "\n".join(lines)
    )


def report_phases_html(records: pd.DataFrame) -> str:
    """A report page's section: its headlines' phases and a link to each trace (or that it has
    none)."""
    rows = profiled(records)
    if rows.empty:
        return f"<h2>Where the time goes</h2><p>{html.escape(NONE)}</p>"
    items = "".join(
        f"<li><code>{html.escape(r['headline'])}</code> ({html.escape(str(r.get('implementation')))}"
        f"): {html.escape(_phase_text(r))}; "
        f"{href(str(r[TRACE_COLUMN]), 'trace')}</li>"
        for _, r in rows.iterrows()
    )
    figure = phases_figure(rows, [_label(r) for _, r in rows.iterrows()])
    return (
        f'<h2>Where the time goes</h2><img alt="each headline\'s phases" '
        f'src="{png_data_uri(figure)}"><ul>{items}</ul><p><small>Traces: gzipped Chrome trace '
        "files (open in Perfetto or chrome://tracing).</small></p>"
    )


def gallery_phase_images(records: dict[str, pd.DataFrame]) -> tuple[dict[str, str], str]:
    """For the gallery's headline panels ({platform: its records}): per headline key that any
    platform profiled, an image with a stacked bar per platform; and a note naming the
    platforms whose reports have no profiles ("" when every one has)."""
    shown = {platform: profiled(frame) for platform, frame in records.items()}
    rows = [frame.assign(platform=platform) for platform, frame in shown.items() if len(frame)]
    images = {}
    for key, mine in (
        pd.concat(rows, ignore_index=True).groupby("headline", sort=False) if rows else ()
    ):
        labels = [f"{r['platform']} · {r.get('implementation')}" for _, r in mine.iterrows()]
        images[key] = (
            f'<img class="phases" alt="{html.escape(key)}: where the time goes" '
            f'src="{png_data_uri(phases_figure(mine, labels))}">'
        )
    missing = [platform for platform, frame in shown.items() if frame.empty]
    note = f"{', '.join(missing)}: {NONE}" if missing else ""
    return images, note
