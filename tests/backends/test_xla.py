"""XLA helpers that need no torch_xla; the device tests are in test_xla_device.py (XLA venv)."""

import pytest

from kernel_lib.backends import xla


@pytest.mark.parametrize(
    ("length", "bucket", "padded"), [(1, 64, 64), (64, 64, 64), (65, 64, 128), (7, 1, 7)]
)
def test_bucket_length_rounds_up_to_a_multiple(length, bucket, padded):
    assert xla.bucket_length(length, bucket) == padded


def test_absent_xla_device_skips_every_xla_section(absent, tiny):
    target = absent("tpu")
    records = (
        xla.compile_phases(target, tiny)
        + xla.recompiles(target, tiny)
        + xla.matmul_precision(target, tiny)
    )
    assert {r.status for r in records} == {"skipped"} and len(records) == 8
    assert set(xla.compile_table(records)["outputs_match"]) == {
        "skipped: no tpu device (this machine: cpu)"
    }


def test_full_fp32_on_an_absent_device_says_skipped(absent):
    assert xla.use_full_fp32(absent("tpu")) == "skipped: no tpu device (this machine: cpu)"
