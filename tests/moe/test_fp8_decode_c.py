"""c_moe_decode's arguments (tests/c_worker.py): over token, expert and width counts, routings,
activations, FP8 and bf16 experts, NaN codes, threads and damaged operands (dtypes, meta,
strides, expanded, shapes; indices out of range, counts that do not count; scales of the wrong
shape or where none belong; an unknown activation), every case is the fp64 reference's answer or
one clear exception, in a worker process that no case may kill; buffers that do not fit are a
MemoryError."""

import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.moe.experts import ACTIVATIONS, in_width
from kernel_lib.moe.fp8_decode import TOLERANCE
from kernel_lib.moe.fp8_experts import DecodeExperts, c_moe_decode, decode_reference
from kernel_lib.moe.routing import from_topk
from tests.c_worker import KINDS, alone, compare, damaged, module_worker
from tests.fp8.test_weight_only_c import _capped

CASES = 150  # per weight dtype
DAMAGES = {
    "x": (*KINDS, "float32", "D+1"),
    "routing": ("tuple", "other T"),
    "routing.token_idx": (*KINDS, "int32", "out of range", "negative"),
    "routing.expert_idx": (*KINDS, "int32", "out of range", "negative"),
    "routing.weight": (*KINDS, "int64", "float64"),
    "routing.counts": (*KINDS, "off by one"),
    "experts": ("tuple",),
    "experts.w_in": (*KINDS, "float32", "uint8", "D+1"),
    "experts.w_out": (*KINDS, "float8_e5m2", "D+1"),
    "experts.s_in": (*KINDS, "float64", "transposed", "missing"),
    "experts.s_out": (*KINDS, "bfloat16", "one element", "missing"),
    "experts.activation": ("silu", None, "the other width"),
}
OTHER_WIDTH = {"relu": "swiglu", "gelu": "swiglu", "swiglu": "relu", "swiglu_clamped": "gelu"}

worker = module_worker("tests.moe.test_fp8_decode_c")


@st.composite
def cases(draw, fp8: bool) -> dict:
    kinds = [(name, kind) for name, kinds in DAMAGES.items() for kind in kinds]
    e = draw(st.integers(1, 6))
    return dict(
        t=draw(st.integers(0, 9)),
        # 16 to past two blocks of 128: below, a token's few outputs can all be far smaller
        # than the F products each sums, and max |ref| no longer measures their rounding
        d=draw(st.integers(16, 260)),
        f=draw(st.integers(1, 140)),
        e=e,
        k=draw(st.integers(1, e)),
        activation=draw(st.sampled_from(ACTIVATIONS)),
        fp8=fp8,
        nan=draw(st.booleans()),
        threads=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**16)),
        damage=draw(st.lists(st.sampled_from(kinds), max_size=2, unique_by=lambda d: d[0])),
    )


def _blocks(n: int) -> int:
    return -(-n // 128)


def _experts(case: dict, gen: torch.Generator) -> dict:
    """DecodeExperts' fields: random e4m3fn codes with positive block scales, or bf16 weights;
    a NaN weight where asked."""
    e, d, f, act = case["e"], case["d"], case["f"], case["activation"]
    shapes = ((e, in_width(f, act), d), (e, d, f))
    if case["fp8"]:
        codes = [
            torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8) for shape in shapes
        ]
        for c in codes:  # |value| <= 15 (exponent field <= 10), no NaN code
            c[(c & 0x78) > 0x50] &= 0xBF
        w_in, w_out = (c.view(torch.float8_e4m3fn) for c in codes)
        blocks = [(e, _blocks(n), _blocks(k)) for _, n, k in shapes]
        # scales ~ 1 / (4 sqrt(width)): pre-activations of a few units, as a model's; a gate
        # past -87 would put a gated output below fp32's range (the fp64 reference's is wider)
        s_in, s_out = ((torch.rand(shape, generator=gen) + 0.5) / (4 * w.shape[2] ** 0.5)
                       for shape, w in zip(blocks, codes))  # fmt: skip
    else:
        w_in, w_out = ((torch.randn(s, generator=gen) / s[2] ** 0.5).bfloat16() for s in shapes)
        s_in = s_out = None
    if case["nan"] and case["fp8"]:
        w_in.view(torch.uint8)[0, 0, 0] = 0x7F
    elif case["nan"]:
        w_in[0, 0, 0] = float("nan")
    return {"w_in": w_in, "w_out": w_out, "activation": act, "s_in": s_in, "s_out": s_out}


