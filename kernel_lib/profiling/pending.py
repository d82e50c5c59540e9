"""The timed calls waiting for the profiled pass: `measure.check_then_time` hands each one over
(`put`) after timing it; `capture.profiled` takes them at the end of the section and forgets
them all, so no tensor outlives its section. Nothing is kept when profiling is off."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import torch

from kernel_lib.params import ParameterError, parse_override
from kernel_lib.records import NOTEBOOK_ENV, Record, record_id

# off, headlines (the runner's default) or all; outside the runner the default is off.
PROFILE_ENV = "KERNEL_WORKBOOK_PROFILE"
MODES = ("off", "headlines", "all")
_PENDING: dict[str, tuple[Callable[[], object], torch.device | str]] = {}


def profile_mode() -> str:
    """The profile mode: $KERNEL_WORKBOOK_PROFILE, else `headlines` under the runner (it names
    the notebook) and `off` elsewhere; ParameterError (one line naming the variable) for another
    value: every command that runs a notebook or a suite calls it before anything runs."""
    value = os.environ.get(PROFILE_ENV) or ("headlines" if os.environ.get(NOTEBOOK_ENV) else "off")
    if value not in MODES:
        raise ParameterError(f"${PROFILE_ENV}={value!r} must be one of {', '.join(MODES)}")
    return value


def mode_override(overrides: dict) -> None:
    """`run -p profile=MODE`: taken out of the notebooks' parameters (`overrides`) into
    $KERNEL_WORKBOOK_PROFILE, which the notebook kernels inherit; ParameterError (one line)
    for another mode."""
    if "profile" not in overrides:
        return
    value = overrides.pop("profile")
    value = "off" if value is False else value  # YAML reads a bare `off` as false
    if value not in MODES:
        raise ParameterError(
            f"command line: -p profile={value!r} must be one of {', '.join(MODES)}"
        )
    os.environ[PROFILE_ENV] = value


def notebook_params(params: Iterable[str]) -> list[str]:
    """The `-p NAME=VALUE`s of `run`, `bench`, `ab` or `device-run` that are the notebooks':
    `-p profile=MODE` taken out into $KERNEL_WORKBOOK_PROFILE (`mode_override`); every `-p` and
    the mode (given, or already in the environment) checked: ParameterError, one line."""
    parsed = [(text, parse_override(text)) for text in params]
    mode_override(dict(override for _, override in parsed))
    profile_mode()
    return [text for text, (name, _) in parsed if name != "profile"]


def identity(record: Record) -> str:
    """A record's id without its platform (stamped only when saved)."""
    return record_id(record, "-")


def put(record: Record, fn: Callable[[], object], device: torch.device | str) -> None:
    """Keep `record`'s timed call until its section is profiled (nothing when profiling is off),
    to run under the autograd mode it was timed in (a section may time under no_grad: the same
    compiled graph, not one recompiled for autograd)."""
    if profile_mode() == "off":
        return
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

    def as_timed():
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return fn()

    _PENDING[identity(record)] = (as_timed, device)


def share(record: Record, source: Record) -> None:
    """`record`, made from `source`'s samples (the same call against another baseline), profiled
    with the call put for `source`."""
    if identity(source) in _PENDING:
        _PENDING[identity(record)] = _PENDING[identity(source)]


def take(record: Record) -> tuple[Callable[[], object], torch.device | str] | None:
    """The call put for `record`, or None."""
    return _PENDING.get(identity(record))


def forget() -> None:
    """Forget every call put (the section was profiled)."""
    _PENDING.clear()
