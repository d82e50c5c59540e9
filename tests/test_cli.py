"""The command line: exit codes, one-line errors, nothing executed on bad input."""

import json
import os
import subprocess
import sys
import types

import pytest

from kernel_lib import __main__ as cli
from kernel_lib import allocator, params
from kernel_lib.backends.suite import NOTEBOOK_BACKEND
from kernel_lib.locks import lock_state
from kernel_lib.params import ROOT
from kernel_lib.platform import detect_backend
from kernel_lib.records import Record
from kernel_lib.results.files import read_table
from kernel_lib.run.environment import kernel_allocator, kernel_environment


def test_unknown_platform_exits_2_with_one_line(capsys, tmp_path):
    assert cli.main(["run", "--platform", "nope", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown platform 'nope'") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_yaml_with_unknown_key_exits_2_naming_it(capsys, tmp_path, monkeypatch):
    (tmp_path / "bad.yaml").write_text("workbook: {notebooks: [backend_cpu]}\ngemm_sizez: [8]\n")
    monkeypatch.setattr(params.platform_files, "PARAMETERS_DIR", tmp_path)
    assert cli.main(["run", "--platform", "bad", "--out", str(tmp_path / "o")]) == 2
    assert "unknown key 'gemm_sizez'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _assert_checked_and_matchable(rows: list[dict], notebook: str) -> None:
    """Every ok record has its id, run, raw samples and a passing check, and names the lock of
    this environment; every ratio has its interval; the records are those `notebook` made in
    outputs/reference (ids past the platform)."""
    assert rows and all(set(r) == set(Record.__dataclass_fields__) for r in rows)
    assert {r["lock"] for r in rows} == {lock_state().label}
    assert all(r["status"] not in ("failed", "wrong") for r in rows)
    assert len({r["record_id"] for r in rows}) == len(rows)
    for r in rows:
        prefix = f"{r['platform']}/{r['topic']}/"
        assert r["record_id"].startswith(prefix) and r["run_id"], r["record_id"]
        if r["status"] == "ok" and r["median_ms"] is not None:
            assert r["samples_ms"] and r["check"]["pass"] is True, r["record_id"]
        if r["ratio_vs_baseline"] is not None:
            assert r["ratio_low"] <= r["ratio_vs_baseline"] <= r["ratio_high"], r["record_id"]
    reference = read_table(ROOT / "outputs" / "reference" / "results.csv")
    made = {
        i.split("/", 1)[1] for i in reference.loc[reference["notebook"] == notebook, "record_id"]
    }
    got = {r["record_id"].split("/", 1)[1] for r in rows}
    assert got == made, got ^ made


# `bench` end to end (its JSON, stamps, allocator) for the detected backend's suite and a topic's,
# at the ci sizes with the least timing per case. The other topics' records are those their
# notebooks made in `make test`'s nbval run (test_rechecked_... below): `bench <topic>` runs
# `run_suite` = `SUITE.run_all`, the sections each notebook cell runs by name, in the same order
# (tests/test_suites.py), so executing flex_attention and moe a second time here would only
# repeat their minutes of compiles.
FAST = {
    "device": ["probe_compile=false", "compile_mlp=false", "min_time_s=0.001"],
    "fp8": ["fp8_min_time_s=0.001"],
}
# fp8 runs with the acceptance plug-ins (docs/plugins.md): the W8A16 one in every weight-only case
PLUGINS = {"fp8": ("tests/plugin_kernels.py", "my_w8a16", "weight_only_linear")}


@pytest.mark.slow
@pytest.mark.parametrize("topic", sorted(FAST))
def test_bench_json_records_are_checked_stamped_and_matchable(topic):
    """Acceptance: the suite's records are checked and stamped, and they are the records its
    notebook makes (device: the detected backend's; its FAST settings skip compiled cases, which
    keep their ids)."""
    argv = ["bench", topic, "--platform", "ci", "--json"] + [
        a for p in FAST[topic] for a in ("-p", p)
    ]
    module, plugin, section = PLUGINS.get(topic, (None, None, None))
    argv += ["--plugin", str(ROOT / module)] if module else []
    # started as `bench` starts itself under the platform's allocator: one process, not two
    with kernel_environment(kernel_allocator(params.load_plan("ci"))):
        proc = subprocess.run(
            [sys.executable, "-m", "kernel_lib", *argv], capture_output=True, text=True
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)
    assert {r["platform"] for r in rows} == {"ci"}
    notebook = cli.TOPICS[topic][1] or f"backend_{NOTEBOOK_BACKEND[detect_backend()]}"
    theirs = [r for r in rows if r["plugin"]]
    _assert_checked_and_matchable([r for r in rows if not r["plugin"]], notebook)
    if plugin:  # ok, with a ratio, in every case of its slot; its records name its file
        cases = {(r["case"], str(r["shape"])) for r in rows if r["case"].startswith(section)}
        assert {(r["case"], str(r["shape"])) for r in theirs} == cases
        assert all(r["implementation"] == plugin and r["status"] == "ok" for r in theirs)
        assert all(r["ratio_vs_baseline"] and r["plugin"]["file"] for r in theirs)


# `kernel_lib check --platform reference` saves the records of the notebooks it re-executes in
# .cache/nbval/reference/; `make test` runs it first and then reads them all here
# (KERNEL_WORKBOOK_RECHECKED=all), and .ci/run after each of its ISA passes (naming the notebooks
# it re-executed), so no path comes out wrong without running the suites again.
RECHECKED = os.environ.get("KERNEL_WORKBOOK_RECHECKED", "")
REFERENCE_NOTEBOOKS = sorted(p.stem for p in (ROOT / "outputs" / "reference").glob("*.ipynb"))


@pytest.mark.skipif(
    not RECHECKED,
    reason="reads what `kernel_lib check` re-executed: `make test` and .ci/run set "
    "KERNEL_WORKBOOK_RECHECKED",
)
@pytest.mark.parametrize(
    "notebook",
    REFERENCE_NOTEBOOKS if RECHECKED == "all" else RECHECKED.split(",") if RECHECKED else ["-"],
)
def test_rechecked_notebooks_records_are_checked_and_matchable(notebook):
    path = ROOT / ".cache" / "nbval" / "reference" / f"{notebook}.results.json"
    _assert_checked_and_matchable(json.loads(path.read_text()), notebook)


def test_platforms_lists_files_and_detection(capsys):
    assert cli.main(["platforms"]) == 0
    out = capsys.readouterr().out
    assert "cpu" in out and "this machine:" in out


def test_check_only_names_notebooks_of_the_report(capsys):
    assert cli.main(["check", "--platform", "reference", "--only", "moe,nope"]) == 2
    assert "--only 'moe,nope'" in capsys.readouterr().err


def test_check_without_a_report_exits_2(capsys):
    assert cli.main(["check", "--platform", "no-such-report"]) == 2


@pytest.mark.parametrize("name", ["../outputs/reference", "../../kernel_lib", "/tmp"])
def test_check_takes_a_report_folders_name_never_a_path(name, capsys):
    assert cli.main(["check", "--platform", name]) == 2
    assert "no report folder" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["bench", "nope"], ["run", "--bogus"]])
