import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from kernel_lib.fp8 import plots  # noqa: E402
from kernel_lib.fp8.bench import suite  # noqa: E402
from kernel_lib.fp8.numerics import quantization_error_table, relative_errors, sample_tensor  # noqa: E402
from kernel_lib.fp8.training import TrainConfig, training_runs  # noqa: E402
from kernel_lib.records import to_frame  # noqa: E402

TINY = dict(fp8_quant_mib=[1], fp8_quant_granularities=["tensorwise", "rowwise"], fp8_min_time_s=0.01,
            fp8_gemm_sizes=[64], fp8_recipes=["tensorwise_dynamic"], fp8_train_steps=4, fp8_train_batch=4,
            fp8_model_seq=8, fp8_model_dim=32, fp8_model_ffn=64, fp8_model_layers=1, fp8_seed=0,
            fp8_train_recipes=["tensorwise_dynamic", "tensorwise_delayed"], fp8_linear_format="e4m3fn",
            fp8_grad_format="e5m2")


@pytest.fixture(scope="module")
def frame():
    return to_frame(suite(TINY))


def test_quantize_records_carry_bandwidth_and_fraction_of_copy(frame):
    quant = frame[frame["case"].str.contains("quantize") & (frame["status"] == "ok")]
    assert set(quant["implementation"]) == {"quantize", "compiled_quantize"}
    assert quant["gbps"].notna().all() and quant["fraction_of_peak"].notna().all()
    assert quant["peak_basis"].str.contains("copy").all()


def test_cpu_never_times_fp8_gemms(frame):
    fp8 = frame[(frame["case"] == "linear_forward") & (frame["dtype"] == "float8_e4m3fn")]
    assert (fp8["status"] == "skipped").all() and fp8["reason"].str.startswith("emulated").all()
    triton = frame[frame["implementation"] == "fused_quantize"]
    assert (triton["status"] == "skipped").all()


def test_comparators_skip_when_not_installed(frame):
    comp = frame[frame["implementation"].isin(["torchao_float8_linear", "transformer_engine_linear"])]
    assert len(comp) == 2 and (comp["reason"] == "not installed").all()


def test_inference_and_training_records(frame):
    inf = frame[frame["case"] == "inference"].set_index("implementation")
    assert inf.loc["fp8_model", "metrics.weight_bytes"] < inf.loc["bf16_model", "metrics.weight_bytes"]
    assert set(frame[frame["case"] == "training"]["implementation"]) == {
        "bf16", "fp8_tensorwise_dynamic", "fp8_tensorwise_delayed"}


def test_plots_draw(frame):
    plots.bandwidth_bars(frame)
    plots.bandwidth_bars(frame[frame["case"] == "training"])  # nothing measured: says so
    x = sample_tensor("normal", (64, 64))
    plots.sqnr_bars(quantization_error_table(x, formats=["e4m3fn", "e5m2"], granularities=["tensorwise", "rowwise"]))
    plots.error_histogram(relative_errors(x, formats=["e4m3fn", "e5m2"], granularity="tensorwise"))
    plots.training_curves(training_runs(TrainConfig(steps=3), recipes=["tensorwise_dynamic"]))


def test_suite_records_skipped_sections_without_scaled_mm(monkeypatch):
    from kernel_lib.fp8 import bench, linear

    for module in (bench, linear):
        monkeypatch.setattr(module, "fp8_matmul_support", lambda device: "unsupported")
    frame = to_frame(suite(TINY))
    fp8 = frame[frame["case"].isin(["linear_forward", "inference", "training"]) & (frame["implementation"] != "bf16_linear")]
    assert (fp8["status"] == "skipped").all()
    assert {"inference", "training"} <= set(fp8["case"])
    assert fp8["reason"].str.contains("unsupported|not installed").all()
