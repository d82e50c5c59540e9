"""kernel_lib.device_run: the quick plans, the budget, the preflight, the offline install and the
archive. No notebook runs: the runner's subprocesses are stood in for."""

from __future__ import annotations

import _thread
import contextlib
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from argparse import Namespace
from pathlib import Path

import psutil
import pytest

from kernel_lib.__main__ import TOPICS
from kernel_lib.device_run import budget, checks, cli, preflight, wheels
from kernel_lib.locks import LOCKS, read_lock
from kernel_lib.params import ROOT, config_class, load_plan, notebook_defaults, notebook_parameters
from kernel_lib.platform import datasheet_for
from kernel_lib.profiling.pending import PROFILE_ENV
from kernel_lib.records import NOTEBOOK_ENV, RESULTS_DIR_ENV
from kernel_lib.run.execute import KERNEL_NAME
from kernel_lib.suite import Context, Section, Suite

QUICK = {"h100-quick": "H100", "h200-quick": "H200"}


@pytest.mark.parametrize("platform", sorted(QUICK))
def test_quick_plan_loads_with_gpu_tiles_and_fits_its_device(platform):
    plan = load_plan(platform)
    assert plan.notebooks == ("fp8", "flex_attention", "moe"), "most wanted first, no backend"
    assert plan.values["moe_presets"] == ["mixtral-8x7b"]
    assert plan.values["attn_page_size"] >= 128, "flex's GPU kernels take key tiles of 128"
    memory = datasheet_for(QUICK[platform]).memory_gb * 1e9
    for notebook in plan.notebooks:
        values = {**notebook_defaults(notebook), **plan.parameters_for(notebook)}
        needs = config_class(notebook).from_params(values).memory_needs()
        key, need = max(needs.items(), key=lambda kv: kv[1])
        assert need < 0.8 * memory, f"{notebook}: {key} needs {need / 2**30:.1f} GiB"


def test_share_splits_the_time_left_by_weight():
    names = ["fp8", "flex_attention", "moe"]
    assert budget.share("fp8", names, 440) == pytest.approx(440 * 4 / 11)
    assert budget.share("moe", names[2:], 100) == 100  # the last gets all that is left


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_run_bounded_stops_a_child_that_overruns():
    outcome = budget.run_bounded(
        # Python's own Ctrl-C handler, even when this suite runs from a shell's `&` (SIGINT ignored)
        _python(
            "import signal, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "print('started', flush=True); time.sleep(60)"
        ),
        2.0,
        echo=lambda line: None,
        grace_s=5,
    )
    assert outcome.stopped and outcome.seconds < 7
    assert outcome.lines[0] == "started" and outcome.lines[-1] == "KeyboardInterrupt"


def test_run_bounded_kills_what_ignores_sigint_and_its_kernel(tmp_path):
    pid_file = tmp_path / "kernel.pid"
    code = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "kernel = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
        f"start_new_session=True); open({str(pid_file)!r}, 'w').write(str(kernel.pid)); "
        "print('ready', flush=True); time.sleep(60)"
    )
    started = time.monotonic()
    outcome = budget.run_bounded(_python(code), 3.0, echo=lambda line: None, grace_s=0.5)
    assert outcome.stopped and time.monotonic() - started < 10
    kernel = int(pid_file.read_text())
    assert not psutil.pid_exists(kernel) or psutil.Process(kernel).status() == "zombie"


def _runner_standin(out: Path, scripts: dict[str, str]):
    """A run_bounded whose `kernel_lib run --only NB` runs scripts[NB] instead (within 1 s),
    writing a report's run.json the way the runner would."""
    real = budget.run_bounded

    def run(command, limit_s, **kwargs):
        if "run" not in command:
            return budget.Outcome(0, 0.0, False, ["ok"])
        notebook = command[command.index("--only") + 1]
        out.mkdir(parents=True, exist_ok=True)
        (out / "run.json").write_text("{}")
        return real(_python(scripts[notebook]), min(limit_s, 1.0), **{**kwargs, "grace_s": 0.5})

    return run


def test_an_overrunning_notebook_is_stopped_and_the_next_still_runs(monkeypatch, tmp_path):
    out = tmp_path / "report"
    scripts = {"fp8": "import time; time.sleep(60)", "moe": "print('  moe: ok')"}
    monkeypatch.setattr(cli, "run_bounded", _runner_standin(out, scripts))
    progress = cli.Progress(budget_s=600)
    statuses = cli.run_notebooks(progress, "ci", ["fp8", "moe"], out, [], env={})
    assert statuses["fp8"].startswith("stopped at its share")
    assert statuses["moe"] == "ok"


