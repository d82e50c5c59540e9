"""Each notebook's plan against the notebook (the cells run the plan's sections by name, in its
order, each once), and the Plan itself: order, outputs kept, records appended."""

import ast
import importlib
import json
from types import SimpleNamespace

import pytest

from kernel_lib.__main__ import TOPICS
from kernel_lib.params import ROOT
from kernel_lib.plan import Context, Plan, Section
from kernel_lib.records import Record


def _planned() -> dict[str, Plan]:
    """notebook -> its plan: every topic of `bench` whose module declares a PLAN, and the backend
    notebooks' (`device`: the module's PLANS, one per backend_<backend> notebook)."""
    planned = {}
    for module_name, notebook in TOPICS.values():
        module = importlib.import_module(module_name)
        if hasattr(module, "PLAN"):
            planned[notebook] = module.PLAN
        for backend, plan in getattr(module, "PLANS", {}).items():
            planned[f"backend_{backend}"] = plan
    return planned


PLANNED = _planned()


def _notebook(name: str) -> dict:
    return json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())


def notebook_sections(notebook: dict) -> list[str]:
    """The section names the notebook's code cells run (`PLAN.run("<name>", ...)`), in cell
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
            and node.func.value.id == "PLAN"
        ]
        for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
            name = call.args[0] if call.args else None
            assert isinstance(name, ast.Constant), (
                f"PLAN.run without a literal section name: {cell}"
            )
            names.append(name.value)
    return names


def test_every_notebook_has_a_plan():
    assert set(PLANNED) == {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert {f"backend_{b}" for b in ("cpu", "nvidia", "amd", "tpu", "xpu")} <= set(PLANNED)


@pytest.mark.parametrize("name", sorted(PLANNED))
def test_the_notebook_runs_every_section_in_the_plans_order_each_once(name):
    names, plan = notebook_sections(_notebook(name)), PLANNED[name]
    assert len(names) == len(set(names)), f"a section run twice: {names}"
    assert set(names) == set(plan.names), set(names) ^ set(plan.names)
    assert names == list(plan.names)


@pytest.mark.parametrize("name", sorted(PLANNED))
def test_two_cells_swapped_break_the_order(name):
    notebook = _notebook(name)
    cells = [i for i, c in enumerate(notebook["cells"]) if notebook_sections({"cells": [c]})]
    first, last = cells[0], cells[-1]
    swapped = list(notebook["cells"])
    swapped[first], swapped[last] = swapped[last], swapped[first]
    assert notebook_sections({"cells": swapped}) != list(PLANNED[name].names)


@pytest.mark.parametrize("name", sorted(PLANNED))
def test_a_section_not_in_the_plan_is_one_line_naming_it(name):
    plan = PLANNED[name]
    with pytest.raises(ValueError) as err:
        plan.run("nope", Context(config=None, facts=None))
    assert str(err.value).startswith(f"the {plan.topic} plan has no section 'nope'")
    assert "\n" not in str(err.value)


def _record(case: str) -> Record:
    return Record(topic="toy", case=case, implementation="i", device="d", backend="cpu")


def _toy(calls: list[str]) -> Plan:
    """Three sections: a list of records, an object carrying `.records` and a table, and one
    that reads the second's output."""

    def first(ctx):
        calls.append("first")
        return [_record("first")]

    def second(ctx):
        calls.append("second")
        return SimpleNamespace(table="shown", records=[_record("second_a"), _record("second_b")])

    def third(ctx):
        calls.append("third")
        return [_record(f"third_after_{ctx.output('second').table}")]

    return Plan(
        "toy",
        (
            Section("first", first, "one record"),
            Section("second", second, "two records and a table"),
            Section("third", third, "one record naming what it read"),
        ),
    )


def test_suite_runs_every_section_once_in_the_declared_order():
    calls = []
    ctx = Context(config=None, facts=None)
    got = _toy(calls).suite(ctx)
    assert calls == ["first", "second", "third"]
    assert [r.case for r in got] == ["first", "second_a", "second_b", "third_after_shown"]
    assert got is ctx.records and list(ctx.outputs) == ["first", "second", "third"]


def test_run_appends_its_records_and_keeps_its_output():
    plan, ctx = _toy([]), Context(config=None, facts=None)
    records = ctx.records  # the notebook's `records` is this list
    plan.run("first", ctx)
    out = plan.run("second", ctx)
    assert out.table == "shown" and ctx.outputs["second"] is out
    assert [r.case for r in records] == ["first", "second_a", "second_b"]


def test_a_section_reading_an_earlier_one_that_did_not_run_says_which():
    with pytest.raises(ValueError, match="section 'second' has not run yet"):
        _toy([]).run("third", Context(config=None, facts=None))


def test_section_names_are_unique():
    run = lambda ctx: []  # noqa: E731
    with pytest.raises(ValueError, match=r"\['a'\] appear more than once"):
        Plan("toy", (Section("a", run, "x"), Section("b", run, "y"), Section("a", run, "z")))
