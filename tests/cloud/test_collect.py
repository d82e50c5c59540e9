"""`cloud collect` from a local folder standing in for the bucket (no SkyPilot needed)."""

import shutil

import pytest

from kernel_lib.__main__ import main
from kernel_lib.params import ROOT


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
