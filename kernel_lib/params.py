"""Platform parameter files: load safely, layer over notebook defaults, validate before anything runs.

A file `parameters/<platform>.yaml` is flat, so plain `papermill NB out -f parameters/<platform>.yaml`
works: a reserved `workbook:` mapping holds runner settings (which notebooks, per-cell timeout), and
every other key is a parameter of at least one of those notebooks, with a compatible type (except
`results_dir`, which only runs by hand take: HAND_RUN_ONLY).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

from kernel_lib import ROOT
from kernel_lib.allocator import ALLOCATORS
from kernel_lib.allocator import DEFAULT as ALLOCATOR_DEFAULT
from kernel_lib.config import short, short_repr

PARAMETERS_DIR = ROOT / "parameters"
NOTEBOOKS_DIR = ROOT / "notebooks"
RESERVED = "workbook"
WORKBOOK_KEYS = ("notebooks", "cell_timeout_s", "description", "allocator", "budget_s")
# Notebook parameters for runs by hand (`papermill ... -p results_dir DIR`), never set by a platform
# file or the runner's -p: the runner writes every notebook's results into its report folder.
HAND_RUN_ONLY = ("results_dir",)
# notebook (or name prefix) -> the config class that gives its parameters their ranges and meaning
CONFIGS = {
    "moe": "kernel_lib.moe.config:MoEBenchConfig",
    "fp8": "kernel_lib.fp8.config:Fp8BenchConfig",
    "flex_attention": "kernel_lib.attention.config:AttentionConfig",
    "backend_": "kernel_lib.backends.config:BackendConfig",
}


class ParameterError(ValueError):
    """Bad platform, file, key or value: the CLI prints the one-line message and exits 2."""


@dataclass(frozen=True)
class Plan:
    """What one run executes: which notebooks, with which parameters, under which limits."""

    platform: str
    source: str  # the parameter file, for messages and the report
    notebooks: tuple[str, ...]
    values: dict = field(default_factory=dict)  # flat parameter values from the file and overrides
    cell_timeout_s: int | None = None
    description: str = ""
    notebooks_dir: Path = NOTEBOOKS_DIR
    allocator: str = ALLOCATOR_DEFAULT  # notebook kernels' host malloc (kernel_lib.allocator)
    # notebook -> its expected wall seconds on the platform's machine (report flags an overrun)
    budget_s: dict = field(default_factory=dict)

    def parameters_for(self, notebook: str) -> dict:
        """The values this notebook declares (papermill injects only these)."""
        declared = notebook_parameters(notebook, self.notebooks_dir)
        return {k: v for k, v in self.values.items() if k in declared and k not in HAND_RUN_ONLY}


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


def list_notebooks(directory: Path | None = None) -> list[str]:
    return sorted(p.stem for p in (directory or NOTEBOOKS_DIR).glob("*.ipynb"))


@cache
def _inspect(path: Path, mtime: float) -> dict:
    import papermill  # here, not at the top: bench-only hosts run without the Jupyter stack

    return papermill.inspect_notebook(str(path))


def notebook_parameters(notebook: str, directory: Path | None = None) -> dict:
    """name -> {inferred_type_name, default (source text), help} from the `parameters` cell."""
    path = (directory or NOTEBOOKS_DIR) / f"{notebook}.ipynb"
    if not path.exists():
        raise ParameterError(
            f"unknown notebook {short_repr(notebook)}: choose from {list_notebooks(directory)}"
        )
    return _inspect(path, path.stat().st_mtime)


def notebook_defaults(notebook: str, directory: Path | None = None) -> dict:
    """The parameters cell's default values as Python objects."""
    return {
        name: ast.literal_eval(spec["default"])
        for name, spec in notebook_parameters(notebook, directory).items()
    }


def _type_ok(value, type_name: str) -> bool:
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


def config_class(notebook: str):
    """The config class of a workbook notebook (None for notebooks without one, e.g. in tests)."""
    import importlib

    spec = next(
        (
            v
            for k, v in CONFIGS.items()
            if notebook == k or (k.endswith("_") and notebook.startswith(k))
        ),
        None,
    )
    if spec is None:
        return None
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def documented_notebooks(directory: Path | None = None) -> list[str]:
    """The notebooks whose parameters a config class gives ranges and meaning."""
    return [nb for nb in list_notebooks(directory) if config_class(nb) is not None]


