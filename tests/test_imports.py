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


# DESIGN.md's Layers, lowest first: a package (or top-level module) imports its own layer or
# those below, never one above.
LAYERS = (
    ("core", {"kernel_lib", "checks", "timing", "platform", "allocator", "headlines",
              "interrupts", "plugins", "locks", "config"}),
    ("records/params", {"records", "params"}),
    ("results", {"results"}),
    ("measuring", {"measure", "profiling", "suite", "variants", "c_kernels", "plots"}),
    ("compare", {"compare", "export", "sensitivity"}),
    ("report", {"report"}),
    ("topics", {"moe", "fp8", "attention", "backends"}),
    ("run/ab/cloud/device_run", {"run", "ab", "cloud", "device_run"}),
    ("__main__", {"__main__"}),
)  # fmt: skip


def _unit(module: str) -> str:
    """The package (or top-level module) of kernel_lib that `module` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _packages() -> dict[str, set[str]]:
    graph, _ = _graph()
    out = defaultdict(set)
    for module, targets in graph.items():
        out[_unit(module)] |= {_unit(t) for t in targets} - {_unit(module)}
    return out


def test_every_package_has_a_layer():
    layered = set().union(*(units for _, units in LAYERS))
    units = {_unit(_module(f)) for f in PACKAGE.rglob("*.py")}
    assert units <= layered, f"not in LAYERS (and DESIGN.md): {sorted(units - layered)}"


def _up(packages: dict[str, set[str]]) -> list[str]:
    level = {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}
    return sorted(
        f"{unit} ({LAYERS[level[unit]][0]}) imports {target} ({LAYERS[level[target]][0]})"
        for unit, targets in packages.items()
        for target in targets
        if level[target] > level[unit]
    )


def _loop(packages: dict[str, set[str]]) -> str:
    try:
        graphlib.TopologicalSorter(packages).prepare()
    except graphlib.CycleError as err:
        return " -> ".join(err.args[1])
    return ""


def test_packages_import_down_the_layers():
    assert not (up := _up(_packages())), f"imports against DESIGN.md's layers: {up}"


def test_no_package_loop():
    """Two packages that import each other (through any modules) are one package in two folders."""
    assert not (loop := _loop(_packages())), f"package loop: {loop}"


def test_the_layer_checks_have_teeth():
    """The two imports #65 removed: results' store reading report's aggregate, and the loop
    report -> history -> compare -> report."""
    assert _up({"results": {"report"}}) == ["results (results) imports report (report)"]
    assert _loop({"report": {"compare"}, "compare": {"ab"}, "ab": {"report"}})


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


def test_test_folders_mirror_the_packages():
    """tests/<package>/ holds the tests of kernel_lib/<package>/ (DESIGN.md, Layers); tests of
    a top-level module stay at tests/ top level."""
    folders = {p.parent.name for p in (ROOT / "tests").glob("[!.]*/test_*.py")}
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders <= packages, f"test folders without a package: {sorted(folders - packages)}"
