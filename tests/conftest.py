"""Shared fixtures: a CPU DeviceFacts, tiny notebooks/parameter files for runner tests, and the
factories of fake records and report folders (tests/fakes.py) with the results store's runs."""

import collections
import contextlib
import io
import json
import os
import shutil
import signal

import matplotlib
import nbformat
import pytest
import torch

from kernel_lib.platform import DeviceFacts, threads_each
from tests import fakes

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
def ctrl_c():
    """SIGINT as Python's default, KeyboardInterrupt, for one test, then as it was: a suite
    started with SIGINT ignored (`nohup make test &`) would otherwise never see one it sends."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


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


@pytest.fixture
def one_notebook_plan(tmp_path):
    """`one_notebook_plan(source)`: the plan of platform p, one notebook `timed` running `source`
    (tmp_path/notebooks and tmp_path/parameters)."""
    from kernel_lib.params import load_plan

    def plan(source: str):
        nbs, prm = tmp_path / "notebooks", tmp_path / "parameters"
        nbs.mkdir(), prm.mkdir()
        _write_notebook(nbs / "timed.ipynb", source)
        (prm / "p.yaml").write_text("workbook: {notebooks: [timed]}\n")
        return load_plan("p", parameters_dir=prm, notebooks_dir=nbs)

    return plan


@pytest.fixture
def fake_execute():
    """A stand-in for kernel_lib.run.runner.execute: each notebook run in no time, empty."""
    return fakes.fake_execute


@pytest.fixture
def cli_run():
    """`cli_run(*args)`: (exit code, stdout, stderr) of `python -m kernel_lib ARGS`, run here."""

    def run(*args) -> tuple[int, str, str]:
        from kernel_lib import __main__ as cli

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main([str(a) for a in args])
        return code, out.getvalue(), err.getvalue()

    return run


# ----------------------------------------------------------------- fake records and report folders


@pytest.fixture
def make_record():
    """`make_record(case="small", ms=1.0, *, topic="gemm", implementation="torch_mm", shape=...,
    samples=None, status="ok", reason="", **fields)`: a timed, checked Record (fakes.record)."""
    return fakes.record


@pytest.fixture
def make_run():
    """`make_run(folder, records=None, *, name="bench", run_id="r1", platform="cpu",
    started_utc=..., git=..., environment=None, notebooks=None, entry=None, repeat=1,
    run_ids=None, **run_json)`: a report folder as the runner leaves it (fakes.report)."""
    return fakes.report


# ---------------------------------------------------------------- the results store's runs


def _samples(ms: float, spread: float) -> tuple[float, ...]:
    """20 raw samples around `ms`, within +-`spread` of it (deterministic)."""
    return tuple(ms * (1 + spread * ((i * 7) % 11 - 5) / 5) for i in range(20))


@pytest.fixture
def make_dated_run(make_run, make_record):
    """`make_dated_run(folder, run_id, day, *, repeat=1, scale=1.0, git="abc1234", spread=0.02,
    busy="", environment=None)`: a report of one run on 2026-01-<day>, or of `repeat` runs
    (run-<k>/, within 2 % of each other) and their aggregate run.json. Its `bench` notebook holds
    a headline (fakes.HEADLINE, 1.5x) and a timed record `large` with 20 raw samples within
    +-`spread`; `scale` multiplies the large case's times (an injected slowdown); `busy`: the
    runner's reason to distrust the run's timings ('' if none)."""

    def records(scale: float, spread: float):
        ratio = {"ratio_vs_baseline": 1.5, "ratio_low": 1.4, "ratio_high": 1.6}
        large = 4.0 * scale
        return [
            make_record("small", 1.0, headline=fakes.HEADLINE, **ratio),
            make_record("large", large, samples=_samples(large, spread)),
        ]

    def dated(
        folder, run_id, day, *, repeat=1, scale=1.0, git="abc1234", spread=0.02, busy="",
        environment=None,
    ):  # fmt: skip
        started = f"2026-01-{day:02d}T00:00:00+00:00"
        at = {"run_id": run_id, "started_utc": started, "git": git, "environment": environment}
        if repeat == 1:
            entry = {"machine": {**fakes.MACHINE, "busy": busy}}
            return make_run(folder, records(scale, spread), entry=entry, **at)
        # the runs of one side within 2 % of each other, as on a quiet machine
        entry = {"machine": {**fakes.MACHINE, "busy": ""}}
        runs = lambda k: records(scale * (1 + k / 100), 0.02)
        return make_run(folder, runs, repeat=repeat, entry=entry, **at)

    return dated


@pytest.fixture
def two_stored_runs(make_dated_run):
    """`two_stored_runs(tmp_path, *, repeat=1, scale=1.0, spread=0.02, busy="")`: two runs into
    outputs/cpu, one after another (r1 on day 1, r2 of git def5678 on day 2, scaled by `scale`),
    each added by the runners' hook: the second replaces the first report, the store keeps both;
    returns the store."""
    from kernel_lib.results import store

    def two(root, *, repeat=1, scale=1.0, spread=0.02, busy=""):
        report = root / "outputs" / "cpu"
        make_dated_run(report, "r1", 1, repeat=repeat, spread=spread)
        store.remember(report)
        shutil.rmtree(report)
        make_dated_run(
            report, "r2", 2, repeat=repeat, scale=scale, git="def5678", spread=spread, busy=busy
        )
        store.remember(report)
        return root / "outputs" / store.STORE_NAME

    return two


@pytest.fixture
def make_ab_run(make_dated_run):
    """`make_ab_run(out, slow_b=None)`: an `ab` run as it leaves .cache/ab/<run>: ab.json and one
    finished run a side (days 10 and 11)."""
    from kernel_lib.compare import ab_layout

    def ab_run(out, slow_b=None):
        out.mkdir(parents=True)
        state = {"runs": 1, "factor": None, "slow_b": slow_b}
        (out / ab_layout.STATE).write_text(json.dumps(state))
        for day, side in enumerate(ab_layout.SIDES, 10):
            make_dated_run(out / side / "run-1", f"{out.name}-{side}", day)
        return out

    return ab_run
