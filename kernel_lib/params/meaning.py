"""A plan's values checked for meaning before anything runs: each notebook's config built from
them, and each size's largest case against this device's memory."""

from __future__ import annotations

from functools import cache

from kernel_lib.config import short_repr
from kernel_lib.params.errors import ParameterError
from kernel_lib.params.notebooks import config_class, notebook_defaults
from kernel_lib.params.plan import Plan


def check_meaning(plan: Plan, overrides: dict, here: bool = False) -> None:
    """Build every notebook's config from its defaults and the plan's values, before anything
    runs: a value of the right type and the wrong meaning (a negative size, top_k > experts, an
    unknown dtype) is one line naming where it came from, the key and the allowed range. So is a
    size whose largest case needs more memory than this machine's device has (`_device_memory`;
    `here`: the plan is to run on this machine, whichever device its file is for)."""
    device = cache(lambda: _device_memory(plan, overrides, here))  # looked up once, only if needed
    too_big = []  # (bytes, key, value, notebook) of each need over the device's memory
    for notebook in plan.notebooks:
        cls = config_class(notebook)
        if cls is None:
            continue
        values = {
            **notebook_defaults(notebook, plan.notebooks_dir),
            **plan.parameters_for(notebook),
        }
        try:
            config = cls.from_params(values)
        except ValueError as err:
            key = str(err).split("=", 1)[0]
            where = "command line" if key in overrides else plan.source
            raise ParameterError(f"{where}: {err} ({notebook}.ipynb)") from None
        if device() is not None:
            memory, needs = device()[0], config.memory_needs().items()
            too_big += [
                (v, k, values[k], notebook) for k, v in needs if k in values and v > memory
            ]
    if too_big:
        _refuse_too_big(too_big, device(), plan, overrides)


def _device_memory(plan: Plan, overrides: dict, here: bool) -> tuple[int, str] | None:
    """(bytes, name) of the device this machine runs the plan's notebooks on, or None: memory
    unknown, or a file for another device that is only being listed or validated (not `here`,
    its platform is not this machine's and nothing was set on the command line)."""
    from kernel_lib import platform  # torch: only to size a plan on this device

    facts = platform.device_facts()
    if not facts.memory_bytes:
        return None
    if not overrides and not here:
        try:
            here = platform.detect_platform(facts)
        except ValueError:  # no parameter file matches this device
            here = None
        if plan.platform != here:
            return None
    return facts.memory_bytes, facts.name


def _refuse_too_big(too_big: list, device: tuple[int, str], plan: Plan, overrides: dict):
    """ParameterError naming one parameter whose largest case needs more than the device's
    memory: the biggest need among the command line's keys, else the file's, else all."""
    memory, name = device
    for given in (overrides, plan.values, None):
        among = [t for t in too_big if given is None or t[1] in given]
        if among:
            need, key, value, notebook = max(among, key=lambda t: t[0])
            break
    where = "command line" if key in overrides else plan.source
    raise ParameterError(
        f"{where}: {key}={short_repr(value)} needs about {need / 2**30:.1f} GiB (largest case), "
        f"this machine's {name} has {memory / 2**30:.1f} GiB ({notebook}.ipynb)"
    )
