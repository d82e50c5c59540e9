"""The task files and the `cloud` command's checks: plain Python, no SkyPilot needed."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml

from kernel_lib import params
from kernel_lib.__main__ import main
from kernel_lib.cloud import jobs
from kernel_lib.cloud.tasks import JOB_PREFIX, MANUAL, RESULTS, TARGETS, task_config, task_yaml
from kernel_lib.params import ParameterError, list_platforms
from tests.cloud.test_collect import HOSTILE_URLS


def test_every_target_is_a_platform_file():
    assert set(TARGETS) | set(MANUAL) <= set(list_platforms())


@pytest.mark.parametrize("platform", ["gcp-l4", "h100", "gcp-tpu-v5e", "ci"])
def test_task_runs_make_report_for_its_platform_into_the_bucket(platform):
    config = task_config(platform, bucket="gs://b/run-1/", repeat=3, spot=True)
    assert config["name"] == JOB_PREFIX + platform
    assert config["envs"]["PLATFORM"] == platform and config["envs"]["REPEAT"] == "3"
    assert 'make report PLATFORM="$PLATFORM" REPEAT="$REPEAT"' in config["run"]
    assert config["file_mounts"][RESULTS] == {"source": "gs://b/run-1", "mode": "MOUNT"}
    assert config["resources"]["use_spot"] is True
    assert yaml.safe_load(task_yaml(config)) == config


def test_tpu_task_sets_up_the_xla_environment_with_its_runtime():
    config = task_config("gcp-tpu-v5e")
    assert config["resources"]["accelerators"] == "tpu-v5litepod-8"
    assert config["resources"]["accelerator_args"]["runtime_version"] == "v2-alpha-tpuv5-lite"
    assert "make xla-setup" in config["setup"]
    assert "file_mounts" not in config


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"platform": "intel-max1550"}, "intel-max1550.*by hand"),
        ({"platform": "nope"}, "unknown platform 'nope'"),
        ({"platform": "h100", "bucket": "/tmp/b"}, "--bucket '/tmp/b' must be a bucket URL"),
        ({"platform": "gcp-tpu-v5e", "only": ["moe"]}, "--only"),
    ],
)
def test_bad_input_is_refused_before_any_launch(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        task_config(**kwargs)


@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_launch_refuses_a_bucket_url_a_shell_would_read(tmp_path, monkeypatch, capsys, url):
    monkeypatch.chdir(tmp_path)
    argv = ["cloud", "launch", "--platforms", "ci", "--bucket", url, "--dry-run"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --bucket {url!r} must be a bucket URL"), err
    assert err.count("\n") == 1 and sorted(tmp_path.iterdir()) == []


HOSTILE = "x;touch pwned $(touch pwned2) `touch pwned3` *"


def test_a_platform_name_a_shell_or_make_would_read_is_refused(tmp_path, monkeypatch):
    (tmp_path / f"{HOSTILE}.yaml").write_text("workbook: {notebooks: [moe]}\n")
    monkeypatch.setattr(params.platform_files, "PARAMETERS_DIR", tmp_path)
    assert HOSTILE in list_platforms()  # a parameter file of that name: load_plan reads it
    with pytest.raises(ParameterError, match="letters, digits, '.', '_' and '-' only"):
        task_config(HOSTILE)


@pytest.mark.parametrize("script", ["setup", "run"])
def test_the_scripts_pass_their_values_to_make_as_one_word_each(tmp_path, script):
    """Run by bash with hostile values in the environment (make and python3 stubbed): make gets
    each value whole, and nothing in them runs."""
    config = task_config("ci", repeat=2, only=["moe"])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > make.args\n')
    (bin_dir / "python3").write_text("#!/bin/sh\nexit 0\n")  # ensurepip found: no apt-get
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    envs = {
        **config["envs"],
        "PLATFORM": HOSTILE,
        "ONLY": "moe;touch pwned4",
        "PLUGINS": "k.py'$(touch pwned5)",
    }
    env = {**os.environ, **envs, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    bash = subprocess.run(["bash", "-c", config[script]], cwd=tmp_path, env=env)
    assert bash.returncode == 0
    assert not list(tmp_path.glob("pwned*"))
    args = (tmp_path / "make.args").read_text().splitlines()
    expected = {
        "setup": ["setup", f"PLATFORM={HOSTILE}"],
        "run": [
            "report",
            f"PLATFORM={HOSTILE}",
            "REPEAT=2",
            "ONLY=moe;touch pwned4",
            "PLUGINS=k.py'$(touch pwned5)",
            "REPLACE=1",
        ],  # fmt: skip
    }
    assert args == expected[script]


def test_a_plugin_travels_as_its_path_in_the_checkout_and_one_outside_is_refused(tmp_path):
    assert task_config("ci", plugins=["examples/my_kernels.py"])["envs"]["PLUGINS"] == (
        "examples/my_kernels.py"
    )
    (tmp_path / "k.py").write_text("")
    with pytest.raises(ParameterError, match="inside this checkout"):
        task_config("ci", plugins=[str(tmp_path / "k.py")])


def test_dry_run_prints_the_task_and_its_resources(capsys):
    assert main(["cloud", "launch", "--platforms", "h100", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# h100: H100:1 on the cheapest enabled cloud, 100 GB disk, on-demand")
    assert yaml.safe_load(out.split("\n", 1)[1])["resources"]["accelerators"] == "H100:1"


def test_launch_needs_a_bucket(capsys):
    assert main(["cloud", "launch", "--platforms", "h100"]) == 2
    assert "--bucket gs://... or s3://... is required" in capsys.readouterr().err


@pytest.mark.parametrize(
    "action", [["launch", "--platforms", "h100", "--bucket", "gs://b"], ["status"], ["down"]]
)
def test_without_skypilot_the_error_names_make_cloud_setup(monkeypatch, capsys, action):
    monkeypatch.setitem(sys.modules, "sky", None)  # `import sky` raises ImportError
    assert main(["cloud", *action]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: SkyPilot is not installed here: run `make cloud-setup`")
    assert err.count("\n") == 1


def test_without_an_enabled_cloud_the_error_names_sky_check():
    sky = SimpleNamespace(get=lambda request: request, enabled_clouds=lambda: [])
    with pytest.raises(ParameterError, match="no cloud is enabled.*sky check"):
        jobs.require_cloud(sky)


def test_status_takes_each_platforms_latest_job():
    def job(job_id, name):
        return SimpleNamespace(job_id=job_id, job_name=name)

    records = [job(3, JOB_PREFIX + "h100"), job(1, JOB_PREFIX + "h100"), job(2, "other")]
    records.append(job(4, JOB_PREFIX + "gcp-l4"))
    latest = jobs.platform_jobs(records)
    assert {p: r.job_id for p, r in latest.items()} == {"h100": 3, "gcp-l4": 4}
    assert list(jobs.platform_jobs(records, ["gcp-l4"])) == ["gcp-l4"]


def test_a_task_of_several_nodes_runs_the_report_on_node_0_and_joins_the_others(tmp_path, capsys):
    """h100-2x8: two nodes, torchrun's rendezvous on node 0 for the moe notebook's expert
    parallelism; run by bash per node (make and the venv's python stubbed)."""
    config = task_config("h100-2x8", bucket="gs://b/run")
    assert config["num_nodes"] == 2 and config["resources"]["accelerators"] == "H100:8"
    assert yaml.safe_load(task_yaml(config)) == config
    assert main(["cloud", "launch", "--platforms", "h100-2x8", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("# h100-2x8: 2 nodes of H100:8 on the cheapest")
    bin_dir, venv = tmp_path / "bin", tmp_path / ".venv" / "bin"
    for folder in (bin_dir, venv):
        folder.mkdir(parents=True)
    (bin_dir / "make").write_text('#!/bin/sh\necho "make $*" >> calls\n')
    (venv / "python").write_text(
        '#!/bin/sh\necho "python $* $KERNEL_WORKBOOK_EP_NODES $KERNEL_WORKBOOK_EP_NODE_RANK'
        ' $KERNEL_WORKBOOK_EP_RENDEZVOUS" >> calls\n'
    )
    for stub in (bin_dir / "make", venv / "python"):
        stub.chmod(0o755)
    for node in ("0", "1"):
        work = tmp_path / f"node{node}"
        work.mkdir()
        (work / ".venv").symlink_to(tmp_path / ".venv")
        env = {
            **os.environ, **config["envs"], "RESULTS": str(work / "results"),
            "PATH": f"{bin_dir}:{os.environ['PATH']}", "SKYPILOT_NUM_NODES": "2",
            "SKYPILOT_NODE_RANK": node, "SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2",
        }  # fmt: skip
        assert subprocess.run(["bash", "-c", config["run"]], cwd=work, env=env).returncode == 0
        calls = (work / "calls").read_text().splitlines()
        joins = "python -m kernel_lib.moe.ep_nodes {} 2 {} 10.0.0.1:29500"
        if node == "0":  # the report, then the other nodes released
            assert calls[0].startswith("make report PLATFORM=h100-2x8")
            assert calls[1:] == [joins.format("release", "0")]
        else:  # joins node 0's runs, never runs the report
            assert calls == [joins.format("join", "1")]
