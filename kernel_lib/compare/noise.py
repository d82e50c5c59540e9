"""The noise floor: what an A/A comparison measured (`ab` writes it), shown beside verdicts."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from kernel_lib.compare.comparison import Comparison
from kernel_lib.compare.runs import CompareError

NOISE_FLOOR_FILE = "noise-floor.json"
NOISE_FLOOR_KEYS = (
    "platform", "device", "git", "runs_a_side", "factor", "records", "ratio_low", "ratio_high",
    "ratio_p05", "ratio_p95", "verdicts",
)  # fmt: skip

NUMBER = (int, float)
NOISE_FLOOR_TYPES = {
    "runs_a_side": (int,), "factor": NUMBER, "records": (int,), "ratio_low": NUMBER, "ratio_high": NUMBER, "ratio_p05": NUMBER,
    "ratio_p95": NUMBER, "verdicts": (dict,),
}  # fmt: skip


def noise_floor(c: Comparison) -> dict:
    """What an A/A comparison (the same code on both sides, runs interleaved) measured: how far
    the ratios of identical code spread here (all, and the middle 90 %), and the verdicts it
    called at its factor and runs a side."""
    if c.cross_platform:
        raise CompareError("a noise floor needs both sides on one device")
    ratios = sorted(float(r) for r in c.table["ratio"].dropna() if math.isfinite(r))
    if not ratios:
        raise CompareError("a noise floor needs timed records on both sides")
    cuts = statistics.quantiles(ratios, n=20, method="inclusive") if len(ratios) > 1 else ratios
    return {
        "platform": c.a[0].platform,
        "device": c.a[0].device,
        "git": c.a[0].git,
        "runs_a_side": min(len(c.a), len(c.b)),
        "factor": c.factor,
        "records": len(ratios),
        "ratio_low": ratios[0],
        "ratio_high": ratios[-1],
        "ratio_p05": cuts[0],
        "ratio_p95": cuts[-1],
        "verdicts": {v: c.counts.get(v, 0) for v in ("slower", "faster", "unconfirmed")},
    }


def read_noise_floor(path: str | Path) -> dict:
    """A noise floor written by `ab` (its noise-floor.json, or a folder holding one);
    CompareError naming the file when it is missing or is not one."""
    path = Path(path)
    path = path / NOISE_FLOOR_FILE if path.is_dir() else path
    try:
        floor = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CompareError(
            f"--noise-floor {path}: {getattr(err, 'strerror', None) or err}"
        ) from None
    if not isinstance(floor, dict) or not set(NOISE_FLOOR_KEYS) <= floor.keys():
        raise CompareError(f"--noise-floor {path}: not a noise floor (needs {NOISE_FLOOR_KEYS})")
    for key, kind in NOISE_FLOOR_TYPES.items():
        value = floor[key]
        if not isinstance(value, kind) or isinstance(value, bool) or value != value:
            raise CompareError(
                f"--noise-floor {path}: {key} = {str(value)[:40]!r} is not "
                f"{' or '.join(k.__name__ for k in kind)}"
            )
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in floor["verdicts"].values()):
        raise CompareError(f"--noise-floor {path}: verdicts must count records (integers)")
    if not isinstance(floor.get("measured_utc") or "", str):
        raise CompareError(f"--noise-floor {path}: measured_utc is not a date (text)")
    return floor


def kept_noise_floor(folder: Path, platform: str, device: str | None) -> dict | None:
    """The noise floor an A/A of `ab` kept for `platform` in `folder` (noise-floor-<platform>.json),
    when it was measured on `device` (a note on stderr when it is not, or is damaged)."""
    path = Path(folder) / f"noise-floor-{platform}.json"
    if not path.exists():
        return None
    try:
        floor = read_noise_floor(path)
    except CompareError as err:
        print(f"note: noise floor not used: {err}", file=sys.stderr)
        return None
    if floor["device"] != device:
        print(f"note: {path} was measured on {floor['device']}: not used", file=sys.stderr)
        return None
    return floor


def describe_noise_floor(floor: dict | None) -> str:
    """One sentence: the A/A, its ratios and what it called."""
    if not floor:
        return (
            "noise floor: none at hand (an A/A, `python -m kernel_lib ab REV REV`, measures one; "
            "`--noise-floor` reads it)"
        )
    when = f", {floor['measured_utc'][:10]}" if floor.get("measured_utc") else ""
    if isinstance(floor.get("notebooks"), list):
        when += f", notebooks {','.join(map(str, floor['notebooks']))}"
    called = ", ".join(f"{n} {v}" for v, n in floor["verdicts"].items())
    return (
        f"noise floor: an A/A of git {floor['git']} on {floor['device']} (runs a side: "
        f"{floor['runs_a_side']}{when}) had ratios {floor['ratio_low']:.3f}-{floor['ratio_high']:.3f} over "
        f"{floor['records']} records (90 % within {floor['ratio_p05']:.3f}-"
        f"{floor['ratio_p95']:.3f}) and called {called or 'nothing'} at factor "
        f"{floor['factor']:g}"
    )