def test_a_notebook_left_too_little_time_is_not_started(monkeypatch, tmp_path):
    ran = []
    monkeypatch.setattr(cli, "run_bounded", lambda command, *a, **k: ran.append(command))
    progress = cli.Progress(budget_s=cli.RESERVE_S + cli.MIN_NOTEBOOK_S / 2)
    statuses = cli.run_notebooks(progress, "ci", ["moe"], tmp_path, [], env={})
    assert statuses["moe"].startswith("not started") and not ran


@pytest.mark.parametrize(
    "notebook", ["backend_cpu", "backend_nvidia", "fp8", "flex_attention", "moe"]
)
def test_declared_parameters_are_papermills(notebook):
    read = checks.cell_parameters(notebook)
    assert set(read) == set(notebook_parameters(notebook))
    for name, spec in notebook_parameters(notebook).items():
        assert read[name] == (spec["inferred_type_name"], notebook_defaults(notebook)[name])


def test_each_notebook_gets_the_params_it_declares():
    params = ["attn_page_size=128", "min_time_s=0.1"]
    assert checks.params_by_notebook(["backend_cpu", "flex_attention"], params) == {
        "backend_cpu": ["min_time_s=0.1"],
        "flex_attention": ["attn_page_size=128"],
    }
    with pytest.raises(cli.DeviceRunError, match="moe_tokens"):
        checks.params_by_notebook(["fp8"], ["moe_tokens=[8]"])


def test_preflight_reports_a_failing_item_in_one_line_and_goes_on(capsys):
    def fails():
        raise RuntimeError("no FP8 here\nsecond line")

    def skips():
        raise preflight.Skip("no GPU")

    items = {"first": lambda: "fine", "broken": fails, "skipped": skips, "last": lambda: "fine"}
    assert preflight.run_items(items) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert re.match(r"broken +error: RuntimeError: no FP8 here \(", lines[1])
    assert re.match(r"skipped +skipped: no GPU", lines[2])
    assert re.match(r"last +ok: fine", lines[3])


def test_preflight_lists_every_compiler_key_kernel_lib_patches():
    listed = preflight.patched_keys()
    for path in (ROOT / "kernel_lib").rglob("*.py"):
        for module, args in re.findall(
            r"(torch\._\w+\.config)\.patch\(([^)]*)\)", path.read_text()
        ):
            for key in re.findall(r"(\w+)=", args):
                assert key in listed[module], f"{path.name}: {module}.{key} is not preflighted"


def test_install_is_pip_offline_from_the_pinned_wheels(tmp_path):
    command = wheels.install_command(tmp_path / "w", tmp_path / "t", python="py", dry_run=False)
    assert command[:4] == ["py", "-m", "pip", "install"]
    for flag in ("--no-index", "--no-deps", "--upgrade"):
        assert flag in command
    assert command[command.index("--target") + 1] == str(tmp_path / "t")
    assert command[command.index("--find-links") + 1] == str(tmp_path / "w")
    assert command[command.index("-r") + 1] == str(wheels.REQUIREMENTS)
    dry = wheels.install_command(tmp_path / "w", tmp_path / "t", python="py", dry_run=True)
    assert {"--dry-run", "--no-index", "--only-binary=:all:"} <= set(dry)
    assert dry[dry.index("--python-version") + 1] == "3.12"


def test_install_runs_once_then_its_stamp_skips_it(monkeypatch, tmp_path):
    source, target, commands = tmp_path / "wheels", tmp_path / "site", []
    source.mkdir()
    (source / "papermill-2.7.0-py3-none-any.whl").write_bytes(b"")

    def pip(command, limit_s, **kwargs):
        commands.append(command)
        target.mkdir(exist_ok=True)
        return budget.Outcome(0, 0.1, False)

    monkeypatch.setattr(cli, "run_bounded", pip)
    for _ in range(2):
        assert cli.install(cli.Progress(600), source, target, dry_run=False, env={})
    assert len(commands) == 1 and "--no-index" in commands[0]


def test_environment_puts_the_target_first_for_children_and_kernels(tmp_path):
    environ = {"PYTHONPATH": "/a", "JUPYTER_PATH": "/j"}
    env = wheels.environment(tmp_path, environ, on_path=True)
    assert env["PYTHONPATH"] == f"{tmp_path}:/a"
    assert env["JUPYTER_PATH"] == f"{tmp_path / 'share' / 'jupyter'}:/j"
    assert "PYTHONPATH" not in wheels.environment(tmp_path, environ, on_path=False)
    assert wheels.KERNEL_NAME == KERNEL_NAME


