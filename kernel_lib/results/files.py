"""A report folder's saved files read back (run.json and `<notebook>.results.json`), checked for
what report, compare and export read from them: a damaged file is a ParameterError of one line
naming the file and the field (the CLI's exit 2), never a traceback from deep inside a reader."""

from __future__ import annotations

import copy
import dataclasses
import errno
import functools
import io
import json
import math
import os
import reprlib
import stat
import sys
import types
import typing
from pathlib import Path
from typing import TypedDict

import pandas as pd

from kernel_lib.headlines import key_of
from kernel_lib.params import ParameterError
from kernel_lib.records import RESULTS_SUFFIX, STATUSES, Record, to_dicts, to_frame_with_verdict
from kernel_lib.results.legacy import record_id_of, shape_of


# A record's profile as kernel_lib.profiling.capture writes it: what the pages and `profile` read.
class TopOp(TypedDict):
    name: str
    calls: float  # per profiled call
    self_ms: float
    share: float


class _Traced(TypedDict):
    trace: str  # relative to the report folder


class Profile(_Traced, total=False):
    top: list[TopOp]
    phases: dict[str, float]  # ms per profiled call
    overhead: float  # profiled / timed median


class PluginSource(TypedDict):  # kernel_lib.plugins.registry.provenance
    slot: str
    name: str
    module: str | None
    file: str | None
    sha256: str
    revision: str | None


# A saved record has every field of Record, typed as annotated there (its profile: Profile), but
# for the run_id that the readers only show as saved. A field without a default must be there,
# and so must the record_id that save_records stamps: records are matched by it.
RECORD_TYPES = {
    **{k: v for k, v in typing.get_type_hints(Record).items() if k != "run_id"},
    "profile": Profile | None,
    "plugin": PluginSource | None,
}
_NO_DEFAULT = {
    f.name: ""
    for f in dataclasses.fields(Record)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
}
RECORD_REQUIRED = frozenset({*_NO_DEFAULT, "record_id"})
# A record as save_records writes it (JSON-ready: lists, not tuples), every field at its default:
# what a missing field reads as, in Record's order (a required field is never missing).
RECORD_DEFAULTS = to_dicts([Record(**_NO_DEFAULT)])[0]


# run.json as the runner writes it (run/runner.py; aggregate.write_aggregate_run for --repeat N),
# less the run ids, which are only shown as saved
class Machine(TypedDict, total=False):
    cores: int | None
    load_start: list[float] | None  # 1-, 5- and 15-min load
    load_end: list[float] | None
    steal_fraction: float | None
    busy: str


class _NotebookKeys(TypedDict):
    notebook: str
    status: str


class NotebookRow(_NotebookKeys, total=False):  # run.execute.NotebookResult
    detail: str
    seconds: float | None
    git: str
    started_utc: str
    stale_results: str
    machine: Machine | None


class Notebook(NotebookRow, total=False):
    runs: dict[str, NotebookRow]  # a repeated report: the notebook's row in each run's run.json


class Environment(TypedDict, total=False):  # platform.DeviceFacts.as_dict, plus versions
    backend: str | None
    device: str | None
    name: str | None
    arch: str | None
    memory_GiB: float | None
    compute_units: str | None
    lock: str  # kernel_lib.locks.LockState.label
    lock_differs: list[str]


class RunEntry(TypedDict):  # and its run_id, times and git, shown as they are
    folder: str


class RunInfo(TypedDict, total=False):
    platform: str
    parameters: str
    description: str
    started_utc: str
    finished_utc: str
    git: str
    command: str
    environment: Environment
    budget_s: dict[str, float]  # notebook -> its expected wall seconds (workbook.budget_s)
    notebooks: list[Notebook]
    repeat: int
    runs: list[RunEntry]


def _error(path: Path, what: str) -> ValueError:

    return ParameterError(f"{path}: {what}")


def _int(text: str) -> int:
    # the readers compute in floats; long text is refused before int() sees it (past 4300 digits
    # Python refuses it with a message about its own setting)
    if len(text) > 400 or abs(int(text)) > sys.float_info.max:
        raise ValueError(f"{text[:12]}...: a number beyond the float range")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:12]}: a number beyond the float range")
    return value


def _constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


