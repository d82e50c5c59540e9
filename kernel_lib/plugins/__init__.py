"""Benchmark your own kernel (docs/plugins.md): `@kernel(slot, name=...)` registers a function in
one of the slots (`SLOTS`), or the `plugins` parameter names modules and `.py` paths that do;
each topic checks and times every registered plug-in beside its own candidates. A plug-in
that cannot run a case raises `kernel_lib.checks.Unsupported("why")`: `skipped: why`.

`slots` (the slots: call, check, baseline) → `registry` (`Plugin`, `kernel`, `registered`: what
ran, recorded) → `loading` (the `plugins` parameter imported: `load`, `PluginError`).
"""

from kernel_lib.plugins.loading import PARAM, PluginError, load, resolved
from kernel_lib.plugins.registry import FORWARD_ONLY, REGISTRY, Plugin, kernel, registered
from kernel_lib.plugins.slots import SLOTS, Slot

__all__ = [
    "FORWARD_ONLY", "PARAM", "REGISTRY", "SLOTS", "Plugin", "PluginError", "Slot", "kernel", "load",
    "registered", "resolved",
]  # fmt: skip
