import dataclasses

import pytest
import torch

from kernel_lib.moe import dispatch, experts
from kernel_lib.moe.bench_presets import preset_case, section_presets
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.presets import preset
from kernel_lib.platform import DeviceFacts, device_facts

CFG = MoEBenchConfig(
    presets=("gpt-oss-20b", "mixtral-8x7b"), preset_tokens=48, preset_scale=1 / 64, strategies=("padded",),
    preset_strategies=("sorted_grouped",), dtype="float32", min_time_s=0.001,
)  # fmt: skip


@pytest.fixture(scope="module")
def records():
    facts = DeviceFacts(backend="cpu", device="cpu", name="Test CPU", compute_units=2)
    return section_presets(CFG, facts)


@pytest.mark.slow
def test_one_checked_compare_and_headline_per_preset(records):
    for name in CFG.presets:
        recs = {r.implementation: r for r in records if r.case == f"preset_{name}"}
        assert set(recs) == {"dense_gemm", "dispatch_sorted_grouped", "dispatch_loop"}
        assert all(r.status == "ok" and r.check["pass"] for r in recs.values())
        assert recs["dispatch_sorted_grouped"].baseline == "dense_gemm"
        assert sum(r.headline is not None for r in recs.values()) == 1
        shape = recs["dense_gemm"].shape
        assert recs["dense_gemm"].metrics["preset"] == name
        assert shape["D"] % 16 == 0 and shape["T"] == 48
        assert all(isinstance(v, (int, float, type(None))) for v in shape.values()), shape


@pytest.mark.slow
def test_gpt_oss_experts_run_its_clamped_swiglu(records):
    oss = next(r for r in records if r.case == "preset_gpt-oss-20b")
    assert oss.metrics["activation"] == "swiglu_clamped"
    assert oss.shape["groups"] == 1 and oss.shape["shared_experts"] == 0


def test_clamped_swiglu_at_the_timed_shape_against_its_twin(cpu_facts):
    cfg = MoEBenchConfig()  # the CPU notebook's preset shape
    model = preset("gpt-oss-20b").scaled(cfg.preset_scale)
    case = preset_case(dataclasses.replace(cfg, dtype="float32"), cpu_facts, model)
    ex, routing = case.feedforward, case.routing
    assert ex.activation == "swiglu_clamped" and routing.num_tokens == cfg.preset_tokens
    some = routing.token_idx % 8 == 0  # every 8th token's rows: the element-wise twin is slow
    tokens, chosen, x = routing.token_idx[some], routing.expert_idx[some], case.x.double()
    h = torch.cat([x[tokens[chosen == e]] @ ex.w_in[e].double() for e in range(ex.num_experts)])
    assert (h > 7).double().mean() > 0.03  # the clamp is reached
    torch.testing.assert_close(
        experts.activate(h, ex.activation), experts.swiglu_clamped_reference(h)
    )


@pytest.mark.parametrize(
    "broken",
    [
        lambda h: experts.activate(h, "swiglu"),  # plain SwiGLU
        lambda h: experts.swiglu_clamped(h, limit=float("inf")),  # gpt-oss's, unclamped
    ],
)
@pytest.mark.slow
def test_teeth_an_unclamped_swiglu_fails_the_gpt_oss_check(broken, monkeypatch, cpu_facts):
    real = dispatch.activate

    def activate(h, activation, **kw):
        return broken(h) if activation == "swiglu_clamped" else real(h, activation, **kw)

    monkeypatch.setattr(dispatch, "activate", activate)
    cfg = dataclasses.replace(CFG, presets=("gpt-oss-20b",))
    recs = {r.implementation: r for r in section_presets(cfg, cpu_facts)}
    assert recs["dispatch_sorted_grouped"].status == "wrong"
    assert recs["dispatch_loop"].status == "ok"


def test_preset_case_routes_within_the_group_limit(cpu_facts):
    model = preset("deepseek-v3").scaled(CFG.preset_scale)
    routing = preset_case(CFG, cpu_facts, model).routing
    groups = (routing.expert_idx // 32).view(CFG.preset_tokens, 8)
    assert max(len(set(row.tolist())) for row in groups) <= 4
    torch.testing.assert_close(routing.weight.view(-1, 8).sum(-1), torch.full((48,), 2.5))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA/AMD GPU")
def test_preset_case_on_the_gpu():
    """Router logits are formed on the CPU from the GPU case's inputs (an H100 run failed here)."""
    model = preset("mixtral-8x7b").scaled(CFG.preset_scale)
    case = preset_case(CFG, device_facts(), model)
    assert case.routing.expert_idx.device.type == "cuda"


def test_too_big_for_memory_is_skipped(cpu_facts):
    facts = dataclasses.replace(cpu_facts, memory_bytes=1000)
    recs = section_presets(CFG, facts)
    assert recs and all(r.status == "skipped" and "GiB" in r.reason for r in recs)


def test_broken_dispatch_on_a_preset_is_wrong_not_timed(monkeypatch, cpu_facts):
    real = dispatch.dispatch_sorted_grouped
    monkeypatch.setattr(dispatch, "dispatch_sorted_grouped", lambda *a: real(*a) * 1.1)
    cfg = dataclasses.replace(CFG, presets=("mixtral-8x7b",))
    recs = {r.implementation: r for r in section_presets(cfg, cpu_facts)}
    assert recs["dispatch_sorted_grouped"].status == "wrong"
    assert recs["dispatch_sorted_grouped"].median_ms is None
