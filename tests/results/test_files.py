"""Damaged report files (results.files): `compare`, `export` and `report` refuse them with exit 2
and one line naming the file (and the field), never a traceback, and write nothing. The valid
report is tests/fakes.py's default: ROWS in RESULTS, and RUN."""

import contextlib
import errno
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_lib import __main__ as cli
from tests import fakes
from tests.fakes import RESULTS, ROWS, RUN

ROOT = Path(__file__).resolve().parents[2]


def argv(command: str, root: Path, good: Path, bad: Path) -> list[str]:
    """The command line that reads the damaged folder `bad`; every output goes under `root`."""
    if command == "compare":
        return ["compare", str(good), "--", str(bad), "--html", str(root / "compare.html")]
    if command == "report":
        return ["report", str(bad)]
    fmt = command.split(":")[1]
    return ["export", "--format", fmt, str(bad), "--out", str(root / "export.json")]


COMMANDS = ("compare", "export:pytorch-v3", "export:bmf", "report")


def files(root: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_cli(args: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of `python -m kernel_lib ARGS`, run here: a traceback would raise."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(args)
    return code, err.getvalue()


def edit_record(index: int, **fields):
    def damage(folder: Path) -> Path:
        rows = json.loads(json.dumps(ROWS))
        rows[index].update(fields)
        (folder / RESULTS).write_text(json.dumps(rows))
        return folder / RESULTS

    return damage


def drop_record_field(name: str):
    def damage(folder: Path) -> Path:
        rows = json.loads(json.dumps(ROWS))
        del rows[0][name]
        (folder / RESULTS).write_text(json.dumps(rows))
        return folder / RESULTS

    return damage


def edit_run(*keys, value):
    """run.json with the value at keys (e.g. "notebooks", 0, "seconds") replaced."""

    def damage(folder: Path) -> Path:
        run = json.loads(json.dumps(RUN))
        inner = run
        for key in keys[:-1]:
            inner = inner[key]
        inner[keys[-1]] = value
        (folder / "run.json").write_text(json.dumps(run))
        return folder / "run.json"

    return damage


def replace(name: str, content: bytes):
    def damage(folder: Path) -> Path:
        (folder / name).write_bytes(content)
        return folder / name

    return damage


def results_folder(folder: Path) -> Path:
    (folder / RESULTS).unlink()
    (folder / RESULTS).mkdir()
    return folder / RESULTS


def link(name: str, target: str | None = None):
    """`name` replaced by a symbolic link to `target` (default: a valid copy outside the report)."""

    def damage(folder: Path) -> Path:
        outside = folder.parent / f"outside-{name}"
        shutil.copyfile(folder / name, outside)
        (folder / name).unlink()
        (folder / name).symlink_to(target or outside)
        return folder / name

    return damage


def fifo(name: str):
    def damage(folder: Path) -> Path:
        (folder / name).unlink()
        os.mkfifo(folder / name)  # a reader that opened it would wait for a writer forever
        return folder / name

    return damage


def linked_folder(folder: Path) -> Path:
    """The report folder itself a link to the report, moved beside it."""
    folder.rename(folder.with_name("real"))
    folder.symlink_to(folder.with_name("real"))
    return folder


VALID = json.dumps(ROWS).encode()
NO_NOTEBOOKS = json.dumps({k: v for k, v in RUN.items() if k != "notebooks"}).encode()
ALL = COMMANDS
RUN_READERS = ("compare", "export:pytorch-v3", "report")  # bmf needs no run.json
# (id, damage(folder) -> the file it damaged, text the line must hold besides the file, commands)
CASES = [
    ("not UTF-8", replace(RESULTS, b'[{"topic": "\xff\xfe"}]'), "not UTF-8", ALL),
    ("results an object", replace(RESULTS, b'{"records": []}'), "must be a list", ALL),
    ("records not objects", replace(RESULTS, b"[1, 2]"), "[0] must be an object", ALL),
    ("median_ms a string", edit_record(0, median_ms="1.5"), "[0].median_ms", ALL),
    ("samples_ms not a list", edit_record(1, samples_ms=3), "[1].samples_ms", ALL),
    ("samples_ms of strings", edit_record(0, samples_ms=["1"]), "[0].samples_ms[0]", ALL),
    ("status not a string", edit_record(2, status=3), "[2].status", ALL),
    ("status unknown", edit_record(0, status="fine"), "[0].status", ALL),
    ("reason null", edit_record(2, reason=None), "[2].reason", ALL),
    ("shape a list", edit_record(0, shape=[64]), "[0].shape", ALL),
    ("shape value a list", edit_record(0, shape={"n": [64]}), "[0].shape.n", ALL),
    ("a key with a newline", edit_record(0, shape={"a\nb": [1]}), "[0].shape['a\\nb']", ALL),
    ("flags a string", edit_record(1, flags="slow"), "[1].flags", ALL),
    ("check a list", edit_record(0, check=[1]), "[0].check", ALL),
    ("metrics null", edit_record(0, metrics=None), "[0].metrics", ALL),
    ("profile.trace a number", edit_record(0, profile={"trace": 5}), "[0].profile.trace", ALL),
    ("profile.top a string", edit_record(0, profile={"trace": "t", "top": "x"}), ".top", ALL),
    ("tflops true", edit_record(0, tflops=True), "[0].tflops", ALL),
    ("a 1 MB reason", edit_record(0, reason="x" * 2**20), "[0].reason holds", ALL),
    ("100,001 samples", edit_record(0, samples_ms=[1.0] * 100_001), "[0].samples_ms", ALL),
    (
        "a 1 MB device",
        edit_run("environment", "name", value="x" * 2**20),
        "name holds",
        RUN_READERS,
    ),
    ("no record_id", drop_record_field("record_id"), "[0] has no record_id", ALL),
    ("no topic", drop_record_field("topic"), "[0] has no topic", ALL),
    ("truncated", replace(RESULTS, VALID[: len(VALID) // 2]), "not JSON", ALL),
    ("empty", replace(RESULTS, b""), "not JSON", ALL),
    ("NaN", replace(RESULTS, VALID.replace(b'"median_ms": 1.0', b'"median_ms": NaN')), "NaN", ALL),
    (
        "1e999",
        replace(RESULTS, VALID.replace(b'"median_ms": 1.0', b'"median_ms": 1e999')),
        "1e999",
        ALL,
    ),
    ("a 5000-digit number", replace(RESULTS, b"[" + b"9" * 5000 + b"]"), "float range", ALL),
    ("nested too deeply", replace(RESULTS, b"[" * 100_000), "not JSON", ALL),
    ("results a folder", results_folder, "", ALL),
    ("results a link to /dev/zero", link(RESULTS, "/dev/zero"), "a symbolic link", ALL),
    ("results a link to a valid copy", link(RESULTS), "a symbolic link", ALL),
    ("results a dangling link", link(RESULTS, "/nonexistent"), "a symbolic link", ALL),
    ("results a FIFO", fifo(RESULTS), "a FIFO, not a regular file", ALL),
    ("the report a link", linked_folder, "a symbolic link", ALL),
    ("run.json a link to /dev/zero", link("run.json", "/dev/zero"), "symbolic", RUN_READERS),
    ("run.json a FIFO", fifo("run.json"), "a FIFO, not a regular file", RUN_READERS),
    ("run.json not UTF-8", replace("run.json", b'{"git": "\xe9"}'), "not UTF-8", RUN_READERS),
    ("run.json a list", replace("run.json", b"[]"), "must be an object", RUN_READERS),
    ("environment a list", edit_run("environment", value=[]), "environment must", RUN_READERS),
    (
        "memory_GiB a string",
        edit_run("environment", "memory_GiB", value="inf"),
        "memory_GiB",
        RUN_READERS,
    ),
    ("notebooks an object", edit_run("notebooks", value={}), "notebooks must", RUN_READERS),
    (
        "notebook unnamed",
        edit_run("notebooks", 0, "notebook", value=None),
        "has no notebook",
        RUN_READERS,
    ),
    ("platform a number", edit_run("platform", value=1), "platform", RUN_READERS),
    ("seconds a string", edit_run("notebooks", 0, "seconds", value="1"), "seconds", RUN_READERS),
    (
        "load_start a string",
        edit_run("notebooks", 0, "machine", "load_start", value="1"),
        "load_start",
        RUN_READERS,
    ),
    ("repeat a string", edit_run("repeat", value="2"), "repeat", RUN_READERS),
    ("no notebooks", replace("run.json", NO_NOTEBOOKS), "has no notebooks", ("report",)),
]
TABLE = [
    pytest.param(command, damage, text, id=f"{command}-{name}")
    for name, damage, text, commands in CASES
    for command in commands
]


@pytest.mark.parametrize("command, damage, text", TABLE)
def test_a_damaged_file_is_one_line_naming_it_and_exit_2(
    command, damage, text, tmp_path, make_run
):
    good = make_run(tmp_path / "good")
    bad = make_run(tmp_path / "bad")
    damaged = damage(bad)
    before = files(tmp_path)
    code, err = run_cli(argv(command, tmp_path, good, bad))
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert str(damaged) in err and text in err, err
    assert files(tmp_path) == before


@pytest.mark.slow
@pytest.mark.parametrize("command", ["compare", "export:bmf", "report"])
def test_python_m_kernel_lib_prints_one_line(command, tmp_path, make_run):
    good = make_run(tmp_path / "good")
    bad = make_run(tmp_path / "bad")
    damaged = replace(RESULTS, b"[1, ")(bad)
    proc = subprocess.run(
        [sys.executable, "-m", "kernel_lib", *argv(command, tmp_path, good, bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert (
        proc.stderr == f"error: {damaged}: not JSON (Expecting value: line 1 column 5 (char 4))\n"
    )


@pytest.mark.parametrize("fmt", ["pytorch-v3", "bmf"])
def test_export_out_into_a_missing_folder_is_bad_input(fmt, tmp_path, make_run):
    report = make_run(tmp_path / "rep")
    out = tmp_path / "missing" / "export.json"
    before = files(tmp_path)
    code, err = run_cli(["export", "--format", fmt, str(report), "--out", str(out)])
    assert code == 2 and err == f"error: --out {out}: no such folder {out.parent}\n", err
    assert files(tmp_path) == before


@pytest.mark.parametrize("name", [RESULTS, "run.json", "new.results.json"])
def test_export_never_writes_over_the_reports_own_files(name, tmp_path, make_run):
    report = make_run(tmp_path / "rep")
    before = files(tmp_path)
    code, err = run_cli(["export", "--format", "bmf", str(report), "--out", str(report / name)])
    assert code == 2 and "the report's own files" in err and err.count("\n") == 1, err
    assert files(tmp_path) == before


def test_export_out_onto_a_folder_is_bad_input(tmp_path, make_run):
    report = make_run(tmp_path / "rep")
    out = tmp_path / "out.json"
    out.mkdir()
    code, err = run_cli(["export", "--format", "bmf", str(report), "--out", str(out)])
    assert code == 2 and err == f"error: --out {out}: is a folder\n", err


def test_export_disk_error_is_one_line_exit_1(tmp_path, monkeypatch, make_run):
    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    report = make_run(tmp_path / "rep")
    monkeypatch.setattr(Path, "write_text", full)
    code, err = run_cli(["export", "--format", "bmf", str(report), "--out", "out.json"])
    assert code == 1 and err == "error: --out out.json: No space left on device\n", err


def test_the_valid_fixture_passes_every_command(tmp_path, make_run):
    good = make_run(tmp_path / "good")
    for command in COMMANDS:
        code, err = run_cli(argv(command, tmp_path, good, make_run(tmp_path / command)))
        assert code == 0 and err == "", (command, err)


@pytest.mark.parametrize("content", [b'notebook,status\n"bench,ok\n', b"\xffnotebook\n"])
def test_report_refuses_a_damaged_results_csv(content, tmp_path, make_run):
    """A report that keeps no JSON files (outputs/reference) is rebuilt from its results.csv."""
    report = make_run(tmp_path / "rep")
    (report / RESULTS).unlink()
    (report / "results.csv").write_bytes(content)
    before = files(tmp_path)
    code, err = run_cli(["report", str(report)])
    assert code == 2 and err.startswith(f"error: {report / 'results.csv'}: not a CSV table (")
    assert err.count("\n") == 1 and files(tmp_path) == before


# A report of two runs (run-1/, run-2/: both run r1, as the default report) and their aggregate
# run.json, as the runner writes it.
REPEATED = {"repeat": 2, "run_ids": ("r1", "r1")}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_damaged_run_of_a_repeated_report_stops_it_before_anything_is_written(
    command, tmp_path, make_run
):
    good = make_run(tmp_path / "good", **REPEATED)
    bad = make_run(tmp_path / "bad", **REPEATED)
    damaged = edit_record(0, median_ms="1.5")(bad / "run-2")
    before = files(tmp_path)
    code, err = run_cli(argv(command, tmp_path, good, bad))
    assert code == 2 and err == f"error: {damaged}: [0].median_ms must be a number, not '1.5'\n"
    assert files(tmp_path) == before


def test_a_valid_repeated_report_passes_every_command(tmp_path, make_run):
    good = make_run(tmp_path / "good", **REPEATED)
    for command in COMMANDS:
        report = make_run(tmp_path / command, **REPEATED)
        code, err = run_cli(argv(command, tmp_path, good, report))
        assert code == 0 and err == "", (command, err)


# ----------------------------------------------------------------------------- property tests
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
NOT_NUMBERS = (
    st.booleans()
    | st.text(max_size=6)
    | st.lists(SCALARS, max_size=2)
    | st.dictionaries(st.text(max_size=4), SCALARS, max_size=2)
)
NOT_STRINGS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.lists(SCALARS, max_size=2)
)
NOT_LISTS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=6)
    | st.dictionaries(st.text(max_size=4), SCALARS, max_size=2)
)
NOT_OBJECTS = (
    st.none() | st.booleans() | st.integers() | st.text(max_size=6) | st.lists(SCALARS, max_size=2)
)
# Record fields and values surely not of their type (independent of the checker's own table)
WRONG = {
    **dict.fromkeys(
        ["median_ms", "p10_ms", "p90_ms", "min_ms", "tflops", "ratio_low"], NOT_NUMBERS
    ),
    **dict.fromkeys(
        ["topic", "case", "implementation", "record_id", "status", "reason"], NOT_STRINGS
    ),
    **dict.fromkeys(["samples_ms", "flags"], NOT_LISTS),
    **dict.fromkeys(["shape", "metrics"], NOT_OBJECTS),
}
WRONG_RUN = {"notebooks": NOT_LISTS, "environment": NOT_OBJECTS, "platform": NOT_STRINGS}


@st.composite
def sure_damage(draw, names: tuple[str, ...]):
    """(file name among `names`, new bytes) that no reader may take: a truncation, a top-level
    value of the wrong kind, or one field of the wrong kind."""
    name = draw(st.sampled_from(names))
    kind = draw(st.sampled_from(["truncate", "top", "field"]))
    if kind == "truncate":
        text = json.dumps(ROWS if name == RESULTS else RUN).encode()
        return name, text[: draw(st.integers(0, len(text) - 1))]
    if kind == "top":
        wrong = st.dictionaries(st.text(), JSON) if name == RESULTS else st.lists(JSON)
        return name, json.dumps(draw(SCALARS | wrong)).encode()
    if name == RESULTS:
        rows = json.loads(json.dumps(ROWS))
        field = draw(st.sampled_from(sorted(WRONG)))
        draw(st.sampled_from(rows))[field] = draw(WRONG[field])
        return name, json.dumps(rows).encode()
    run = json.loads(json.dumps(RUN))
    field = draw(st.sampled_from(sorted(WRONG_RUN)))
    run[field] = draw(WRONG_RUN[field])
    return name, json.dumps(run).encode()


@st.composite
def any_damage(draw):
    """(file name, new bytes): random bytes, a random JSON value, a flipped byte, or one field
    (of a record, run.json or its first notebook) set to a random JSON value."""
    name = draw(st.sampled_from([RESULTS, "run.json"]))
    valid = json.loads(json.dumps(ROWS if name == RESULTS else RUN))
    kind = draw(st.sampled_from(["bytes", "json", "flip", "field"]))
    if kind == "bytes":
        return name, draw(st.binary(max_size=40))
    if kind == "json":
        return name, json.dumps(draw(JSON)).encode()
    text = json.dumps(valid).encode()
    if kind == "flip":
        at = draw(st.integers(0, len(text) - 1))
        return name, text[:at] + bytes([draw(st.integers(0, 255))]) + text[at + 1 :]
    if name == RESULTS:
        target = draw(st.sampled_from(valid))
    else:
        target = draw(st.sampled_from([valid, valid["notebooks"][0], valid["environment"]]))
    key = draw(st.sampled_from([*target, "repeat", "runs"]) | st.text(max_size=6))
    target[key] = draw(JSON)
    return name, json.dumps(valid).encode()


def _run_damaged(command: str, name: str, content: bytes) -> tuple[int, str, Path, bool]:
    """(exit code, stderr, damaged file, whether nothing was written) of `command` on a report
    folder whose file `name` now holds `content`."""
    root = Path(tempfile.mkdtemp())
    try:
        good = fakes.report(root / "good")
        bad = fakes.report(root / "bad")
        (bad / name).write_bytes(content)
        before = files(root)
        code, err = run_cli(argv(command, root, good, bad))
        return code, err, bad / name, files(root) == before
    finally:
        shutil.rmtree(root)


PROPERTY = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("command", COMMANDS)
@PROPERTY
@given(data=st.data())
def test_sure_damage_is_one_line_naming_the_file(command, data):
    names = (RESULTS,) if command == "export:bmf" else (RESULTS, "run.json")  # bmf: no run.json
    code, err, damaged, untouched = _run_damaged(command, *data.draw(sure_damage(names)))
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and str(damaged) in err, err
    assert untouched


@pytest.mark.parametrize("command", COMMANDS)
@PROPERTY
@given(damage=any_damage())
def test_any_damage_is_taken_or_refused_in_one_line(command, damage):
    """Damage may leave a valid file (the command then runs: compare may find a record lost,
    exit 1); a refusal is one line and writes nothing."""
    code, err, _, untouched = _run_damaged(command, *damage)
    assert code in ((0, 1, 2) if command == "compare" else (0, 2)), err
    if code == 2:
        assert err.startswith("error: ") and err.count("\n") == 1, err
        assert untouched
