import dataclasses
import types

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kernel_lib import c_kernels  # noqa: E402
from kernel_lib import plots as common_plots  # noqa: E402
from kernel_lib import records as rec  # noqa: E402
from kernel_lib.fp8 import (  # noqa: E402
    bench,
    bench_blocks,
    bench_weight_only,
    candidates,
    linear,
    plots,
    quantize_c,
    quantize_compiled,
)
from kernel_lib.fp8 import suite as fp8_suite  # noqa: E402
from kernel_lib.fp8.config import Fp8BenchConfig  # noqa: E402
from kernel_lib.fp8.numerics import quantization_error_table, relative_errors, sample_tensor  # noqa: E402
from kernel_lib.platform import Datasheet, device_facts  # noqa: E402
from kernel_lib.records import to_frame  # noqa: E402
from kernel_lib.report.findings import headlines  # noqa: E402
from kernel_lib.suite import Context  # noqa: E402

from .conftest import ONEDNN_REFUSAL, refuse_ragged  # noqa: E402

pytestmark = pytest.mark.slow  # the fp8 suite, run once for the module, and its sections again

TINY = dict(
    fp8_quant_mib=[1],
    fp8_quant_granularities=["tensorwise", "rowwise"],
    fp8_min_time_s=0.01,
    fp8_gemm_sizes=[64],
    fp8_check_sizes=[32],
    fp8_recipes=["tensorwise_dynamic"],
    fp8_train_steps=20,
    fp8_train_batch=8,
    fp8_model_seq=16,
    fp8_train_seeds=2,
    fp8_train_recipes=["tensorwise_dynamic", "tensorwise_delayed"],
    fp8_error_rows=128,
    fp8_block_sizes=[128],
    fp8_grouped_experts=4,
    fp8_grouped_tokens=64,
    fp8_grouped_dim=64,
    fp8_grouped_ffn=32,
    fp8_weight_only_decode_rows=[1, 3],
    fp8_weight_only_prefill_rows=[17],
    fp8_weight_only_dims=[72, 40],
    fp8_weight_only_expert_dims=[128, 24],
)
CONFIG = Fp8BenchConfig.from_params(TINY)


@pytest.fixture(scope="module")
def records():
    return fp8_suite.run_suite(TINY)


@pytest.fixture(scope="module")
def frame(records):
    return to_frame(records)


def _status(records, implementation):
    return {r.implementation: r for r in records}[implementation].status


def test_quantize_records_carry_bandwidth_fraction_of_copy_and_ratio(frame):
    quant = frame[(frame["case"] == "quantize") & (frame["status"] == "ok")]
    assert set(quant["implementation"]) == {
        "copy",
        "quantize_tensorwise",
        "compiled_quantize_tensorwise",
        "quantize_rowwise",
        "compiled_quantize_rowwise",
        "row_fused_quantize_rowwise",
        "c_quantize_tensorwise",
        "c_quantize_rowwise",
        "plain_compiled_quantize_tensorwise",
        "plain_compiled_quantize_rowwise",
    }
    kernels = quant[quant["implementation"] != "copy"]
    assert (
        kernels["fraction_of_peak"].notna().all()
        and kernels["peak_basis"].str.contains("copy").all()
    )
    assert kernels["ratio_vs_baseline"].notna().all() and (kernels["baseline"] == "copy").all()
    assert quant["check.pass"].all()


def test_the_quantise_variant_is_chosen_by_measurement_and_declared(frame):
    quant = frame[frame["variant"].notna() & (frame["case"] == "quantize")]
    chosen = set(quant["variant"])
    variants = {f"{v}_{g}" for v in candidates.VARIANTS for g in ("tensorwise", "rowwise")}
    assert len(chosen) == 2 and chosen <= variants  # one per granularity
    assert "row_fused_quantize_rowwise" in set(quant["implementation"])  # a rowwise candidate
    headline = frame[frame["headline"].notna() & (frame["case"] == "quantize")]
    assert len(headline) == 1 and headline["implementation"].iloc[0] in chosen


