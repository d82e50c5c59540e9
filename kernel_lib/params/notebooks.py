"""The notebooks' parameters cells as papermill reads them (name, type, default, help), and the
config class that gives each workbook notebook's parameters their ranges and meaning."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from kernel_lib import ROOT
from kernel_lib.config import short_repr
from kernel_lib.params.errors import ParameterError

NOTEBOOKS_DIR = ROOT / "notebooks"
# notebook (or name prefix) -> the config class that gives its parameters their ranges and meaning
CONFIGS = {
    "moe": "kernel_lib.moe.config:MoEBenchConfig",
    "fp8": "kernel_lib.fp8.config:Fp8BenchConfig",
    "flex_attention": "kernel_lib.attention.config:AttentionBenchConfig",
    "backend_": "kernel_lib.backends.config:BackendBenchConfig",
}


def notebook_folder(directory: Path | None = None) -> Path:
    """`directory`, else the workbook's notebooks/ (NOTEBOOKS_DIR, looked up at each call)."""
    return directory or NOTEBOOKS_DIR


def list_notebooks(directory: Path | None = None) -> list[str]:
    return sorted(p.stem for p in notebook_folder(directory).glob("*.ipynb"))


@cache
def _inspect(path: Path, mtime: float) -> dict:
    import papermill  # here, not at the top: bench-only hosts run without the Jupyter stack

    return papermill.inspect_notebook(str(path))


def notebook_parameters(notebook: str, directory: Path | None = None) -> dict:
    """name -> {inferred_type_name, default (source text), help} from the `parameters` cell."""
    path = notebook_folder(directory) / f"{notebook}.ipynb"
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
