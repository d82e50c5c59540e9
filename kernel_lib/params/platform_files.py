"""The platform files: `parameters/<platform>.yaml` read and validated (`load_plan`) into what one
run executes (`Plan`), with the command line's values over the file's."""

from __future__ import annotations

from pathlib import Path

from kernel_lib import ROOT
from kernel_lib.allocator import ALLOCATORS
from kernel_lib.allocator import DEFAULT as ALLOCATOR_DEFAULT
from kernel_lib.config import short, short_repr
from kernel_lib.params.errors import ParameterError
from kernel_lib.params.meaning import check_meaning
from kernel_lib.params.notebooks import list_notebooks, notebook_folder, notebook_parameters
from kernel_lib.params.plan import HAND_RUN_ONLY, Plan
from kernel_lib.params.safe_yaml import load_yaml
from kernel_lib.plugins.loading import PARAM as PLUGINS
from kernel_lib.plugins.loading import PluginError, load, resolved

PARAMETERS_DIR = ROOT / "parameters"
RESERVED = "workbook"
WORKBOOK_KEYS = ("notebooks", "cell_timeout_s", "description", "allocator", "budget_s")


def list_platforms(directory: Path | None = None) -> list[str]:
    """The stems of the parameter files (hidden files excluded: `...yaml` would be `..`)."""
    files = (directory or PARAMETERS_DIR).glob("*.yaml")
    return sorted(p.stem for p in files if not p.name.startswith("."))


def check_platform(platform: str, directory: Path | None = None) -> str:
    """`platform` if it is exactly one of `list_platforms()`, else ParameterError listing them:
    a platform name is never a path (`../x`, `/abs`), it names parameters/<platform>.yaml and
    the default report folder outputs/<platform>/."""
    known = list_platforms(directory)
    if platform not in known:
        raise ParameterError(f"unknown platform {short_repr(platform)}: choose from {known}")
    return platform


def _type_ok(value, type_name: str) -> bool:
    """Whether `value` fits the type papermill inferred for a parameter (`int`, `list[str]`)."""
    scalar = {
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "bool": lambda v: isinstance(v, bool),
    }
    if type_name in scalar:
        return scalar[type_name](value)
    if type_name.startswith("list[") and type_name.endswith("]"):
        inner = type_name[5:-1]
        return isinstance(value, list) and all(_type_ok(v, inner) for v in value)
    if type_name == "list":
        return isinstance(value, list)
    return True  # unannotated parameter: papermill injects any literal


def _check_values(
    values: dict, notebooks: tuple[str, ...], source: str, directory: Path | None
) -> None:
    for key, value in values.items():
        if key in HAND_RUN_ONLY:
            raise ParameterError(
                f"{source}: key {key!r} is only for running a notebook by hand with papermill; "
                "the runner writes results into its report folder (choose it with --out)"
            )
        declaring = {
            nb: notebook_parameters(nb, directory)[key]["inferred_type_name"]
            for nb in notebooks
            if key in notebook_parameters(nb, directory)
        }
        if not declaring:
            raise ParameterError(
                f"{source}: unknown key {short_repr(key)} "
                f"(not a parameter of {', '.join(notebooks)})"
            )
        for nb, type_name in declaring.items():
            if not _type_ok(value, type_name):
                raise ParameterError(
                    f"{source}: key {key!r} = {short_repr(value)} is not {type_name} "
                    f"(as {nb}.ipynb declares it)"
                )


