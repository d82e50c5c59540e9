"""A record's identity: its shape as text, its record_id (stable across runs of one revision), and
the run and platform it is stamped with when saved."""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterable

import pandas as pd

from kernel_lib.locks import lock_state
from kernel_lib.records.schema import Record

# The runner hands each notebook kernel its run's identity through these.
RUN_ID_ENV, PLATFORM_ENV = "KERNEL_WORKBOOK_RUN_ID", "KERNEL_WORKBOOK_PLATFORM"
_PROCESS_RUN_ID = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def shape_key(shape: dict) -> str:
    """A shape as 'K=256,M=133,N=128': by name, so the same shape reads the same wherever built."""
    return ",".join(f"{k}={shape[k]}" for k in sorted(shape))


def record_shape(row: pd.Series) -> dict:
    """A loaded record's shape as saved, {name: value} by name, from its `shape.*` columns: a
    whole number that a table with gaps loaded as a float is an int again; a gap is no field."""
    return {
        k[6:]: int(v) if isinstance(v, float) and v.is_integer() else v
        for k, v in sorted(row.items())
        if k.startswith("shape.") and pd.notna(v)
    }


def shape_text(row: pd.Series) -> str:
    """A loaded record's shape (its `shape.*` columns) as `batch=1,head_dim=64,...`: by name, as in
    its record_id, so the same shape reads the same whatever order the columns were loaded in."""
    return shape_key(record_shape(row))


def record_id(record: Record, platform: str) -> str:
    """platform/topic/case/implementation/dtype/mode/shape: stable across runs of one revision."""
    shape = shape_key(record.shape)
    parts = (
        platform,
        record.topic,
        record.case,
        record.implementation,
        record.dtype or "-",
        record.mode or "-",
        shape or "-",
    )
    return "/".join(str(p) for p in parts)


def run_context() -> tuple[str, str]:
    """(run_id, platform) of this run: from the runner's environment, else this process's own id
    and the detected platform ('unknown' where no parameter file matches)."""
    platform = os.environ.get(PLATFORM_ENV)
    if not platform:
        from kernel_lib.platform import detect_platform  # torch: only where no platform was set

        try:
            platform = detect_platform()
        except ValueError:
            platform = "unknown"
    return os.environ.get(RUN_ID_ENV, _PROCESS_RUN_ID), platform


def stamp(
    records: Iterable[Record], *, run_id: str | None = None, platform: str | None = None
) -> list[Record]:
    """Records with run_id, platform, record_id and the environment's lock set (default:
    `run_context()`); raises ValueError when two records would share an id (they could not be
    matched across runs)."""
    if run_id is None or platform is None:
        default_run, default_platform = run_context()
        run_id, platform = run_id or default_run, platform or default_platform
    out, seen, lock = [], {}, lock_state().label
    for r in records:
        rid = record_id(r, platform)
        if rid in seen:
            raise ValueError(f"two records share record_id {rid!r}")
        seen[rid] = r
        out.append(
            dataclasses.replace(r, run_id=run_id, platform=platform, record_id=rid, lock=lock)
        )
    return out
