"""YAML read safely: no duplicate keys, anchors, aliases or merge keys; every problem one line
naming where it is (`load_yaml`); a command line's `name=value` (`parse_override`)."""

from __future__ import annotations

import yaml

from kernel_lib.config import short, short_repr
from kernel_lib.params.errors import ParameterError


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


def load_yaml(text: str, where: str):
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


def parse_override(text: str) -> tuple[str, object]:
    """`name=value` from the command line; the value is read as YAML (`8`, `[1, 2]`, `bfloat16`)."""
    name, sep, raw = text.partition("=")
    where = f"command line: -p {short_repr(text)}"
    if not sep or not name.strip():
        raise ParameterError(f"{where} must look like name=value")
    return name.strip(), load_yaml(raw, where)
