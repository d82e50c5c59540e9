"""The `plugins` parameter: module names or `.py` paths imported before a notebook's first
section (their `@kernel`s register as they import). A name that does not import, a path that is
not there, or a module that registers nothing is one line naming it (`PluginError`)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

from kernel_lib.checks import error_line
from kernel_lib.plugins.registry import REGISTRY

PARAM = "plugins"  # the parameter every notebook declares, `bench --plugin`, `make ... PLUGINS=`


class PluginError(ValueError):
    """A plug-in that cannot be loaded: the message names it and why, in one line."""


def is_path(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec


def resolved(specs) -> list[str]:
    """`specs` checked to be a list of strings, paths made absolute (a notebook runs in another
    folder than the command that named them)."""
    if not (isinstance(specs, (list, tuple)) and all(isinstance(s, str) and s for s in specs)):
        raise PluginError(f"{PARAM}={specs!r:.80} must be a list of module names or .py paths")
    return [str(Path(s).expanduser().resolve()) if is_path(s) else s for s in specs]


def _import_path(path: Path):
    if not path.is_file():
        raise PluginError(f"{PARAM}: no file {path}")
    module = "kernel_workbook_plugin_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if module in sys.modules:
        return sys.modules[module]
    spec = importlib.util.spec_from_file_location(module, path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[module] = loaded
    try:
        spec.loader.exec_module(loaded)
    except BaseException:
        del sys.modules[module]
        raise
    return loaded


def load(specs) -> list[str]:
    """Import every plug-in module of `specs` (the `plugins` parameter); the names of the
    modules imported. PluginError naming the first that is missing, raises while imported,
    registers a slot that does not exist or registers nothing."""
    names = []
    for spec in resolved(specs):
        try:
            module = _import_path(Path(spec)) if is_path(spec) else importlib.import_module(spec)
        except PluginError:
            raise
        except Exception as err:  # noqa: BLE001 - a user's module: one line naming it
            missing = isinstance(err, ModuleNotFoundError) and not is_path(spec)
            if missing and err.name in (spec.split(".")[0], spec):  # not one it imports
                raise PluginError(
                    f"{PARAM}: no module named {spec!r} (a module name or a .py path)"
                ) from None
            raise PluginError(
                f"{PARAM}: {spec} raised while imported: {error_line(err)}"
            ) from None
        if not any(p.source["module"] == module.__name__ for p in REGISTRY.values()):
            raise PluginError(
                f"{PARAM}: {spec} registers no kernel (decorate a function with "
                "@kernel(slot, name=...) from kernel_lib.plugins)"
            )
        names.append(module.__name__)
    return names
