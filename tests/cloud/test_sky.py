"""Every generated task is a valid SkyPilot task, and SkyPilot's optimizer, on a fixture catalog with
GCP and AWS enabled, places each platform on the instance expected of it. Offline (conftest)."""

import pytest

from kernel_lib.cloud.tasks import MANUAL, TARGETS, task_config, task_yaml
from kernel_lib.params import list_platforms
from tests.cloud.conftest import NO_SKY

sky = pytest.importorskip("sky", reason=NO_SKY)

LAUNCHABLE = [p for p in list_platforms() if p not in MANUAL]


@pytest.mark.parametrize("platform", LAUNCHABLE)
def test_task_parses_with_sky_task_from_yaml(tmp_path, platform):
    path = tmp_path / f"{platform}.yaml"
    path.write_text(
        task_yaml(task_config(platform, bucket="s3://bucket/run", repeat=2, spot=True))
    )
    task = sky.Task.from_yaml(str(path))
    (resources,) = task.resources
    assert task.envs["PLATFORM"] == platform
    assert resources.use_spot
    assert resources.disk_size == 100
    accelerator = TARGETS[platform].accelerator if platform in TARGETS else None
    if accelerator:
        name, _, count = accelerator.partition(":")
        assert resources.accelerators == {name: int(count or 1)}
    else:
        assert resources.accelerators is None and resources.cpus == "8+"


@pytest.mark.parametrize(
    "platform, cloud, instance, accelerator",
    [
        ("gcp-l4", "GCP", "g2-standard-4", "L4"),
        ("aws-a10g", "AWS", "g5.xlarge", "A10G"),
        ("h100", "GCP", "a3-highgpu-1g", "H100"),
        ("gcp-tpu-v5e", "GCP", "TPU-VM", "tpu-v5litepod-8"),
        ("ci", "AWS", "m6i.2xlarge", None),
    ],
)
def test_optimizer_places_each_platform_on_its_instance(
    clouds_enabled, platform, cloud, instance, accelerator
):
    task = sky.Task.from_yaml_config(task_config(platform, bucket="gs://bucket/run"))
    with sky.Dag() as dag:
        dag.add(task)
    # what `sky.optimize` runs on the API server, called in-process (no server, no network)
    sky.optimizer.Optimizer.optimize(dag, quiet=True)
    best = task.best_resources
    assert (str(best.cloud), best.instance_type) == (cloud, instance)
    assert (list(best.accelerators) if best.accelerators else [None]) == [accelerator]
