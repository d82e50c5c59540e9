"""Bad input never runs and never destroys: exit 2, one line naming the key, nothing written."""

import os
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_lib import __main__ as cli
from kernel_lib import params
from kernel_lib.params import ParameterError, load_plan, notebook_parameters, parse_override
from kernel_lib.platform import DeviceFacts, device_facts
from kernel_lib.profiling.pending import PROFILE_ENV
from tests.fakes import another_device

ANOTHER_DEVICE = another_device()  # a parameter file for a device this machine is not
GOOD = "workbook: {notebooks: [backend_cpu, fp8, flex_attention, moe]}\n"
# "Billion laughs": nine lists of nine aliases of the one before, 9^9 items once expanded.
LAUGHS = (
    GOOD
    + "moe_tokens: [&a0 [1, 1, 1, 1, 1, 1, 1, 1, 1], "
    + ", ".join(f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9))
    + "]\n"
)
ALIASES = "YAML anchors and aliases (&name, *name) are not allowed"
# (parameter file text or None for parameters/cpu.yaml, extra argv, the text the one line must name)
CASES = [
    (None, ["-p", "moe_tokens=[0]"], "moe_tokens"),
    (None, ["-p", "moe_tokens=[-5]"], "moe_tokens"),
    (None, ["-p", "moe_hidden=[0]"], "moe_hidden"),
    (None, ["-p", "moe_ffn=[-1]"], "moe_ffn"),
    (None, ["-p", "moe_experts=-4"], "moe_experts"),
    (None, ["-p", "moe_experts=0"], "moe_experts"),
    (None, ["-p", "moe_top_k=9"], "moe_top_k"),
    (None, ["-p", "moe_top_k=0"], "moe_top_k"),
    (None, ["-p", "moe_dtype=float8"], "moe_dtype"),
    (None, ["-p", "moe_activation=tanhh"], "moe_activation"),
    (None, ["-p", "moe_strategies=[loop, warp]"], "moe_strategies"),
    (None, ["-p", "moe_capacity_factor=0"], "moe_capacity_factor"),
    (None, ["-p", "moe_capacity_factor=.nan"], "moe_capacity_factor"),
    (None, ["-p", "moe_imbalance=[.nan]"], "moe_imbalance"),
    (None, ["-p", "moe_min_time_s=-1"], "moe_min_time_s"),
    (None, ["-p", "moe_tokens=[]"], "moe_tokens"),
    (None, ["-p", "moe_tokens=[128, 256]"], "moe_tokens"),  # one entry per moe_hidden entry
    (None, ["-p", "attn_seq_len=0"], "attn_seq_len"),
    (None, ["-p", "attn_window=4096"], "attn_window"),
    (None, ["-p", "attn_windows=[8, 99999]"], "attn_windows"),
    (None, ["-p", "attn_dtype=float64x"], "attn_dtype"),
    (None, ["-p", "attn_causal_dtypes=[bfloat16, int8]"], "attn_causal_dtypes"),
    (None, ["-p", "attn_patterns=[causal, nope]"], "attn_patterns"),
    (None, ["-p", "attn_patterns=[]"], "attn_patterns"),
    (None, ["-p", "attn_block_sizes=[24]"], "attn_block_sizes"),
    (None, ["-p", "attn_heads=-2"], "attn_heads"),
    (None, ["-p", "attn_softcap=.inf"], "attn_softcap"),
    (None, ["-p", "fp8_gemm_sizes=[17]"], "fp8_gemm_sizes"),
    (None, ["-p", "fp8_gemm_sizes=[0]"], "fp8_gemm_sizes"),
    (None, ["-p", "fp8_linear_format=e3m4"], "fp8_linear_format"),
    (None, ["-p", "fp8_recipes=[magic]"], "fp8_recipes"),
    (None, ["-p", "fp8_quant_mib=[-1]"], "fp8_quant_mib"),
    (None, ["-p", "fp8_train_steps=0"], "fp8_train_steps"),
    (None, ["-p", "gemm_sizes=[-1]"], "gemm_sizes"),
    (None, ["-p", "gemm_dtypes=[float7]"], "gemm_dtypes"),
    (None, ["-p", "bandwidth_mib=[0]"], "bandwidth_mib"),
    (None, ["-p", "min_time_s=0"], "min_time_s"),
    (None, ["-p", "moe_tokens=12"], "moe_tokens"),  # a scalar where a list is expected
    (None, ["-p", "moe_experts=[8]"], "moe_experts"),  # a list where a scalar is expected
    (None, ["-p", "moe_experts=eight"], "moe_experts"),
    (None, ["-p", "moe_expertz=8"], "moe_expertz"),
    (None, ["-p", "moe_experts"], "moe_experts"),
    (None, ["--only", ","], "--only"),
    (None, ["--only", "moe,nope"], "nope"),
    (GOOD + "moe_experts: 8\nmoe_experts: 4\n", [], "moe_experts"),
    ("workbook: {notebooks: []}\n", [], "workbook.notebooks"),
    ("workbook: {notebooks: [moe, mystery]}\n", [], "mystery"),
    ("", [], "bad.yaml"),
    (b"\x00\x01\x02binary", [], "bad.yaml"),
    (b"moe_experts: \xe9\n", [], "bad.yaml"),
    (GOOD + "moe_top_k: 99\n", [], "moe_top_k"),
    (GOOD + "moe_experts: \x01\n", [], "bad.yaml: malformed YAML: unacceptable character"),
    (None, ["-p", "moe_experts=2024-13-01"], "moe_experts=2024-13-01': unreadable YAML value"),
    (None, ["-p", "moe_experts=" + "9" * 5000], "unreadable YAML value"),  # > 4300 digits
    # an empty list where it would leave a section nothing to run
    (None, ["-p", "moe_strategies=[]"], "moe_strategies"),
    (None, ["-p", "moe_sweep_strategies=[]"], "moe_sweep_strategies"),
    (None, ["-p", "moe_layer_types=[]"], "moe_layer_types"),
    (None, ["-p", "moe_presets=[]"], "moe_presets"),
    (None, ["-p", "attn_gym_kernels=[]"], "attn_gym_kernels"),
    (None, ["-p", "attn_activations=[]"], "attn_activations"),
    (None, ["-p", "fp8_train_recipes=[]"], "fp8_train_recipes"),
    # YAML that expands or hides what it sets
    (LAUGHS, [], f"bad.yaml: {ALIASES} at line 2"),
    (None, ["-p", "moe_tokens=[&a 8, *a]"], f"-p 'moe_tokens=[&a 8, *a]': {ALIASES} at line 1"),
    (GOOD + "<<: {moe_experts: 4}\n", [], "bad.yaml: YAML merge keys (<<) are not allowed"),
    # a platform name is a parameter file's stem, never a path
    (None, ["--platform", "../parameters/cpu"], "unknown platform '../parameters/cpu'"),
    (None, ["--platform", str(params.PARAMETERS_DIR / "cpu")], "unknown platform '/"),
    (None, ["--platform", "cpu.yaml"], "unknown platform 'cpu.yaml'"),
    # seeds as torch takes them: 0 .. 2**64 - 1, with fp8_seed + 1, ... and each teacher's + 1000
    (None, ["-p", f"fp8_seed={2**70}"], "fp8_seed"),
    (None, ["-p", f"fp8_seed={2**64 - 1}"], "fp8_seed"),
    (None, ["-p", "fp8_seed=-1"], "fp8_seed"),
    (None, ["-p", "fp8_seed=true"], "fp8_seed"),
    # a platform file for another device (a TPU's here; an H100's on a TPU): --other-device
    (None, ["--platform", ANOTHER_DEVICE], "--other-device runs it here anyway"),
]
# Sizes whose largest case needs more memory than any device has: refused before anything runs.
TOO_BIG = [
    (None, ["-p", "moe_tokens=[1000000000]"], "moe_tokens"),
    (None, ["-p", "attn_seq_len=10000000"], "attn_seq_len"),
    (None, ["-p", "fp8_quant_mib=[100000000]"], "fp8_quant_mib"),
    (None, ["-p", "gemm_sizes=[10000000]"], "gemm_sizes"),
    (None, ["-p", "fp8_train_steps=1000000000000"], "fp8_train_steps"),  # (steps, R, D) at once
    (None, ["-p", "fp8_check_sizes=[1048576]"], "fp8_check_sizes"),
    (None, ["-p", "fp8_block_check_sizes=[1048576]"], "fp8_block_check_sizes"),
    (None, ["-p", "moe_capacity_factor=1000000000"], "moe_capacity_factor"),
    (None, ["-p", "attn_decode_kv_len=10000000000"], "attn_decode_kv_len"),
    (None, ["-p", "attn_decode_kv_lens=[10000000000]"], "attn_decode_kv_lens"),
    (None, ["-p", "attn_cross_kv_len=100000000"], "attn_cross_kv_len"),
    (None, ["-p", "attn_block_sizes=[1048576]"], "attn_block_sizes"),
    (None, ["-p", "attn_page_size=1073741824"], "attn_page_size"),
    (None, ["-p", "attn_mla_kv_lora_rank=1000000000"], "attn_mla_kv_lora_rank"),
    # past float's range: 400 digits, or a float whose product overflows
    (None, ["-p", f"moe_experts={'9' * 400}"], "moe_experts"),
    (None, ["-p", f"attn_seq_lens=[{'9' * 400}]"], "attn_seq_lens"),
    (None, ["-p", "moe_capacity_factor=1e300"], "moe_capacity_factor"),
    (None, ["-p", "fp8_quant_mib=[1e300]"], "fp8_quant_mib"),
]
CASES += TOO_BIG


