"""The gallery: `outputs/index.html` puts every report folder under outputs/ side by side. Its first
screen lists the platforms, then the user's kernels where a report timed any (`report.plugins`),
then each topic's declared headlines as small multiples, one panel per headline key with a bar per
platform (each labelled with the dtype and shape it was measured at), then the same figures as a
table. A check run at CI sizes (`outputs/reference`, the nbval reference set) is listed apart,
under its own heading: its toy sizes time nothing worth a bar. Built from saved records and
run.json files only, so `python -m kernel_lib report` rebuilds everything without running a
notebook."""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from kernel_lib.params import ParameterError
from kernel_lib.report.aggregate import counts
from kernel_lib.report.findings import (
    HEADLINE_COLUMNS,
    correctness_summary,
    figure_text,
    headline_rows,
    measured_at,
)
from kernel_lib.report.markup import details, link, page, table, text
from kernel_lib.report.pages import panels_html
from kernel_lib.report.phases import gallery_phase_images
from kernel_lib.report.plugins import gallery_section
from kernel_lib.report.read import (
    REFERENCE_FOLDER,
    REFERENCE_PLATFORM,
    Report,
    read_report,
    report_folders,
)
from kernel_lib.report.trends import store_trends
from kernel_lib.results.store import Stored
from kernel_lib.results.writes import report_holding, write_text

GALLERY = "index.html"
TITLE = "Kernel workbook: every platform"


def check_gallery(folder: Path, option: str) -> Path:
    """`folder/index.html`, where a gallery may be written: the folder exists and is not a report,
    and its index.html is absent or a gallery (ParameterError otherwise: a page of the user's or
    a report's own page is never overwritten)."""
    target = Path(folder) / GALLERY
    if not Path(folder).is_dir():
        raise ParameterError(f"{option} {folder}: no such folder")
    report = report_holding(folder)
    if report is not None:
        raise ParameterError(
            f"{option} {folder}: is in the report {report}, not a gallery's folder"
        )
    try:
        ours = target.exists() and f"<title>{TITLE}</title>" in target.read_text(errors="replace")
    except OSError as err:
        raise ParameterError(f"{option} {folder}: {target} {err.strerror}") from None
    if target.exists() and not ours:
        raise ParameterError(
            f"{option} {folder}: its {GALLERY} is not a gallery of this workbook: choose a folder "
            "without one"
        )
    return target


def _platform_row(outputs: Path, report: Report) -> dict:
    folder, run, records = report
    env = run.get("environment", {})
    statuses = [nb["status"] for nb in run.get("notebooks", [])]
    checks = correctness_summary(records).sum(numeric_only=True)
    busy = [
        nb["notebook"] for nb in run.get("notebooks", []) if (nb.get("machine") or {}).get("busy")
    ]
    name = folder.name
    links = " · ".join(
        found
        for found in (
            link(outputs, f"{name}/SUMMARY.md", "summary"),
            link(outputs, f"{name}/results.csv", "records"),
        )
        if found
    )
    return {
        "platform": link(outputs, f"{name}/index.html", name) or html.escape(name),
        "device": html.escape(f"{env.get('name', '?')} ({env.get('backend', '?')})"),
        "date (UTC)": html.escape(str(run.get("started_utc", "?"))),
        "git": html.escape(str(run.get("git", "?"))),
        "lock": html.escape(str(env.get("lock", "?"))),
        "runs": run.get("repeat", 1),
        "notebooks": html.escape(counts(statuses) if statuses else "none"),
        "checks": f"{int(checks.get('checks passed', 0))} passed, "
        f"{int(checks.get('checks failed', 0))} failed, {int(checks.get('skipped', 0))} skipped",
        "busy machine": html.escape(", ".join(busy)),
        "links": links,
    }


def _cell(rows: pd.DataFrame) -> str:
    """A platform's figures for one key (one per shape it measured), each with where it was
    measured."""
    return "<br>".join(
        html.escape(figure_text(r))
        + (f"<br><small>{text(measured_at(r))}</small>" if r["status"] == "ok" else "")
        for _, r in rows.iterrows()
    )


