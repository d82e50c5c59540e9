"""`python -m kernel_lib profile RECORD_ID [--report DIR] [--trace FILE]`: where a record's time
went, as its report saved it (the profiled pass after timing: kernel_lib.profiling.capture): the
top ops by self time, its phases, the profiling overhead, and its Chrome trace written out as
JSON (Perfetto, chrome://tracing). A record id that is not in the report: one line, exit 2; a
record without a profile (only headlines are profiled unless the run had `-p profile=all`), or a
report made before profiles: one line saying so, exit 1. A profile whose fields are not as
`capture` writes them (`results.files.Profile`), or whose trace is not a regular file inside the
report: one line naming the record and the field, exit 2."""

from __future__ import annotations

import gzip
import sys
import zlib
from pathlib import Path

import pandas as pd

from kernel_lib.config import short_repr
from kernel_lib.params import ROOT, ParameterError
from kernel_lib.records import RESULTS_SUFFIX
from kernel_lib.results.files import read_results, regular_bytes
from kernel_lib.results.writes import output_file, write_text


def find_record(report: Path, record_id: str) -> tuple[Path, dict]:
    """The results file holding the saved record `record_id` of `report`, and the record;
    ParameterError (one line) when the report or the record is not there."""
    if not report.is_dir():
        raise ParameterError(f"profile: --report {report}: no such report folder")
    for path in sorted(report.glob(f"*{RESULTS_SUFFIX}")):
        for row in read_results(path):
            if row.get("record_id") == record_id:
                return path, row
    raise ParameterError(
        f"profile: no record {record_id!r} in {report} (its ids: the record_id column of "
        f"{report / 'results.csv'})"
    )


def top_table(profile: dict) -> str:
    """The profile's top ops as a text table: name, calls, self ms and share per timed call."""
    frame = pd.DataFrame(profile.get("top") or [], columns=["name", "calls", "self_ms", "share"])
    frame["share"] = frame["share"].map(lambda s: f"{s:.1%}")
    return frame.to_string(index=False, float_format=lambda v: f"{v:.4g}")


def trace_source(report: Path, path: Path, record: dict) -> Path:
    """The trace file of `record` (a profiled record read from `path`, its profile's types
    checked there: `results.files.Profile`), inside `report` (resolved: no `..`, absolute path nor
    link out of it); ParameterError naming the record and the field otherwise."""
    where = f"profile: {record['record_id']}"
    if record["median_ms"] is None:
        raise ParameterError(f"{where}: has a profile but no median_ms (in {path})")
    trace = record["profile"]["trace"]
    source = report / trace
    try:
        inside = report.resolve() in source.resolve().parents
    except (OSError, ValueError):  # a name too long, a NUL byte: no file of the report's
        inside = False
    if not inside:
        raise ParameterError(
            f"{where}: profile.trace {short_repr(trace)} is not a file in {report}"
        )
    return source


def read_trace(source: Path) -> str:
    """A gzipped trace's JSON text, read as a regular file only (never through a link)."""
    try:
        return gzip.decompress(regular_bytes(source)).decode()
    except ParameterError as err:
        raise ParameterError(f"profile: {err}") from None
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as err:
        raise ParameterError(f"profile: {source}: not a gzipped trace ({err})") from None


def cmd_profile(args) -> int:
    """Print where the record's time went and write its trace (see the module)."""
    report = Path(args.report) if args.report else ROOT / "outputs" / args.record_id.split("/")[0]
    path, record = find_record(report, args.record_id)
    profile = record.get("profile")
    if not profile:
        print(
            f"profile: {args.record_id} has no profile: only headline records are profiled "
            "(`run -p profile=all` profiles every one), and reports before profiles have none",
            file=sys.stderr,
        )
        return 1
    source = trace_source(report, path, record)
    target = output_file(args.trace or source.name.removesuffix(".gz"), "--trace")
    text = read_trace(source)
    print(f"{args.record_id}: {record['median_ms']:.4g} ms timed median")
    print(top_table(profile))
    phases = ", ".join(f"{k} {v:.4g} ms" for k, v in (profile.get("phases") or {}).items())
    print(f"phases per call: {phases or 'none marked'}")
    print(f"profiled / timed time: {profile.get('overhead', float('nan')):.3g}")
    if target is None:
        sys.stdout.write(text)
    else:
        write_text(target, text)
        print(f"trace: {target} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def add_parser(subparsers) -> None:
    """`profile` on `python -m kernel_lib`'s subcommands."""
    profile = subparsers.add_parser(
        "profile", help="where a record's time went: top ops, phases, its trace"
    )
    profile.add_argument("record_id", help="a record id (the record_id column of results.csv)")
    profile.add_argument(
        "--report", help="the report folder (default: outputs/<the id's platform>)"
    )
    profile.add_argument(
        "--trace", help="where the trace JSON goes (default: its name, here; - for stdout)"
    )
    profile.set_defaults(func=cmd_profile)