@pytest.fixture
def previous_report(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "moe.results.json").write_text("[]\n")
    (out / "run.json").write_text("{}\n")
    return out


@pytest.mark.parametrize(
    "text, argv, names", CASES, ids=[(" ".join(c[1]) or c[2])[:80] for c in CASES]
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    text, argv, names, tmp_path, monkeypatch, capsys, previous_report
):
    if (text, argv, names) in TOO_BIG and device_facts().memory_bytes is None:
        pytest.skip("this device does not report its memory: no memory check")
    platform = "cpu"
    if text is not None:
        (tmp_path / "bad.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
        monkeypatch.setattr(params.platform_files, "PARAMETERS_DIR", tmp_path)
        platform = "bad"
    before = {p.name: p.read_bytes() for p in previous_report.iterdir()}
    start = time.perf_counter()
    code = cli.main(["run", "--platform", platform, "--out", str(previous_report), *argv])
    elapsed = time.perf_counter() - start
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and names in err, err
    assert {p.name: p.read_bytes() for p in previous_report.iterdir()} == before
    assert elapsed < 5, f"{elapsed:.1f} s to refuse"


def test_too_big_names_the_need_and_this_devices_memory(capsys):
    assert cli.main(["run", "--platform", "cpu", "-p", "moe_tokens=[1000000000]"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(
        r"error: command line: moe_tokens=\[1000000000\] needs about [\d.]+ GiB \(largest case\), "
        r"this machine's .+ has [\d.]+ GiB \(moe\.ipynb\)\n",
        err,
    ), err


def _tiny_device(monkeypatch, memory_bytes=2**30, backend="cpu"):
    facts = DeviceFacts(backend=backend, device=backend, name="Tiny", memory_bytes=memory_bytes)
    monkeypatch.setattr("kernel_lib.platform.device_facts", lambda *a, **k: facts)


def test_a_file_too_big_for_this_machine_is_refused_naming_its_key(tmp_path, monkeypatch):
    (tmp_path / "cpu.yaml").write_text(GOOD + "attn_seq_lens: [256, 65536]\n")
    monkeypatch.setattr(params.platform_files, "PARAMETERS_DIR", tmp_path)
    _tiny_device(monkeypatch, memory_bytes=4 * 2**30)
    with pytest.raises(ParameterError) as err:
        load_plan("cpu")
    assert "cpu.yaml: attn_seq_lens=[256, 65536] needs about" in str(err.value)
    assert str(err.value).endswith("this machine's Tiny has 4.0 GiB (flex_attention.ipynb)")


def test_the_memory_check_is_for_plans_that_run_here(monkeypatch):
    _tiny_device(monkeypatch)  # 1 GiB: the CPU defaults (moe about 1.6 GiB) do not fit
    with pytest.raises(ParameterError, match=r"parameters/cpu\.yaml: moe_\w+=.* \(moe\.ipynb\)"):
        load_plan("cpu")
    assert load_plan("h100").notebooks  # another device's file: listed and validated, not sized
    with pytest.raises(ParameterError, match="command line: moe_tokens"):
        load_plan("h100", overrides={"moe_tokens": [4096, 4096, 8192]})  # a run here: sized
    _tiny_device(monkeypatch, memory_bytes=None)
    assert load_plan("cpu", overrides={"moe_tokens": [10**9]}).notebooks  # memory unknown


def test_another_devices_file_is_refused_and_under_other_device_still_sized(monkeypatch):
    _tiny_device(monkeypatch, memory_bytes=2**20)  # a CPU "Tiny" of 1 MiB
    with pytest.raises(ParameterError, match=r"^--platform gcp-tpu-v5e is for a tpu v5litepod "):
        load_plan("gcp-tpu-v5e", here=True)
    with pytest.raises(ParameterError, match=r"needs about .* this machine's Tiny has 0\.0 GiB"):
        load_plan("gcp-tpu-v5e", here=True, other_device=True)
    assert load_plan("gcp-tpu-v5e").notebooks  # listed and validated, not run here: not sized


HUGE = "[" + ", ".join(["0"] * 10_000) + "]"  # 30 000 characters


@pytest.mark.parametrize("text, override", [
    (GOOD, f"moe_tokens={HUGE}"),  # a value out of range
    (GOOD, f"moe_experts={HUGE}"),  # a value of the wrong type
    (GOOD, f"moe_{'x' * 100_000}=1"),  # an unknown key
    (GOOD, f"moe_tokens={HUGE[:-1]}"),  # malformed YAML
    (GOOD, "fp8_quant_mib=[100000000" + ", 1" * 10_000 + "]"),  # too big
    (GOOD + f"moe_tokens: {HUGE}\n", None),
    (f"workbook: {{notebooks: {HUGE}}}\n", None),
    (f"workbook: {{notebooks: [moe], {'x' * 100_000}: 1}}\n", None),
])  # fmt: skip
def test_a_huge_value_gives_a_short_message(text, override, tmp_path, monkeypatch):
    """The message itself stays short, not only the line the CLI prints."""
    _tiny_device(monkeypatch, memory_bytes=2**40)
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ParameterError) as err:
        overrides = dict([parse_override(override)]) if override else None
        load_plan("bad", parameters_dir=tmp_path, overrides=overrides)
    message = str(err.value).replace(str(tmp_path), "")
    assert "\n" not in message and len(message) < 300, message[:1000]


def test_at_least_forty_bad_inputs():
    assert len(CASES) >= 40


KEYS = sorted(
    {k for nb in ("backend_cpu", "fp8", "flex_attention", "moe") for k in notebook_parameters(nb)}
)
SCALARS = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=8),
    st.none(),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=4))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(KEYS), value=VALUES)