def test_argparse_errors_exit_2(argv):
    with pytest.raises(SystemExit) as err:
        cli.main(argv)
    assert err.value.code == 2


DONE = types.SimpleNamespace(returncode=0)


def test_bench_runs_under_the_platforms_allocator_as_the_notebooks_do(monkeypatch):
    """cpu.yaml keeps freed memory (system_kept): `bench` starts itself again under it, with this
    checkout first on the path, as the runner starts each notebook kernel."""
    calls = []
    monkeypatch.delenv(allocator.ENV, raising=False)
    monkeypatch.setenv("MALLOC_CONF", "stale")
    monkeypatch.setattr(
        cli.subprocess, "run", lambda cmd: calls.append((cmd, dict(os.environ))) or DONE
    )
    assert cli.main(["bench", "device", "--platform", "cpu", "-p", "min_time_s=0.5"]) == 0
    ((command, env),) = calls
    assert command[1:] == [
        "-m",
        "kernel_lib",
        "bench",
        "device",
        "--platform",
        "cpu",
        "-p",
        "min_time_s=0.5",
    ]
    assert env[allocator.ENV] == "system_kept" and env["MALLOC_MMAP_THRESHOLD_"] == allocator.KEPT
    assert "MALLOC_CONF" not in env and env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)


def test_bench_under_its_allocator_runs_the_suite_in_process(monkeypatch, capsys):
    monkeypatch.setenv(allocator.ENV, "system_kept")
    monkeypatch.setattr(cli.subprocess, "run", None)  # never started again
    monkeypatch.setattr("kernel_lib.moe.suite.run_suite", lambda params, progress: [])
    assert cli.main(["bench", "moe", "--platform", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
