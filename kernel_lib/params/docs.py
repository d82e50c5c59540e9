"""The parameter docs: each documented notebook's parameters with their range and meaning
(`python -m kernel_lib params`, the tables of docs/parameters.md)."""

from __future__ import annotations

from pathlib import Path

from kernel_lib.config import short_repr
from kernel_lib.params.errors import ParameterError
from kernel_lib.params.notebooks import config_class, list_notebooks, notebook_parameters


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
