"""One source for each default: a topic's config class. A notebook's `parameters` cell (papermill
needs literals there) declares its config's fields with the config's defaults and, as each line's
comment, the meaning part of the field's doc ("meaning; range": the text before the last "; ").
The range is the config's to enforce and docs/parameters.md's (`python -m kernel_lib params`) to
show. And the five backend notebooks are one notebook but for their own parts: the cells they
share are tested equal, in order, to backend_cpu.ipynb's."""

import dataclasses
import re
import shutil

import nbformat
import pytest

from kernel_lib.params import (
    HAND_RUN_ONLY,
    NOTEBOOKS_DIR,
    SHARED,
    _type_ok,
    config_class,
    documented_notebooks,
    list_notebooks,
    notebook_defaults,
    notebook_parameters,
)

# the backend notebooks beside backend_cpu.ipynb, which the tests below compare them with
OTHER_BACKENDS = [
    nb.removeprefix("backend_") for nb in list_notebooks() if nb.startswith("backend_")
]
OTHER_BACKENDS.remove("cpu")


def _plain(value):
    """Lists and tuples alike (a notebook writes lists, a config holds tuples), 1 and 1.0 not."""
    return repr(tuple(map(_plain, value)) if isinstance(value, (list, tuple)) else value)


def _fields(cls) -> dict:
    """Notebook parameter name -> the config field it sets."""
    return {cls.PARAM_PREFIX + f.name: f for f in dataclasses.fields(cls) if f.init}


def disagreements(notebook: str, directory=None) -> list[str]:
    """Each way the notebook's parameters cell differs from its config class, one line each."""
    fields = _fields(config_class(notebook))
    declared = notebook_parameters(notebook, directory)
    values = notebook_defaults(notebook, directory)
    out = []
    for name, spec in declared.items():
        if name in HAND_RUN_ONLY + SHARED:
            continue
        if name not in fields:
            out.append(f"{name}: not a config field")
            continue
        field = fields[name]
        if _plain(values[name]) != _plain(field.default):
            out.append(f"{name}: default {spec['default']}, the config's {field.default!r}")
        default = list(field.default) if isinstance(field.default, tuple) else field.default
        if not _type_ok(default, spec["inferred_type_name"]):
            out.append(f"{name}: the config's default is not {spec['inferred_type_name']}")
        meaning = field.metadata["doc"].rsplit("; ", 1)[0]
        if spec["help"] != meaning:
            out.append(f"{name}: comment {spec['help']!r}, the config's {meaning!r}")
    return out


@pytest.mark.parametrize("notebook", documented_notebooks())
def test_each_parameter_is_a_config_field_with_its_default_and_meaning(notebook):
    assert disagreements(notebook) == []


def test_a_notebook_that_strays_from_its_config_is_caught(tmp_path):
    shutil.copy(NOTEBOOKS_DIR / "moe.ipynb", tmp_path)
    nb = nbformat.read(tmp_path / "moe.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    for line, stray in (
        (r"moe_experts: int = 8(.*)", r"moe_experts: int = 9\1"),
        (r"(moe_top_k: .*  # ).*", r"\1experts per token"),
        (r"moe_backward: .*", "moe_backward: int = 1"),
    ):
        cell.source = re.sub(f"^{line}$", stray, cell.source, count=1, flags=re.M)
    cell.source += "\nmoe_extra: int = 1  # a new knob"
    nbformat.write(nb, tmp_path / "moe.ipynb")
    found = disagreements("moe", tmp_path)
    assert [line.split(":")[0] for line in found] == [
        "moe_experts",
        "moe_top_k",
        "moe_backward",  # 1 for True
        "moe_backward",  # not bool
        "moe_backward",  # no comment
        "moe_extra",
    ], found


@pytest.mark.parametrize(
    "cls", sorted({config_class(nb) for nb in documented_notebooks()}, key=lambda c: c.__name__)
)
def test_every_config_field_is_a_parameter_of_its_notebooks(cls):
    """(else a platform file could not set it: only declared parameters are accepted)"""
    notebooks = [nb for nb in documented_notebooks() if config_class(nb) is cls]
    declared = set().union(*(notebook_parameters(nb) for nb in notebooks))
    missing = sorted(set(_fields(cls)) - declared)
    assert not missing, f"{missing} not in {notebooks} (papermill skips a line with two '=')"


def test_the_hand_run_parameters_are_declared_alike_in_every_notebook():
    for name in HAND_RUN_ONLY + SHARED:
        specs = {nb: notebook_parameters(nb)[name] for nb in list_notebooks()}
        assert len({repr(s) for s in specs.values()}) == 1, specs


def _backend_parts(backend: str) -> dict[str, list]:
    """The notebook's cells cut at its headings "## 1.", "## 5." and "## Summary": head (title,
    parameters, setup), common (sections 1 to 4), own (section 5) and summary."""
    cells = nbformat.read(NOTEBOOKS_DIR / f"backend_{backend}.ipynb", as_version=4).cells
    starts = [
        next(i for i, c in enumerate(cells) if c.source.startswith(heading))
        for heading in ("## 1.", "## 5.", "## Summary")
    ]
    bounds = zip(["head", "common", "own", "summary"], [0, *starts], [*starts, len(cells)])
    return {part: cells[a:b] for part, a, b in bounds}


def _cell(cell, backend: str = "cpu") -> tuple:
    """Type, tags and source of a cell of backend_cpu.ipynb as the backend's notebook holds it:
    cpu's name made the backend's, and the modules imported from kernel_lib.backends left out
    (each notebook imports its own)."""
    source = cell.source.replace("backend_cpu", f"backend_{backend}")
    source = source.replace('"cpu"', f'"{backend}"')
    source = re.sub(r"^from kernel_lib\.backends import .*$", "", source, flags=re.M)
    return cell.cell_type, cell.metadata.get("tags", []), source


def _title_body(title) -> str:
    """The title cell's list of what the notebook measures and how (between the backend's name
    and what it records without its device)."""
    return title.source.split("measured in this run:\n", 1)[1].split(" On a machine without")[0]


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_a_backend_notebook_shares_every_cell_but_its_own_with_the_cpu_notebook(backend):
    cpu, other = _backend_parts("cpu"), _backend_parts(backend)
    for part in ("common", "summary"):
        assert [_cell(c) for c in other[part]] == [_cell(c, backend) for c in cpu[part]], part
    assert _title_body(other["head"][0]) == _title_body(cpu["head"][0]), "title"
    code = [c for c in other["head"] if c.cell_type == "code"]
    assert [c.metadata.get("tags", []) for c in code] == [["parameters"], []]
    setup = next(c for c in cpu["head"] if c.cell_type == "code" and not c.metadata.get("tags"))
    assert _cell(code[1]) == _cell(setup, backend), "setup"
