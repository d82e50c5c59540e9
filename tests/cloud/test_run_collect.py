"""The task's set-up and run, executed locally with PLATFORM=ci in a copy of the repository and a
folder standing in for the bucket, then `cloud collect` of that folder: outputs/ci/ and the gallery.
One notebook (backend_cpu, ~1 min here) through the task's ONLY, not the whole ci workbook."""

import os
import shutil
import subprocess

import pytest

from kernel_lib.__main__ import main
from kernel_lib.cloud.tasks import task_config
from kernel_lib.params import ROOT
from tests.cloud.conftest import NO_SKY

pytest.importorskip("sky", reason=NO_SKY)

# Not copied: the venvs and the Inductor cache are linked instead, reports are made afresh.
SKIP = shutil.ignore_patterns(".git", ".venv*", ".cache", "outputs", "__pycache__", ".*cache")


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory):
    """The working tree copied with its files' times (so make finds .venv up to date), with .venv
    and .cache linked to the real ones."""
    copy = tmp_path_factory.mktemp("repo") / "kernel-workbook"
    shutil.copytree(ROOT, copy, ignore=SKIP)
    (ROOT / ".cache").mkdir(exist_ok=True)
    for shared in (".venv", ".cache"):
        (copy / shared).symlink_to(ROOT / shared)
    # a set-up that would run from the copy would point .venv's path file at it: refuse
    if subprocess.run(["make", "-q", "setup"], cwd=copy).returncode != 0:
        pytest.fail("`make setup` is not up to date in this checkout: run it first")
    return copy


def test_task_run_locally_then_collect_gives_outputs_ci_and_the_gallery(repo_copy, tmp_path):
    config = task_config("ci", only=["backend_cpu"])
    bucket = tmp_path / "bucket"
    env = {**os.environ, **config["envs"], "RESULTS": str(bucket)}
    for script in (config["setup"], config["run"]):
        done = subprocess.run(
            ["bash", "-c", script], cwd=repo_copy, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (bucket / "ci" / "run.json").exists()

    outputs = repo_copy / "outputs"
    shutil.rmtree(outputs)  # as on the machine that launched it: the report is in the bucket only
    assert main(["cloud", "collect", str(bucket), "--out", str(outputs)]) == 0
    assert (outputs / "ci" / "backend_cpu.ipynb").exists()
    assert (outputs / "ci" / "index.html").exists()
    assert 'href="ci/index.html"' in (outputs / "index.html").read_text()
