"""Shared fixtures: a CPU DeviceFacts, and tiny notebooks/parameter files for runner tests."""

import collections
import os

import matplotlib
import nbformat
import pytest
import torch

from kernel_lib.platform import DeviceFacts, threads_each

matplotlib.use("Agg")


def _precompile_kernel_headers():
    """Inductor precompiles its C++ kernels' prefix header once; its CPU flex-attention template
    then includes ATen/Context.h, which g++ parses again for each kernel: ~2 s of each flex
    compile's ~3 s, and the tests compile ~50. Here the precompiled header holds those includes
    too (inductor_prefix.h); the kernels' code is the same. Left alone where torch renamed it."""
    from torch._inductor import codecache

    prefix = getattr(codecache, "_get_cpp_prefix_header", None)
    if prefix is not None and prefix("cpu") == "torch/csrc/inductor/cpp_prefix.h":
        header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inductor_prefix.h")
        codecache._get_cpp_prefix_header = lambda device: header if prefix(device) else None


if workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # pytest-xdist's workers side by side each take their share of the cores as torch threads
    # (the notebooks and commands a test starts inherit it), as `kernel_lib check` gives its notebooks
    os.environ.setdefault("OMP_NUM_THREADS", str(threads_each(int(workers))))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
if not torch.cuda.is_available():
    # Triton runs here only under its interpreter, which must be on before triton is first imported
    # (by torch.compile or a kernel module): triton's own tl.* helpers are @jit-decorated at import.
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".cache", "inductor")
)
_precompile_kernel_headers()
# a team's shared results store (docs/history.md) never receives the tests' fake runs
os.environ.pop("KERNEL_WORKBOOK_STORE", None)

KERNEL = {
    "name": "kernel-workbook",
    "display_name": "Python (kernel-workbook)",
    "language": "python",
}


# `make test` hands each pytest-xdist worker whole files in the order below (--dist loadfile
# --no-loadscope-reorder): the runner's workbook first, whose `sleeps` notebook waits 30 s for its
# cell timeout (at the start nbval keeps the cores busy meanwhile; at the end a core would idle),
# then the files with the most tests first, as pytest-xdist orders them itself.
WAITS = "test_runner.py"


def pytest_collection_modifyitems(items):
    tests = collections.Counter(item.path for item in items)
    items.sort(key=lambda item: (item.path.name != WAITS, -tests[item.path]))


@pytest.fixture
def cpu_facts():
    return DeviceFacts(
        backend="cpu", device="cpu", name="Test CPU", compute_units=2, compute_unit_kind="threads"
    )


def _write_notebook(path, *sources, parameters="n: int = 1  # a size"):
    """A notebook whose first code cell is the tagged `parameters` cell, then `sources`."""
    nb = nbformat.v4.new_notebook(
        metadata={"kernelspec": KERNEL, "language_info": {"name": "python"}}
    )
    nb.cells = [nbformat.v4.new_code_cell(parameters, metadata={"tags": ["parameters"]})]
    nb.cells += [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, str(path))
    return path


SAVE = """from kernel_lib.platform import device_facts
from kernel_lib.records import {kind}, save_records
save_records([{kind}("t", "c", "i", "no device here", facts=device_facts())], "{name}")"""


WRONG = """import torch
from kernel_lib.checks import Tolerance, check_output
from kernel_lib.platform import device_facts
from kernel_lib.records import save_records, wrong
check = check_output(torch.ones(2), torch.zeros(2), reference="zeros", tolerance=Tolerance(0.1, "exact"))
save_records([wrong("t", "c", "broken_kernel", check, facts=device_facts())], "wrong")"""


@pytest.fixture
def write_notebook():
    return _write_notebook


@pytest.fixture(scope="module")
def workbook(tmp_path_factory):
    """notebooks/ with one notebook per runner outcome, and parameters/ naming them all."""
    root = tmp_path_factory.mktemp("workbook")
    nbs, params = root / "notebooks", root / "parameters"
    nbs.mkdir()
    params.mkdir()
    _write_notebook(
        nbs / "good.ipynb",
        "print(n * 2)",
        "from kernel_lib.records import save_records\nsave_records([], 'good')",
    )
    _write_notebook(
        nbs / "raises.ipynb",
        "x = 1",
        "raise ValueError('broken on purpose\\nwith a table below')",
        "y = undefined_name",
        SAVE.format(kind="skipped", name="raises"),
    )
    _write_notebook(nbs / "sleeps.ipynb", "import time\ntime.sleep(300)")
    _write_notebook(nbs / "exits.ipynb", "import os\nos._exit(3)")
    _write_notebook(nbs / "absent.ipynb", SAVE.format(kind="skipped", name="absent"))
    _write_notebook(nbs / "wrong.ipynb", WRONG)
    (params / "all.yaml").write_text(
        "workbook:\n  notebooks: [good, raises, sleeps, exits, absent, wrong]\n  cell_timeout_s: 30\nn: 21\n"
    )
    return root


@pytest.fixture
def plugin_registry():
    """kernel_lib.plugins' registry emptied for one test and restored after it: the test's
    `@kernel`s are the only plug-ins its sections see."""
    from kernel_lib.plugins import REGISTRY

    saved = dict(REGISTRY)
    REGISTRY.clear()
    yield REGISTRY
    REGISTRY.clear()
    REGISTRY.update(saved)
