"""A notebook's time budget (workbook.budget_s): read from the platform file, checked, carried in
run.json, and a run past 1.5x of it flagged in the report. The cpu platform's cut of the full sweep
(cpu-full): what it keeps, and the line each notebook prints about what it left out."""

import json

import pytest

from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.config import left_out
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.params import ParameterError, load_plan
from kernel_lib.records import measured, save_records
from kernel_lib.report.pages import build_report
from kernel_lib.timing import Timing

T = Timing(2.0, 1.9, 2.2, 1.8, 10, "perf_counter + cpu synchronize", None)


def _report(folder, facts, seconds: dict, budget: dict):
    for name in seconds:
        save_records([measured("device", "gemm", "torch_mm", T, facts=facts)], name, folder)
    run = {
        "platform": "cpu",
        "parameters": "parameters/cpu.yaml",
        "description": "",
        "started_utc": "s",
        "finished_utc": "f",
        "git": "abc",
        "command": "c",
        "environment": facts.as_dict(),
        "budget_s": budget,
        "notebooks": [
            {"notebook": n, "status": "ok", "detail": "", "seconds": s} for n, s in seconds.items()
        ],
    }
    (folder / "run.json").write_text(json.dumps(run))
    build_report(folder)
    return (folder / "index.html").read_text(), (folder / "SUMMARY.md").read_text()


def test_a_notebook_past_one_and_a_half_times_its_budget_is_flagged(tmp_path, cpu_facts):
    seconds = {"slow": 160.0, "near": 149.0, "free": 999.0}
    index, summary = _report(tmp_path, cpu_facts, seconds, {"slow": 100, "near": 100})
    for page in (index, summary):
        assert "every record of slow" in page
        assert "ran 160 s: past 1.5x its budget of 100 s" in page
        assert "every record of near" not in page  # within 1.5x
        assert "every record of free" not in page  # no budget declared


def test_the_platform_files_budgets_are_read_and_checked(tmp_path):
    for name in ("cpu", "cpu-full"):
        plan = load_plan(name)
        assert set(plan.budget_s) == set(plan.notebooks)
    assert sum(load_plan("cpu").budget_s.values()) <= 8.5 * 60  # 10 minutes with setup
    for bad in ("{moe: 0}", "{nope: 5}", "[5]", "{moe: true}"):
        (tmp_path / "x.yaml").write_text(f"workbook: {{notebooks: [moe], budget_s: {bad}}}\n")
        with pytest.raises(ParameterError, match="workbook.budget_s"):
            load_plan("x", parameters_dir=tmp_path)


# What the cpu cut may never leave out: what a headline or a correctness check is made of.
KEPT = {
    AttentionBenchConfig: ("patterns", "causal_dtypes", "upcast", "cold_compile", "gym_kernels",
                      "activations", "seq_len", "decode_kv_len"),
    MoEBenchConfig: ("strategies", "compile", "backward", "presets", "tokens", "imbalance",
                     "fp8_decode_presets", "fp8_decode_tokens"),
}  # fmt: skip


@pytest.mark.parametrize("cls", list(KEPT))
def test_the_cpu_cut_keeps_every_headline_and_check(cls):
    cut = cls.from_params(load_plan("cpu").values)
    full = cls.from_params(load_plan("cpu-full").values)
    assert full == cls()  # cpu-full: the notebook's defaults
    for name in KEPT[cls]:
        assert getattr(cut, name) == getattr(full, name), name


def test_a_cut_says_what_it_left_out_and_the_command_that_runs_it():
    cut = AttentionBenchConfig(block_sizes=(64,), cold_compile=False)
    line = left_out(cut, "flex_attention")
    assert "left out attn_block_sizes [32, 128, 256]; attn_cold_compile. All" in line
    sized = left_out(AttentionBenchConfig(windows_seq_len=2048), "flex_attention")
    assert "changed attn_windows_seq_len=2048 (default 4096)." in sized
    assert line.endswith("python -m kernel_lib run --platform cpu-full --only flex_attention")
    assert "nothing" in left_out(MoEBenchConfig(), "moe")
