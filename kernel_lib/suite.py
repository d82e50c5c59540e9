"""A topic's suite: its sections declared once, in the notebook's order. Each notebook cell runs
one section by name (`SUITE.run("linear_speed", ctx)`); `python -m kernel_lib bench <topic>`
runs them all (`SUITE.run_all(ctx)`), so the two cannot drift apart. Under the runner, the records
made so far are saved as each section ends: a notebook stopped later keeps them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, Protocol, TypeVar

import pandas as pd

from kernel_lib.platform import DeviceFacts
from kernel_lib.profiling.capture import profiled
from kernel_lib.records import Record, save_sections

ConfigT = TypeVar("ConfigT")


class HasRecords(Protocol):
    """A section's output that the notebook shows more of (a table, a chosen variant)."""

    records: list[Record]


class Table(NamedTuple):
    """A section's table as the notebook shows it (a correctness table, errors), and its records."""

    table: pd.DataFrame
    records: list[Record]


Output = list[Record] | HasRecords


@dataclass
class Context(Generic[ConfigT]):
    """What the sections of one run share: the topic's config, the device, whether to show
    progress bars, every record made so far (the notebook's `records`), and each section's
    output by name."""

    config: ConfigT
    facts: DeviceFacts
    progress: bool = False
    records: list[Record] = field(default_factory=list)
    outputs: dict[str, Output] = field(default_factory=dict)

    def output(self, name: str) -> Output:
        """The output of the earlier section `name` (ValueError where it has not run)."""
        if name not in self.outputs:
            raise ValueError(f"section {name!r} has not run yet: run it before this one")
        return self.outputs[name]


@dataclass(frozen=True)
class Section:
    """One measuring or checking cell: `name` is what the notebook calls, `run(ctx)` returns
    its records (a list, or an object carrying `.records`); `summary` says in one line what
    they are."""

    name: str
    run: Callable[[Context], Output]
    summary: str


def records_of(output: Output) -> list[Record]:
    """A section output's records: the list itself, or its `.records`."""
    return output if isinstance(output, list) else output.records


class Suite:
    """A topic's sections, in the notebook's order; names unique."""

    def __init__(self, topic: str, sections: Sequence[Section]):
        names = [s.name for s in sections]
        if repeated := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"{topic} suite: section names {repeated} appear more than once")
        self.topic, self.sections = topic, tuple(sections)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sections)

    def section(self, name: str) -> Section:
        """The section `name` (ValueError naming it and the suite's sections if there is none)."""
        for s in self.sections:
            if s.name == name:
                return s
        raise ValueError(f"the {self.topic} suite has no section {name!r} (it has {self.names})")

    def run(self, name: str, ctx: Context) -> Output:
        """Run section `name`: its records are appended to `ctx.records` (and saved where the
        runner executes the notebook: `records.save_sections`), its output kept in
        `ctx.outputs[name]` for later sections and returned for the notebook to show. Its
        headline records are profiled after it was timed (`profiling.capture.profiled`)."""
        output = self.section(name).run(ctx)
        ctx.records.extend(profiled(records_of(output)))
        ctx.outputs[name] = output
        save_sections(ctx.records)
        return output

    def run_all(self, ctx: Context) -> list[Record]:
        """Every section in order (what `bench` runs); the records of all of them."""
        for name in self.names:
            self.run(name, ctx)
        return ctx.records
