"""`run` (run.runner, results.outdir) replaces only its own reports, one run per folder, never
loses a finished run, and says in one line why it stopped (bad --out, busy folder, disk error,
Ctrl-C); kernels run this checkout."""

import contextlib
import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from kernel_lib import __main__ as cli
from kernel_lib import params
from kernel_lib.params import ROOT, load_plan
from kernel_lib.platform import device_facts
from kernel_lib.records import save_records, skipped
from kernel_lib.results import outdir
from kernel_lib.run import runner
from kernel_lib.run.environment import code_environment
from kernel_lib.run.runner import run_plan
from tests.fakes import fake_execute


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.fixture
def run(tmp_path, write_notebook, monkeypatch, capsys):
    """`run(out, *argv)`: `python -m kernel_lib run --platform p --out out` of one fake notebook;
    returns the exit code and stderr."""
    nbs, prm = tmp_path / "notebooks", tmp_path / "parameters"
    nbs.mkdir(), prm.mkdir()
    write_notebook(nbs / "a.ipynb", "x = 1")
    (prm / "p.yaml").write_text("workbook: {notebooks: [a]}\n")
    monkeypatch.setattr(params.platform_files, "PARAMETERS_DIR", prm)
    monkeypatch.setattr(params.notebooks, "NOTEBOOKS_DIR", nbs)
    monkeypatch.setattr("kernel_lib.run.runner.execute", fake_execute)

    def run(out, *argv):
        capsys.readouterr()
        code = cli.main(["run", "--platform", "p", "--no-progress", "--out", str(out), *argv])
        return code, capsys.readouterr().err

    return run


@pytest.fixture
def out(tmp_path):
    """A report folder's path in a folder of its own (to see what is left beside it)."""
    folder = tmp_path.resolve() / "runs" / "out"
    folder.parent.mkdir()
    return folder


