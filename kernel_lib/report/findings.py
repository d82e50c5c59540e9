"""What a report found, as text and tables from its loaded records: the declared headlines (by key,
each a ratio against a baseline or a fraction of a ceiling), the correctness summary, the flags,
how busy the machine was."""

from __future__ import annotations

import math

import pandas as pd

from kernel_lib.headlines import headline
from kernel_lib.records import record_shape, shape_key

HEADLINE_COLUMNS = [
    "topic", "key", "title", "platform", "status", "reason", "kind", "value", "low", "high",
    "against", "verdict", "runs", "run_min", "run_max", "implementation", "dtype", "shape",
    "flags",
]  # fmt: skip


def number(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _scaled(value, scale: float) -> float | None:
    value = number(value)
    return None if value is None else value * scale


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def headline_rows(records: pd.DataFrame, platform: str) -> pd.DataFrame:
    """One row per declared headline of a report (a headline measured at several shapes: one per
    shape): its key and title, kind `ratio` (against a baseline: faster or slower) or `ceiling` (a
    fraction of what it can at best reach, named in `against`), value with its 95 % interval
    (low/high), verdict, for a repeated report runs and run_min/run_max (the runs' figures), the
    implementation, dtype and shape (a dict, `record_shape`) it was measured at, and its
    measurement flags."""
    if records.empty or "headline" not in records:
        return pd.DataFrame(columns=HEADLINE_COLUMNS)
    rows = []
    for _, r in records[records["headline"].notna()].iterrows():
        declared = headline(r["headline"])
        ratio, fraction = number(r.get("ratio_vs_baseline")), number(r.get("fraction_of_peak"))
        ceiling = declared.ceiling if declared else None
        # A ceiling's figure is the rate's fraction of it (a quantiser writes fewer bytes than the
        # copy it is measured against: its time ratio is not that fraction); the ratio's interval,
        # paired by round, scales with it (rate = work / time, the work fixed).
        scale = fraction / ratio if ceiling and fraction is not None and ratio else 1.0
        if (ceiling or ratio is None) and fraction is not None:
            kind, value = "ceiling", fraction
            against = _text(r.get("peak_basis")) or ceiling  # the measured basis, in full
        else:
            kind, value = ("ceiling" if ceiling else "ratio"), ratio
            against = ceiling or r.get("baseline")
        rows.append(
            {
                "topic": r.get("topic"),
                "key": r["headline"],
                "title": declared.title if declared else r["headline"],
                "platform": platform,
                "status": r["status"],
                "reason": _text(r.get("reason")),
                "kind": kind,
                "value": value,
                "low": _scaled(r.get("ratio_low"), scale) if ratio is not None else None,
                "high": _scaled(r.get("ratio_high"), scale) if ratio is not None else None,
                "against": _text(against),
                "verdict": _text(r.get("verdict")) if kind == "ratio" else "",
                "runs": number(r.get("runs")),
                "run_min": _scaled(r.get("ratio_min"), scale) if ratio is not None else None,
                "run_max": _scaled(r.get("ratio_max"), scale) if ratio is not None else None,
                "implementation": _text(r.get("implementation")),
                "dtype": _text(r.get("dtype")),
                "shape": record_shape(r),
                "flags": tuple(r["flags"]) if isinstance(r.get("flags"), (list, tuple)) else (),
            }
        )
    frame = pd.DataFrame(rows, columns=HEADLINE_COLUMNS)
    same = frame.assign(shape=frame["shape"].map(shape_key))
    return frame[~same.duplicated(["key", "platform", "dtype", "shape"])]


def figure_text(row: pd.Series) -> str:
    """'1.12x [1.08, 1.18] vs dense_gemm', '0.87 [0.85, 0.90] of an fp32 copy of its input' (a
    repeated report adds its runs' range), or 'skipped: why'."""
    value, low, high = number(row["value"]), number(row["low"]), number(row["high"])
    if row["status"] != "ok" or value is None:
        return f"{row['status']}: {row['reason']}" if row["reason"] else str(row["status"])
    interval = f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
    if row["kind"] == "ceiling":
        text = f"{value:.2f}{interval} of {row['against']}"
    else:
        text = f"{value:.2f}x{interval} vs {row['against']}"
        if row["verdict"] and row["verdict"] != "faster":
            text += f" ({row['verdict']})"
    lo, hi, runs = number(row.get("run_min")), number(row.get("run_max")), number(row.get("runs"))
    if runs and runs > 1 and lo is not None and hi is not None:
        text += f"; {int(runs)} runs: {lo:.2f}–{hi:.2f}"
    return text


def measured_at(row: pd.Series) -> str:
    """'dispatch_fused_c bfloat16 D=512,E=8,...': what produced a headline, at which size."""
    return " ".join(p for p in (row["implementation"], row["dtype"], shape_key(row["shape"])) if p)


def headlines(records: pd.DataFrame, platform: str = "") -> list[str]:
    """The declared headlines, one line each: title, figure, what produced it and at which size;
    one that did not run says why; a flagged measurement says so."""
    lines = []
    for _, row in headline_rows(records, platform).iterrows():
        line = f"{row['title']}: {figure_text(row)}"
        if row["status"] == "ok":
            line += f" ({measured_at(row)})"
        if row["flags"]:
            line += f" — measurement problem: {'; '.join(row['flags'])}"
        lines.append(line)
    return lines


def correctness_summary(records: pd.DataFrame) -> pd.DataFrame:
    """Per notebook: records whose check passed, whose check failed (status `wrong`), skipped
    (cannot run here), raised (status `failed`), and measured without a check."""
    columns = ["notebook", "checks passed", "checks failed", "skipped", "raised", "no check"]
    if records.empty or "status" not in records:
        return pd.DataFrame(columns=columns)
    passed = (
        records["check.pass"].map(lambda v: v is True or v == 1 or str(v) == "True")
        if "check.pass" in records
        else pd.Series(False, index=records.index)
    )
    has_check = (
        records["check.pass"].notna()
        if "check.pass" in records
        else pd.Series(False, index=records.index)
    )
    status = records["status"]
    notebook = records["notebook"] if "notebook" in records else records.get("topic")
    frame = pd.DataFrame(
        {
            "notebook": notebook.fillna("?"),
            "checks passed": passed & has_check,
            "checks failed": (has_check & ~passed) | (status == "wrong") & ~has_check,
            "skipped": status == "skipped",
            "raised": status == "failed",
            "no check": (status == "ok") & ~has_check,
        }
    )
    return frame.groupby("notebook", sort=False).sum().astype(int).reset_index()[columns]


def machine_text(machine: dict) -> str:
    """How busy the machine was over a notebook (run.json's `machine`): 'BUSY: why' when its
    timings shared the machine, else the 1-min load at its start and end and the CPU steal."""
    if machine.get("busy"):
        return f"BUSY: {machine['busy']}"
    start, end = machine.get("load_start"), machine.get("load_end")
    if not start or not end:
        return ""
    steal = machine.get("steal_fraction")
    return f"load {start[0]:.2f} → {end[0]:.2f} of {machine.get('cores')} cores" + (
        f", steal {steal:.1%}" if steal is not None else ""
    )


def busy_flags(run: dict) -> pd.DataFrame:
    """A Flags row for each notebook measured on a busy machine (all its records)."""
    rows = [
        {
            "record_id": f"every record of {nb['notebook']}",
            "flag": f"measured on a busy machine: {nb['machine']['busy']}",
        }
        for nb in run["notebooks"]
        if (nb.get("machine") or {}).get("busy")
    ]
    return pd.DataFrame(rows, columns=["record_id", "flag"])


OVER_BUDGET = 1.5  # a notebook whose wall time passes its budget by this factor is flagged


def budget_flags(run: dict) -> pd.DataFrame:
    """A Flags row for each notebook whose wall time passed OVER_BUDGET x its declared budget
    (run.json's `budget_s`, from the platform file's `workbook.budget_s`)."""
    budget = run.get("budget_s") or {}
    rows = [
        {
            "record_id": f"every record of {nb['notebook']}",
            "flag": f"ran {nb['seconds']:.0f} s: past {OVER_BUDGET:g}x its budget of "
            f"{budget[nb['notebook']]:g} s ({run.get('parameters', '?')} workbook.budget_s)",
        }
        for nb in run["notebooks"]
        if nb["notebook"] in budget
        and nb.get("seconds") is not None
        and nb["seconds"] > OVER_BUDGET * budget[nb["notebook"]]
    ]
    return pd.DataFrame(rows, columns=["record_id", "flag"])


def flag_table(records: pd.DataFrame) -> pd.DataFrame:
    """Every record with a measurement problem or a tuned path slower than its plain comparator."""
    if records.empty or "flags" not in records:
        return pd.DataFrame(columns=["record_id", "flag"])
    rows = [
        {"record_id": row.get("record_id"), "flag": flag}
        for _, row in records.iterrows()
        if isinstance(row["flags"], (list, tuple))
        for flag in row["flags"]
    ]
    return pd.DataFrame(rows, columns=["record_id", "flag"])