def headline_table(rows: pd.DataFrame, platforms: list[str]) -> pd.DataFrame:
    """One row per headline key (its title), one column per platform (HTML cells; '—' where the
    platform has no record of it)."""
    frame = pd.DataFrame(
        [
            {
                "headline": f"{html.escape(title)}<br><small><code>{html.escape(key)}</code></small>",
                **{p: _cell(mine[mine["platform"] == p]) or "—" for p in platforms},
            }
            for (key, title), mine in rows.groupby(["key", "title"], sort=False)
        ],
        columns=["headline", *platforms],
    )
    return frame


def _check_runs(outputs: Path, checks: list[Report]) -> str:
    """The check runs at CI sizes, apart from the platforms: what they are, and a row each."""
    if not checks:
        return ""
    listing = pd.DataFrame([_platform_row(outputs, r) for r in checks])
    listing = listing.rename(columns={"platform": "check run"})
    return f"""<h2>Check run at CI sizes</h2>
<p>Every notebook run at the tiny sizes of <code>parameters/{REFERENCE_PLATFORM}.yaml</code>, so
that nbval can check its outputs (<code>make reference</code>): it checks the code, it measures
nothing, and its figures are not among the platforms' panels.</p>
{table(listing, raw=tuple(listing.columns))}"""


def build_gallery(
    outputs: str | Path, reports: Iterable[Report] = (), stored: Stored = ()
) -> Path:
    """Write `outputs/index.html`: every report folder under `outputs` (device, date, git revision,
    notebook statuses, checks, links) and each topic's declared headlines side by side across
    platforms, as small multiples and as a table; the check runs at CI sizes apart, without
    figures. A folder among `reports` (read by `pages.rebuild_reports` or the runner) is not
    read again, nor are the runs `stored` (the runner's, just added) read back from the results
    store. ParameterError when outputs/index.html is not a gallery (`check_gallery`)."""
    outputs = Path(outputs)
    target = check_gallery(outputs, "gallery:")
    known = {r.folder.resolve(): r for r in reports}
    read = [known.get(f.resolve()) or read_report(f) for f in report_folders(outputs)]
    checks = [r for r in read if r.folder.name == REFERENCE_FOLDER]
    measured = [r for r in read if r.folder.name != REFERENCE_FOLDER]
    listing = [_platform_row(outputs, r) for r in measured]
    frames = [headline_rows(r.records, r.folder.name) for r in measured]
    profiles = {r.folder.name: r.records for r in measured}
    platforms = [r.folder.name for r in measured]
    frames = [f for f in frames if len(f)]
    rows = (
        pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=HEADLINE_COLUMNS)
    )
    listing_html = (
        table(pd.DataFrame(listing), raw=tuple(listing[0]))
        if listing
        else "<p>No platform's report folder (with a run.json) under this folder yet.</p>"
    )
    if len(rows):
        shown = headline_table(rows, platforms)
        trends, trends_note = store_trends(outputs, leave_out=REFERENCE_FOLDER, stored=stored)
        phases, no_phases = gallery_phase_images(profiles)
        headlines_html = (
            trends_note
            + (
                f"<p><small>Where the time goes: {html.escape(no_phases)}</small></p>"
                if no_phases
                else ""
            )
            + panels_html(rows, platforms, trends, phases)
            + details("Every headline as a table", table(shown, raw=tuple(shown.columns)))
        )
    else:
        headlines_html = "<p>No report declares a headline yet.</p>"
    body = f"""<p>Every report folder under <code>{html.escape(outputs.name)}/</code>, and each topic's
declared headlines side by side: one panel per headline, a bar per platform (a check run at CI
sizes is listed apart, below the platforms). Ratios are baseline /
subject per interleaved round, median, with a 95 % interval (&gt; 1: the subject is faster); a
repeated report shows the median over its runs. Under a panel's bars, where the results store
(<code>python -m kernel_lib history</code>) holds the headline from two runs or more: its trend
over the runs, a black diamond where torch, the device, the allocator or the lock changed; under it, where
reports were profiled, where the time goes: each platform's phases of a profiled call. Rebuilt from
records by <code>python -m kernel_lib report</code>.</p>
<h2>Platforms</h2>{listing_html}
{_check_runs(outputs, checks)}
{gallery_section(profiles)}<h2>Headlines</h2>{headlines_html}"""
    write_text(target, page(TITLE, body))
    return target