WIDTH_DIM = {"x": 1, "experts.w_in": 2, "experts.w_out": 1}  # the dim of D: "D+1" grows it


def _damaged(name: str, value, kind, case: dict):
    if kind == "D+1":
        shape = list(value.shape)
        shape[WIDTH_DIM[name]] += 1
        return torch.zeros(shape, dtype=value.dtype)
    if kind in ("out of range", "negative"):
        bad = value.clone()
        if len(bad):
            bad[0] = -1 if kind == "negative" else case["t" if "token" in name else "e"]
        return bad
    if kind == "off by one":
        return value + (torch.arange(len(value)) == 0)
    if kind == "missing":
        return None
    if value is None:  # a scale where bf16 weights have none
        return torch.ones(1)
    if kind == "transposed":
        return value.transpose(1, 2)
    if kind == "one element":
        return value.reshape(-1)[:1]
    return damaged(value, kind)


def prepare(case: dict):
    """The case's operands (seeded x, a top-k routing of random distinct experts and weights,
    the experts, then the damage); its call and the check of its answer."""
    torch.set_num_threads(case["threads"])
    gen = torch.Generator().manual_seed(case["seed"])
    t, e, k = case["t"], case["e"], case["k"]
    x = torch.randn(t, case["d"], generator=gen).bfloat16()
    ids = torch.rand(t, e, generator=gen).argsort(dim=1)[:, :k]
    routing = from_topk(ids, torch.rand(t, k, generator=gen), e, None)
    ops = {"x": x} | {f"routing.{n}": v for n, v in routing._asdict().items()}
    ops |= {f"experts.{n}": v for n, v in _experts(case, gen).items()}
    damage = dict(case["damage"])
    for name, kind in damage.items():
        if name == "experts.activation":
            ops[name] = OTHER_WIDTH[case["activation"]] if kind == "the other width" else kind
        elif name == "routing" and kind == "other T":
            ops["routing.num_tokens"] = t + 1
        elif name not in ("routing", "experts"):
            ops[name] = _damaged(name, ops[name], kind, case)
    routing = type(routing)(**{n: ops[f"routing.{n}"] for n in routing._fields})
    experts = DecodeExperts(**{n: ops[f"experts.{n}"] for n in DecodeExperts._fields})
    routing = tuple(routing) if damage.get("routing") == "tuple" else routing
    experts = tuple(experts) if "experts" in damage else experts
    x = ops["x"]

    def call():
        return c_moe_decode(x, routing, experts)

    def check(got):
        return compare(got, decode_reference(x, routing, experts), torch.bfloat16, TOLERANCE.value)

    return (lambda: _capped(call)) if case.get("capped") else call, check


@pytest.mark.parametrize("fp8", [True, False], ids=["fp8", "bf16"])
@settings(max_examples=CASES, deadline=None)
@given(data=st.data())
def test_every_case_is_right_or_one_clear_error(fp8, data, worker):
    worker.check(data.draw(cases(fp8), label="case"))


BASE = dict(t=5, d=131, f=130, e=4, k=2, nan=False, threads=2, seed=0)


@pytest.mark.parametrize(
    "case",
    [
        param
        for fp8 in (True, False)
        for activation in ("relu", "swiglu")
        for param in alone(
            BASE | {"fp8": fp8, "activation": activation},
            DAMAGES,
            f"{'fp8' if fp8 else 'bf16'}-{activation}-",
        )
    ],
)
def test_each_damage_alone_is_right_or_one_clear_error(case, worker):
    worker.check(case)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_buffers_that_do_not_fit_are_a_memory_error(worker):
    """T = 2^24 tokens of D = F = 1, top-1 of one expert: x and out take 32 MiB each, the
    kernel's padded, sorted copy of x 1 or 2 GiB."""
    case = BASE | dict(t=2**24, d=1, f=1, e=1, k=1, fp8=True, activation="relu", damage=[])
    result = worker.run(case | {"capped": True})
    assert result[:2] == ("raised", "MemoryError"), result
