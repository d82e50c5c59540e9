"""FP8 MoE decode: the C kernel (FP8 and bf16 experts) against the fp64 reference at odd shapes,
routings and activations, in the build for this CPU, the AVX2 one and the generic one; a step's
chosen experts alone give the same bits as all of them; NaN
weights poison only the outputs that use them; any thread count gives the same bits; a kernel
broken on purpose fails the bench's check; bad operands raise one line; the section's records, and
the moe suite's section of them (its parameters, none when moe_fp8_decode_presets is empty)."""

import dataclasses
import functools

import pytest
import torch

from kernel_lib import c_kernels
from kernel_lib import records as rec
from kernel_lib.__main__ import main
from kernel_lib.fp8 import bench_weight_only, weight_only_c
from kernel_lib.moe import fp8_decode
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.experts import ACTIVATIONS, FeedForwardExperts
from kernel_lib.moe.fp8_decode import decode_check
from kernel_lib.moe.fp8_experts import (
    DecodeExperts,
    bf16_experts,
    c_moe_decode,
    decode_reference,
    fp8_experts,
)  # fmt: skip
from kernel_lib.moe.suite import SUITE
from kernel_lib.platform import device_facts
from kernel_lib.suite import Context
from tests.moe.conftest import random_routing

E = 10
SHAPES = [(200, 72), (40, 136)]  # (D, F): ragged, past one 128 block in D, F or H
ROUTINGS = {  # name -> (T, top-k, random_routing options)
    "T1-top1": (1, 1, {}),
    "T3-top8": (3, 8, {"skip_expert": 4}),
    "T16-top8": (16, 8, {"skip_expert": 0}),
    "T16-skewed": (16, 1, {"only_expert": 7}),
}


@pytest.fixture(params=["native", "avx2", "generic"])
def build(request, monkeypatch, tmp_path_factory):
    """The library as built for this CPU, then held to AVX2 and to x86-64 (no vector ISA named:
    GCC's generic vectors), each in a folder of its own."""
    if request.param != "native":
        if not c_kernels.is_x86():
            pytest.skip("x86 builds only")
        level = {"avx2": "avx2", "generic": "default"}[request.param]
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", level)
        folder = tmp_path_factory.getbasetemp() / request.param
        monkeypatch.setenv(c_kernels.CACHE_ENV, str(folder))
    weight_only_c._library.cache_clear()
    yield request.param
    weight_only_c._library.cache_clear()


@functools.cache
def _experts(d: int, f: int, activation: str) -> tuple[DecodeExperts, DecodeExperts]:
    """Seeded FP8 experts and their bf16 model (weights over several binades per expert)."""
    torch.manual_seed(d * f)
    ff = FeedForwardExperts(E, d, f, activation=activation).requires_grad_(False)
    ff.w_in.mul_(torch.logspace(-1, 1, E)[:, None, None])
    q = fp8_experts(ff)
    return q, bf16_experts(q)


