"""Never destroy (results.writes, results.outdir): every command that writes (run, cloud
collect, compare --html, export --out, report --gallery, sensitivity --out, history --add and
--rebuild) refuses what is not its own in one line (exit 2) or completes without loss; a disk
error is one line (exit 1) and leaves every file as it was; the user's files stay byte for byte."""

import contextlib
import errno
import io
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernel_lib.ab as ab
from kernel_lib import __main__ as cli
from kernel_lib import params
from kernel_lib.compare import NOISE_FLOOR_KEYS, ab_layout
from kernel_lib.report.gallery import build_gallery
from kernel_lib.results import store
from kernel_lib.run import runner
from kernel_lib.run.execute import execute
from tests.fakes import RESULTS, another_device

PAGE = b"<html>my own page</html>"
MINE = b"my notes, never overwritten"


def run_cli(args) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `python -m kernel_lib ARGS` run here; never a traceback."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in args])
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue(), err.getvalue()


def refused(result, *words) -> None:
    """Exit 2, one line, nothing on stdout, every word said."""
    code, out, err = result
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and not out, err
    assert all(w in err for w in words), err


def files(root: Path) -> dict:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def pages(report: Path) -> Path:
    """A report's own files beside its records: executed notebook, pages, table."""
    for name in ("fp8.ipynb", "index.html", "SUMMARY.md", "results.csv"):
        (report / name).write_text(f"the report's {name}")
    return report


@pytest.fixture
def run(tmp_path, write_notebook, monkeypatch, fake_execute):
    """`run(out, *argv)`: `run --platform p --out out` of one fake notebook (platforms p and q
    for any device, gcp-tpu-v5e for a TPU); returns (exit code, stdout, stderr)."""
    nbs, prm = tmp_path / "notebooks", tmp_path / "parameters"
    nbs.mkdir(), prm.mkdir()
    write_notebook(nbs / "a.ipynb", "x = 1")
    for name in ("p", "q", "gcp-tpu-v5e"):
        (prm / f"{name}.yaml").write_text("workbook: {notebooks: [a]}\n")
    monkeypatch.setattr(params.platform_files, "PARAMETERS_DIR", prm)
    monkeypatch.setattr(params.notebooks, "NOTEBOOKS_DIR", nbs)
    monkeypatch.setattr("kernel_lib.run.runner.execute", fake_execute)

    def run(out, *argv, platform="p"):
        return run_cli(["run", "--platform", platform, "--no-progress", "--out", out, *argv])

    return run


@pytest.fixture
def out(tmp_path):
    """A report folder's path beside the fake workbook (its parent: all to see unchanged)."""
    return tmp_path.resolve() / "out"


# ------------------------------------------------------------------------- cloud collect


@pytest.fixture
def bucket(tmp_path, make_run) -> Path:
    """A bucket `cloud collect` reads: one report, cpu."""
    make_run(tmp_path / "bucket" / "cpu")
    return tmp_path / "bucket"


def test_collect_refuses_a_folder_that_is_not_a_report(tmp_path, bucket):
    outputs = tmp_path / "outputs"
    (outputs / "cpu").mkdir(parents=True)
    (outputs / "cpu" / "mine.txt").write_bytes(MINE)
    before = files(tmp_path)
    refused(run_cli(["cloud", "collect", bucket, "--out", outputs]), "not a report")
    assert files(tmp_path) == before


def test_collect_refuses_an_index_html_that_is_not_a_gallery(tmp_path, bucket):
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    (outputs / "index.html").write_bytes(PAGE)
    before = files(tmp_path)
    refused(run_cli(["cloud", "collect", bucket, "--out", outputs]), "not a gallery")
    assert files(tmp_path) == before


def test_collect_on_a_full_disk_keeps_the_previous_report(tmp_path, monkeypatch, make_run, bucket):
    outputs = tmp_path / "outputs"
    pages(make_run(outputs / "cpu"))
    before = files(outputs)
    copy = shutil.copyfile

    def full(src, dst, **kwargs):
        Path(dst).write_bytes(b"")  # what a full disk leaves: a 0-byte file
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(shutil, "copyfile", full)
    code, _, err = run_cli(["cloud", "collect", bucket, "--out", outputs])
    monkeypatch.setattr(shutil, "copyfile", copy)
    assert code == 1 and err.count("\n") == 1 and err.endswith("No space left on device\n"), err
    assert "[(" not in err  # one line of words, not shutil's list of errors
    assert files(outputs) == before  # byte for byte, and no staging folder left beside it