def test_cpu_times_fp8_gemms_wherever_onednn_runs_them(frame):
    """Measured, never declared: no rule by device type keeps _scaled_mm from being timed."""
    fp8 = frame[(frame["case"] == "linear_forward") & (frame["dtype"] == "float8_e4m3fn")]
    assert len(fp8) == 4
    if linear.cpu_scaled_mm_error():  # a CPU whose oneDNN has no FP8 matmul: its own reason
        assert (fp8["status"] == "skipped").all() and fp8["reason"].str.contains("raised").all()
        return
    assert (fp8["status"] == "ok").all() and fp8["ratio_vs_baseline"].notna().all()
    fast = fp8.set_index("implementation")["metrics.use_fast_accum"]
    assert fast.to_dict() == {
        "scaled_mm_tensorwise_dynamic": False,
        "scaled_mm_fast_accum_tensorwise_dynamic": True,
        "fp8_inference_linear_tensorwise_dynamic": False,
        "fp8_linear_tensorwise_dynamic": False,
    }  # the record says which accumulation ran; the headline (fp8_linear) is the fp32 one
    assert (
        frame[frame["implementation"].str.startswith("fused_quantize")]["status"] == "skipped"
    ).all()


def test_a_quantiser_that_fails_to_build_costs_only_the_fp8_records(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("triton.CompilationError: at 12:4: unsupported")

    monkeypatch.setattr(candidates, "dynamic_quantize", broken)
    got = {r.implementation: r for r in bench.linear_speed(CONFIG, device_facts())}
    assert got["bf16_linear"].status == "ok"
    for path in ("scaled_mm", "scaled_mm_fast_accum", "fp8_inference_linear"):
        record = got[f"{path}_tensorwise_dynamic"]
        assert record.status == "failed" and "CompilationError" in record.reason


SKIPPED_HEADLINES = ("block_linear_blockwise", "scaled_grouped_mm")


def test_headlines_declared(frame, records):
    declared = frame[frame["headline"].notna()]
    heads = declared[declared["headline"] != "fp8.weight_only_decode_vs_read"]
    heads = heads.set_index("implementation")
    quantiser = next(i for i in heads.index if i.endswith("_tensorwise"))
    decode = heads[heads["headline"] == "fp8.weight_only_decode_vs_bf16"]
    (read,) = declared[declared["headline"] == "fp8.weight_only_decode_vs_read"].itertuples()
    assert read.implementation == decode.index[0] and read.case == "weight_only_vs_read"
    assert len(heads) == 5 and quantiser.removesuffix("_tensorwise") in candidates.VARIANTS
    assert heads.loc[quantiser, "fraction_of_peak"] > 0
    for name in SKIPPED_HEADLINES:  # no CPU kernel for these layouts: the headline says why
        assert heads.loc[name, "status"] == "skipped" and heads.loc[name, "reason"]
    assert heads.loc["block_linear_blockwise", "shape.N"] == max(CONFIG.block_sizes)
    assert len(decode) == 1 and decode.index[0] in bench_weight_only.VARIANTS
    assert decode["shape.M"].iloc[0] == 1 and decode["shape.scaling"].iloc[0] == "channel"
    assert heads["headline"].to_dict() == {
        quantiser: "fp8.quantize_vs_copy",
        "fp8_linear_tensorwise_dynamic": "fp8.linear_vs_bf16",
        "block_linear_blockwise": "fp8.block_linear_vs_bf16",
        "scaled_grouped_mm": "fp8.grouped_gemm_vs_bf16",
        decode.index[0]: "fp8.weight_only_decode_vs_bf16",
    }  # each declared by its key
    lines = headlines(rec.to_frame_with_verdict(records))
    assert sum(": skipped: " in line for line in lines) == 2
    joined = "\n".join(lines)
    assert "FP8 linear vs bf16 linear" in joined and "W8A16" in joined  # their titles


def test_declare_marks_only_the_subject_at_the_shape():
    facts = device_facts()
    records = [
        rec.skipped("fp8", "block_linear", name, "why", facts=facts, shape={"N": n})
        for name in ("bf16_linear", "block_linear_blockwise")
        for n in (128, 256)
    ]
    key = "fp8.block_linear_vs_bf16"
    got = bench_blocks.declare(records, "block_linear_blockwise", {"N": 256}, key)
    assert [(r.implementation, r.shape["N"]) for r in got if r.headline == key] == [
        ("block_linear_blockwise", 256)
    ]
    with pytest.raises(ValueError, match="not declared"):  # a headline is a declared key
        bench_blocks.declare(records, "block_linear_blockwise", {"N": 256}, "label")


def test_comparators_skip_when_not_installed(frame):
    comp = frame[
        frame["implementation"].isin(["torchao_float8_linear", "transformer_engine_linear"])
    ]
    assert len(comp) == 2 and (comp["reason"] == "not installed").all()


def test_inference_and_training_records(frame):
    inf = frame[frame["case"] == "inference"].set_index("implementation")
    assert (
        inf.loc["fp8_model", "metrics.weight_bytes"]
        < inf.loc["bf16_model", "metrics.weight_bytes"]
    )
    train = frame[frame["case"] == "training"]
    assert len(train) == 2 * 3 and (train["status"] == "ok").all() and train["check.pass"].all()


def test_inference_and_training_records_name_the_model_they_measured(records):
    model = {"D": CONFIG.model_dim, "F": CONFIG.model_ffn, "layers": CONFIG.model_layers}
    model |= {"rows": CONFIG.train_batch * CONFIG.model_seq}
    got = {
        (r.case, r.implementation, r.shape.get("seed")): r
        for r in records
        if r.case in ("inference", "training")
    }
    assert got["inference", "bf16_model", None].shape == model
    assert got["inference", "fp8_model", None].dtype == "float8_e4m3fn"
    trained = model | {"steps": CONFIG.train_steps, "seed": 1}
    assert got["training", "bf16", 1].shape == trained
    fp8 = got["training", "fp8_tensorwise_dynamic", 1]
    assert fp8.dtype == "float8_e4m3fn" and fp8.shape == trained | {"grad_format": "e5m2"}


def test_plots_draw(frame):
    plots.bandwidth_bars(frame)
    plots.bandwidth_bars(frame[frame["case"] == "training"])  # nothing measured: says so
    x = sample_tensor("normal", (64, 64))
    at = common_plots.tensor_text(x)
    ax = plots.sqnr_bars(
        quantization_error_table(
            x, formats=["e4m3fn", "e5m2"], granularities=["tensorwise", "rowwise"]
        ),
        at=at,
    )
    assert ax.get_title() == "median per-row SQNR (dB)\nfloat32 64x64"
    errors = relative_errors(x, formats=["e4m3fn", "e5m2"], granularity="tensorwise")
    assert plots.error_histogram(errors, title="t", at=at).get_title() == "t\nfloat32 64x64"


def test_training_curves_name_the_model_and_run_sizes():
    losses = pd.DataFrame(
        {"step": [0, 1, 0, 1], "run": ["bf16"] * 2 + ["fp8"] * 2, "loss": [1, 0.5, 1, 0.6]}
    )
    ax = plots.training_curves(losses, at=bench.training_text(CONFIG))
    assert ax.get_title() == "bf16 vs FP8 training\nD=32,F=64,layers=1,rows=128,seed=0,steps=20"


def test_e5m2_for_e4m3_makes_every_fp8_linear_path_wrong(monkeypatch):
    real = candidates.dynamic_quantize
    monkeypatch.setattr(
        candidates, "dynamic_quantize", lambda t, config: real(t, config, fmt="e5m2")
    )
    monkeypatch.setattr(
        linear, "dynamic_quantize", lambda t, config, fmt=None: real(t, config, fmt="e5m2")
    )
    records = bench.linear_speed(CONFIG, device_facts())
    for path in ("scaled_mm", "fp8_inference_linear", "fp8_linear"):
        assert _status(records, f"{path}_tensorwise_dynamic") == "wrong", path


def test_dropped_scale_makes_the_gemm_wrong(monkeypatch):
    real = candidates.scaled_mm

    def unscaled(a, b, *, out_dtype):
        one = torch.ones((), device=a.data.device)
        return real(
            dataclasses.replace(a, scale=one),
            dataclasses.replace(b, scale=one),
            out_dtype=out_dtype,
        )

    monkeypatch.setattr(candidates, "scaled_mm", unscaled)
    records = bench.linear_speed(CONFIG, device_facts())
    assert _status(records, "scaled_mm_tensorwise_dynamic") == "wrong"
    assert _status(records, "bf16_linear") == "ok"


def test_broken_baseline_is_wrong_and_gives_no_ratio(monkeypatch):
    monkeypatch.setattr(
        candidates, "F", types.SimpleNamespace(linear=lambda x, w: F.linear(x, w) * 1.02)
    )
    assert _status(bench.linear_speed(CONFIG, device_facts()), "bf16_linear") == "wrong"


def test_quantiser_in_the_wrong_format_or_copy_dropping_data_is_wrong(monkeypatch):
    real = candidates.quantize
    monkeypatch.setattr(candidates, "quantize", lambda x, *, fmt, **kw: real(x, fmt="e5m2", **kw))
    records = bench.quantize_bandwidth(CONFIG, device_facts())
    assert _status(records, "quantize_tensorwise") == "wrong"
    assert _status(records, "compiled_quantize_tensorwise") == "ok"


def test_a_row_fused_quantiser_dropping_a_code_is_wrong_and_never_chosen(monkeypatch):
    real = quantize_compiled.compiled_quantize

    def broken(x, *, fuse_rows=False, **kw):
        got = real(x, fuse_rows=fuse_rows, **kw)
        if fuse_rows:
            got.data.view(torch.uint8)[-1, -1] ^= 1  # one code off by one ulp
        return got

    monkeypatch.setattr(quantize_compiled, "compiled_quantize", broken)
    records = bench.quantize_bandwidth(CONFIG, device_facts())
    assert _status(records, "row_fused_quantize_rowwise") == "wrong"
    rowwise = {r.implementation: r for r in records}["compiled_quantize_rowwise"]
    assert rowwise.status == "ok" and rowwise.variant != "row_fused_quantize_rowwise"


def test_a_c_quantiser_with_a_wrong_constant_is_wrong_and_never_chosen(monkeypatch):
    real = quantize_c.cast_constants
    monkeypatch.setattr(
        quantize_c,
        "cast_constants",
        lambda fmt: dataclasses.replace(real(fmt), max_bits=real(fmt).max_bits - (1 << 20)),
    )
    records = bench.quantize_bandwidth(CONFIG, device_facts())
    for gran in ("tensorwise", "rowwise"):
        assert _status(records, f"c_quantize_{gran}") == "wrong"
        chosen = {r.implementation: r for r in records}[f"compiled_quantize_{gran}"].variant
        assert chosen != f"c_quantize_{gran}"


def test_the_c_quantiser_is_skipped_with_the_reason_it_cannot_build(monkeypatch, tmp_path):
    monkeypatch.setenv(c_kernels.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(quantize_c, "_library", quantize_c._library.__wrapped__)
    monkeypatch.setattr(c_kernels.shutil, "which", lambda name: None)
    records = {r.implementation: r for r in bench.quantize_bandwidth(CONFIG, device_facts())}
    c = records["c_quantize_rowwise"]
    assert c.status == "skipped" and "no C compiler" in c.reason
    assert records["compiled_quantize_rowwise"].status == "ok"


def test_suite_records_skipped_sections_without_scaled_mm(records, monkeypatch):
    monkeypatch.setattr(linear, "fp8_matmul_support", lambda device: "unsupported")
    unsupported = fp8_suite.run_suite(TINY)
    # the same records, skipped: a run here and one on a device without FP8 match in `compare`
    assert sorted(rec.record_id(r, "p") for r in unsupported) == sorted(
        rec.record_id(r, "p") for r in records
    )
    frame = to_frame(unsupported)
    fp8 = frame[
        frame["case"].isin(["linear_forward", "inference", "training"])
        & (frame["implementation"] != "bf16_linear")
    ]
    assert (fp8["status"] == "skipped").all()
    assert {"inference", "training"} <= set(fp8["case"])
    assert fp8["reason"].str.contains("unsupported|not installed").all()


def _rerun_keeps_every_record(records):
    """The suite run again (as patched): the same record ids as `records`, none failed or wrong."""
    again = fp8_suite.run_suite(TINY)
    ids = lambda rs: sorted(rec.record_id(r, "p") for r in rs)  # noqa: E731
    assert ids(again) == ids(records)
    frame = to_frame(again)
    assert not frame["status"].isin(["failed", "wrong"]).any()
    return frame


def test_a_cpu_whose_onednn_refuses_scaled_mm_skips_every_fp8_gemm_and_keeps_the_rest(
    records, refused_scaled_mm
):
    frame = _rerun_keeps_every_record(records)
    gemms = frame[frame["reason"].fillna("").str.contains("primitive descriptor")]
    assert {"inference", "training", "block_gemm_check"} <= set(gemms["case"])
    assert (frame[frame["case"] == "quantize"]["status"] == "ok").any()


def test_calls_onednn_refuses_after_its_probe_passed_are_skipped_never_failed(
    records, monkeypatch
):
    """Every odd M refused (the check tables' ragged shapes) though the probe passed: the same
    records, the refused ones skipped naming the call, none failed."""
    monkeypatch.setattr(torch, "_scaled_mm", refuse_ragged(torch._scaled_mm))
    monkeypatch.setattr(linear, "cpu_scaled_mm_error", lambda: None)
    frame = _rerun_keeps_every_record(records)
    refused = frame[frame["reason"].fillna("").str.contains("no FP8 matmul for")]
    assert "scaled_mm_check" in set(refused["case"])


@pytest.mark.parametrize("section", ["inference", "training"])
def test_a_section_oneDNN_refuses_after_the_probe_passed_says_so_itself(section, monkeypatch):
    """The notebook's inference and training cells read the section's own skip, not the probe's:
    an AMX Xeon held to AVX2 passes the probe and refuses these sections' calls."""

    def refused(a, *args, **kwargs):
        raise RuntimeError(ONEDNN_REFUSAL)

    monkeypatch.setattr(torch, "_scaled_mm", refused)
    monkeypatch.setattr(linear, "cpu_scaled_mm_error", lambda: None)
    out = fp8_suite.SUITE.run(section, Context(CONFIG, device_facts()))
    assert "no FP8 matmul for" in out.skipped
    assert out.records and all(r.status == "skipped" for r in out.records)
    tables = [out.comparison] if section == "inference" else [out.losses, out.checks]
    assert tables == [None] * len(tables)


def test_an_inductor_key_this_torch_lacks_skips_the_compiled_quantisers_only(monkeypatch):
    monkeypatch.setattr(quantize_compiled, "EXACT_DIVISION", {"eager_numerics.added_later": True})
    records = {r.implementation: r for r in bench.quantize_bandwidth(CONFIG, device_facts())}
    compiled = [r for name, r in records.items() if name.startswith("compiled_quantize")]
    assert compiled and all(r.status == "skipped" for r in compiled)
    assert "no config key eager_numerics.added_later" in compiled[0].reason
    assert records["copy"].status == records["quantize_rowwise"].status == "ok"


def test_recipe_error_records_cover_every_recipe_on_every_tensor(frame):
    errors = frame[frame["case"] == "recipe_error"]
    assert len(errors) == 4 * 5 and errors["metrics.sqnr_db"].notna().all()
    assert (errors["dtype"] == f"float8_{CONFIG.error_format}").all()
    assert (errors[["shape.rows", "shape.cols"]] == CONFIG.error_rows).all().all()
    assert set(errors["implementation"]) == {
        "tensorwise", "rowwise", "blockwise", "blockwise_1x128", "mx"
    }  # fmt: skip


def test_block_and_grouped_checks_carried_and_native_paths_skipped_on_cpu(frame):
    checks = frame[frame["case"].isin(["block_gemm_check", "grouped_gemm_check"])]
    twins = checks[checks["implementation"].str.startswith(("split_k", "looped"))]
    assert len(twins) == 3 and (twins["status"] == "ok").all() and twins["check.pass"].all()
    native = checks[checks["implementation"].str.startswith(("block_scaled_mm", "scaled_grouped"))]
    assert len(native) == 3 and native["reason"].str.startswith("unsupported").all()


def test_scaled_mm_and_linear_checks_are_records_carrying_their_check(frame):
    mm = frame[frame["case"] == "scaled_mm_check"]
    assert set(mm["implementation"]) == {"scaled_mm_tensorwise", "scaled_mm_rowwise"}
    assert len(mm) == 2 * len(CONFIG.check_sizes) and (mm["status"] == "ok").all()
    assert mm["check.pass"].all() and mm["metrics.bf16_vs_fp64"].notna().all()
    assert (mm["shape.M"] == [n + 5 for n in CONFIG.check_sizes for _ in range(2)]).all()
    lin = frame[frame["case"] == "linear_check"]
    recipes = fp8_suite.LINEAR_CHECK_RECIPES
    assert list(lin["implementation"]) == [f"fp8_linear_{r}" for r in recipes]
    assert (lin["status"] == "ok").all() and lin["check.pass"].all()
    assert (
        lin["metrics.grad_w_vs_fp32"].notna().all() and (lin["shape.grad_format"] == "e5m2").all()
    )


def test_a_failed_linear_check_row_is_a_wrong_record_naming_its_error():
    table = pd.DataFrame([{
        "recipe": "rowwise_dynamic", "out_vs_fp8_reference": 0.2, "out_vs_fp32": 0.2,
        "grad_x_vs_fp32": 0.1, "grad_w_vs_fp32": 0.1, "max_abs_error": 0.5, "tolerance": 2**-7,
        "check": "FAIL",
    }])  # fmt: skip
    (record,) = fp8_suite.check_records(table, device_facts(), CONFIG, case="linear_check")
    assert (record.status, record.implementation) == ("wrong", "fp8_linear_rowwise_dynamic")
    assert record.reason.startswith("rel_error 2.0e-01 > 7.8e-03 vs fp64 FP8 reference")
    assert record.shape == fp8_suite.LINEAR_CHECK_SHAPE | {"grad_format": CONFIG.grad_format}


def test_a_check_table_with_an_unknown_verdict_raises():
    table = pd.DataFrame([{"granularity": "tensorwise", "M": 5, "K": 8, "N": 3, "check": "ok"}])
    with pytest.raises(ValueError, match="check='ok' must be one of"):
        fp8_suite.check_records(table, device_facts(), CONFIG, case="scaled_mm_check")


def test_block_and_grouped_speed_time_every_path_onednn_runs(frame):
    """The split-K twins and the per-expert loop are rowwise `_scaled_mm`s: timed wherever it
    runs; the layouts a CPU has no kernel for are skipped with the reason."""
    speed = frame[frame["case"].isin(["block_linear", "grouped_gemm"])]
    timed = speed[speed["median_ms"].notna()]
    assert timed["check.pass"].all()
    runs = linear.cpu_scaled_mm_error() is None
    loops = {"split_k_scaled_mm_blockwise", "split_k_scaled_mm_mxfp8", "looped_scaled_mm"}
    assert set(timed["implementation"]) == {"bf16_linear", "bf16_grouped_mm"} | (
        loops if runs else set()
    )
    untimed = speed[speed["median_ms"].isna()]
    assert len(untimed) == 2 + 1 + (0 if runs else 3) and (untimed["status"] == "skipped").all()


def test_a_failed_check_row_is_a_wrong_record():
    table = pd.DataFrame([{
        "M": 5, "K": 128, "N": 16, "recipe": "blockwise", "implementation": "split_k_scaled_mm",
        "vs_fp8_reference": 0.3, "vs_fp64": 0.3, "max_abs_error": 1.0, "tolerance": 2**-16,
        "check": "FAIL",
    }])  # fmt: skip
    (record,) = fp8_suite.check_records(table, device_facts(), CONFIG, case="block_gemm_check")
    assert record.status == "wrong" and record.implementation == "split_k_scaled_mm_blockwise"
    assert (record.dtype, record.shape) == ("float8_e4m3fn", {"M": 5, "K": 128, "N": 16})


def test_a_broken_grouped_baseline_is_wrong(monkeypatch):
    real = torch._grouped_mm
    monkeypatch.setattr(torch, "_grouped_mm", lambda a, b, offs: real(a, b, offs=offs) * 1.05)
    records = bench_blocks.grouped_gemm_speed(CONFIG, device_facts())
    assert _status(records, "bf16_grouped_mm") == "wrong"


def test_recipe_error_plot_draws_the_records_and_names_what_they_measured(frame):
    axes = plots.recipe_error_bars(frame)
    assert all(len(ax.patches) == 4 * 5 for ax in axes)  # tensors x granularities
    assert axes[0].figure.get_suptitle() == (
        "Quantisation error per scaling recipe, same tensors\nfloat8_e4m3fn cols=128,rows=128"
    )


def test_a_check_row_that_raised_is_a_failed_record():
    table = pd.DataFrame([{
        "T": 36, "E": 4, "implementation": "scaled_grouped_mm", "check": "failed",
        "reason": "RuntimeError: grouped GEMM with 4 groups is not supported",
    }])  # fmt: skip
    (record,) = fp8_suite.check_records(table, device_facts(), CONFIG, case="grouped_gemm_check")
    assert (record.status, record.reason) == ("failed", table["reason"][0])


def test_a_grouped_kernel_failing_at_the_real_case_fails_only_its_record(
    grouped_kernel_up_to_two_groups,
):
    # the probe (2 groups) passes; the real case (4 experts, one empty) raises in compare
    records = bench_blocks.grouped_gemm_speed(CONFIG, device_facts())
    got = {r.implementation: r for r in records}
    assert got["scaled_grouped_mm"].status == "failed"
    assert got["scaled_grouped_mm"].reason.endswith("with 4 groups is not supported")
    assert got["bf16_grouped_mm"].status == got["looped_scaled_mm"].status == "ok"


def test_timed_block_linear_calls_never_sync_on_nonfinite_checks(monkeypatch):
    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs.get("nonfinite", "raise"))
        return real(*args, **kwargs)

    real = bench_blocks.block_linear
    monkeypatch.setattr(bench_blocks, "block_linear", spy)
    bench_blocks.block_linear_speed(CONFIG, device_facts())
    assert calls and set(calls) == {"nan"}  # "raise" costs a host sync per call


def test_gemm_records_carry_the_datasheet_fraction_of_their_dtype(monkeypatch):
    sheet = Datasheet("Fake", 2.0, 4.0, None, None, None, "fake datasheet")
    monkeypatch.setattr(bench_blocks, "datasheet_for", lambda name: sheet)
    records = bench.linear_speed(CONFIG, device_facts())
    base = {r.implementation: r for r in records}["bf16_linear"]
    assert base.fraction_of_datasheet == base.tflops / 2.0
    assert base.datasheet_basis == "datasheet: fake datasheet, bf16 2.0 TFLOP/s"
    assert all(r.fraction_of_datasheet is None for r in records if r.tflops is None)
    fp8 = dataclasses.replace(base, dtype="float8_e4m3fn", fraction_of_datasheet=None)
    (got,) = bench_blocks.with_datasheets([fp8], device_facts())
    assert got.fraction_of_datasheet == base.tflops / 4.0
    assert got.datasheet_basis == "datasheet: fake datasheet, FP8 4.0 TFLOP/s"


def test_no_datasheet_fraction_where_the_device_has_no_datasheet(frame):
    assert frame["fraction_of_datasheet"].isna().all()
