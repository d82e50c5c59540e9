"""Shared pieces of the topics' typed configurations: the one dtype table, name parsing, and the
one way a notebook's flat parameters become a frozen config (`from_params`).

A topic's config is a frozen dataclass beside its kernels whose fields are the notebook's
parameters without the topic prefix (`moe_tokens` -> `MoEBenchConfig.tokens`): one name from YAML to
record. Each field is declared with `param(default, doc)`: the doc says what the parameter means and
which values `__post_init__` accepts (it validates with `require`, naming the notebook parameter).
`memory_needs()` estimates the peak bytes each size parameter drives, so a plan too big for this
machine is refused before anything runs.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from kernel_lib.plugins.loading import PARAM as PLUGINS
from kernel_lib.plugins.loading import load as load_plugins

DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def short(text: str, limit: int = 80) -> str:
    """`text` cut to `limit` characters, "..." marking the cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short_repr(value, limit: int = 80) -> str:
    """repr(value) cut to `limit` characters: a message that shows a user's value stays one
    readable line whatever its size."""
    return short(repr(value), limit)


def require(ok: bool, param: str, value, must: str) -> None:
    """Raise ValueError("param=value must be ...") unless `ok`: one line naming the parameter."""
    if not ok:
        raise ValueError(f"{param}={short_repr(value)} must be {must}")


def parse_choice(value: str, choices, *, param: str) -> str:
    """`value` if it is one of `choices` (exact match), else ValueError listing them."""
    require(isinstance(value, str) and value in choices, param, value, f"one of {list(choices)}")
    return value


def parse_choices(values, choices, *, param: str) -> tuple:
    """`values` as a tuple if it is a non-empty list of `choices` (an empty one would run
    nothing), else ValueError listing them."""
    ok = isinstance(values, (list, tuple)) and len(values) > 0
    require(ok, param, values, f"a non-empty list of {', '.join(choices)}")
    for value in values:
        parse_choice(value, choices, param=param)
    return tuple(values)


def parse_dtype(name: str, *, param: str = "dtype", allowed=tuple(DTYPES)) -> torch.dtype:
    """The torch dtype of a dtype name from the one table (`allowed` narrows it)."""
    return DTYPES[parse_choice(name, allowed, param=param)]


def dtype_name(dtype: torch.dtype) -> str:
    """'bfloat16' for torch.bfloat16: the name records carry."""
    return str(dtype).removeprefix("torch.")


def finite(value) -> bool:
    """A number, not a bool, and finite (an int of any size is: math.isfinite would overflow)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and (isinstance(value, int) or math.isfinite(value))


def positive(value, param: str) -> None:
    """A finite number > 0 (sizes, times, factors)."""
    require(finite(value) and value > 0, param, value, "a finite number > 0")


SEED_MAX = 2**64 - 1  # torch.manual_seed's largest seed (an unsigned 64-bit integer)


def seeds(value, param: str, count: int = 1) -> None:
    """`value`, `value + 1`, ..., `value + count - 1`: seeds torch takes (ints 0 .. SEED_MAX)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value
    require(
        ok and value + count - 1 <= SEED_MAX,
        param,
        value,
        f"an int from 0 to {SEED_MAX + 1 - count}",
    )


def positive_list(values, param: str) -> None:
    """A non-empty list of finite numbers > 0."""
    require(
        isinstance(values, (list, tuple)) and len(values) > 0, param, values, "a non-empty list"
    )
    for value in values:
        positive(value, param)


def param(default, doc: str):
    """A config field with its default and `doc`: the parameter's meaning and allowed range in one
    short line (what `__post_init__` enforces), shown by `python -m kernel_lib params`."""
    return dataclasses.field(default=default, metadata={"doc": doc})


def describe(cls, prefix: str) -> list[dict]:
    """One row per init field of the config class `cls`: the notebook parameter's name (`prefix`
    + field), its default (tuples as lists, as a notebook writes them) and its doc."""
    rows = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        rows.append(
            {
                "parameter": prefix + f.name,
                "default": list(default) if isinstance(default, tuple) else default,
                "doc": f.metadata.get("doc", ""),
            }
        )
    return rows


FULL_PLATFORM = "cpu-full"  # the notebooks' defaults: every sweep point, tile and variant


def left_out(config, notebook: str) -> str:
    """One line: what a run of `config` leaves out of the notebook's defaults (the full CPU sweep:
    list items it does not run, options turned off), the sizes it changed, and the one command
    that runs all of it."""
    missing, changed = [], []
    for row in describe(type(config), config.PARAM_PREFIX):
        value = getattr(config, row["parameter"].removeprefix(config.PARAM_PREFIX))
        value, default = (list(value) if isinstance(value, tuple) else value), row["default"]
        if isinstance(default, list) and all(v in default for v in value):  # a subset: a cut
            if gone := [d for d in default if d not in value]:
                missing.append(f"{row['parameter']} {gone}")
        elif default is True and value is False:
            missing.append(row["parameter"])
        elif value != default:
            changed.append(f"{row['parameter']}={value!r} (default {default!r})")
    command = f"python -m kernel_lib run --platform {FULL_PLATFORM} --only {notebook}"
    if not missing and not changed:
        return f"Left out of the full sweep: nothing ({command} runs the same)."
    parts = [
        f"left out {'; '.join(missing)}" if missing else "",
        f"changed {'; '.join(changed)}" if changed else "",
    ]
    said = " and ".join(filter(None, parts))
    return f"Beside the full sweep (the notebook's defaults) this run {said}. All of it: {command}"


def largest_needs(cases, prefix: str) -> dict[str, float]:
    """`cases`: (estimated bytes of one case, the field names that set its size); returns each
    notebook parameter (`prefix` + field) -> the bytes of the largest case it sets."""
    needs: dict[str, float] = {}
    for size, names in cases:
        size = math.inf if size > 2.0**1000 else float(size)  # float() of a huge int overflows
        for name in names:
            needs[prefix + name] = max(needs.get(prefix + name, 0.0), size)
    return needs


def from_params(cls, params: dict, *, prefix: str):
    """`cls(**{field: params[prefix + field]})` for each init field of the dataclass `cls`;
    fields the notebook does not pass keep their defaults. The `plugins` every notebook takes
    are imported first, so their kernels are registered before the first section."""
    load_plugins(params.get(PLUGINS, []))
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    return cls(**{n: params[prefix + n] for n in names if prefix + n in params})
