"""Every parameter's range and meaning is declared once, in its config class: the `params` command
shows them beside each notebook's own declaration, and docs/parameters.md holds that command's output
(README links to it)."""

import dataclasses
import importlib
import re

import pytest

from kernel_lib import __main__ as cli
from kernel_lib.config import describe, param
from kernel_lib.params import CONFIGS, ROOT, config_class, list_notebooks

CLASSES = [
    getattr(importlib.import_module(module), name)
    for module, name in (spec.split(":") for spec in CONFIGS.values())
]
BEGIN, END = "<!-- params:begin -->", "<!-- params:end -->"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_config_field_has_a_doc_of_meaning_and_range(cls):
    for f in dataclasses.fields(cls):
        doc = f.metadata.get("doc", "")
        assert doc.strip(), f"{cls.__name__}.{f.name} has no doc: declare it with param()"
        assert "\n" not in doc and "; " in doc, f"{cls.__name__}.{f.name}: 'meaning; range'"


def test_param_and_describe():
    @dataclasses.dataclass(frozen=True)
    class Toy:
        sizes: tuple = param((1, 2), "sizes; ints > 0")
        name: str = param("a", "a name; any text")

    assert Toy().sizes == (1, 2)
    assert describe(Toy, "toy_") == [
        {"parameter": "toy_sizes", "default": [1, 2], "doc": "sizes; ints > 0"},
        {"parameter": "toy_name", "default": "a", "doc": "a name; any text"},
    ]


def test_the_parameters_doc_is_the_commands_output(capsys):
    assert cli.main(["params", "--markdown"]) == 0
    out = capsys.readouterr().out
    text = (ROOT / "docs" / "parameters.md").read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block.strip() == out.strip(), (
        "docs/parameters.md's tables are stale: paste the output of "
        "`python -m kernel_lib params --markdown` between its params markers"
    )


def test_the_readme_links_the_parameters_doc_and_holds_no_copy():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/parameters.md)" in readme
    assert BEGIN not in readme and END not in readme and "| `moe_top_k`" not in readme


def test_params_lists_each_notebook_with_its_ranges(capsys):
    assert cli.main(["params"]) == 0
    out = capsys.readouterr().out
    for notebook in list_notebooks():
        assert (f"{notebook}.ipynb (" in out) == (config_class(notebook) is not None)
    line = next(line for line in out.splitlines() if line.startswith("moe_top_k "))
    assert re.search(r"\bint\b", line) and "1 <= K <= moe_experts" in line, line


def test_params_of_one_notebook(capsys):
    assert cli.main(["params", "flex_attention", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("### `flex_attention.ipynb`") and "moe_" not in out
    assert "| `attn_block_sizes`" in out and "powers of two >= 16" in out


def test_params_of_an_unknown_notebook_exits_2_naming_the_valid_ones(capsys):
    assert cli.main(["params", "moe", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    assert err.count("\n") == 1 and "'nope'" in err and "flex_attention" in err, err