def test_collect_replaces_a_report_whole_and_leaves_the_rest(tmp_path, make_run, bucket):
    outputs = tmp_path / "outputs"
    pages(make_run(outputs / "cpu"))
    (outputs / "mine.txt").write_bytes(MINE)
    assert run_cli(["cloud", "collect", bucket, "--out", outputs])[0] == 0
    assert (outputs / "mine.txt").read_bytes() == MINE
    assert not (outputs / "cpu" / "fp8.ipynb").exists()  # the earlier report, replaced whole
    assert (outputs / "cpu" / RESULTS).read_bytes() == (bucket / "cpu" / RESULTS).read_bytes()


# ------------------------------------------------------------------------- compare


@pytest.fixture
def sides(tmp_path, make_run):
    return make_run(tmp_path / "a"), pages(make_run(tmp_path / "b"))


@pytest.mark.parametrize("own", [RESULTS, "run.json", "fp8.ipynb", "index.html", "new.html"])
def test_compare_html_never_lands_in_a_report(sides, tmp_path, own):
    a, b = sides
    before = files(tmp_path)
    refused(run_cli(["compare", a, "--", b, "--html", b / own]), "the report's own files")
    assert files(tmp_path) == before
    assert run_cli(["compare", a, "--", b])[0] == 0  # and B still reads


def test_compare_html_overwrites_the_users_own_file(sides, tmp_path):
    a, b = sides
    (tmp_path / "my.html").write_bytes(PAGE)
    code, out, _ = run_cli(["compare", a, "--", b, "--html", tmp_path / "my.html"])
    assert code == 0 and out.endswith(f"html: {tmp_path / 'my.html'}\n")
    assert b"<html" in (tmp_path / "my.html").read_bytes() != PAGE


@pytest.mark.parametrize("html", ["missing/x.html", ".", "-"])
def test_compare_html_bad_path_is_refused_before_the_table(sides, tmp_path, html):
    a, b = sides
    refused(run_cli(["compare", a, "--", b, "--html", tmp_path / html if html != "-" else html]))


def test_compare_of_a_folder_with_itself_says_so(sides):
    a, _ = sides
    refused(run_cli(["compare", a, "--", a]), "the same report folders")


def test_compare_into_a_closed_pipe_is_no_traceback(sides, tmp_path):
    a, b = sides

    class Closed(io.StringIO):  # `compare ... | head`: head has stopped reading
        def write(self, text):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

        def fileno(self):
            return sink.fileno()

    err = io.StringIO()
    with open(tmp_path / "sink", "w") as sink, contextlib.redirect_stderr(err):
        with contextlib.redirect_stdout(Closed()):
            code = cli.main(["compare", str(a), "--", str(b)])
    assert code == 0 and err.getvalue() == ""


@pytest.mark.parametrize(
    "field, value", [("ratio_low", "0.9"), ("runs_a_side", 2.5), ("verdicts", {"slower": "x"})]
)
def test_a_noise_floor_of_wrong_types_is_one_line(sides, tmp_path, field, value):
    a, b = sides
    floor = {k: 1 for k in NOISE_FLOOR_KEYS} | {"verdicts": {"slower": 0}, field: value}
    (tmp_path / "floor.json").write_text(json.dumps(floor))
    refused(run_cli(["compare", a, "--", b, "--noise-floor", tmp_path / "floor.json"]), field)


def test_ab_does_not_crash_on_a_stored_noise_floor_of_wrong_types(tmp_path, monkeypatch, capsys):
    floor = {k: 1 for k in NOISE_FLOOR_KEYS} | {"verdicts": {"slower": 0}, "ratio_high": "1.1"}
    (tmp_path / "noise-floor-cpu.json").write_text(json.dumps(floor))
    monkeypatch.setattr(ab_layout, "CACHE", tmp_path)
    assert ab._floor_at_hand("cpu", "Test CPU") is None
    assert capsys.readouterr().err.startswith("note: noise floor not used: --noise-floor ")


def test_ab_out_is_never_in_a_report(sides):
    _, b = sides
    with pytest.raises(cli.ParameterError, match="is in the report"):
        ab._previous(b / "ab", {}, resume=False)


# ------------------------------------------------------------------------- export


@pytest.mark.parametrize("own", ["fp8.ipynb", "results.csv", "index.html", "SUMMARY.md"])
def test_export_never_writes_over_any_report_file(sides, tmp_path, own):
    _, b = sides
    before = files(tmp_path)
    refused(run_cli(["export", "--format", "bmf", b, "--out", b / own]), "own files")
    assert files(tmp_path) == before