def parameter_rows(notebook: str, directory: Path | None = None) -> list[dict]:
    """The notebook's parameters as it declares them (papermill's view: name, type, default
    source), each with its range and meaning from the config class (a parameter without a config
    field: papermill's help comment)."""
    from kernel_lib.config import describe  # torch: only to describe parameters

    cls = config_class(notebook)
    docs = {row["parameter"]: row["doc"] for row in describe(cls, cls.PARAM_PREFIX)}
    return [
        {
            "parameter": name,
            "type": spec["inferred_type_name"],
            "default": spec["default"],
            "range and meaning": docs.get(name) or spec["help"],
        }
        for name, spec in notebook_parameters(notebook, directory).items()
    ]


def parameters_doc(
    notebooks: list[str] | None = None, *, markdown: bool = False, directory: Path | None = None
) -> str:
    """One table per notebook (default: every documented one) of `parameter_rows`, as plain
    text or as markdown (`python -m kernel_lib params [--markdown]`; the markdown is the tables
    of docs/parameters.md, between its params markers)."""
    from tabulate import tabulate

    valid = documented_notebooks(directory)
    unknown = [nb for nb in notebooks or () if nb not in valid]
    if unknown:
        raise ParameterError(f"unknown notebook {short_repr(unknown[0])}: choose from {valid}")
    blocks = []
    for notebook in notebooks or valid:
        cls = config_class(notebook)
        source = f"{cls.__module__}.{cls.__name__}"
        rows = parameter_rows(notebook, directory)
        if markdown:
            rows = [
                {**r, "parameter": f"`{r['parameter']}`", "default": f"`{r['default']}`"}
                for r in rows
            ]
            table = tabulate(rows, headers="keys", tablefmt="pipe", disable_numparse=True)
            blocks.append(f"### `{notebook}.ipynb` ({source})\n\n{table}")
        else:
            table = tabulate(rows, headers="keys", tablefmt="simple", disable_numparse=True)
            blocks.append(f"{notebook}.ipynb ({source})\n{table}")
    return "\n\n".join(blocks)


def _check_meaning(plan: Plan, overrides: dict, here: bool = False) -> None:
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


def _display(path: Path) -> str:
    """A path as the user would type it: relative to the repository where possible."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


class _Refused(yaml.MarkedYAMLError):
    """Valid YAML that a parameter file may not use."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice (plain YAML keeps the last one silently),
    anchors and aliases (a few lines of `&a [*b, *b, ...]` expand to gigabytes: "billion
    laughs") and merge keys (`<<` would set keys that are not written out)."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or event.anchor is not None:
            problem = "YAML anchors and aliases (&name, *name) are not allowed"
            raise _Refused(problem=problem, problem_mark=event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise _Refused(
                    problem="YAML merge keys (<<) are not allowed",
                    problem_mark=key_node.start_mark,
                )
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise _Refused(
                    problem=f"duplicate key {short_repr(key)}", problem_mark=key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _load_yaml(text: str, where: str):
    """`text` read by `_Loader`; ParameterError naming `where` and the line of a problem."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]  # ReaderError: none
        if isinstance(err, _Refused):
            raise ParameterError(f"{where}: {problem}{at}") from None
        raise ParameterError(f"{where}: malformed YAML{at}: {short(problem)}") from None
    except (ValueError, RecursionError) as err:  # an int of over 4300 digits, a date 2024-13-01
        raise ParameterError(f"{where}: unreadable YAML value: {short(str(err))}") from None


def _read_yaml(path: Path, source: str) -> dict:
    raw = path.read_bytes()
    if b"\0" in raw:
        raise ParameterError(f"{source}: is a binary file, not YAML text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ParameterError(f"{source}: is not UTF-8 text (byte {err.start})") from None
    data = _load_yaml(text, source)
    if data is None:  # nothing but blanks and comments
        raise ParameterError(f"{source}: is empty (needs `{RESERVED}: {{notebooks: [...]}}`)")
    if not isinstance(data, dict):
        raise ParameterError(f"{source}: must be a mapping of parameter names to values")
    return data


def parse_override(text: str) -> tuple[str, object]:
    """`name=value` from the command line; the value is read as YAML (`8`, `[1, 2]`, `bfloat16`)."""
    name, sep, raw = text.partition("=")
    where = f"command line: -p {short_repr(text)}"
    if not sep or not name.strip():
        raise ParameterError(f"{where} must look like name=value")
    return name.strip(), _load_yaml(raw, where)


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
    plan = Plan(
        platform=platform,
        source=source,
        notebooks=notebooks,
        values={**data, **overrides},
        cell_timeout_s=timeout,
        description=str(settings.get("description", "")),
        notebooks_dir=notebooks_dir or NOTEBOOKS_DIR,
        allocator=allocator,
        budget_s={nb: budget[nb] for nb in notebooks if nb in budget},
    )
    _check_meaning(plan, overrides, here)
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
