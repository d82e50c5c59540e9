"""`cloud collect` from a local folder standing in for the bucket (no SkyPilot needed; a module
standing in for it where the bucket's sync line is built); bucket URLs a shell would read, and
reports holding links or FIFOs, refused before anything runs or is copied."""

import os
import shlex
import shutil
import sys
import tempfile
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernel_lib.__main__ import main
from kernel_lib.params import ROOT, ParameterError
from kernel_lib.results.outdir import install
from tests.fakes import RESULTS


@pytest.mark.slow  # rebuilds every report of outputs/reference and the gallery
def test_collect_copies_each_report_and_rebuilds_the_gallery(tmp_path, capsys):
    bucket, outputs = tmp_path / "bucket", tmp_path / "outputs"
    shutil.copytree(ROOT / "outputs" / "reference", bucket / "ci")
    (bucket / "h100").mkdir()  # a job still running: no run.json yet, not collected
    shutil.copytree(bucket / "ci", outputs / "ci")  # an earlier report, replaced as a whole
    (outputs / "ci" / "stale.txt").write_text("a file of the earlier report")
    assert main(["cloud", "collect", str(bucket), "--out", str(outputs)]) == 0
    assert (outputs / "ci" / "run.json").exists() and (outputs / "ci" / "index.html").exists()
    assert not (outputs / "ci" / "stale.txt").exists() and not (outputs / "h100").exists()
    assert 'href="ci/index.html"' in (outputs / "index.html").read_text()
    assert capsys.readouterr().out.endswith(f"gallery: {outputs / 'index.html'}\n")


def test_collect_without_a_finished_report_is_bad_input(tmp_path, capsys):
    (tmp_path / "h100").mkdir()
    assert main(["cloud", "collect", str(tmp_path), "--out", str(tmp_path / "outputs")]) == 2
    assert "no finished report (<platform>/run.json)" in capsys.readouterr().err


# A bucket URL that SkyPilot would put into its `bash -c` sync line as it is.
HOSTILE_URLS = ["gs://b/x;touch F", "s3://b/$(touch F)", "gs://b/x`touch F`", "gs://b x", "gs://"]


def _fake_sky(monkeypatch, report: Path | None = None) -> Path:
    """`sky` stood in for by a module whose sync line, built as SkyPilot builds it (its arguments
    put in unquoted), prints its arguments one a line into the file returned, then copies
    `report` in as the bucket's `cpu/`."""
    args = report.parent / "sync.args" if report else Path("/nonexistent")

    def make_sync_dir_command(source: str, destination: str) -> str:
        copy = f" && cp -r {shlex.quote(str(report))} {destination}/cpu" if report else ""
        return f"printf '%s\\n' {source} {destination} > {shlex.quote(str(args))}{copy}"

    storage = SimpleNamespace(make_sync_dir_command=make_sync_dir_command)
    sky = types.ModuleType("sky")
    sky.cloud_stores = SimpleNamespace(get_storage_from_path=lambda url: storage)
    monkeypatch.setitem(sys.modules, "sky", sky)
    return args


@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_a_bucket_url_a_shell_would_read_is_refused_before_anything_runs(
    tmp_path, monkeypatch, capsys, url
):
    monkeypatch.chdir(tmp_path)
    _fake_sky(monkeypatch)
    assert main(["cloud", "collect", url, "--out", str(tmp_path / "outputs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: source {url!r} must be a bucket URL gs://BUCKET[/PATH]"), err
    assert err.count("\n") == 1 and sorted(tmp_path.iterdir()) == []


def test_the_sync_line_gets_the_bucket_and_the_folder_quoted(tmp_path, monkeypatch, make_run):
    """A temporary folder whose name a shell would read: the sync line gets it as one word."""
    weird = tmp_path / "tmp; touch F $(touch G)"
    weird.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(weird))
    monkeypatch.chdir(tmp_path)
    args = _fake_sky(monkeypatch, make_run(tmp_path / "job" / "cpu"))
    outputs = tmp_path / "outputs"
    assert main(["cloud", "collect", "gs://bucket/run-1", "--out", str(outputs)]) == 0
    bucket, folder = args.read_text().splitlines()
    assert bucket == "gs://bucket/run-1" and Path(folder).parent == weird
    assert (outputs / "cpu" / "run.json").exists() and (outputs / "index.html").exists()
    assert not (tmp_path / "F").exists() and not (tmp_path / "G").exists()


def _special(kind: str):
    """A report's file replaced by `kind`: a link out of the report, a FIFO; or the report
    itself a link."""

    def damage(report: Path) -> Path:
        if kind == "linked report":
            report.rename(report.with_name("real"))
            report.symlink_to(report.with_name("real"))
            return report
        path = report / RESULTS
        path.unlink()
        if kind == "FIFO":
            os.mkfifo(path)
        else:
            path.symlink_to("/etc/hostname" if kind == "link out" else "/dev/zero")
        return path

    return damage


def _tree(root: Path) -> dict:
    return {p: p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("kind", ["link out", "link to /dev/zero", "FIFO", "linked report"])
def test_a_report_holding_a_link_or_a_fifo_is_refused_nothing_copied(
    tmp_path, capsys, kind, make_run
):
    source, outputs = tmp_path / "bucket", tmp_path / "outputs"
    make_run(source / "ci")
    refused = _special(kind)(make_run(source / "cpu"))
    make_run(outputs / "cpu")  # an earlier report: kept byte for byte
    (outputs / "cpu" / "mine.txt").write_text("the user's")
    before = _tree(outputs)
    assert main(["cloud", "collect", str(source), "--out", str(outputs)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {refused}: "), err
    assert ("a FIFO, not a regular file" if kind == "FIFO" else "a symbolic link") in err, err
    assert _tree(outputs) == before and not (outputs / "ci").exists()


def test_install_refuses_a_report_holding_a_link(tmp_path, make_run):
    report = make_run(tmp_path / "cpu")
    (report / "trace.json.gz").symlink_to("/etc/hostname")
    with pytest.raises(ParameterError, match="trace.json.gz: a symbolic link"):
        install(report, tmp_path / "outputs" / "cpu")
    assert not (tmp_path / "outputs").exists()