def test_export_out_dash_is_standard_output(sides, tmp_path, monkeypatch):
    _, b = sides
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(["export", "--format", "bmf", b, "--out", "-"])
    assert code == 0 and json.loads(out) and not (tmp_path / "-").exists()


def test_export_on_a_full_disk_leaves_the_users_file(sides, tmp_path, monkeypatch):
    _, b = sides
    (tmp_path / "mine.json").write_bytes(MINE)
    write = Path.write_text

    def full(self, text, *args, **kwargs):
        write(self, text[:10])
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_text", full)
    code, _, err = run_cli(["export", "--format", "bmf", b, "--out", tmp_path / "mine.json"])
    assert code == 1 and err.count("\n") == 1 and "No space left on device" in err
    assert files(tmp_path)["mine.json"] == MINE and not list(tmp_path.glob(".mine.json*"))


# ------------------------------------------------------------------------- report --gallery, sensitivity


def test_report_gallery_never_overwrites_a_page_it_did_not_write(sides, tmp_path):
    a, b = sides
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_bytes(PAGE)
    before = files(tmp_path)
    refused(run_cli(["report", a, "--gallery", tmp_path / "site"]), "not a gallery")
    refused(run_cli(["report", a, "--gallery", b]), "is in the report")
    assert files(tmp_path) == before
    (tmp_path / "site" / "index.html").unlink()
    assert run_cli(["report", a, "--gallery", tmp_path / "site"])[0] == 0
    assert build_gallery(tmp_path / "site").exists()  # its own gallery: rebuilt


@pytest.mark.parametrize("kind", ["folder", "file", "report"])
def test_sensitivity_out_is_never_someone_elses(tmp_path, kind, make_run):
    target = tmp_path / "target"
    if kind == "folder":
        target.mkdir()
        (target / "mine.txt").write_bytes(MINE)
    elif kind == "file":
        target.write_bytes(MINE)
    else:
        make_run(target)
    before = files(tmp_path)
    refused(run_cli(["sensitivity", "--tally-only", "--out", target]), "--out")
    assert files(tmp_path) == before


# ------------------------------------------------------------------------- run


@pytest.mark.parametrize(
    "first, then, says",
    [
        (["--repeat", "2"], [], "--repeat 2 runs them again"),
        ([], ["--repeat", "2"], "holds one run: --repeat 2 would replace it"),
        (["--repeat", "3"], ["--repeat", "2"], "holds 3 runs (run-1/ ... run-3/): --repeat 3"),
    ],
)
def test_a_run_never_drops_the_runs_of_a_report(run, out, first, then, says):
    assert run(out, *first)[0] == 0
    before = files(out.parent)
    refused(run(out, *then), says, "--replace")
    assert files(out.parent) == before
    assert run(out, *then, "--replace")[0] == 0


def test_more_runs_onto_a_repeated_report_are_added(run, out):
    assert run(out, "--repeat", "2")[0] == 0
    assert run(out, "--repeat", "3")[0] == 0
    assert [p.name for p in sorted(out.glob("run-*"))] == ["run-1", "run-2", "run-3"]
    assert json.loads((out / "run.json").read_text())["repeat"] == 3


@pytest.mark.parametrize("field, value", [("platform", "q"), ("device", "NVIDIA H100 80GB HBM3")])
def test_another_platforms_or_devices_report_is_refused_without_replace(run, out, field, value):
    assert run(out)[0] == 0
    made = json.loads((out / "run.json").read_text())
    if field == "platform":
        made["platform"] = value
    else:
        made["environment"]["name"] = value
    (out / "run.json").write_text(json.dumps(made))
    before = files(out.parent)
    refused(run(out), f"is the report of {made['platform']} on ", "--replace")
    assert files(out.parent) == before
    assert run(out, "--replace")[0] == 0


def test_a_report_git_holds_unchanged_is_replaced_freely(run, out):
    """A fresh clone's `make report` on another CPU replaces the committed report: git holds it,
    so nothing is lost; once the report holds a change git lacks, it is refused again."""
    assert run(out)[0] == 0
    made = json.loads((out / "run.json").read_text())
    made["environment"]["name"] = "another CPU"
    (out / "run.json").write_text(json.dumps(made))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "report"]):
        subprocess.run([*git, *args], cwd=out.parent, check=True, capture_output=True)
    assert runner.in_git(out)
    assert run(out)[0] == 0
    made["environment"]["name"] = "a third CPU"
    (out / "run.json").write_text(json.dumps(made))  # now a change git does not hold
    assert not runner.in_git(out)
    refused(run(out), "is the report of", "--replace")