def test_any_value_is_accepted_or_refused_in_one_line_naming_the_key(key, value):
    """Property: a value of any type or range either makes a valid plan or a ParameterError of one
    line naming the key; never another exception."""
    start = time.perf_counter()
    try:
        load_plan("cpu", overrides={key: value})
    except ParameterError as err:
        assert "\n" not in str(err) and key in str(err), str(err)
    assert time.perf_counter() - start < 5


BOGUS_PROFILE = "error: $KERNEL_WORKBOOK_PROFILE='bogus' must be one of off, headlines, all\n"


@pytest.mark.parametrize(
    "argv, work",
    [
        (["run", "--platform", "cpu", "--out", "{tmp}/o"], "kernel_lib.__main__.load_plan"),
        (["bench", "moe", "--platform", "cpu"], "kernel_lib.__main__.load_plan"),
        (["check", "--platform", "cpu"], "kernel_lib.run.nbval.check"),
        (["ab", "HEAD", "HEAD", "--platform", "cpu"], "kernel_lib.ab.load_plan"),
        (["sensitivity", "--out", "{tmp}/s"], "kernel_lib.sensitivity.cli"),
    ],
)
def test_a_bad_profile_mode_in_the_environment_is_refused_before_anything_runs(
    argv, work, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(PROFILE_ENV, "bogus")
    monkeypatch.setattr(work, lambda *a, **k: pytest.fail("ran"))
    assert cli.main([a.format(tmp=tmp_path) for a in argv]) == 2
    assert capsys.readouterr().err == BOGUS_PROFILE
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", [["run"], ["bench", "moe"]])
def test_profile_is_taken_out_of_the_notebooks_parameters(command, monkeypatch):
    monkeypatch.setenv(PROFILE_ENV, "off")  # restored after the test
    seen = {}

    def plan(platform, *, overrides, **kwargs):
        seen.update(overrides)
        raise ParameterError("planned")

    monkeypatch.setattr(cli, "load_plan", plan)
    argv = [*command, "--platform", "cpu", "-p", "profile=all", "-p", "moe_experts=4"]
    assert cli.main(argv) == 2
    assert seen == {"moe_experts": 4} and os.environ[PROFILE_ENV] == "all"


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"cells": [', "Notebook does not appear to be JSON"),
        ("", "Notebook does not appear to be JSON"),
        ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}}', "is missing an expected key"),
    ],
)
def test_check_of_a_damaged_notebook_is_one_line_naming_it(
    text, why, tmp_path, monkeypatch, capsys
):
    from kernel_lib.run import nbval

    report = tmp_path / "outputs" / "p"
    report.mkdir(parents=True)
    (report / "a.ipynb").write_text(text)
    monkeypatch.setattr(nbval, "OUTPUTS", tmp_path / "outputs")
    monkeypatch.setattr(nbval, "ROOT", tmp_path)  # its copy for nbval: never made
    assert cli.main(["check", "--platform", "p"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {report / 'a.ipynb'} is damaged (") and why in err, err
    assert err.endswith("): `run` remakes the report\n") and err.count("\n") == 1
    assert not (tmp_path / ".cache").exists()