def files(folder: Path) -> dict:
    """Every path under `folder` and its bytes (None for a folder)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
        for p in sorted(folder.rglob("*"))
    }


def last_line(err: str) -> str:
    assert "Traceback" not in err
    return err.splitlines()[-1]


def test_a_folder_that_is_not_a_report_is_refused_and_untouched(run, out):
    (out / "sub").mkdir(parents=True)
    (out / "notes.txt").write_text("my notes")
    (out / "sub" / "data.csv").write_text("a,b\n1,2\n")
    before = files(out.parent)
    code, err = run(out)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: --out {out} holds files that are not a report (no run.json")
    assert files(out.parent) == before


def test_a_file_is_refused(run, out):
    out.write_text("keep me")
    assert run(out) == (2, f"error: --out {out} is a file\n")
    assert files(out.parent) == {"out": b"keep me"}


@pytest.mark.parametrize("where", [".", ".."])
def test_the_repository_and_its_parents_are_refused(run, where, monkeypatch):
    def never(*args, **kwargs):  # were the check missing, nothing would be touched
        raise AssertionError("staged")

    monkeypatch.setattr(outdir, "_stage", never)
    monkeypatch.chdir(ROOT)
    code, err = run(where)
    assert code == 2 and err.count("\n") == 1 and "is or contains the repository" in err


def test_a_second_run_into_a_held_folder_is_refused(run, out):
    assert run(out)[0] == 0
    before = files(out.parent)
    with outdir.locked(out):
        code, err = run(out)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: --out {out} is being written by run pid {os.getpid()} (started")
    assert files(out.parent) == before  # and the lock went with its holder
    (out.parent / ".lock-out").write_text("run pid 999999999")  # left by a killed run
    assert run(out)[0] == 0 and not (out.parent / ".lock-out").exists()


def test_a_failed_swap_keeps_the_finished_run_and_says_where(run, out, monkeypatch):
    assert run(out)[0] == 0
    before = files(out)
    rename = Path.rename

    def busy(self, target):
        if self.name.startswith(".staging") and Path(target) == out:
            raise OSError(errno.EBUSY, "Device or resource busy", str(out))
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", busy)
    code, err = run(out)
    (kept,) = out.parent.glob("out.unswapped-*")
    assert code == 1 and last_line(err) == (
        f"error: the finished run is in {kept}: it could not replace {out} "
        "(Device or resource busy)"
    )
    assert files(out) == before  # the previous report is back in place
    assert {"run.json", "a.ipynb", "a.html", "index.html"} <= set(files(kept))
    monkeypatch.setattr(Path, "rename", rename)
    assert run(out)[0] == 0 and kept.exists()  # the next run keeps it too


def test_a_killed_run_is_cleaned_up_only_if_it_had_not_finished(tmp_path):
    out = tmp_path / "out"
    finished, unfinished = tmp_path / ".staging-out-999999999", tmp_path / ".staging-out-999999998"
    finished.mkdir(), unfinished.mkdir()
    (finished / "run.json").write_text("{}")
    outdir.clean_after_killed_runs(out)
    (kept,) = tmp_path.glob("out.unswapped-*")
    assert (kept / "run.json").exists() and not finished.exists() and not unfinished.exists()


def test_a_run_in_progress_holds_no_run_json(run, out, monkeypatch):
    """So a run killed before it finished is never taken for a finished one."""
    assert run(out)[0] == 0
    seen = []

    def execute(notebook, output, parameters, **options):
        seen.extend(p.name for p in output.parent.iterdir())
        return fake_execute(notebook, output, parameters)

    monkeypatch.setattr("kernel_lib.run.runner.execute", execute)
    assert run(out)[0] == 0
    assert (
        "index.html" in seen and "run.json" not in seen
    )  # a copy of the report, but its run.json


def full_copy(src, dst, **kwargs):
    Path(dst).mkdir()
    (Path(dst) / "half.ipynb").write_text("{")
    raise OSError(errno.ENOSPC, "No space left on device", str(Path(dst) / "half.ipynb"))


def read_only_report(folder, report=None):
    raise OSError(errno.EROFS, "Read-only file system", str(Path(folder) / "index.html"))


@pytest.mark.parametrize(
    "target, fault",
    [("shutil.copytree", full_copy), ("kernel_lib.run.runner.build_report", read_only_report)],
)
def test_a_disk_error_is_one_line_and_leaves_the_previous_report(
    run, out, monkeypatch, target, fault
):
    assert run(out)[0] == 0
    before = files(out.parent)
    monkeypatch.setattr(target, fault)
    code, err = run(out)
    staging = out.parent / f".staging-out-{os.getpid()}"
    assert code == 1 and last_line(err).startswith(f"error: {staging}/")
    assert last_line(err).endswith((": No space left on device", ": Read-only file system"))
    assert files(out.parent) == before  # nothing stranded, the report byte for byte


@pytest.mark.parametrize("repeat", ["1", "2"])
def test_ctrl_c_is_one_line_exit_130_and_leaves_the_previous_report(run, out, monkeypatch, repeat):
    assert run(out)[0] == 0
    before = files(out.parent)
    monkeypatch.setattr("kernel_lib.run.runner.execute", interrupt)
    code, err = run(out, "--repeat", repeat, "--replace")
    assert code == 130
    assert last_line(err) == f"interrupted: the previous report in {out} is unchanged"
    assert files(out.parent) == before


@pytest.mark.parametrize("command", ["platforms", "compare"])
def test_ctrl_c_in_any_command_is_one_line(command, monkeypatch, capsys):
    monkeypatch.setattr(cli, "cmd_platforms", interrupt)
    monkeypatch.setattr("kernel_lib.compare.cli", interrupt)
    assert cli.main([command]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_an_error_line_is_cut_to_a_readable_length(capsys, tmp_path, monkeypatch):
    def long_error(args):
        raise cli.ParameterError("x" * 1000 + "\nsecond line")

    monkeypatch.setattr(cli, "cmd_platforms", long_error)
    assert cli.main(["platforms"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("…\n")
    assert len(err) == len("error: ") + cli.ERROR_CHARS + 1


def test_the_kernels_get_this_checkout_first_and_its_cache_unless_one_is_set():
    env = code_environment({"PYTHONPATH": f"/elsewhere{os.pathsep}{ROOT}"})
    assert env == {
        "PYTHONPATH": f"{ROOT}{os.pathsep}/elsewhere",
        "TORCHINDUCTOR_CACHE_DIR": str(ROOT / ".cache" / "inductor"),
    }
    mine = code_environment({"TORCHINDUCTOR_CACHE_DIR": "/mine"})
    assert mine == {"PYTHONPATH": str(ROOT), "TORCHINDUCTOR_CACHE_DIR": "/mine"}


WHERE = """import os, kernel_lib
print("kernel_lib", kernel_lib.__file__)
print("cache", os.environ["TORCHINDUCTOR_CACHE_DIR"])"""


def test_a_notebook_imports_the_runners_kernel_lib(tmp_path, write_notebook, monkeypatch):
    """Another checkout's kernel_lib on the path (a venv made there) does not win."""
    other = tmp_path / "other-clone"
    (other / "kernel_lib").mkdir(parents=True)
    (other / "kernel_lib" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(other))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    nbs, prm = tmp_path / "notebooks", tmp_path / "parameters"
    nbs.mkdir(), prm.mkdir()
    write_notebook(nbs / "where.ipynb", WHERE)
    (prm / "p.yaml").write_text("workbook: {notebooks: [where]}\n")
    plan = load_plan("p", parameters_dir=prm, notebooks_dir=nbs)
    (result,) = run_plan(plan, tmp_path / "out", progress=False)
    assert result.status == "ok", result.detail
    nb = nbformat.read(tmp_path / "out" / "where.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    printed = dict(line.split(" ", 1) for line in text.splitlines())
    assert printed == {
        "kernel_lib": str(ROOT / "kernel_lib" / "__init__.py"),
        "cache": str(ROOT / ".cache" / "inductor"),
    }
    assert os.environ["PYTHONPATH"] == str(other)  # the runner's own environment is restored


def sigterm(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_is_ctrl_c_one_line_exit_130_and_leaves_the_previous_report(run, out, monkeypatch):
    """Before a notebook has run (the report being staged): nothing of the run is kept."""
    assert run(out)[0] == 0
    before, handler = files(out.parent), signal.getsignal(signal.SIGTERM)
    copytree = shutil.copytree

    def copy_then_sigterm(*args, **kwargs):
        copytree(*args, **kwargs)
        sigterm()

    monkeypatch.setattr(shutil, "copytree", copy_then_sigterm)
    code, err = run(out)
    assert code == 130
    assert last_line(err) == f"interrupted: the previous report in {out} is unchanged"
    assert files(out.parent) == before and signal.getsignal(signal.SIGTERM) is handler


@pytest.fixture
def ctrl_c():
    """SIGINT raises KeyboardInterrupt for the test, even where pytest was started with it
    ignored (a shell's `&`)."""
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, handler)


def measuring_execute(notebook, output, parameters, **options):
    """A notebook run in no time that saved one record, as its sections would."""
    save_records([skipped("t", "c", "i", "no device here", facts=device_facts())], notebook.stem)
    return fake_execute(notebook, output, parameters)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_after_the_kernel_ended_keeps_the_notebook_stopped_with_its_records(
    run, out, monkeypatch, ctrl_c, signum
):
    """The stop comes while the runner writes the notebook's findings: the notebook is kept,
    `stopped` with what it measured and no HTML, and the report swapped in (no staging left)."""
    lead = runner.lead_with_findings

    def stop_then_lead(*args):
        os.kill(os.getpid(), signum)
        return lead(*args)

    monkeypatch.setattr("kernel_lib.run.runner.execute", measuring_execute)
    monkeypatch.setattr("kernel_lib.run.runner.lead_with_findings", stop_then_lead)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    code, err = run(out)
    assert code == 130
    assert last_line(err) == f"interrupted: a stopped; {out} keeps the sections it finished"
    (notebook,) = json.loads((out / "run.json").read_text())["notebooks"]
    assert notebook["status"] == "stopped", notebook
    assert "after its kernel ended: the 1 records" in notebook["detail"]
    assert notebook["detail"].endswith("it had ended ok; no HTML")
    assert [r["case"] for r in json.loads((out / "a.results.json").read_text())] == ["c"]
    assert (out / "a.ipynb").exists() and not (out / "a.html").exists()
    assert [p.name for p in out.parent.iterdir()] == ["out"]  # no staging left beside it
    assert {s: signal.getsignal(s) for s in handlers} == handlers


def test_a_stop_between_notebooks_keeps_the_first_and_starts_no_other(
    run, out, tmp_path, write_notebook, monkeypatch, ctrl_c
):
    write_notebook(tmp_path / "notebooks" / "b.ipynb", "y = 2")
    (tmp_path / "parameters" / "p.yaml").write_text("workbook: {notebooks: [a, b]}\n")
    started = []

    def execute(notebook, output, parameters, **options):
        started.append(notebook.stem)
        return measuring_execute(notebook, output, parameters)

    keep = runner._keep_or_replace

    def keep_then_stop(*args):
        kept = keep(*args)
        os.kill(os.getpid(), signal.SIGINT)
        return kept

    monkeypatch.setattr("kernel_lib.run.runner.execute", execute)
    monkeypatch.setattr("kernel_lib.run.runner._keep_or_replace", keep_then_stop)
    code, err = run(out)
    assert code == 130 and last_line(err) == f"interrupted: {out} holds the new report whole"
    assert started == ["a"]
    (notebook,) = json.loads((out / "run.json").read_text())["notebooks"]
    assert notebook["notebook"] == "a" and notebook["status"] == "ok"
    assert (out / "a.results.json").exists() and (out / "a.html").exists()


def test_sigterm_in_cloud_collect_is_ctrl_c_and_writes_nothing(run, out, tmp_path, monkeypatch):
    assert run(out)[0] == 0  # a report to collect
    monkeypatch.setattr("kernel_lib.cloud.collect.install", sigterm)
    code, err = run_cli(["cloud", "collect", str(out.parent), "--out", str(tmp_path / "gallery")])
    assert (code, err) == (130, "interrupted: SIGTERM\n")
    assert not (tmp_path / "gallery").exists()


def run_cli(argv: list[str]) -> tuple[int, str]:
    """`python -m kernel_lib ARGV` in this process: its exit code and stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, err.getvalue()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_between_the_swaps_two_renames_waits_for_the_second(
    run, out, monkeypatch, signum, ctrl_c
):
    assert run(out)[0] == 0
    first = out.stat().st_ino
    rename = Path.rename

    def signalled(self, target):
        moved = rename(self, target)
        if self == out:  # the old report set aside, the new one not yet in place
            os.kill(os.getpid(), signum)
        return moved

    monkeypatch.setattr(Path, "rename", signalled)
    code, err = run(out)
    assert code == 130 and last_line(err) == f"interrupted: {out} holds the new report whole"
    assert (out / "run.json").exists() and out.stat().st_ino != first  # the staged folder
    assert [p.name for p in out.parent.iterdir()] == ["out"]  # the old one gone, nothing beside


def test_replace_carries_nothing_of_the_report_it_replaces(run, out, tmp_path, write_notebook):
    write_notebook(tmp_path / "notebooks" / "b.ipynb", "y = 2")
    (tmp_path / "parameters" / "p.yaml").write_text("workbook: {notebooks: [a, b]}\n")
    assert run(out)[0] == 0
    assert run(out, "--only", "a")[0] == 0 and (out / "b.ipynb").exists()  # the others kept
    assert run(out, "--only", "a", "--replace")[0] == 0
    assert not list(out.glob("b.*"))
    notebooks = json.loads((out / "run.json").read_text())["notebooks"]
    assert [n["notebook"] for n in notebooks] == ["a"]


STOP_WHILE_IMPORTING = """import runpy, sys
class Stop:  # a Ctrl-C while python -m kernel_lib imports its modules
    def find_spec(self, name, path=None, target=None):
        if name == "kernel_lib.platform":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Stop())
