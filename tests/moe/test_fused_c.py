"""The fused C expert kernel against the fp64 loop over experts, bf16: odd shapes (row tiles,
vector lanes and K pairs with tails), empty experts, all tokens on one expert, capacity drops,
expert choice, the clamped SwiGLU past its limits; wrong packing or a wrong activation fails the check; skipped with a reason where
it cannot run. Its arguments (tests/c_worker.py): over shapes, routers, NaN rows and damaged
operands (x's dtype, device, strides, width; routing's experts, tokens, counts, indices and
weights; the experts' dtypes), every case is the fp64 loop's answer or one clear exception, in a
worker process that no case may kill."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib import c_kernels
from kernel_lib.moe import fused_c
from kernel_lib.moe.capacity import apply_capacity
from kernel_lib.moe.dispatch import dispatch_loop
from kernel_lib.moe.fused_c import dispatch_fused_c, fused_unavailable
from kernel_lib.moe.routing import route_expert_choice
from kernel_lib.moe.strategies import unavailable
from kernel_lib.moe.tolerances import TOLERANCES
from tests.c_worker import KINDS, alone, compare, damaged, module_worker
from tests.moe.conftest import as_fp64, make_experts, random_routing

BF16 = torch.bfloat16
RTOL = TOLERANCES[("forward", "bfloat16")].value
REASON = fused_unavailable(torch.zeros(1, 16, dtype=BF16), make_experts(1, 16, 16, dtype=BF16))
needs_kernel = pytest.mark.skipif(REASON is not None, reason=f"{REASON}")
CASES = 200
DAMAGES = {
    "x": (*KINDS, "float32", "D+1"),
    "routing": ("tuple",),
    "routing.num_experts": (64,),  # routed to 64 experts where E exist
    "routing.num_tokens": ("T+1",),
    "routing.token_idx": ("meta", "list", "int32", "T", -1, 2**40),
    "routing.expert_idx": ("meta", "int32", "E", -1),
    "routing.weight": ("meta", "list", "one short"),
    "routing.counts": ("meta", "int32", "one short", "one more", "one moved"),
    "experts.w_in": ("meta", "strided", "float32"),
    "experts.w_out": ("meta", "strided", "float32"),
}

worker = module_worker("tests.moe.test_fused_c")


def _error(x, routing, experts) -> float:
    """max |fused - fp64 loop| / max |fp64 loop| (0 for an empty output)."""
    ref = dispatch_loop(x.double(), routing, as_fp64(experts))
    out = dispatch_fused_c(x, routing, experts)
    assert out.shape == x.shape and out.dtype == x.dtype
    if not ref.numel():
        return 0.0
    return ((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def _experts(n, hidden, ffn, activation="swiglu"):
    return make_experts(n, hidden, ffn, activation=activation, dtype=BF16)


@needs_kernel
@settings(max_examples=25, deadline=None)
@given(
    tokens=st.integers(0, 45),
    hidden=st.integers(1, 70),
    ffn=st.integers(1, 40),
    experts=st.integers(1, 6),
    data=st.data(),
)
def test_matches_fp64_reference_on_odd_shapes(tokens, hidden, ffn, experts, data):
    top_k = data.draw(st.integers(1, experts))
    ex = _experts(experts, hidden, ffn, data.draw(st.sampled_from(sorted(fused_c.ACTIVATIONS))))
    x = torch.randn(tokens, hidden, dtype=BF16)
    assert _error(x, random_routing(tokens, experts, top_k, seed=hidden), ex) <= RTOL


@needs_kernel
@pytest.mark.parametrize(
    "routing",
    [
        random_routing(43, 5, 2, skip_expert=2),  # an empty expert
        random_routing(43, 5, 1, only_expert=4),  # skewed: every token on one expert
        apply_capacity(random_routing(43, 5, 2, only_expert=0), 12),  # drops: empty slots
        route_expert_choice(torch.randn(43, 5), capacity=9),
    ],
    ids=["empty_expert", "one_expert", "capacity_drops", "expert_choice"],
)
def test_routings(routing):
    assert _error(torch.randn(43, 24, dtype=BF16), routing, _experts(5, 24, 40)) <= RTOL


@needs_kernel
def test_clamped_swiglu_past_its_limit():
    ex = _experts(4, 16, 24, "swiglu_clamped")
    x = 6 * torch.randn(40, 16, dtype=BF16)  # pre-activations ~N(0, 36): many past the limit 7
    assert ((x @ ex.w_in[0]).abs() > 7).float().mean() > 0.1
    assert _error(x, random_routing(40, 4, 2), ex) <= RTOL
    with pytest.MonkeyPatch.context() as mp:  # the same gate without its clamps
        mp.setitem(fused_c.ACTIVATIONS, "swiglu_clamped", fused_c.ACTIVATIONS["swiglu"])
        assert _error(x, random_routing(40, 4, 2), ex) > RTOL


@needs_kernel
def test_wrong_packing_or_activation_fails_the_check(monkeypatch):
    x, routing = torch.randn(29, 32, dtype=BF16), random_routing(29, 4, 2)
    assert _error(x, routing, _experts(4, 32, 48, "gelu")) <= RTOL
    real = fused_c.pack
    monkeypatch.setattr(fused_c, "pack", lambda w: real(w).flip(-1))  # pair order swapped
    assert _error(x, routing, _experts(4, 32, 48, "gelu")) > RTOL
    monkeypatch.setattr(fused_c, "pack", real)
    monkeypatch.setitem(fused_c.ACTIVATIONS, "gelu", fused_c.ACTIVATIONS["relu"])
    assert _error(x, routing, _experts(4, 32, 48, "gelu")) > RTOL


@needs_kernel
def test_packed_weights_follow_an_in_place_weight_change():
    ex, x, routing = _experts(3, 16, 24), torch.randn(11, 16, dtype=BF16), random_routing(11, 3, 2)
    assert _error(x, routing, ex) <= RTOL
    with torch.no_grad():
        ex.w_out.mul_(-2)  # a stale packing would give the old output
    assert _error(x, routing, ex) <= RTOL


@needs_kernel
def test_refuses_to_train():
    ex, x, routing = _experts(3, 16, 24), torch.randn(11, 16, dtype=BF16), random_routing(11, 3, 2)
    with pytest.raises(ValueError, match="fused_c is inference only"):
        dispatch_fused_c(x.requires_grad_(True), routing, ex)
    with torch.no_grad():
        assert _error(x, routing, ex) <= RTOL


def test_unavailable_says_why(monkeypatch, tmp_path):
    x, ex = torch.randn(4, 16, dtype=BF16), _experts(2, 16, 32)
    assert "bfloat16" in fused_unavailable(x.float(), ex.float())
    assert "forward only" in unavailable("fused_c", x, ex, backward=True)
    assert "torch.compile" in unavailable("fused_c", x, ex, compiled=True)
    with pytest.raises(ValueError, match="bfloat16"):
        dispatch_fused_c(x.float(), random_routing(4, 2, 1), ex.float())
    monkeypatch.setenv(c_kernels.CACHE_ENV, str(tmp_path))
    fused_c._library.cache_clear()
    try:
        monkeypatch.setattr(c_kernels.shutil, "which", lambda name: None)
        assert "no C compiler" in fused_unavailable(x, ex)
        if c_kernels.is_x86():  # CI's ISA pass: the library builds, the kernel is not in it
            monkeypatch.undo()
            monkeypatch.setenv(c_kernels.CACHE_ENV, str(tmp_path))
            monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
            fused_c._library.cache_clear()
            assert fused_unavailable(x, ex) == "fused_c needs a CPU with AVX512-BF16"
    finally:
        fused_c._library.cache_clear()


@st.composite
def cases(draw) -> dict:
    experts = draw(st.integers(1, 6))
    kinds = [(name, kind) for name, some in DAMAGES.items() for kind in some]
    return dict(
        tokens=draw(st.integers(0, 40)),
        # D >= 16 outputs a token: the activations' bf16 rounding, relative to each product of
        # the second GEMM, stays within RTOL of the largest (smaller D: the odd-shape test)
        hidden=draw(st.integers(16, 40)),
        ffn=draw(st.integers(1, 40)),
        experts=experts,
        top_k=draw(st.integers(1, experts)),
        activation=draw(st.sampled_from(sorted(fused_c.ACTIVATIONS))),
        router=draw(st.sampled_from(["top_k", "capacity", "expert_choice"])),
        capacity=draw(st.integers(0, 20)),
        nan=draw(st.booleans()),
        threads=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**16)),
        damage=draw(st.lists(st.sampled_from(kinds), max_size=2, unique_by=lambda d: d[0])),
    )


def _damaged_index(v, kind, case):
    """v (A,) or (E,) one short, or its first entry set to `kind` (T, E: the bound; one more;
    one moved: from the last, the same sum), or damaged() as a whole."""
    if kind in KINDS or kind == "int32":
        return damaged(v, kind)
    if not len(v):
        return v  # nothing to break
    if kind == "one short":
        return v[:-1]
    v = v.clone()
    if kind == "one moved":
        v[-1] -= 1
    if kind in ("one more", "one moved"):
        v[0] += 1
    else:
        v[0] = {"T": case["tokens"], "E": case["experts"]}.get(kind, kind)
    return v


def prepare(case: dict):
    """The case's experts, routing (one of three routers) and x (a NaN row where asked), then
    its damage; dispatch_fused_c of them and the check against the fp64 loop."""
    torch.set_num_threads(case["threads"])
    gen = torch.Generator().manual_seed(case["seed"])
    t, d, e, damage = case["tokens"], case["hidden"], case["experts"], dict(case["damage"])
    ex = _experts(e, d, case["ffn"], case["activation"])
    routed = damage.get("routing.num_experts", e)
    routing = random_routing(t, routed, case["top_k"], seed=case["seed"])
    if case["router"] == "capacity":
        routing = apply_capacity(routing, case["capacity"])
    elif case["router"] == "expert_choice":
        routing = route_expert_choice(
            torch.randn(t, routed, generator=gen), capacity=case["capacity"]
        )
    x = torch.randn(t, d, generator=gen).to(BF16)
    if case["nan"] and t:
        x[case["seed"] % t] = float("nan")
    for name, kind in damage.items():
        field = name.rpartition(".")[2]
        if name == "x":
            x = torch.randn(t, d + 1).to(BF16) if kind == "D+1" else damaged(x, kind)
        elif name.startswith("experts."):
            weight = damaged(getattr(ex, field), kind)
            setattr(ex, field, torch.nn.Parameter(weight, requires_grad=False))
        elif name == "routing.num_tokens":
            routing = routing._replace(num_tokens=t + 1)
        elif name.startswith("routing.") and name != "routing.num_experts":
            routing = routing._replace(
                **{field: _damaged_index(getattr(routing, field), kind, case)}
            )
    passed = tuple(routing) if "routing" in damage else routing

    def check(out):
        return compare(out, dispatch_loop(x.double(), passed, as_fp64(ex)), BF16, RTOL)

    return lambda: dispatch_fused_c(x, passed, ex), check


@needs_kernel
@settings(max_examples=CASES, deadline=None)
@given(case=cases())
def test_every_case_is_right_or_one_clear_error(case, worker):
    worker.check(case)


@needs_kernel
@pytest.mark.parametrize("router", ["top_k", "expert_choice"])
@pytest.mark.parametrize(
    "case",
    alone(
        dict(tokens=29, hidden=24, ffn=40, experts=4, top_k=2, activation="swiglu_clamped"),
        DAMAGES,
    ),
)
def test_each_damage_alone_is_right_or_one_clear_error(case, router, worker):
    worker.check(dict(case, router=router, capacity=9, nan=True, threads=2, seed=0))
