"""The one registry of plug-ins: `@kernel(slot, name=...)` in a notebook cell or a module puts a
function in a slot; each topic's sections time every function registered in their slots beside
their own candidates. A record of a plug-in carries `source` (its `plugin` field): the slot, the
name, and the exact code that ran (the module, its file's SHA-256 or the cell's, and the git
revision of the file's folder)."""

from __future__ import annotations

import hashlib
import inspect
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernel_lib.plugins.slots import SLOTS

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Plugin:
    """A user's kernel in `slot`: `fn` is called as the slot says; `backward`: it is
    differentiable, so the slot's forward + backward cases time it too (else `skipped`)."""

    slot: str
    name: str
    fn: Callable
    backward: bool
    source: dict  # the record's `plugin`: slot, name, module, file, sha256, revision


# a plug-in's record in a forward + backward case when it did not declare backward=True
FORWARD_ONLY = "declared forward only: @kernel(..., backward=True) to time its backward"
REGISTRY: dict[tuple[str, str], Plugin] = {}  # (slot, name) -> its plug-in, in order registered


def _revision(folder: Path) -> str | None:
    """The git revision of `folder` ("<sha>" or "<sha>-dirty"), or None outside a checkout."""
    try:
        head = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain", "--", "."],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")


def provenance(fn: Callable, slot: str, name: str) -> dict:
    """What ran: the function's module and file with that file's SHA-256 and its folder's git
    revision; for a function defined in a notebook cell (no file of its own), the SHA-256 of
    its source and file None."""
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:  # a builtin or C function: no Python source
        path = None
    module = getattr(fn, "__module__", None)
    file = Path(path) if path and module != "__main__" and Path(path).is_file() else None
    if file is not None:
        digest, revision = hashlib.sha256(file.read_bytes()).hexdigest(), _revision(file.parent)
    else:
        try:
            text = inspect.getsource(fn)
        except (OSError, TypeError):
            text = repr(fn)
        digest, revision = hashlib.sha256(text.encode()).hexdigest(), None
    return {
        "slot": slot,
        "name": name,
        "module": module,
        "file": str(file) if file else None,
        "sha256": digest[:16],
        "revision": revision,
    }


def _known(slot: str) -> None:
    if slot not in SLOTS:
        raise ValueError(f"@kernel slot={slot!r} does not exist: choose from {list(SLOTS)}")


def kernel(slot: str, name: str | None = None, *, backward: bool = False):
    """Decorator: register the function as `name` (default: its own name) in `slot` (one of
    SLOTS). Registering the same slot and name again replaces it (a notebook cell run twice).
    ValueError naming the slot or name when either is not valid."""
    _known(slot)

    def register(fn: Callable) -> Callable:
        label = name or getattr(fn, "__name__", "")
        if not callable(fn) or not NAME.fullmatch(label):
            raise ValueError(f"@kernel name={label!r} must match {NAME.pattern} (a function's)")
        REGISTRY[(slot, label)] = Plugin(
            slot, label, fn, bool(backward), provenance(fn, slot, label)
        )
        return fn

    return register


def registered(slot: str) -> tuple[Plugin, ...]:
    """The plug-ins in `slot`, in the order they were first registered."""
    _known(slot)
    return tuple(p for (s, _), p in REGISTRY.items() if s == slot)