def _display(path: Path) -> str:
    """A path as the user would type it: relative to the repository where possible."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _read_yaml(path: Path, source: str) -> dict:
    """The file's mapping; ParameterError where it is binary, not UTF-8, empty or no mapping."""
    raw = path.read_bytes()
    if b"\0" in raw:
        raise ParameterError(f"{source}: is a binary file, not YAML text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ParameterError(f"{source}: is not UTF-8 text (byte {err.start})") from None
    data = load_yaml(text, source)
    if data is None:  # nothing but blanks and comments
        raise ParameterError(f"{source}: is empty (needs `{RESERVED}: {{notebooks: [...]}}`)")
    if not isinstance(data, dict):
        raise ParameterError(f"{source}: must be a mapping of parameter names to values")
    return data


def load_plan(
    platform: str,
    *,
    overrides: dict | None = None,
    only: list[str] | None = None,
    parameters_dir: Path | None = None,
    notebooks_dir: Path | None = None,
    here: bool = False,
    other_device: bool = False,
) -> Plan:
    """Read and validate `parameters/<platform>.yaml`, then `overrides` (command line, wins).
    `here`: the plan is to run on this machine (`run`, `bench`): its sizes are checked against
    this device's memory, and a file for another device is refused unless `other_device`."""
    check_platform(platform, parameters_dir)
    if here and not other_device:
        _refuse_other_device(platform)
    path = (parameters_dir or PARAMETERS_DIR) / f"{platform}.yaml"
    source = _display(path)
    data = _read_yaml(path, source)
    settings = data.pop(RESERVED, None)
    if not isinstance(settings, dict) or "notebooks" not in settings:
        raise ParameterError(f"{source}: needs `{RESERVED}: {{notebooks: [...]}}`")
    for key in settings:
        if key not in WORKBOOK_KEYS:
            raise ParameterError(
                f"{source}: unknown key {RESERVED}.{short(str(key))} (known: {WORKBOOK_KEYS})"
            )
    notebooks = settings["notebooks"]
    known = list_notebooks(notebooks_dir)
    if not (
        isinstance(notebooks, list) and notebooks and all(isinstance(n, str) for n in notebooks)
    ):
        raise ParameterError(
            f"{source}: key {RESERVED}.notebooks = {short_repr(notebooks)} must be a non-empty "
            f"list of notebook names from {known}"
        )
    unknown = [nb for nb in notebooks if nb not in known]
    if unknown:
        raise ParameterError(
            f"{source}: key {RESERVED}.notebooks names unknown notebooks {short_repr(unknown)}: "
            f"choose from {known}"
        )
    notebooks = tuple(notebooks)
    timeout = settings.get("cell_timeout_s")
    if timeout is not None and not (isinstance(timeout, int) and timeout > 0):
        raise ParameterError(
            f"{source}: key {RESERVED}.cell_timeout_s = {short_repr(timeout)} must be a "
            "positive int"
        )
    allocator = settings.get("allocator", ALLOCATOR_DEFAULT)
    if not isinstance(allocator, str) or allocator not in ALLOCATORS:
        raise ParameterError(
            f"{source}: key {RESERVED}.allocator = {short_repr(allocator)} must be one of "
            f"{', '.join(ALLOCATORS)}"
        )
    budget = _budget(settings.get("budget_s", {}), notebooks, source)
    _check_values(data, notebooks, source, notebooks_dir)
    if only is not None:
        unknown = [nb for nb in only if nb not in notebooks]
        if not only or unknown:
            raise ParameterError(
                f"--only: {short_repr(unknown) if unknown else 'no notebook named'}: "
                f"choose from {platform}'s notebooks {list(notebooks)}"
            )
        notebooks = tuple(nb for nb in notebooks if nb in only)
    overrides = dict(overrides or {})
    _check_values(overrides, notebooks, "command line", notebooks_dir)
    values = {**data, **overrides}
    if PLUGINS in values:  # imported here, before anything runs: one line naming a bad one
        try:
            values[PLUGINS] = resolved(values[PLUGINS])
            load(values[PLUGINS])
        except PluginError as err:
            where = "command line" if PLUGINS in overrides else source
            raise ParameterError(f"{where}: {err}") from None
    plan = Plan(
        platform=platform,
        source=source,
        notebooks=notebooks,
        values=values,
        cell_timeout_s=timeout,
        description=str(settings.get("description", "")),
        notebooks_dir=notebook_folder(notebooks_dir),
        allocator=allocator,
        budget_s={nb: budget[nb] for nb in notebooks if nb in budget},
    )
    check_meaning(plan, overrides, here)
    return plan


def _budget(budget, notebooks: tuple[str, ...], source: str) -> dict:
    """The file's `workbook.budget_s`: each of its notebooks' expected wall seconds."""
    if not (
        isinstance(budget, dict)
        and all(n in notebooks for n in budget)
        and all(type(s) in (int, float) and 0 < s < float("inf") for s in budget.values())
    ):
        raise ParameterError(
            f"{source}: key {RESERVED}.budget_s = {short_repr(budget)} must map notebooks of "
            f"{RESERVED}.notebooks to seconds > 0"
        )
    return budget


OTHER_DEVICE = "--other-device"  # run a platform file for another device here: a dry run of it


def _refuse_other_device(name: str) -> None:
    """ParameterError naming this machine's device when platform `name` is for another one."""
    from kernel_lib import platform  # torch: only to run a plan on this device

    device = platform.device_of_platform(name)
    if device is None:
        return
    facts = platform.device_facts()
    if not platform.is_device(facts, device):
        raise ParameterError(
            f"--platform {name} is for a {device[0]} {device[1]} device; this machine's is "
            f"{facts.backend} {facts.name!r}: {OTHER_DEVICE} runs it here anyway (its sizes, "
            "checked against this device's memory)"
        )