sys.argv = ["kernel_lib", "platforms"]
runpy.run_module("kernel_lib", run_name="__main__", alter_sys=True)"""


def test_ctrl_c_while_importing_is_one_line_exit_130():
    proc = subprocess.run(
        [sys.executable, "-c", STOP_WHILE_IMPORTING],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (proc.returncode, proc.stderr) == (130, "interrupted\n")


def test_ctrl_c_while_the_commands_load_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_parser", interrupt)
    assert cli.main(["platforms"]) == 130
    assert capsys.readouterr().err == "interrupted\n"


SLEEP = "import time\ntime.sleep(120)"
RUNNER = """import sys
from pathlib import Path
from kernel_lib import __main__ as cli, params
params.platform_files.PARAMETERS_DIR = Path({prm!r})
params.notebooks.NOTEBOOKS_DIR = Path({nbs!r})
sys.exit(cli.main(["run", "--platform", "p", "--no-progress", "--out", {out!r}]))"""


@pytest.mark.slow
def test_sigterm_stops_a_real_run_in_its_second_notebook_as_ctrl_c_does(tmp_path, write_notebook):
    """Papermill has run a kernel for the first notebook: SIGTERM still stops the second one."""
    nbs, prm, out = tmp_path / "notebooks", tmp_path / "parameters", tmp_path / "runs" / "out"
    nbs.mkdir(), prm.mkdir()
    started = tmp_path / "b-started"
    write_notebook(nbs / "a.ipynb", "x = 1")
    write_notebook(nbs / "b.ipynb", f"open({str(started)!r}, 'w').close()", SLEEP)
    (prm / "p.yaml").write_text("workbook: {notebooks: [a, b]}\n")
    code = RUNNER.format(prm=str(prm), nbs=str(nbs), out=str(out))
    runner = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and runner.poll() is None and not started.exists():
            time.sleep(0.2)
        runner.send_signal(signal.SIGTERM)
        err = runner.communicate(timeout=60)[1]
    finally:
        runner.kill()
    assert runner.returncode == 130, err
    # the runner's last line (a kernel being shut down may print to the stderr it inherits)
    assert err.splitlines()[-1] == f"interrupted: b stopped; {out} keeps the sections it finished"
    notebooks = json.loads((out / "run.json").read_text())["notebooks"]
    assert {n["notebook"]: n["status"] for n in notebooks} == {"a": "ok", "b": "stopped"}


def test_a_run_told_so_leaves_the_store_and_gallery_to_its_caller(run, out, monkeypatch):
    """The device run: one run per notebook, the store and gallery once at its end."""
    rebuilt = []
    monkeypatch.setattr(runner, "_rebuild_gallery", lambda folder, *_: rebuilt.append(folder))
    assert run(out)[0] == 0 and rebuilt == [out]
    monkeypatch.setenv(outdir.GALLERY_LATER_ENV, "1")
    assert run(out)[0] == 0 and rebuilt == [out]
    runner.rebuild_gallery(out)
    assert rebuilt == [out, out]