# What a report's file may not be: it is read or copied as what it is, never through a link (to
# /dev/zero, to a file outside the report) nor from a FIFO (a read that never ends) or a device.
SPECIAL = (
    (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"),
)  # fmt: skip


def _special(path: Path, mode: int) -> ValueError:
    if stat.S_ISLNK(mode):
        return _error(path, "a symbolic link: a report is never read or copied through one")
    kind = next((name for test, name in SPECIAL if test(mode)), "special")
    return _error(path, f"{kind}, not a regular file")


def _unreadable(path: Path, err: OSError) -> ValueError:
    """`err` of opening `path` without following a link, as one line naming the link if it was one."""
    if err.errno in (errno.ELOOP, errno.ENOTDIR) and path.is_symlink():
        return _special(path, os.lstat(path).st_mode)
    return _error(path, err.strerror or str(err))


def regular_bytes(path: str | Path) -> bytes:
    """The bytes of a report's file `path`, a regular file whose folder is not a link either,
    opened without following one (O_NOFOLLOW: no race with a file swapped for a link);
    ParameterError naming the file (or its folder) otherwise, before a FIFO or device is opened."""
    path = Path(path)
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as err:  # named: the folder where it is a link, else the file
        raise _unreadable(path.parent if path.parent.is_symlink() else path, err) from None
    try:
        mode = os.stat(path.name, dir_fd=folder, follow_symlinks=False).st_mode
        if not stat.S_ISREG(mode):
            raise _special(path, mode)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK  # a FIFO swapped in: no wait
        with open(os.open(path.name, flags, dir_fd=folder), "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise _special(path, mode)
            return file.read()
    except OSError as err:
        raise _unreadable(path, err) from None
    finally:
        os.close(folder)


def refuse_special(folder: str | Path) -> None:
    """ParameterError naming the first entry of the report `folder` (or the folder itself) that is
    not a regular file or a folder (a link, a FIFO, a device): what a copier refuses to copy."""
    entries = [Path(folder)]
    while entries:
        path = entries.pop()
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                entries += sorted(path.iterdir(), reverse=True)
            elif not stat.S_ISREG(mode):
                raise _special(path, mode)
        except OSError as err:
            raise _error(path, err.strerror or str(err)) from None


def _read_json(path: str | Path):
    """The JSON value in `path`: UTF-8, numbers finite (what the writers save); ParameterError
    naming the file otherwise."""
    path = Path(path)
    data = regular_bytes(path)
    try:
        text = data.decode("utf-8")
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except UnicodeDecodeError as err:
        raise _error(path, f"not UTF-8 text (byte {err.start})") from None
    except RecursionError:
        raise _error(path, "not JSON (nested too deeply)") from None
    except ValueError as err:  # json.JSONDecodeError, or a number refused above
        raise _error(path, f"not JSON ({err})") from None


def _kind(value) -> str:
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    if value is None:
        return "null"
    return reprlib.repr(value)


@functools.cache
def _fields(hint) -> tuple[dict, frozenset]:
    """(field -> type, required fields) of an object type: a TypedDict or Record."""
    if hint is Record:
        return RECORD_TYPES, RECORD_REQUIRED
    return typing.get_type_hints(hint), hint.__required_keys__


def _member(where: str, key: str) -> str:
    """`where.key`, or `where['key']` for a key that is not a name (a newline would break the line)."""
    if key.isidentifier():
        return f"{where}.{key}" if where else key
    return f"{where}[{key!r}]"


TYPE_NAMES = {str: "a string", float: "a number", int: "an integer", dict: "an object"}
# The most a field may hold (the longest saved so far: a 300-character reason, 1,000 samples):
# a report page or SUMMARY.md never grows from one field beyond what a person reads.
MAX_TEXT, MAX_ITEMS = 16_384, 100_000


def _problem(value, hint, where: str = "") -> str | None:
    """What is wrong with the JSON `value` at `where` for type `hint`, or None. Types: str, int,
    float (any number), dict, X | None, list[X] or tuple[X, ...] (a list), dict[str, X], and
    objects (a TypedDict or Record): their fields where present, and the required ones."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    at = f"{where} " if where else ""
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if value is None and len(options) < len(args):
            return None
        if len(options) == 1:
            return _problem(value, options[0], where)
        if any(_problem(value, a) is None for a in options):  # scalars: str | float
            return None
        return f"{at}must be {' or '.join(TYPE_NAMES[a] for a in options)}, not {_kind(value)}"
    if origin in (list, tuple):
        if not isinstance(value, list):
            return f"{at}must be a list, not {_kind(value)}"
        if len(value) > MAX_ITEMS:
            return f"{at}holds {len(value):,} items, more than {MAX_ITEMS:,}"
        items = ((f"{where}[{i}]", v, args[0]) for i, v in enumerate(value))
    elif origin is dict or hint is Record or typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return f"{at}must be an object, not {_kind(value)}"
        fields, required = (
            ({key: args[1] for key in value}, ()) if origin is dict else _fields(hint)
        )
        missing = min((key for key in required if value.get(key) is None), default=None)
        if missing:
            return f"{at}has no {missing}"
        items = ((_member(where, k), value[k], h) for k, h in fields.items() if k in value)
    else:
        fits = isinstance(value, (int, float) if hint is float else hint)
        if fits and isinstance(value, str) and len(value) > MAX_TEXT:
            return f"{at}holds {len(value):,} characters, more than {MAX_TEXT:,}"
        if fits and not isinstance(value, bool):
            return None
        return f"{at}must be {TYPE_NAMES[hint]}, not {_kind(value)}"
    return next((p for w, v, h in items if (p := _problem(v, h, w))), None)


def read_run(path: str | Path, *, required: tuple[str, ...] = ()) -> dict:
    """A run.json, checked (`RunInfo`), with the keys in `required` present; ParameterError naming
    the file and field otherwise."""
    run = _read_json(path)
    bad = _problem(run, RunInfo) or next(
        (f"has no {key}" for key in required if run.get(key) is None), None
    )
    if bad:
        raise _error(Path(path), bad)
    return run


def read_results(path: str | Path) -> list[dict]:
    """A `<notebook>.results.json` file's records as saved, checked against Record (a missing
    field takes its default); ParameterError naming the file, the record and the field otherwise."""
    rows = _read_json(path)
    bad = _problem(rows, list[Record]) or next(
        (
            f"[{i}].status must be one of {', '.join(STATUSES)}, not {_kind(row['status'])}"
            for i, row in enumerate(rows)
            if row.get("status", "ok") not in STATUSES
        ),
        None,
    )
    if bad:
        raise _error(Path(path), bad)
    return [_keyed({**copy.deepcopy(RECORD_DEFAULTS), **row}) for row in rows]


def _keyed(row: dict) -> dict:
    """A saved record in today's names: its headline as a key (a report written before keys has
    labels), its id and shape with one name per quantity (kernel_lib.results.legacy)."""
    if isinstance(row.get("headline"), str):
        row["headline"] = key_of(row["headline"])
    if isinstance(row.get("record_id"), str):
        row["record_id"] = record_id_of(row["record_id"])
    if isinstance(row.get("shape"), dict):
        row["shape"] = shape_of(str(row.get("case")), row["shape"])
    return row


class Results(typing.NamedTuple):
    """A `<notebook>.results.json` file read once: its records as saved (`read_results`: what the
    results store keeps) and as one table (`results_frame`: what the findings cell, a report's
    pages and the gallery show)."""

    saved: list[dict]
    frame: pd.DataFrame


# Results files already read, by their path in the report folder (`moe.results.json`,
# `run-2/moe.results.json`): a run reads each once, and hands them on.
Read = dict[str, Results]


def read_notebook(path: str | Path) -> Results:
    """A results file read and checked (`read_results`), and its table: a row per record with
    its `notebook`, and its `verdict` (`records.verdict`)."""
    path = Path(path)
    saved = read_results(path)
    frame = to_frame_with_verdict(saved).assign(notebook=path.name[: -len(RESULTS_SUFFIX)])
    return Results(saved, frame)


def results_frame(path: str | Path) -> pd.DataFrame:
    """A results file's table (`read_notebook`)."""
    return read_notebook(path).frame