def test_outputs_reference_is_written_by_make_reference_only(run, tmp_path, monkeypatch):
    reference = tmp_path.resolve() / "reference"
    monkeypatch.setattr(runner, "REFERENCE", reference)
    monkeypatch.setattr(runner, "REFERENCE_PLATFORM", "p")
    refused(run(reference), "only `make reference` writes it")
    refused(run(reference, "--nbval-reference", "-p", "n=2"), "no -p")
    refused(run(tmp_path / "elsewhere", "--nbval-reference"), "--nbval-reference")
    assert not reference.exists()
    assert run(reference, "--nbval-reference")[0] == 0
    assert "--out outputs/reference --nbval-reference" in (params.ROOT / "Makefile").read_text()


def test_another_devices_platform_file_is_refused_unless_other_device(run, out):
    refused(run(out, platform="gcp-tpu-v5e"), "is for a tpu v5litepod device", "--other-device")
    assert not out.exists()
    assert run(out, "--other-device", platform="gcp-tpu-v5e")[0] == 0


def test_a_disk_that_fills_while_the_notebook_is_written_is_one_line(run, out, monkeypatch):
    assert run(out)[0] == 0
    before = files(out.parent)

    def fills(notebook, output, **kwargs):
        Path(output).write_text('{"cells": [')  # the notebook cut short
        raise OSError(errno.ENOSPC, "No space left on device", str(output))

    monkeypatch.setattr("kernel_lib.run.runner.execute", execute)
    monkeypatch.setattr("papermill.execute_notebook", fills)
    code, _, err = run(out)
    assert code == 1 and err.splitlines()[-1].endswith("a.ipynb: No space left on device"), err
    assert files(out.parent) == before


def test_bench_refuses_another_devices_file_before_anything_runs():
    refused(run_cli(["bench", "fp8", "--platform", another_device()]), "--other-device")


def test_check_of_a_report_made_by_other_code_says_so(tmp_path, capsys, make_run):
    report = make_run(tmp_path / "old")
    runner.say_other_code(report)
    err = capsys.readouterr().err
    assert err.startswith(f"note: {report} was made by git abc1234, ")
    assert "may come from the code, not this machine" in err and err.count("\n") == 1


# ------------------------------------------------------------------------- history (results store)


@pytest.fixture
def outputs(tmp_path, make_run):
    """outputs/ holding a report (its pages beside its records) and a store of its run."""
    outputs = tmp_path / "outputs"
    store.remember(pages(make_run(outputs / "cpu")))
    assert (outputs / store.STORE_NAME).exists()
    return outputs


@pytest.mark.parametrize("kind", ["report's results file", "user's text file", "user's folder"])
def test_rebuild_writes_only_onto_a_store_or_a_new_path(outputs, monkeypatch, kind):
    target = outputs / "cpu" / RESULTS
    if kind == "user's text file":
        (target := outputs.parent / "notes.txt").write_bytes(MINE)
    elif kind == "user's folder":
        (target := outputs.parent / "mine").mkdir()
        (target / "mine.txt").write_bytes(MINE)
    monkeypatch.setenv(store.STORE_ENV, str(target))  # as `KERNEL_WORKBOOK_STORE=... history`
    before = files(outputs.parent)
    says = {"report's results file": "report's own files", "user's text file": "not a results"}
    refused(run_cli(["history", "--rebuild", "--outputs", outputs]), says.get(kind, "folder"))
    assert files(outputs.parent) == before


def test_rebuild_from_a_misspelt_outputs_is_one_line(outputs):
    before, path = files(outputs.parent), outputs / store.STORE_NAME
    argv = ["history", "--rebuild", "--store", path, "--outputs", outputs.parent / "outptus"]
    refused(run_cli(argv), "outptus")
    assert files(outputs.parent) == before


def test_a_store_is_never_made_in_a_report(outputs, capsys):
    inside = outputs / "cpu" / store.STORE_NAME
    before = files(outputs.parent)
    for argv in (["--add", outputs / "cpu"], ["--rebuild", "--outputs", outputs]):
        refused(run_cli(["history", "--store", inside, *argv]), "report's own files")
    store.remember(outputs / "cpu", path=inside)  # the runners' hook: one warning line
    assert capsys.readouterr().err.count("\n") == 1 and files(outputs.parent) == before


