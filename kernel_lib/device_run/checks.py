"""The device run's input, checked before anything expensive runs (the install, the preflight,
a notebook): the plan's notebooks, each `-p NAME=VALUE` (a parameter of one of them, read as YAML,
of the type its notebook declares, of a meaning its config accepts), the report folder and the
archive. Each problem is a DeviceRunError: one line, exit 2, nothing run."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import yaml

from kernel_lib import OUTPUTS
from kernel_lib.params import (
    ROOT,
    ParameterError,
    _type_ok,  # the runner's own type rule, so that the two never disagree
    check_platform,
    config_class,
    parse_override,
)
from kernel_lib.results import outdir, writes

PARAMETERS = ROOT / "parameters"
NOTEBOOKS = ROOT / "notebooks"


class DeviceRunError(ParameterError):
    """Bad input: one line, exit 2, nothing run."""


def _platform_file(platform: str) -> dict:
    path = PARAMETERS / f"{check_platform(platform)}.yaml"
    return yaml.safe_load(path.read_text()) or {}


def plan_notebooks(platform: str, only: str | None) -> list[str]:
    """The notebooks of parameters/<platform>.yaml in its order (the runner checks the rest of
    the file), or the `only` ones among them."""
    notebooks = (_platform_file(platform).get("workbook") or {}).get("notebooks")
    if not isinstance(notebooks, list) or not notebooks:
        raise DeviceRunError(f"parameters/{platform}.yaml: needs `workbook: {{notebooks: [...]}}`")
    if only is None:
        return notebooks
    chosen = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in notebooks]
    if unknown or not chosen:
        raise DeviceRunError(f"--only {only!r}: choose from {platform}'s notebooks {notebooks}")
    return [n for n in notebooks if n in chosen]


def cell_parameters(notebook: str) -> dict[str, tuple[str, object]]:
    """name -> (declared type, default) from the notebook's `parameters` cell, read here with
    ast (papermill, whose reader the runner uses, may not be installed yet)."""
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    found = {}
    for cell in tagged:
        for node in ast.parse("".join(cell["source"])).body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                found[node.target.id] = (ast.unparse(node.annotation), node.value)
            elif isinstance(node, ast.Assign):
                found.update((t.id, ("", node.value)) for t in node.targets if hasattr(t, "id"))
    return {name: (kind, ast.literal_eval(value)) for name, (kind, value) in found.items()}


def declared(notebook: str) -> set[str]:
    """The names the notebook's `parameters` cell sets."""
    return set(cell_parameters(notebook))


def params_by_notebook(notebooks: list[str], params: list[str]) -> dict[str, list[str]]:
    """notebook -> the `-p NAME=VALUE` it declares (each notebook runs alone, and the runner
    refuses a name its notebooks lack); DeviceRunError for a name none of them declares."""
    names = {notebook: declared(notebook) for notebook in notebooks}
    for param in params:
        name = param.partition("=")[0].strip()
        if not any(name in known for known in names.values()):
            raise DeviceRunError(f"-p {param!r}: not a parameter of {', '.join(notebooks)}")
    return {
        notebook: [p for p in params if p.partition("=")[0].strip() in names[notebook]]
        for notebook in notebooks
    }


def check_params(platform: str, notebooks: list[str], params: list[str]) -> None:
    """Each `-p` value as the runner will check it: YAML, the declared type, and every
    notebook's config built from its defaults, the platform file's values and the `-p` ones
    (the runner checks the device's memory itself)."""
    params_by_notebook(notebooks, params)
    given = dict(parse_override(p) for p in params)
    platform_values = {k: v for k, v in _platform_file(platform).items() if k != "workbook"}
    for notebook in notebooks:
        cell = cell_parameters(notebook)
        for name, value in given.items():
            if name in cell and not _type_ok(value, cell[name][0]):
                raise DeviceRunError(
                    f"-p {name}={value!r}: not {cell[name][0]} (as {notebook}.ipynb declares it)"
                )
        cls = config_class(notebook)
        values = {k: v for k, v in {**platform_values, **given}.items() if k in cell}
        try:
            if cls is not None:
                cls.from_params({**{k: d for k, (_, d) in cell.items()}, **values})
        except ValueError as err:
            raise DeviceRunError(f"-p: {err} ({notebook}.ipynb)") from None


def check_out(out: Path) -> Path:
    """`out` if the runner may write its report there (outdir.check_out), never the nbval
    reference set."""
    if out == OUTPUTS / "reference":
        raise DeviceRunError(
            f"--out {out}: the nbval reference set is written by `make reference`"
        )
    outdir.check_out(out)
    return out


def check_archive(path: Path) -> Path:
    """`path` if the archive can be written there: not a folder, nor a report's own file, in a
    folder that exists (or can be made) and that this user may write."""
    folder = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise DeviceRunError(f"--archive {path}: {folder} is not a folder this user may write")
    if path.parent.is_dir():
        writes.output_file(str(path), "--archive")  # a folder, a report's own file: refused
    return path