def _x(t: int, d: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(t, d, generator=torch.Generator().manual_seed(seed)).bfloat16()


def _routing(name: str):
    t, k, options = ROUTINGS[name]
    return random_routing(t, E, k, seed=t * k, **options)


@pytest.mark.parametrize("routing", list(ROUTINGS))
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("d, f", SHAPES)
def test_the_kernel_matches_the_fp64_reference(d, f, activation, routing, build):
    """FP8 and bf16 experts alike, against the FP8 weights' fp64 reference (the bf16 ones are
    its dequantised model), with empty experts, a skewed routing, top-1 and top-8."""
    q, b = _experts(d, f, activation)
    r = _routing(routing)
    x = _x(r.num_tokens, d)
    assert (r.counts == 0).any()  # some experts are never chosen
    expected = {"native": weight_only_c.ISAS, "avx2": ("avx2",), "generic": ("generic",)}
    assert weight_only_c.isa() in expected[build]
    for experts in (q, b):
        out = c_moe_decode(x, r, experts)
        assert out.dtype == torch.bfloat16 and out.shape == x.shape
        check = decode_check(x, r, q)(out)
        assert check.passed, check.describe()
        assert torch.equal(c_moe_decode(x, r, experts, prefetch=0), out)  # a hint, no numbers


@pytest.mark.parametrize("where", ["w_in", "w_out"])
def test_a_nan_weight_poisons_only_the_outputs_that_use_it(where, build):
    """A NaN code in expert 3's w_in makes its tokens' rows NaN (every output reads its
    activations); in its w_out, their one output column. Nothing else changes."""
    q, _ = _experts(200, 72, "swiglu")
    bits = getattr(q, where).view(torch.uint8).clone()
    bits[3, 5, 7] = 0x7F
    q = q._replace(**{where: bits.view(torch.float8_e4m3fn)})
    r, x = _routing("T16-top8"), _x(16, 200)
    ref, out = decode_reference(x, r, q), c_moe_decode(x, r, q).double()
    assert torch.equal(out.isnan(), ref.isnan()) and ref.isnan().any()
    assert not ref.isnan().all()
    finite = ~ref.isnan()
    error = (out[finite] - ref[finite]).abs().max() / ref[finite].abs().max()
    assert error <= fp8_decode.TOLERANCE.value


def test_any_thread_count_gives_the_same_bits():
    q, b = _experts(200, 72, "gelu")
    r, x = _routing("T16-top8"), _x(16, 200)
    before = torch.get_num_threads()
    try:
        for experts in (q, b):
            torch.set_num_threads(1)
            one = c_moe_decode(x, r, experts)
            for threads in (2, 3):
                torch.set_num_threads(threads)
                assert torch.equal(c_moe_decode(x, r, experts), one)
    finally:
        torch.set_num_threads(before)


class _NextExpert:
    """The library with every expert reading the next expert's w_in (the routing never chooses
    the last one, so it stays in bounds): the kind of indexing slip the check must catch."""

    def __init__(self, lib, stride: int):
        self.lib, self.stride = lib, stride

    def __getattr__(self, name):
        return getattr(self.lib, name)

    def moe_decode(self, *args):
        args = list(args)
        args[10] += self.stride  # w_in, one expert further
        return self.lib.moe_decode(*args)


def test_a_kernel_reading_the_wrong_expert_fails_the_bench_check(monkeypatch):
    q, _ = _experts(200, 72, "swiglu")
    r, x = random_routing(4, E, 2, seed=3, skip_expert=E - 1), _x(4, 200)
    check = decode_check(x, r, q)
    assert check(c_moe_decode(x, r, q)).passed
    lib = weight_only_c._library()
    stride = q.w_in[0].numel()  # bytes of one expert's FP8 w_in
    monkeypatch.setattr(weight_only_c, "_library", lambda: _NextExpert(lib, stride))
    assert not check(c_moe_decode(x, r, q)).passed


@pytest.mark.parametrize("dropped", ["all scales", "one block"])
def test_a_kernel_dropping_a_block_scale_fails_the_bench_check(dropped):
    """Scales read as ones: all of them, or one 128 x 128 block's of one chosen expert's w_out
    (the kind of slip that ignores one block's scale)."""
    q, _ = _experts(200, 72, "relu")
    r, x = _routing("T3-top8"), _x(3, 200)
    check = decode_check(x, r, q)
    if dropped == "all scales":
        broken = q._replace(s_in=torch.ones_like(q.s_in), s_out=torch.ones_like(q.s_out))
    else:
        s_out = q.s_out.clone()
        s_out[int(r.expert_idx[0]), 1, 0] = 1.0  # output rows 128-199 of its first expert
        broken = q._replace(s_out=s_out)
    assert check(c_moe_decode(x, r, q)).passed
    assert not check(c_moe_decode(x, r, broken)).passed


def test_bad_operands_raise_one_line_naming_the_operand():
    q, _ = _experts(200, 72, "relu")
    r, x = _routing("T3-top8"), _x(3, 200)
    shifted = r._replace(expert_idx=r.expert_idx.clone())
    shifted.expert_idx[0] = E
    cases = {
        "x": (x.float(), r, q),
        "x must be a CPU bfloat16 tensor of shape (T, 200)": (_x(3, 201), r, q),
        "routing.expert_idx must lie in [0, 10)": (x, shifted, q),
        "routing.counts": (x, r._replace(counts=r.counts + 1), q),
        "routing.token_idx must lie in [0, 3)": (x, r._replace(token_idx=r.token_idx + 1), q),
        "experts.s_out": (x, r, q._replace(s_out=None)),
    }
    for name, args in cases.items():
        with pytest.raises((ValueError, TypeError)) as raised:
            c_moe_decode(*args)
        message = str(raised.value)
        assert name in message and "\n" not in message, message
    for prefetch in (-1, 1.5, True):
        with pytest.raises(ValueError, match=f"^prefetch={prefetch!r} must be an int >= 0"):
            c_moe_decode(x, r, q, prefetch=prefetch)


TINY = {"scale": 0.03125, "tokens": [1, 4], "min_time_s": 0.01}


def _section(monkeypatch, facts=None):
    """The section at TINY sizes, its copies sized for a 2 MiB cache (a copy or a few)."""
    monkeypatch.setattr(bench_weight_only, "last_level_cache_bytes", lambda device: 2**21)
    args = TINY | {"facts": facts or device_facts()}
    return fp8_decode.fp8_decode_records(list(fp8_decode.PRESETS), **args)


@pytest.mark.slow
def test_the_section_checks_and_times_every_candidate_and_declares_one_headline(monkeypatch):
    records = _section(monkeypatch)
    frame = rec.to_frame(records)
    assert len(frame) == len(fp8_decode.NAMES) * 2 * 2 and (frame["status"] == "ok").all()
    assert frame["check.pass"].all()
    assert set(frame["implementation"]) == set(fp8_decode.NAMES)
    for column in ("expert_bytes", "experts_touched", "weight_copies", "fraction_of_read"):
        assert frame[f"metrics.{column}"].notna().all(), column
    by = {(r.case, r.shape["T"], r.implementation): r for r in records}
    for (case, t, name), r in by.items():
        fp8 = by[(case, t, "c_decode_fp8")].metrics["expert_bytes"]
        if name == fp8_decode.BASELINE:  # bf16: twice the bytes, no scales
            assert fp8 / 2 < r.metrics["expert_bytes"] < 2 * fp8
            assert r.ratio_vs_baseline is None
        else:
            assert abs(r.metrics["expert_bytes"] - fp8) < 4  # the read pads to whole int32s
            assert r.ratio_low <= r.ratio_vs_baseline <= r.ratio_high
        if name != "read":
            assert r.bytes == r.metrics["expert_bytes"] + 4 * t * r.shape["D"]
    assert (frame[frame["implementation"] == "read"]["metrics.fraction_of_read"] == 1).all()
    heads = frame[frame["headline"].notna()]
    assert len(heads) == 1 and heads["headline"].iloc[0] == fp8_decode.HEADLINE
    head = heads.iloc[0]
    assert head["implementation"] == "c_decode_fp8" and head["shape.T"] == 1
    assert head["case"] == "fp8_decode_deepseek-v3"


def test_the_timed_expert_sets_add_up_to_twice_the_cache(monkeypatch):
    q, _ = _experts(40, 136, "relu")
    monkeypatch.setattr(bench_weight_only, "last_level_cache_bytes", lambda device: 2**20)
    sets = fp8_decode.expert_sets(q, device_facts())
    whole = q.expert_bytes(torch.arange(E))
    assert len(sets["fp8"]) == len(sets["bf16"]) == -(-(2**21) // whole) > 1
    assert all(s.w_in.data_ptr() != q.w_in.data_ptr() for s in sets["fp8"][1:])
    assert all(torch.equal(s.s_out, q.s_out) for s in sets["fp8"])


@pytest.mark.parametrize("routing", ["T3-top8", "T16-skewed"])
def test_a_steps_chosen_experts_alone_give_the_same_bits_as_all_of_them(routing):
    torch.manual_seed(3)
    ff = FeedForwardExperts(E, 40, 136, activation="swiglu").requires_grad_(False)
    r, x = _routing(routing), _x(_routing(routing).num_tokens, 40)
    experts, step = fp8_decode.touched(ff, r)
    chosen = fp8_decode.chosen_experts(r)
    assert experts.num_experts == step.num_experts == chosen.numel() < E
    assert torch.equal(step.counts, r.counts[chosen]) and (step.counts > 0).all()
    assert torch.equal(chosen[step.expert_idx], r.expert_idx)
    assert torch.equal(experts.w_in, fp8_experts(ff).w_in[chosen])
    with torch.no_grad():
        assert torch.equal(c_moe_decode(x, step, experts), c_moe_decode(x, r, fp8_experts(ff)))


def test_the_read_ceiling_reads_exactly_the_chosen_experts_bytes():
    q, _ = _experts(40, 136, "swiglu")
    chosen = torch.tensor([1, 4, 9])
    buffer = fp8_decode.read_ceiling_buffer(q, chosen)
    assert buffer.nbytes - 4 < q.expert_bytes(chosen) <= buffer.nbytes
    assert q.expert_bytes(chosen) == 3 * (2 * 136 * 40 + 40 * 136 + 4 * (3 * 1 + 1 * 2))


@pytest.mark.slow
def test_the_c_candidates_are_skipped_where_they_cannot_build(monkeypatch, tmp_path):
    monkeypatch.setenv(c_kernels.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(weight_only_c, "_library", weight_only_c._library.__wrapped__)
    monkeypatch.setattr(c_kernels.shutil, "which", lambda name: None)
    monkeypatch.setattr(fp8_decode, "PRESETS", ("qwen3-30b-a3b",))
    got = {(r.shape["T"], r.implementation): r for r in _section(monkeypatch)}
    for (_, name), r in got.items():
        if name == "read":
            assert r.status == "ok"
        else:
            assert r.status == "skipped" and "no C compiler" in r.reason, name


def test_off_a_cpu_every_candidate_is_skipped(monkeypatch):
    facts = dataclasses.replace(device_facts(), backend="cuda", device="cuda:0")
    records = _section(monkeypatch, facts)
    assert len(records) == len(fp8_decode.NAMES) * 2 * 2
    assert all(r.status == "skipped" and "not cuda" in r.reason for r in records)
    assert not any(r.headline for r in records)


def test_the_suites_section_runs_the_configs_presets_and_tokens_after_the_presets(monkeypatch):
    """SUITE.run("fp8_decode") at moe_fp8_decode_presets x moe_fp8_decode_tokens, at
    moe_preset_scale and moe_preset_zipf: one record per candidate each, their ids unique and the
    same whether measured here or skipped (off a CPU)."""
    monkeypatch.setattr(bench_weight_only, "last_level_cache_bytes", lambda device: 2**21)
    names = list(SUITE.names)
    assert names.index("fp8_decode") == names.index("presets") + 1
    cfg = MoEBenchConfig(
        fp8_decode_presets=["qwen3-30b-a3b"], fp8_decode_tokens=[3, 1], preset_scale=0.03125,
        preset_zipf=0.5, min_time_s=0.01,
    )  # fmt: skip
    records = SUITE.run("fp8_decode", Context(cfg, device_facts()))
    assert [(r.case, r.shape["T"]) for r in records[:: len(fp8_decode.NAMES)]] == [
        ("fp8_decode_qwen3-30b-a3b", 3), ("fp8_decode_qwen3-30b-a3b", 1)
    ]  # fmt: skip
    assert all(r.status == "ok" and r.check["pass"] for r in records)
    assert {(r.shape["size_factor"], r.shape["zipf"]) for r in records} == {(0.03125, 0.5)}
    assert not any(r.headline for r in records)  # DeepSeek-V3's at T = 1
    ids = [r.record_id for r in rec.stamp(records, run_id="t", platform="p")]  # unique
    gpu = dataclasses.replace(device_facts(), backend="cuda", device="cuda:0")
    skipped = SUITE.run("fp8_decode", Context(cfg, gpu))
    assert [r.record_id for r in rec.stamp(skipped, run_id="u", platform="p")] == ids


def test_no_fp8_decode_presets_is_no_section():
    records = SUITE.run(
        "fp8_decode", Context(MoEBenchConfig(fp8_decode_presets=[]), device_facts())
    )
    assert records == []


@pytest.mark.parametrize("override, line", [
    ("moe_fp8_decode_presets=[deepseek]", "moe_fp8_decode_presets='deepseek' must be one of"),
    ("moe_fp8_decode_presets=deepseek-v3", "moe_fp8_decode_presets"),
    ("moe_fp8_decode_tokens=[]", "moe_fp8_decode_tokens=[] must be a non-empty list"),
    ("moe_fp8_decode_tokens=[1, 0]", "moe_fp8_decode_tokens=0 must be a finite number > 0"),
    ("moe_fp8_decode_tokens=[1.5]", "'moe_fp8_decode_tokens' = [1.5] is not list[int]"),
    ("moe_fp8_decode_tokens=4", "moe_fp8_decode_tokens"),
])  # fmt: skip
def test_a_bad_fp8_decode_parameter_exits_2_with_one_line_naming_it(
    override, line, tmp_path, capsys
):
    out = tmp_path / "out"
    assert main(["run", "--platform", "cpu", "--out", str(out), "-p", override]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and line in err, err
    assert not out.exists()
