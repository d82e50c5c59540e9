"""SkyPilot offline: its state and catalogs under a temporary SKY_RUNTIME_DIR (set before `sky` is
first imported), a fixture catalog there, and GCP and AWS enabled by monkeypatch as SkyPilot's own tests do
(tests/common_test_fixtures.py `enable_all_clouds`): no credentials, no network."""

import atexit
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest

if importlib.util.find_spec("sky") is not None:
    os.environ["SKY_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="sky-runtime-")
    atexit.register(shutil.rmtree, os.environ["SKY_RUNTIME_DIR"], ignore_errors=True)

# Reason shown where SkyPilot is absent (`make test` runs in .venv, SkyPilot lives in .venv-cloud).
NO_SKY = "SkyPilot is installed in .venv-cloud only: run `make cloud-test`"

COLUMNS = "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice"
# A few rows in the hosted catalog's format (skypilot-catalog catalogs/v8/gcp/vms.csv): host VMs
# without accelerators, and accelerators with no instance type (SkyPilot pairs them with hosts).
GCP_VMS = """\
n2-standard-8,8.0,32.0,,,,us-central1,us-central1-a,0.38852,0.0935
n1-highmem-8,8.0,52.0,,,,us-central1,us-central1-a,0.47321,0.09962
g2-standard-4,4.0,16.0,,,,us-central1,us-central1-a,0.17,0.068
g2-standard-8,8.0,32.0,,,,us-central1,us-central1-a,0.34,0.136
a3-highgpu-1g,26.0,234.0,,,,us-central1,us-central1-a,1.18251,0.36117
,,,L4,1,L4,us-central1,us-central1-a,0.56,0.224
,,,H100,1,H100,us-central1,us-central1-a,9.79,2.94
,,,tpu-v5litepod-8,1,tpu-v5litepod-8,us-central1,us-central1-a,9.6,4.2
"""
AWS_COLUMNS = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,Arch"
# (catalogs/v8/aws/vms.csv): zone ids, not names, until SkyPilot maps them with credentials
AWS_VMS = """\
m6i.2xlarge,,,8.0,32.0,,0.384,0.15,us-east-1,use1-az1,x86_64
g5.xlarge,A10G,1.0,4.0,16.0,A10G,1.006,0.41,us-east-1,use1-az1,x86_64
g5.2xlarge,A10G,1.0,8.0,32.0,A10G,1.212,0.48,us-east-1,use1-az1,x86_64
"""
ACCELERATOR_CLOUDS = """\
AcceleratorName,Clouds
A10G,['AWS']
H100,"['AWS', 'GCP']"
H200,"['AWS', 'GCP']"
L4,"['AWS', 'GCP']"
MI300X,['RunPod']
tpu-v5litepod,['GCP']
"""


def _write_catalog(root: Path) -> None:
    """SkyPilot reads its catalogs lazily, on first use, from here (else it downloads them)."""
    catalog = root / ".sky" / "catalogs" / "v8"
    files = {
        "gcp/vms.csv": f"{COLUMNS}\n{GCP_VMS}",
        "gcp/images.csv": "Tag,Region,OS,OSVersion,ImageId,CreationDate\n",
        "gcp/accelerator_quota_mapping.csv": "Accelerator,OnDemandQuotaCode,SpotQuotaCode\n",
        "aws/vms.csv": f"{AWS_COLUMNS}\n{AWS_VMS}",
        "aws/images.csv": "Tag,Region,OS,OSVersion,ImageId,CreationDate\n",
        "aws/instance_quota_mapping.csv": "InstanceType,QuotaCode\n",
        "common/accelerators.csv": ACCELERATOR_CLOUDS,
    }
    for name, text in files.items():
        (catalog / name).parent.mkdir(parents=True, exist_ok=True)
        (catalog / name).write_text(text)


@pytest.fixture
def clouds_enabled(monkeypatch):
    """The fixture catalog in place and GCP and AWS enabled, offline."""
    sky = pytest.importorskip("sky", reason=NO_SKY)
    _write_catalog(Path(os.environ["SKY_RUNTIME_DIR"]))
    monkeypatch.setattr(
        "sky.check.get_cached_enabled_clouds_or_refresh",
        lambda *a, **k: [sky.clouds.GCP(), sky.clouds.AWS()],
    )
    # without credentials SkyPilot keeps the catalog's zone ids (its tests read a fixture instead)
    monkeypatch.setattr("sky.catalog.aws_catalog._get_az_mappings", lambda *a, **k: None)
    monkeypatch.setattr(
        "sky.clouds.utils.gcp_utils.list_reservations_for_instance_type_in_zone",
        lambda *a, **k: [],
    )
    return sky
