"""Correctness checks: one definition of the error, and the check every timed record carries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

METRICS = ("rel_error", "max_abs_error")


class Unsupported(Exception):
    """A path that cannot run here (device, compiler, memory): becomes `skipped: <reason>`."""


def error_line(err: BaseException) -> str:
    """The traceback's last line ('Name: first line of the message'), at most 200 characters:
    what a failed record says."""
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"[:200]


@dataclass(frozen=True)
class Tolerance:
    """An error bound and the one-line derivation that justifies it."""

    value: float
    why: str
    metric: str = "rel_error"  # which Check figure the bound applies to (METRICS)

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"metric={self.metric!r} must be one of {METRICS}")
        if not self.value >= 0:
            raise ValueError(f"tolerance value={self.value} must be >= 0")


@dataclass(frozen=True)
class Check:
    """How one output compared with its reference at the timed shape, dtype and mode."""

    reference: str  # what it was compared with, e.g. "fp64 loop over experts"
    max_abs_error: float
    rel_error: float  # max |out - ref| / max |ref| (relative_error)
    tolerance: float
    metric: str
    passed: bool

    def as_dict(self) -> dict:
        return {
            "reference": self.reference,
            "max_abs_error": self.max_abs_error,
            "rel_error": self.rel_error,
            "tolerance": self.tolerance,
            "metric": self.metric,
            "pass": self.passed,
        }

    def describe(self) -> str:
        """'rel_error 3.1e-02 > 1.0e-03 vs fp64 loop' (why a check failed, for a record's reason)."""
        value = getattr(self, self.metric)
        sign = "<=" if self.passed else ">"
        return f"{self.metric} {value:.1e} {sign} {self.tolerance:.1e} vs {self.reference}"


def _flat(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _flat(v)]
    raise TypeError(f"a checked output must be a tensor or a tuple of tensors, not {type(value)}")


# Elements compared at a time: a 1 GiB FP8 output is never copied whole into float64 (8 GiB).
CHUNK = 2**24


def errors(out, ref) -> tuple[float, float]:
    """(max |out - ref|, that over max |ref|) in float64 over every tensor of `out` and `ref`
    (tensors or matching tuples of tensors), on the reference's device. NaN anywhere gives NaN,
    which fails every bound; empty outputs have no error."""
    outs, refs = _flat(out), _flat(ref)
    if len(outs) != len(refs):
        raise ValueError(f"output has {len(outs)} tensors, reference {len(refs)}")
    abs_err, scale = 0.0, 0.0
    for o, r in zip(outs, refs):
        if o.shape != r.shape:
            raise ValueError(f"output shape {tuple(o.shape)} != reference shape {tuple(r.shape)}")
        if o.numel() == 0:
            continue
        r = r.detach()
        pairs = zip(o.detach().to(r.device).reshape(-1).split(CHUNK), r.reshape(-1).split(CHUNK))
        for o_part, r_part in pairs:  # on the reference's device, CHUNK elements at a time
            r_part = r_part.double()
            diff = (o_part.double() - r_part).abs()
            if diff.isnan().any():
                return float("nan"), float("nan")
            abs_err = max(abs_err, float(diff.max()))
            scale = max(scale, float(r_part.abs().max()))
    return abs_err, abs_err / scale if scale > 0 else abs_err


def relative_error(out, ref) -> float:
    """max |out - ref| / max |ref| (the project's one definition of relative error)."""
    return errors(out, ref)[1]


def check_output(out, ref, *, reference: str, tolerance: Tolerance) -> Check:
    """`out` against `ref`, pass/fail by `tolerance` (NaN never passes)."""
    abs_err, rel_err = errors(out, ref)
    check = Check(reference, abs_err, rel_err, tolerance.value, tolerance.metric, False)
    value = getattr(check, tolerance.metric)
    return Check(
        reference, abs_err, rel_err, tolerance.value, tolerance.metric, value <= tolerance.value
    )


def against(ref, *, reference: str, tolerance: Tolerance) -> Callable[[object], Check]:
    """A check function for `Candidate.check`: compares the timed function's result with `ref`
    (a tensor, a tuple of tensors, or a zero-argument callable giving one, called once)."""
    cache = []

    def check(out) -> Check:
        if not cache:
            cache.append(ref() if callable(ref) else ref)
        return check_output(out, cache[0], reference=reference, tolerance=tolerance)

    return check


def exact(ref, *, reference: str) -> Callable[[object], Check]:
    """A check that passes only on bit-identical output (e.g. FP8 bytes)."""
    return against(
        ref, reference=reference, tolerance=Tolerance(0.0, "bit-exact", "max_abs_error")
    )