def test_device_lock_pins_the_cuda_locks_versions_and_leaves_the_image_its_own():
    pins, cuda = wheels.pins(), read_lock(ROOT / LOCKS["cuda"].path)
    assert pins and not wheels.image_provides() & set(pins)
    assert {"torch", "triton", "numpy", "pandas", "matplotlib"} <= wheels.image_provides()
    assert {"papermill", "nbclient", "ipykernel", "nbval"} <= set(pins)
    for name, version in pins.items():
        if name in cuda:
            assert cuda[name].version == version, name
    assert all(pin.hashes for pin in read_lock(wheels.REQUIREMENTS).values())


def test_unmet_requirements_follow_markers_extras_and_the_image():
    dists = {
        "nbconvert": ["bleach[css]!=5.0.0", "jinja2>=3.0", "sphinx; extra == 'docs'"],
        "bleach": ["webencodings", "tinycss2>=1.1.0; extra == 'css'"],
        "ipython": ["typing_extensions>=4.6; python_version < '3.12'"],
    }
    available = {"bleach": "6.4.0", "webencodings": "0.5", "jinja2": None}
    assert wheels.unmet(dists, available, wheels.HOST_MARKERS) == [
        'bleach needs tinycss2>=1.1.0; extra == "css" (missing)'
    ]
    assert wheels.unmet({"a": ["b>=2"]}, {"b": "1.0"}) == ["a needs b>=2 (found 1.0)"]


@pytest.mark.skipif(
    not (ROOT / ".whl" / "device" / ".downloaded").exists(), reason="needs make device-wheels"
)
def test_the_downloaded_wheels_need_nothing_the_image_lacks():
    assert wheels.check_wheels(ROOT / ".whl" / "device") == []


def test_archive_holds_the_report_and_the_log(tmp_path):
    report = tmp_path / "h100-quick"
    report.mkdir()
    (report / "run.json").write_text("{}")
    (report / "index.html").write_text("<html>")
    path = cli.write_archive([report], tmp_path / "out" / "h100-quick.tar.gz", ["[0 s] done"])
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
        log = tar.extractfile(f"h100-quick/{cli.LOG_NAME}").read().decode()
    assert {"h100-quick/run.json", "h100-quick/index.html"} <= names
    assert log == "[0 s] done\n"