def test_rebuild_on_a_full_disk_leaves_the_store_as_it_was(outputs, monkeypatch):
    before = files(outputs.parent)

    def full(src, dst, **kwargs):
        Path(dst).write_bytes(b"")  # what a full disk leaves: a 0-byte file
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(shutil, "copyfile", full)
    path = outputs / store.STORE_NAME
    code, out, err = run_cli(["history", "--rebuild", "--store", path, "--outputs", outputs])
    assert code == 1 and not out and err.count("\n") == 1, err
    assert f"{path}." in err and "No space left on device" in err, err
    assert files(outputs.parent) == before  # no backup, no temporary file left


# ------------------------------------------------------------------------- every command x target

KINDS = (
    "user file",
    "user folder",
    "report's file",
    "other platform's report",
    "repeated report",
    "read-only disk",
    "full disk",
)
COMMANDS = ("run", "collect", "compare --html", "export --out", "report --gallery", "sensitivity")


def _target(kind: str, root: Path, run) -> Path:
    """The thing at `root/target` of this kind; returns the path the command is pointed at."""
    target = root / "target"
    if kind == "user file":
        target.write_bytes(MINE)
    elif kind == "user folder":
        target.mkdir()
        (target / "mine.txt").write_bytes(MINE)
        (target / "index.html").write_bytes(PAGE)
    else:
        assert run(target, *(["--repeat", "2"] if kind == "repeated report" else []))[0] == 0
        if kind == "other platform's report":
            made = json.loads((target / "run.json").read_text())
            (target / "run.json").write_text(json.dumps({**made, "platform": "q"}))
        if kind == "report's file":
            return target / "index.html"
    return target


def _argv(command: str, target: Path, root: Path, side: Path, make_run) -> list:
    if command == "run":
        return ["run", "--platform", "p", "--no-progress", "--out", target]
    if command == "collect":  # a report of the target's name, into the target's folder
        bucket = root.parent / "bucket"
        if not bucket.exists():
            make_run(bucket / "target")
        return ["cloud", "collect", bucket, "--out", target.parent]
    if command == "compare --html":
        return ["compare", side, "--", side.parent / "b", "--html", target]
    if command == "export --out":
        return ["export", "--format", "bmf", side, "--out", target]
    if command == "report --gallery":
        return ["report", side, "--gallery", target]
    return ["sensitivity", "--tally-only", "--out", target]


def _faulty(kind: str):
    """A disk that refuses every write (read-only) or fills on the first (full)."""
    if kind not in ("read-only disk", "full disk"):
        return contextlib.nullcontext()
    code, why = (
        (errno.EROFS, "Read-only file system")
        if kind == "read-only disk"
        else (errno.ENOSPC, "No space left on device")
    )

    def fail(path, *args, **kwargs):
        raise OSError(code, why, str(path))

    stack = contextlib.ExitStack()
    stack.enter_context(mock.patch.object(Path, "write_text", lambda self, *a, **k: fail(self)))
    stack.enter_context(mock.patch("shutil.copyfile", lambda src, dst, **k: fail(dst)))
    return stack


def meant_to_change(command: str, kind: str) -> bool:
    """Where a command is meant to change what was there: a plain file the user names as an
    output (theirs to overwrite), or a report `cloud collect` brings a new copy of."""
    if command in ("compare --html", "export --out"):
        return kind == "user file"
    return command == "collect" and kind in ("other platform's report", "repeated report")


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@pytest.mark.slow
@given(command=st.sampled_from(COMMANDS), kind=st.sampled_from(KINDS))
def test_nothing_of_the_users_or_of_a_report_changes_unless_meant(run, command, kind, make_run):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve() / "root"
        root.mkdir()
        side = make_run(Path(tmp) / "sides" / "a")
        make_run(Path(tmp) / "sides" / "b")
        target = _target(kind, root, run)
        argv, before = _argv(command, target, root, side, make_run), files(root)
        with _faulty(kind):
            code, _, err = run_cli(argv)
        assert code in (0, 1, 2) and (code == 0 or err.count("\n") >= 1), err
        if code == 2:
            assert err.count("\n") == 1, err
        after = files(root)
        assert not [p for p in after if ".staging-" in p or ".writing-" in p]
        if not meant_to_change(command, kind):
            changed = {p for p in before if after.get(p) != before[p]}
            assert not changed, (command, kind, code, err, changed)
        if kind in ("read-only disk", "full disk"):
            assert code != 0, (command, kind)
