"""XLA helpers that need no torch_xla; the device tests are in test_xla_device.py (XLA venv)."""

import pytest

from kernel_lib.backends import xla


@pytest.mark.parametrize(
    ("length", "bucket", "padded"), [(1, 64, 64), (64, 64, 64), (65, 64, 128), (7, 1, 7)]
)
def test_bucket_length_rounds_up_to_a_multiple(length, bucket, padded):
    assert xla.bucket_length(length, bucket) == padded


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"seq_lens": [], "bucket": 8}, "xla_seq_lens"),
        ({"seq_lens": [0, 4], "bucket": 8}, "xla_seq_lens"),
        ({"seq_lens": [4], "bucket": 0}, "xla_bucket"),
    ],
)
def test_recompiles_rejects_bad_input(cpu_target, kwargs, name):
    with pytest.raises(ValueError, match=name):
        xla.recompiles(cpu_target, dim=8, **kwargs)


def test_matmul_precision_rejects_bad_size(cpu_target):
    with pytest.raises(ValueError, match="xla_precision_size"):
        xla.matmul_precision(cpu_target, n=0)


def test_absent_xla_device_skips_every_xla_section(absent):
    target = absent("tpu")
    records = (
        xla.compile_phases(target, batch=2, dim=4, dtype="float32")
        + xla.recompiles(target, seq_lens=[3], bucket=4, dim=4)
        + xla.matmul_precision(target, n=8)
    )
    assert {r.status for r in records} == {"skipped"} and len(records) == 9
    assert set(xla.compile_table(records)["outputs_match"]) == {
        "skipped: no tpu device (this machine: cpu)"
    }


def test_full_fp32_on_an_absent_device_says_skipped(absent):
    assert xla.use_full_fp32(absent("tpu")) == "skipped: no tpu device (this machine: cpu)"