def within(read: Read | None, folder: str) -> Read:
    """The files of `read` in its subfolder `folder` (a run `run-<k>` of a repeated report), by
    their path there."""
    prefix = f"{folder}/"
    return {k[len(prefix) :]: v for k, v in (read or {}).items() if k.startswith(prefix)}


def notebook_records(folder: str | Path, read: Read | None = None) -> pd.DataFrame:
    """Every record of a report folder (`results_frame` of each `<notebook>.results.json`, but
    for the files in `read`: their table as already read); empty when it holds none."""
    read, frames = read or {}, []
    for path in sorted(Path(folder).glob(f"*{RESULTS_SUFFIX}")):
        frames.append(read[path.name].frame if path.name in read else results_frame(path))
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def read_table(path: str | Path) -> pd.DataFrame:
    """A results.csv (a report that keeps no JSON files: outputs/reference) with its columns as
    saved, none for an empty file; ParameterError naming it where it is not a CSV table."""
    data = regular_bytes(path)
    try:
        table = pd.read_csv(io.BytesIO(data), low_memory=False)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except (UnicodeDecodeError, pd.errors.ParserError) as err:
        raise _error(Path(path), f"not a CSV table ({err})") from None
    if "headline" in table:
        table["headline"] = table["headline"].map(lambda v: key_of(v) if isinstance(v, str) else v)
    if "record_id" in table:
        table["record_id"] = table["record_id"].map(
            lambda v: record_id_of(v) if isinstance(v, str) else v
        )
    return table
