"""Plot titles say what their records were measured at."""

import matplotlib.pyplot as plt
import pandas as pd

from kernel_lib import plots
from kernel_lib.fp8 import plots as fp8_plots
from kernel_lib.moe import plots as moe_plots
from kernel_lib.moe import tables as moe_tables
from kernel_lib.moe.balancing import load_over_steps
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.presets import preset


def _frame(**columns) -> pd.DataFrame:
    base = {
        "status": ["ok", "ok", "ok"],
        "implementation": ["a", "a", "b"],
        "dtype": ["float32"] * 3,
        "median_ms": [1.0, 2.0, 3.0],
        "shape.seq_len": [256, 512, 512],
        "shape.heads": [4, 4, 4],
        "shape.capacity": [None, None, None],
    }
    return pd.DataFrame({**base, **columns})


def test_measured_at_names_dtype_and_the_fields_every_record_shares():
    assert plots.measured_at(_frame()) == "float32 heads=4"  # seq_len varies: it is the x axis
    mixed = _frame(dtype=["float32", "bfloat16", "float32"])
    assert plots.measured_at(mixed) == "bfloat16 and float32 heads=4"
    assert plots.measured_at(_frame().iloc[:1]) == "float32 heads=4,seq_len=256"
    assert plots.measured_at(_frame().iloc[:0]) == ""


def test_sweep_title_carries_it():
    ax = plots.sweep(_frame(), x="shape.seq_len", y="median_ms", title="time vs S")
    assert ax.get_title() == "time vs S\nfloat32 heads=4"
    plt.close(ax.figure)


def test_moe_and_fp8_bars_name_it_too():
    moe = _frame(case=["forward"] * 3, tflops=[0.3, 0.4, 0.5], **{"shape.D": [512] * 3})
    ax = moe_plots.strategy_bars(moe)
    assert ax.get_title().endswith("\nfloat32 D=512,heads=4")
    fp8 = _frame(
        case=["quantize"] * 3,
        implementation=["copy", "a", "b"],
        gbps=[30.0, 20.0, 10.0],
        fraction_of_peak=[1.0, 0.67, 0.33],
        **{"shape.MiB": [64] * 3},
    )
    ax = fp8_plots.bandwidth_bars(fp8)
    assert ax.get_title() == "Quantisation bandwidth vs copy\nfloat32 MiB=64,heads=4,seq_len=512"
    plt.close("all")


def test_moe_load_plots_name_the_routing_they_count():
    cfg = MoEBenchConfig.from_params(
        {"moe_tokens": [256], "moe_hidden": [64], "moe_ffn": [128], "moe_experts": 4}
    )
    rows = [
        {"imbalance": 0.0, "expert": e, "tokens": n, "cv": 0.1} for e, n in enumerate([1, 2, 3])
    ]
    ax = moe_plots.expert_load(rows, at=moe_tables.load_text(cfg))
    assert ax.get_title() == "Expert load\nT=256,E=4,K=2"
    load = load_over_steps(preset(cfg.balance_preset), steps=2, tokens=64, gamma=0.1, zipf=0.3)
    ax = moe_plots.load_over_steps(load, at=moe_tables.balance_text(cfg))
    assert ax.get_title() == f"Expert load over steps\n{cfg.balance_preset} " + (
        f"T={cfg.preset_tokens},gamma={cfg.balance_gamma},zipf={cfg.preset_zipf}"
    )
    plt.close("all")
