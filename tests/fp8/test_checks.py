from kernel_lib.fp8.checks import linear_check, scaled_mm_check


def test_scaled_mm_check_passes():
    table = scaled_mm_check([(21, 32, 48), (64, 128, 16)], granularities=["tensorwise", "rowwise"])
    assert (table["check"] == "PASS").all(), table.to_string()


def test_linear_check_passes():
    table = linear_check(recipes=["tensorwise_dynamic", "rowwise_dynamic", "tensorwise_delayed"])
    assert (table["check"] == "PASS").all(), table.to_string()


def test_checks_skip_where_scaled_mm_cannot_run(monkeypatch):
    from kernel_lib.fp8 import linear

    monkeypatch.setattr(linear, "fp8_matmul_support", lambda device: "unsupported")
    for table in (scaled_mm_check([(32, 64, 32)], granularities=["tensorwise"]),
                  linear_check(recipes=["tensorwise_dynamic"])):
        assert list(table["check"]) == ["skipped"]
        assert table["reason"][0].startswith("unsupported: torch._scaled_mm needs FP8 matrix units")
