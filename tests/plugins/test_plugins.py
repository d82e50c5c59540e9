"""Your own kernels (kernel_lib.plugins): registered by decorator or by the `plugins` parameter,
refused in one line where they cannot load, checked and timed like ours, and saved with the
exact code that ran. The slots' sections: tests/<topic>/test_plugins.py."""

import hashlib
import json
import textwrap

import pytest
import torch

from kernel_lib import __main__ as cli
from kernel_lib import plugins
from kernel_lib.checks import Tolerance, Unsupported, against
from kernel_lib.measure import Candidate, Case, check_then_time
from kernel_lib.records import save_records
from kernel_lib.results.files import read_results

pytestmark = pytest.mark.usefixtures("plugin_registry")


def _module(tmp_path, body: str, name: str = "my_kernels.py"):
    path = tmp_path / name
    path.write_text("from kernel_lib.plugins import kernel\n" + textwrap.dedent(body))
    return path


MATMUL = """
@kernel("backend.matmul", name="my_mm")
def my_mm(a, b):
    return a @ b
"""


def test_a_decorated_function_is_registered_with_its_code_and_replaced_when_run_again():
    @plugins.kernel("moe.dispatch", name="mine")
    def first(x, routing, experts):
        return x

    @plugins.kernel("moe.dispatch", name="mine", backward=True)
    def second(x, routing, experts):
        return x

    (plugin,) = plugins.registered("moe.dispatch")
    assert plugin.fn is second and plugin.backward
    assert plugin.source["slot"] == "moe.dispatch" and plugin.source["name"] == "mine"
    assert len(plugin.source["sha256"]) == 16
    assert plugins.registered("fp8.quantize") == ()


@pytest.mark.parametrize(
    "slot, name, says",
    [("moe.dispatc", "x", "slot='moe.dispatc' does not exist"), ("moe.dispatch", "a b", "name")],
)
def test_an_unknown_slot_or_a_bad_name_is_refused_naming_it(slot, name, says):
    with pytest.raises(ValueError, match=says):
        plugins.kernel(slot, name=name)(lambda x, r, e: x)


def test_a_path_is_loaded_once_and_its_records_name_the_file_and_its_hash(tmp_path):
    path = _module(tmp_path, MATMUL)
    assert plugins.load([str(path)]) == plugins.load([str(path)])
    (plugin,) = plugins.registered("backend.matmul")
    assert plugin.source["file"] == str(path)
    assert plugin.source["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    assert plugin.source["revision"] is None  # not in a git checkout


def test_a_module_name_is_imported(tmp_path, monkeypatch):
    _module(tmp_path, MATMUL, "team_kernels.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert plugins.load(["team_kernels"]) == ["team_kernels"]
    assert plugins.registered("backend.matmul")[0].source["module"] == "team_kernels"


@pytest.mark.parametrize(
    "body, says",
    [
        (None, "no module named 'no_such_kernels'"),
        ("raise RuntimeError('boom')", "raised while imported: RuntimeError: boom"),
        ("import no_such_dependency", "raised while imported: ModuleNotFoundError"),
        ("@kernel('moe.nope')\ndef f(x): return x", "slot='moe.nope' does not exist"),
        ("def f(x): return x", "registers no kernel"),
    ],
)
def test_a_plugin_that_cannot_load_is_one_line_naming_it(tmp_path, body, says):
    spec = "no_such_kernels" if body is None else str(_module(tmp_path, body))
    with pytest.raises(plugins.PluginError, match=says) as err:
        plugins.load([spec])
    assert "\n" not in str(err.value) and spec in str(err.value)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["run", "--platform", "cpu", "-p", "plugins=[no_such_kernels]"], "no_such_kernels"),
        (["run", "--platform", "cpu", "-p", "plugins=[/nowhere/k.py]"], "no file /nowhere/k.py"),
        (["run", "--platform", "cpu", "-p", "plugins=no_such_kernels"], "plugins"),
        (["bench", "moe", "--platform", "ci", "--plugin", "no_such_kernels"], "no_such_kernels"),
        (["bench", "fp8", "--platform", "ci", "--plugin", "BAD"], "moe.nope"),
    ],
)
def test_a_bad_plugin_exits_2_in_one_line_before_anything_runs(
    argv, says, tmp_path, monkeypatch, capsys
):
    bad = _module(tmp_path, "@kernel('moe.nope')\ndef f(x): return x")
    out = tmp_path / "out"
    argv = [str(bad) if a == "BAD" else a for a in argv]
    argv += ["--out", str(out)] if argv[0] == "run" else []
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and says in err, err
    assert not out.exists()


def _case_candidates(plugin_fn, name="my_mm"):
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    check = against(
        lambda: a.double() @ b.double(), reference="fp64 a @ b", tolerance=Tolerance(1e-4, "fp32")
    )
    plugins.kernel("backend.matmul", name=name)(plugin_fn)
    (plugin,) = plugins.registered("backend.matmul")
    ours = Candidate("matmul", lambda: a @ b, check)
    return [ours, Candidate(plugin.name, lambda: plugin.fn(a, b), check, plugin=plugin.source)]


def _compare(candidates):
    case = Case("backends", "gemm", {"n": 16}, "float32", "forward")
    facts = cli.device_facts()
    return check_then_time(case, candidates, facts=facts, baseline="matmul", rounds=6,
                           min_time_s=0.005)  # fmt: skip


@pytest.mark.parametrize(
    "fn, status, reason",
    [
        (lambda a, b: a @ b, "ok", ""),
        (lambda a, b: 1.1 * (a @ b), "wrong", "rel_error"),
        (lambda a, b: 1 / 0, "failed", "ZeroDivisionError: division by zero"),
        (lambda a, b: (_ for _ in ()).throw(Unsupported("only on GPUs")), "skipped", "only on"),
    ],
)
def test_a_plugin_is_checked_then_timed_beside_ours_and_its_records_say_so(fn, status, reason):
    ours, theirs = _compare(_case_candidates(fn))
    assert ours.status == "ok" and ours.plugin is None
    assert theirs.status == status and reason in theirs.reason
    assert theirs.plugin["name"] == "my_mm" and theirs.plugin["slot"] == "backend.matmul"
    assert (theirs.ratio_vs_baseline is not None) == (status == "ok")
    assert bool(theirs.samples_ms) == (status == "ok")


def test_a_plugin_named_as_ours_fails_under_another_name_and_ours_is_timed():
    ours, theirs = _compare(_case_candidates(lambda a, b: a @ b, name="matmul"))
    assert (ours.implementation, ours.status) == ("matmul", "ok")
    assert (theirs.implementation, theirs.status) == ("matmul.plugin", "failed")
    assert "is a built-in's here" in theirs.reason


def test_a_plugins_record_reads_back_with_its_code(tmp_path):
    records = _compare(_case_candidates(lambda a, b: a @ b))
    path = save_records(records, "backend_cpu", tmp_path)
    rows = read_results(path)
    assert [r["plugin"] for r in rows] == [None, records[1].plugin]
    assert json.loads(path.read_text())[1]["plugin"]["sha256"] == records[1].plugin["sha256"]
