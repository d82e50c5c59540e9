"""The import graph of kernel_lib: no cycles (an import inside a function counts: it only hides
one), and a kernel_lib import inside a function only for what is optional or for CLI start-up,
said in a comment on that import or just above it."""

import ast
import graphlib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "kernel_lib"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]):
    """(imported kernel_lib module, (first, last line), inside a function) per import in `path`."""
    tree = ast.parse(path.read_text())
    nested = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(function)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for name in names:
            if name in modules:
                yield name, (node.lineno, node.end_lineno), id(node) in nested
                break


def _graph():
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {_module(f) for f in files}
    graph, nested = defaultdict(set), []
    for f in files:
        for target, lines, inside in _imports(f, modules):
            graph[_module(f)].add(target)
            if inside:
                nested.append((f, lines))
    return graph, nested


def test_no_import_cycle():
    graph, _ = _graph()
    for module, targets in graph.items():
        targets.discard(module)  # `from kernel_lib.x import y` of its own package __init__
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        raise AssertionError(f"import cycle: {' -> '.join(err.args[1])}") from None


def test_imports_inside_functions_say_why():
    _, nested = _graph()
    silent = [
        f"{f.relative_to(ROOT)}:{first}"
        for f, (first, last) in nested
        if "#" not in "".join(f.read_text().splitlines()[first - 2 : last])  # or just above
    ]
    assert not silent, f"kernel_lib imported inside a function without a comment: {silent}"


def test_one_class_per_name():
    """A class name means one thing in kernel_lib (DESIGN.md, Words): two classes of one name in
    two modules would be two meanings of a word."""
    where = defaultdict(list)
    for f in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(_module(f))
    assert not {name: mods for name, mods in where.items() if len(mods) > 1}


def test_no_module_over_450_lines():
    """A module that grows past this does several jobs (DESIGN.md): split it by job."""
    long = {str(f.relative_to(ROOT)): n for f in PACKAGE.rglob("*.py")
            if (n := len(f.read_text().splitlines())) > 450}  # fmt: skip
    assert not long
