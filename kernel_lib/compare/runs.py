"""A report's runs read back: each run's identity, and its records keyed by `match_key`."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from kernel_lib.params import ParameterError
from kernel_lib.records import RESULTS_SUFFIX, record_id
from kernel_lib.results import store
from kernel_lib.results.files import read_results, read_run
from kernel_lib.results.folders import RUN_FILE, run_folders


class CompareError(ParameterError):
    """Bad input: shown as one line, exit code 2."""


@dataclass(frozen=True)
class Run:
    """One run of the workbook: its folder, identity and records keyed by match key."""

    folder: Path
    platform: str | None
    device: str | None
    run_id: str | None
    git: str | None
    records: dict[str, dict] = field(repr=False)
    stale: tuple[str, ...] = ()  # notebooks left out: the report kept an earlier run's records
    busy: str = ""  # why its timings shared a busy machine (run.json's notebooks), '' if quiet
    lock: str | None = None  # the environment that measured it (kernel_lib.locks.LockState.label)

    def describe(self) -> str:
        parts = [str(self.folder), self.platform or "?", self.device or "?"]
        if self.git:
            parts.append(f"git {self.git}")
        if self.lock:
            parts.append(f"lock {self.lock}")
        text = " · ".join(parts) + (f" · BUSY ({self.busy})" if self.busy else "")
        return text + (f" (left out, stale: {', '.join(self.stale)})" if self.stale else "")


def busy_of(meta: dict) -> str:
    """Why a run's timings shared a busy machine: its notebooks' `machine.busy` (a run.json's),
    '' when none was busy."""
    return "; ".join(
        f"{nb['notebook']}: {nb['machine']['busy']}"
        for nb in meta.get("notebooks") or []
        if (nb.get("machine") or {}).get("busy") and not nb.get("stale_results")
    )


def match_key(row: dict) -> str:
    """A record's `record_id` without its leading platform, so runs of two platform files (or
    devices) match; built from the record's fields when it has no id."""
    platform = row.get("platform") or ""
    rid = row.get("record_id")
    if not rid:
        fields = {k: row.get(k) for k in ("topic", "case", "implementation", "dtype", "mode")}
        rid = record_id(SimpleNamespace(shape=row.get("shape") or {}, **fields), platform)
    prefix = f"{platform}/"
    return rid[len(prefix) :] if platform and rid.startswith(prefix) else rid


def runs_with_records(folder: str | Path) -> list[Path]:
    """The runs a report folder holds (`folders.run_folders`, else the folder itself), each with
    results. Raises CompareError for a missing folder or a run without records."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CompareError(f"{folder}: no such folder")
    runs = run_folders(folder) or [folder]
    for run in runs:
        if not any(run.glob(f"*{RESULTS_SUFFIX}")):
            raise CompareError(f"{run}: not a report folder (no *{RESULTS_SUFFIX})")
    return runs


def load_run(folder: str | Path) -> Run:
    """One run's records (from every `*.results.json`) and identity (from `run.json` where
    present, else from the records); ParameterError naming a damaged file, or one that is a link,
    a FIFO or a device (`results.files.regular_bytes`)."""
    folder = Path(folder)
    run_json = folder / RUN_FILE
    present = run_json.exists() or run_json.is_symlink()  # a link, even a dangling one: refused
    meta = read_run(run_json) if present else {}
    stale = tuple(nb["notebook"] for nb in meta.get("notebooks", []) if nb.get("stale_results"))
    records: dict[str, dict] = {}
    for path in sorted(folder.glob(f"*{RESULTS_SUFFIX}")):
        if path.name[: -len(RESULTS_SUFFIX)] in stale:
            continue
        for row in read_results(path):
            records[match_key(row)] = row
    devices = Counter(r.get("device") for r in records.values() if r.get("device"))
    platforms = Counter(r.get("platform") for r in records.values() if r.get("platform"))
    locks = Counter(r.get("lock") for r in records.values() if r.get("lock"))
    env = meta.get("environment") or {}
    return Run(
        folder=folder,
        platform=meta.get("platform") or (platforms.most_common(1)[0][0] if platforms else None),
        device=env.get("name") or (devices.most_common(1)[0][0] if devices else None),
        run_id=meta.get("run_id"),
        git=meta.get("git"),
        records=records,
        stale=stale,
        busy=busy_of(meta),
        lock=env.get("lock") or (locks.most_common(1)[0][0] if locks else None),
    )


def stored_runs(path: Path, rows: list[dict]) -> list[Run]:
    """The runs of the results store at `path` whose rows (store.runs) are `rows`, with their
    records as saved."""
    by_run: dict[str, dict[str, dict]] = {r["run_id"]: {} for r in rows}
    for rec in store.records(path, list(by_run)):
        row = json.loads(rec["record"])
        by_run[rec["run_id"]][match_key(row)] = row
    return [
        Run(
            folder=Path(r["folder"]),
            platform=r["platform"],
            device=r["device"],
            run_id=r["run_id"],
            git=r["git"],
            records=by_run[r["run_id"]],
            busy=busy_of(json.loads(r["run_json"])),
            lock=r.get("lock"),
        )
        for r in rows
    ]


STORE_NAMES = {"latest": -1, "previous": -2}  # <platform>@latest: its latest report


def named_runs(name: str, path: Path | None = None) -> list[Run]:
    """The runs of the results store (`store.store_path`) that `name` names: `<platform>@latest`
    (the latest report's runs: one, or the N of --repeat N), `<platform>@previous` (the report
    before it), or a run id or report id; CompareError when it names none."""
    path = path or store.store_path()
    platform, at, which = name.partition("@")
    if not at and not path.exists():
        raise CompareError(f"{name}: no such folder (nor a run id: no results store at {path})")
    rows = store.runs(path, platform if at else None)
    if not at:
        chosen = [r for r in rows if name in (r["run_id"], r["report"])]
        if not chosen:
            raise CompareError(f"{name}: no such folder, nor a run id in the store {path}")
        return stored_runs(path, chosen)
    if which not in STORE_NAMES:
        raise CompareError(f"{name}: {platform}@ is followed by {' or '.join(STORE_NAMES)}")
    reports = list(dict.fromkeys(r["report"] for r in rows))
    if len(reports) < -STORE_NAMES[which]:
        raise CompareError(
            f"{name}: the store {path} holds {len(reports)} report(s) of {platform}"
        )
    return stored_runs(path, [r for r in rows if r["report"] == reports[STORE_NAMES[which]]])


def load_side(folders: list[str | Path]) -> list[Run]:
    """Every run of the given report folders (or runs of the results store: `named_runs`), in
    order."""
    if not folders:
        raise CompareError("a side has no report folder")
    return [
        run
        for folder in folders
        for run in (
            [load_run(r) for r in runs_with_records(folder)]
            if Path(folder).exists()
            else named_runs(str(folder))
        )
    ]


def _by_key(runs: list[Run]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for run in runs:
        for key, row in run.records.items():
            out.setdefault(key, []).append(row)
    return out