def _wheel(folder: Path, name: str = "papermill", version: str = "2.7.0") -> Path:
    """A wheel holding its METADATA alone."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        metadata = f"Name: {name}\nVersion: {version}\n"
        archive.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
    return path


def _args(tmp_path, **given) -> Namespace:
    wheels_dir = tmp_path / "wheels"
    wheels_dir.mkdir(exist_ok=True)
    _wheel(wheels_dir)
    defaults = dict(
        platform="ci",
        wheels=str(wheels_dir),
        target=str(tmp_path / "site"),
        only="fp8,moe",
        out=str(tmp_path / "report"),
        archive=None,
        budget_s=600.0,
        param=[],
        dry_run=False,
        plan_only=False,
    )
    return Namespace(**{**defaults, **given})


def test_the_recipe_installs_preflights_runs_and_archives_into_out(monkeypatch, tmp_path):
    out, commands = tmp_path / "report", []
    standin = _runner_standin(out, {"fp8": "print('  fp8: ok')", "moe": "print('  moe: ok')"})
    monkeypatch.setattr(
        cli, "run_bounded", lambda c, *a, **k: commands.append(c) or standin(c, *a, **k)
    )
    monkeypatch.setenv("OUT", str(tmp_path / "back"))
    assert cli.cmd_device_run(_args(tmp_path)) == 0
    words = ("pip", "ipykernel", "preflight", "gallery", "run")
    steps = [next(w for w in words if w in str(c)) for c in commands]
    assert steps == ["pip", "ipykernel", "preflight", "run", "run", "gallery"]  # once, at the end
    assert (tmp_path / "site" / wheels.STAMP).exists()
    with tarfile.open(tmp_path / "back" / "report.tar.gz") as tar:
        assert "report/run.json" in tar.getnames()


@pytest.mark.parametrize(
    "given",
    [
        {"out": str(ROOT / "outputs" / "reference")},
        {"only": "nonesuch"},
        {"platform": "nonesuch"},
        {"platform": "../parameters/ci"},  # a path, not a parameter file's name
        {"param": ["nonesuch=1"]},
        {"param": ["fp8_seed=abc"]},  # the type the notebook declares
        {"param": ["moe_tokens=[-8]"]},  # the meaning its config checks
        {"param": ["fp8_seed=[1"]},  # not YAML
        {"budget_s": 0.0},
        {"budget_s": cli.MAX_BUDGET_S + 1},
        {"budget_s": float("inf")},
        {"budget_s": float("nan")},
        {"param": ["profile=sometimes"]},
        {"archive": "{tmp}"},  # a folder
        {"archive": "{tmp}/a-file/x.tar.gz"},  # in a file, not a folder
        {"out": "{tmp}/a-file"},
    ],
)
def test_bad_input_exits_2_before_anything_runs(monkeypatch, tmp_path, capsys, given):
    monkeypatch.setattr(cli, "run_bounded", lambda *a, **k: pytest.fail("ran"))
    (tmp_path / "a-file").write_text("mine")
    given = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in given.items()}
    assert cli.cmd_device_run(_args(tmp_path, **given)) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    assert (tmp_path / "a-file").read_text() == "mine"


@pytest.mark.parametrize(
    "damage",
    [
        lambda path: path.write_bytes(b""),
        lambda path: path.write_bytes(path.read_bytes()[:40]),  # cut short
        lambda path: zipfile.ZipFile(path, "w").close(),  # no METADATA
    ],
)
def test_a_damaged_wheel_is_one_line_naming_it_before_anything_runs(
    monkeypatch, tmp_path, capsys, damage
):
    monkeypatch.setattr(cli, "run_bounded", lambda *a, **k: pytest.fail("ran"))
    args = _args(tmp_path, dry_run=True)
    damage(_wheel(tmp_path / "wheels", "nbclient", "0.10.2"))
    assert cli.cmd_device_run(args) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --wheels: nbclient-0.10.2-py3-none-any.whl is not a readable")


def test_profile_is_taken_as_run_takes_it(monkeypatch, tmp_path):
    monkeypatch.setenv(PROFILE_ENV, "off")  # restored after the test
    monkeypatch.setattr(cli, "run_bounded", lambda *a, **k: pytest.fail("ran"))
    given = dict(platform="h100-quick", only=None, plan_only=True, param=["profile=all"])
    assert cli.cmd_device_run(_args(tmp_path, **given)) == 0
    assert os.environ[PROFILE_ENV] == "all"  # what the runs inherit


def test_a_bad_profile_in_the_environment_is_one_line_before_anything_runs(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.setenv(PROFILE_ENV, "bogus")
    monkeypatch.setattr(cli, "run_bounded", lambda *a, **k: pytest.fail("ran"))
    assert cli.cmd_device_run(_args(tmp_path)) == 2
    assert capsys.readouterr().err == (
        "error: $KERNEL_WORKBOOK_PROFILE='bogus' must be one of off, headlines, all\n"
    )


def test_a_run_that_ends_before_its_first_notebook_archives_no_earlier_report(
    monkeypatch, tmp_path, capsys
):
    out = tmp_path / "report"
    out.mkdir()
    (out / "run.json").write_text('{"platform": "ci", "run_id": "earlier"}')
    (out / "fp8.results.json").write_text("[]")
    failed = budget.Outcome(1, 0.0, False, ["pip: no such wheel"])
    monkeypatch.setattr(cli, "run_bounded", lambda *a, **k: failed)  # the install fails
    monkeypatch.setenv("OUT", str(tmp_path / "back"))
    assert cli.cmd_device_run(_args(tmp_path)) == 1
    assert not (tmp_path / "back").exists()
    said = capsys.readouterr().out.splitlines()
    assert said[-1].endswith(f"archive: none, no notebook of this run is in {out} yet")


def test_device_mk_downloads_for_the_tags_the_dry_run_checks():
    text = (ROOT / "device.mk").read_text()
    recipe = text[text.index("pip download") : text.index("-r locks/device.txt")]
    tags = wheels.HOST_TAGS
    platforms = [tags[i + 1] for i, t in enumerate(tags) if t == "--platform"]
    assert re.findall(r"--platform (\S+)", recipe) == platforms
    assert "--python-version 3.12 --implementation cp" in recipe


def test_run_bounded_kills_what_a_stopping_child_starts(tmp_path):
    """A child whose Ctrl-C handler starts a process and hangs: frozen, listed and killed."""
    pid_file = tmp_path / "late.pid"
    code = (
        "import signal, subprocess, sys, time\n"
        "def late(*_):\n"
        "    p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
        "start_new_session=True)\n"
        f"    open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "    time.sleep(60)\n"
        "signal.signal(signal.SIGINT, late)\n"
        "print('ready', flush=True); time.sleep(60)"
    )
    outcome = budget.run_bounded(_python(code), 2.0, echo=lambda line: None, grace_s=3.0)
    assert outcome.stopped
    if pid_file.exists():  # under heavy load the handler may not have got that far
        late = int(pid_file.read_text())
        assert not psutil.pid_exists(late) or psutil.Process(late).status() == "zombie"


@pytest.mark.slow
def test_ctrl_c_stops_the_child_without_echoing_its_traceback():
    echoed = []

    def echo(line):
        echoed.append(line)
        if line == "ready":
            _thread.interrupt_main()  # Ctrl-C, once the child is running

    code = (
        "import signal, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "print('ready', flush=True); time.sleep(60)"
    )
    # Python's own handler, as under a terminal: a process started in the background by a shell
    # without job control inherits SIGINT ignored, and interrupt_main then does nothing
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            budget.run_bounded(_python(code), 60.0, echo=echo, grace_s=5.0)
    finally:
        signal.signal(signal.SIGINT, handler)
    assert echoed == ["ready"]


def test_a_ctrl_c_while_the_output_reader_starts_still_stops_the_child(monkeypatch):
    """Thread.start waits for the new thread: under load a Ctrl-C or SIGTERM lands there, and
    the child must be stopped all the same (it once ran on, sleeping)."""

    class Interrupted(threading.Thread):
        def start(self):
            raise KeyboardInterrupt

    monkeypatch.setattr(budget.threading, "Thread", Interrupted)
    before = {p.pid for p in psutil.Process().children()}
    with pytest.raises(KeyboardInterrupt):
        budget.run_bounded(_python("import time; time.sleep(60)"), 60.0, grace_s=1.0)
    left = [p for p in psutil.Process().children() if p.pid not in before]
    assert all(p.status() == psutil.STATUS_ZOMBIE for p in left), left


def test_help_needs_no_psutil():
    code = (
        "import sys; sys.modules['psutil'] = None\n"
        "from kernel_lib.device_run import main\n"
        "main(['--help'])"
    )
    done = subprocess.run(_python(code), capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--plan-only" in done.stdout


def test_platform_detection_reads_its_own_line_whatever_follows(monkeypatch):
    said = ["a warning before", "platform: h100", "UserWarning: and one after"]
    monkeypatch.setattr(cli, "run_bounded", lambda *a, **k: budget.Outcome(0, 0.1, False, said))
    assert cli.quick_platform(cli.Progress(600), env={}) == "h100-quick"


@pytest.mark.parametrize("platform", sorted(QUICK))
def test_plan_only_prints_the_shares_and_sections_and_runs_nothing(
    monkeypatch, tmp_path, capsys, platform
):
    monkeypatch.setattr(cli, "run_bounded", lambda *a, **k: pytest.fail("ran"))
    args = _args(tmp_path, platform=platform, only=None, plan_only=True, budget_s=540.0)
    assert cli.cmd_device_run(args) == 0
    said = capsys.readouterr().out
    shares = re.findall(r"^ +(\w+): (\d+) s$", said, re.MULTILINE)
    notebooks = [name for name, _ in shares]
    assert notebooks == list(load_plan(platform).notebooks)
    left = 540 - cli.SETUP_ESTIMATE_S - cli.RESERVE_S
    assert sum(int(s) for _, s in shares) == pytest.approx(left, abs=2)
    for notebook, text in zip(notebooks, re.split(r"^ +\w+: \d+ s$", said, flags=re.M)[1:]):
        listed = re.findall(r"^ +\d+\. (\w+): ", text, re.MULTILINE)
        assert listed == [s.name for s in budget.sections(notebook)], notebook
        assert "which fit in" in text  # not known before they run
    assert said.splitlines()[0].endswith("no gallery or results-store rebuild between them")
    assert "then: the results store and the gallery, once" in said.splitlines()[-1]
    assert not (tmp_path / "report").exists()


def test_each_notebook_s_sections_are_its_suite_s():
    for module_name, notebook in TOPICS.values():
        module = importlib.import_module(module_name)
        suites = {f"backend_{b}": suite for b, suite in getattr(module, "SUITES", {}).items()}
        if hasattr(module, "SUITE"):
            suites[notebook] = module.SUITE
        for name, suite in suites.items():
            assert budget.sections(name) == suite.sections, name


def _fp8_then(out: Path, then: str, seen: list):
    """A run_bounded standing in for the runner: fp8 writes its records and a run.json, moe
    runs the real run_bounded on `then` (within 60 s)."""
    real = budget.run_bounded

    def run(command, limit_s, **kwargs):
        if "run" not in command:
            return budget.Outcome(0, 0.0, False, ["ok"])
        notebook = command[command.index("--only") + 1]
        seen.append(notebook)
        if notebook == "fp8":
            out.mkdir(parents=True, exist_ok=True)
            (out / "fp8.results.json").write_text("[]")
            (out / "run.json").write_text("{}")
            return budget.Outcome(0, 0.1, False, ["  fp8: ok"])
        return real(_python(then), 60.0, **{**kwargs, "grace_s": 2.0})

    return run


def _archived(path: Path) -> set:
    with tarfile.open(path) as tar:
        return set(tar.getnames())


@pytest.mark.slow
def test_sigterm_after_fp8_leaves_an_archive_holding_fp8s_records(monkeypatch, tmp_path):
    out, seen = tmp_path / "report", []
    pid_file = tmp_path / "moe.pid"
    then = (
        "import os, signal, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
        f"os.kill({os.getpid()}, signal.SIGTERM); time.sleep(60)"  # the host's kill, mid-moe
    )
    monkeypatch.setattr(cli, "run_bounded", _fp8_then(out, then, seen))
    started = time.monotonic()
    assert cli.cmd_device_run(_args(tmp_path, archive=str(tmp_path / "back.tar.gz"))) == 130
    assert seen == ["fp8", "moe"] and time.monotonic() - started < 30
    assert "report/fp8.results.json" in _archived(tmp_path / "back.tar.gz")
    child = int(pid_file.read_text())
    with contextlib.suppress(
        psutil.NoSuchProcess
    ):  # stopped; on a busy machine maybe not gone yet
        psutil.wait_procs([psutil.Process(child)], timeout=15)
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_a_refused_plan_still_archives_what_ran(monkeypatch, tmp_path):
    out, seen = tmp_path / "report", []
    then = "import sys; print('error: moe refused'); sys.exit(2)"
    monkeypatch.setattr(cli, "run_bounded", _fp8_then(out, then, seen))
    assert cli.cmd_device_run(_args(tmp_path, archive=str(tmp_path / "back.tar.gz"))) == 2
    assert "report/fp8.results.json" in _archived(tmp_path / "back.tar.gz")


def test_a_section_s_records_are_saved_as_it_ends_under_the_runner(
    monkeypatch, tmp_path, make_record
):
    seen, at = [], {"topic": "t", "implementation": "i", "device": "cpu"}
    suite = Suite(
        "t",
        [
            Section("first", lambda ctx: [make_record("first", **at)], "one"),
            Section("second", lambda ctx: seen.append(_saved(tmp_path)) or [], "none"),
        ],
    )
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(NOTEBOOK_ENV, raising=False)
    suite.run("first", Context(None, None))
    assert not list(tmp_path.iterdir()), "only where the runner names the notebook"
    monkeypatch.setenv(NOTEBOOK_ENV, "nb")
    suite.run_all(Context(None, None))
    assert seen == [["first"]]  # saved before the next section began


def _saved(folder: Path) -> list[str]:
    return [r["case"] for r in json.loads((folder / "nb.results.json").read_text())]


STOPPED_NOTEBOOK = (
    "from kernel_lib.suite import Context, Suite, Section\n"
    "from kernel_lib.records import Record, save_notebook_records\n"
    "def section(name):\n"
    "    record = Record(topic='t', case=name, implementation='i', device='cpu', backend='cpu')\n"
    "    return Section(name, lambda ctx: [record], name)\n"
    "SUITE = Suite('t', [section('first'), section('second'), section('third')])\n"
    "ctx = Context(None, None)",
    "SUITE.run('first', ctx)",
    "SUITE.run('second', ctx)",
    "import time\ntime.sleep(120)",
    "SUITE.run('third', ctx)",
    "save_notebook_records(ctx.records, 'nb', globals())",
)


@pytest.mark.slow
def test_a_notebook_stopped_after_its_first_sections_keeps_them_in_the_report(
    tmp_path, write_notebook
):
    """The runner (a real kernel) gets SIGINT, as at its share of the budget, once two sections
    have ended: the report holds them, its notebook `stopped`; exit 130 in one line."""
    nbs, prm, out = tmp_path / "notebooks", tmp_path / "parameters", tmp_path / "runs" / "out"
    nbs.mkdir(), prm.mkdir()
    write_notebook(nbs / "nb.ipynb", *STOPPED_NOTEBOOK)
    (prm / "p.yaml").write_text("workbook: {notebooks: [nb]}\n")
    code = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from pathlib import Path\n"
        "from kernel_lib import __main__ as cli, params\n"
        f"params.platform_files.PARAMETERS_DIR = Path({str(prm)!r})\n"
        f"params.notebooks.NOTEBOOKS_DIR = Path({str(nbs)!r})\n"
        f"sys.exit(cli.main(['run', '--platform', 'p', '--no-progress', '--out', {str(out)!r}]))"
    )
    runner = subprocess.Popen(
        _python(code), cwd=ROOT, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and runner.poll() is None:
            staged = list(out.parent.glob(".staging-out-*/nb.results.json"))
            with contextlib.suppress(OSError, ValueError):
                if staged and len(json.loads(staged[0].read_text())) == 2:
                    break
            time.sleep(0.2)
        runner.send_signal(signal.SIGINT)
        err = runner.communicate(timeout=60)[1]
    finally:
        runner.kill()
    assert runner.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("interrupted: nb stopped")
    (notebook,) = json.loads((out / "run.json").read_text())["notebooks"]
    assert notebook["status"] == "stopped" and "2 records" in notebook["detail"]
    assert _saved(out) == ["first", "second"]
    assert (out / "index.html").exists()


def test_the_preflight_counts_its_items_that_failed(monkeypatch, tmp_path, capsys):
    said = ["scaled_mm        ok: relative error: 2e-03 (0.1 s)", "triton  error: RuntimeError: x"]
    standin = _runner_standin(tmp_path / "report", {"fp8": "print('  fp8: ok')"})

    def run(command, *args, **kwargs):
        if "kernel_lib.device_run.preflight" in command:
            return budget.Outcome(1, 0.1, False, said)
        return standin(command, *args, **kwargs)

    monkeypatch.setattr(cli, "run_bounded", run)
    assert cli.cmd_device_run(_args(tmp_path, only="fp8")) == 0
    assert "preflight: 1 items failed" in capsys.readouterr().out


def test_a_child_starts_with_sigint_at_its_default_where_this_process_ignores_it():
    """A host's `cmd &` starts the device run with SIGINT ignored: its children still stop at
    their limit (the runner then writes its report), rather than being killed after the grace."""
    code = (
        "import signal, time; "
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True); "
        "time.sleep(60)"
    )
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        outcome = budget.run_bounded(_python(code), 3.0, echo=lambda line: None, grace_s=5)
    finally:
        signal.signal(signal.SIGINT, handler)
    assert outcome.stopped
    assert outcome.lines[0] == "True" and outcome.lines[-1] == "KeyboardInterrupt"


def test_a_runner_killed_before_its_swap_leaves_its_records_archived(
    monkeypatch, tmp_path, capsys
):
    """Its staging folder (what its sections saved) is kept beside the report and archived."""
    dead = tmp_path / ".staging-report-999999999"  # the runner's, whose process has gone

    def killed(command, limit_s, **kwargs):
        if "run" in command:  # fp8's runner, killed after its grace: no report swapped in
            dead.mkdir()
            (dead / "fp8.results.json").write_text("[]")
            return budget.Outcome(-9, limit_s, True, [])
        return budget.Outcome(0, 0.0, False, ["ok"])

    monkeypatch.setattr(cli, "run_bounded", killed)
    archive = tmp_path / "back.tar.gz"
    assert cli.cmd_device_run(_args(tmp_path, only="fp8", archive=str(archive))) == 1
    (kept,) = tmp_path.glob("report.unswapped-*")
    assert {f"{kept.name}/fp8.results.json", f"{kept.name}/{cli.LOG_NAME}"} <= _archived(archive)
    said = capsys.readouterr().out
    assert "fp8: stopped at its share of" in said and "no report written" in said
    assert f"kept: {kept}, left by a runner killed before its swap" in said


def test_a_run_with_nothing_to_archive_says_so_in_one_line(monkeypatch, tmp_path, capsys):
    failed = budget.Outcome(1, 0.0, False, ["pip: no such wheel"])
    monkeypatch.setattr(cli, "run_bounded", lambda *a, **k: failed)  # the install fails
    assert cli.cmd_device_run(_args(tmp_path, archive=str(tmp_path / "back.tar.gz"))) == 1
    assert not (tmp_path / "back.tar.gz").exists()
    said = capsys.readouterr().out.splitlines()
    assert said[-1].endswith(f"archive: none, no notebook of this run is in {tmp_path}/report yet")


@pytest.mark.parametrize("mode", ["off", "headlines", "all"])
def test_profile_reaches_the_runs_of_a_device_run(monkeypatch, tmp_path, mode):
    monkeypatch.setenv(PROFILE_ENV, "headlines")  # restored after the test
    runs = []
    standin = _runner_standin(tmp_path / "report", {"fp8": "print('  fp8: ok')"})

    def run(command, limit_s, **kwargs):
        if "run" in command:
            runs.append((command, kwargs["env"]))
        return standin(command, limit_s, **kwargs)

    monkeypatch.setattr(cli, "run_bounded", run)
    args = _args(tmp_path, only="fp8", param=[f"profile={mode}", "fp8_seed=3"])
    assert cli.cmd_device_run(args) == 0
    ((command, env),) = runs
    assert env[PROFILE_ENV] == mode and "--param=fp8_seed=3" in command
    assert not [c for c in command if c.startswith("--param=profile")]


def test_the_gallery_is_left_out_when_too_little_time_is_left(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cli, "run_bounded", lambda *a, **k: pytest.fail("ran"))
    (tmp_path / "run.json").write_text("{}")
    cli.gallery(cli.Progress(cli.RESERVE_S + cli.MIN_NOTEBOOK_S / 2), tmp_path, env={})
    assert "gallery: not rebuilt" in capsys.readouterr().out


IGNORING = """import signal, sys
from kernel_lib.device_run.budget import run_bounded
from kernel_lib.interrupts import terminate_as_interrupt
assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # as a host's `cmd &` starts it
with terminate_as_interrupt():
    try:
        run_bounded(sys.argv[1:], 600.0)
    except KeyboardInterrupt:
        sys.exit(130)"""


@pytest.mark.slow
def test_a_device_run_started_with_sigint_ignored_still_keeps_a_stopped_notebook(
    tmp_path, write_notebook
):
    """The device run's stop (SIGTERM from the host: it stops its runner with SIGINT) reaches a
    runner whose parent ignores SIGINT: the notebook is kept as `stopped` with its sections."""
    nbs, prm, out = tmp_path / "notebooks", tmp_path / "parameters", tmp_path / "runs" / "out"
    nbs.mkdir(), prm.mkdir()
    write_notebook(nbs / "nb.ipynb", *STOPPED_NOTEBOOK)
    (prm / "p.yaml").write_text("workbook: {notebooks: [nb]}\n")
    runner = (
        "import sys\n"
        "from pathlib import Path\n"
        "from kernel_lib import __main__ as cli, params\n"
        f"params.platform_files.PARAMETERS_DIR = Path({str(prm)!r})\n"
        f"params.notebooks.NOTEBOOKS_DIR = Path({str(nbs)!r})\n"
        f"sys.exit(cli.main(['run', '--platform', 'p', '--no-progress', '--out', {str(out)!r}]))"
    )
    device_run = subprocess.Popen(
        [*_python(IGNORING), *_python(runner)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and device_run.poll() is None:
            staged = list(out.parent.glob(".staging-out-*/nb.results.json"))
            with contextlib.suppress(OSError, ValueError):
                if staged and len(json.loads(staged[0].read_text())) == 2:
                    break
            time.sleep(0.2)
        device_run.send_signal(signal.SIGTERM)
        said = device_run.communicate(timeout=90)[0]
    finally:
        device_run.kill()
    assert device_run.returncode == 130, said
    (notebook,) = json.loads((out / "run.json").read_text())["notebooks"]
    assert notebook["status"] == "stopped" and "2 records" in notebook["detail"]
    assert _saved(out) == ["first", "second"]
    assert [p.name for p in out.parent.iterdir()] == ["out"]  # no staging left beside it


def test_a_stopped_runner_s_notebook_is_read_from_its_own_report_only(tmp_path):
    stopped, before = budget.Outcome(130, 10.0, True, []), cli.made(tmp_path)
    entry = {"notebook": "fp8", "status": "ok"}  # it ended; the stop came as it was swapped in
    (tmp_path / "run.json").write_text(json.dumps({"notebooks": [entry]}))
    assert cli._status("fp8", stopped, 10.0, tmp_path, before).startswith("ok: ")  # ran: done
    earlier = cli.made(tmp_path)  # the same report, an earlier run's: this one swapped nothing in
    assert "no report written" in cli._status("fp8", stopped, 10.0, tmp_path, earlier)
