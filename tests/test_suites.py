"""Each notebook's suite against the notebook (the cells run the suite's sections by name, in its
order, each once), and the Suite itself: order, outputs kept, records appended."""

import ast
import importlib
import json
from types import SimpleNamespace

import pytest

from kernel_lib.__main__ import TOPICS
from kernel_lib.params import ROOT
from kernel_lib.suite import Context, Section, Suite


def _suites() -> dict[str, Suite]:
    """notebook -> its suite: every topic of `bench` whose module declares a SUITE, and the backend
    notebooks' (`device`: the module's SUITES, one per backend_<backend> notebook)."""
    suites = {}
    for module_name, notebook in TOPICS.values():
        module = importlib.import_module(module_name)
        if hasattr(module, "SUITE"):
            suites[notebook] = module.SUITE
        for backend, suite in getattr(module, "SUITES", {}).items():
            suites[f"backend_{backend}"] = suite
    return suites


SUITE_OF = _suites()


def _notebook(name: str) -> dict:
    return json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())


def notebook_sections(notebook: dict) -> list[str]:
    """The section names the notebook's code cells run (`SUITE.run("<name>", ...)`), in cell
    order and, within a cell, in source order."""
    names = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        calls = [
            node
            for node in ast.walk(ast.parse("".join(cell["source"])))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "run"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "SUITE"
        ]
        for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
            name = call.args[0] if call.args else None
            assert isinstance(name, ast.Constant), (
                f"SUITE.run without a literal section name: {cell}"
            )
            names.append(name.value)
    return names


def test_every_notebook_has_a_suite():
    assert set(SUITE_OF) == {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert {f"backend_{b}" for b in ("cpu", "nvidia", "amd", "tpu", "xpu")} <= set(SUITE_OF)


@pytest.mark.parametrize("name", sorted(SUITE_OF))
def test_the_notebook_runs_every_section_in_the_plans_order_each_once(name):
    names, suite = notebook_sections(_notebook(name)), SUITE_OF[name]
    assert len(names) == len(set(names)), f"a section run twice: {names}"
    assert set(names) == set(suite.names), set(names) ^ set(suite.names)
    assert names == list(suite.names)


@pytest.mark.parametrize("name", sorted(SUITE_OF))
def test_two_cells_swapped_break_the_order(name):
    notebook = _notebook(name)
    cells = [i for i, c in enumerate(notebook["cells"]) if notebook_sections({"cells": [c]})]
    first, last = cells[0], cells[-1]
    swapped = list(notebook["cells"])
    swapped[first], swapped[last] = swapped[last], swapped[first]
    assert notebook_sections({"cells": swapped}) != list(SUITE_OF[name].names)


@pytest.mark.parametrize("name", sorted(SUITE_OF))
def test_a_section_not_in_the_suite_is_one_line_naming_it(name):
    suite = SUITE_OF[name]
    with pytest.raises(ValueError) as err:
        suite.run("nope", Context(config=None, facts=None))
    assert str(err.value).startswith(f"the {suite.topic} suite has no section 'nope'")
    assert "\n" not in str(err.value)


@pytest.fixture
def toy(make_record):
    """`toy(calls)`: a Suite "toy" of three sections, each appending its name to `calls`."""
    at = {"topic": "toy", "implementation": "i", "device": "d"}

    def toy(calls: list[str]) -> Suite:
        """Three sections: a list of records, an object carrying `.records` and a table, and one
        that reads the second's output."""

        def first(ctx):
            calls.append("first")
            return [make_record("first", **at)]

        def second(ctx):
            calls.append("second")
            return SimpleNamespace(
                table="shown",
                records=[make_record("second_a", **at), make_record("second_b", **at)],
            )

        def third(ctx):
            calls.append("third")
            return [make_record(f"third_after_{ctx.output('second').table}", **at)]

        return Suite(
            "toy",
            (
                Section("first", first, "one record"),
                Section("second", second, "two records and a table"),
                Section("third", third, "one record naming what it read"),
            ),
        )

    return toy


def test_suite_runs_every_section_once_in_the_declared_order(toy):
    calls = []
    ctx = Context(config=None, facts=None)
    got = toy(calls).run_all(ctx)
    assert calls == ["first", "second", "third"]
    assert [r.case for r in got] == ["first", "second_a", "second_b", "third_after_shown"]
    assert got is ctx.records and list(ctx.outputs) == ["first", "second", "third"]


def test_run_appends_its_records_and_keeps_its_output(toy):
    suite, ctx = toy([]), Context(config=None, facts=None)
    records = ctx.records  # the notebook's `records` is this list
    suite.run("first", ctx)
    out = suite.run("second", ctx)
    assert out.table == "shown" and ctx.outputs["second"] is out
    assert [r.case for r in records] == ["first", "second_a", "second_b"]


def test_a_section_reading_an_earlier_one_that_did_not_run_says_which(toy):
    with pytest.raises(ValueError, match="section 'second' has not run yet"):
        toy([]).run("third", Context(config=None, facts=None))


def test_section_names_are_unique():
    run = lambda ctx: []  # noqa: E731
    with pytest.raises(ValueError, match=r"\['a'\] appear more than once"):
        Suite("toy", (Section("a", run, "x"), Section("b", run, "y"), Section("a", run, "z")))
