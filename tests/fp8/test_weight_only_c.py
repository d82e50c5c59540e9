"""The weight-only C wrappers' arguments (tests/c_worker.py): over shapes, threads, NaN codes and
damaged operands (dtypes, meta, strides, expanded, shapes, scale shapes of either scaling, an
unknown scaling, out buffers), every case is its reference's answer (fp64; the C conversion's
plain twin, bit for bit) or one clear exception, in a worker process that no case may kill;
buffers that do not fit are a MemoryError."""

import resource
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.fp8.checks import TOLERANCES
from kernel_lib.fp8.scaling import BLOCK
from kernel_lib.fp8.weight_only import Fp8Weight, dequantize_weight, weight_only_reference
from kernel_lib.fp8.weight_only_c import c_dequant_linear, c_dequantize_weight, c_w8a16_linear
from tests.c_worker import KINDS, alone, compare, damaged, module_worker

CASES = 200  # per wrapper
DAMAGES = {
    "x": (*KINDS, "float32", "float16", "K+1"),
    "w": ("tuple",),
    "w.data": (*KINDS, "float32", "uint8", "float8_e5m2"),
    "w.scale_inv": (*KINDS, "float64", "bfloat16", "one element", "transposed", "other scaling"),
    "w.scaling": ("tensor", "Channel", None),
    "out": (*KINDS, "float32", "K+1"),
}
DAMAGES["workspace"] = DAMAGES["out"]
WEIGHT = ("w", "w.data", "w.scale_inv", "w.scaling")
OPERANDS = {
    "c_w8a16_linear": ("x", *WEIGHT),
    "c_dequantize_weight": (*WEIGHT, "out"),
    "c_dequant_linear": ("x", *WEIGHT, "workspace"),
}
MEMORY_HEADROOM = 2**30  # bytes of address space a capped call may add: x and out, not 4 GiB

worker = module_worker("tests.fp8.test_weight_only_c")


@st.composite
def cases(draw, fn: str) -> dict:
    kinds = [(name, kind) for name in OPERANDS[fn] for kind in DAMAGES[name]]
    return dict(
        fn=fn,
        m=draw(st.integers(0, 9)),  # <= 4 (2 blocked): converted in registers; more: a tile
        k=draw(st.integers(0, 300)),
        n=draw(st.integers(0, 140)),  # past one block of 128 rows
        scaling=draw(st.sampled_from(["channel", "block"])),
        nan=draw(st.booleans()),
        out=draw(st.booleans()),
        threads=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**16)),
        damage=draw(st.lists(st.sampled_from(kinds), max_size=2, unique_by=lambda d: d[0])),
    )


def _scales(scaling: str, n: int, k: int) -> tuple[int, int]:
    return (n, 1) if scaling == "channel" else (-(-n // BLOCK), -(-k // BLOCK))


def _damaged(ops: dict, name: str, kind, case: dict):
    m, k, n, scaling = case["m"], case["k"], case["n"], case["scaling"]
    if name == "w.scaling":
        return kind
    if kind == "K+1":  # a column too many, x's or the output's
        return torch.ones(m if name == "x" else n, k + 1, dtype=torch.bfloat16)
    if kind == "one element":
        return ops[name].reshape(-1)[:1]
    if kind == "transposed":
        return ops[name].t()
    if kind == "other scaling":
        other = "block" if scaling == "channel" else "channel"
        return torch.ones(_scales(other, n, k))
    return damaged(ops[name], kind)


def _capped(call):
    """call() with the address space capped MEMORY_HEADROOM above its present size."""
    with open("/proc/self/status") as status:
        size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (size + MEMORY_HEADROOM, hard))
    try:
        return call()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def prepare(case: dict):
    """The case's operands (random e4m3fn codes, a NaN code where asked, positive scales, then
    the damage); its call and the check of its answer."""
    torch.set_num_threads(case["threads"])
    gen = torch.Generator().manual_seed(case["seed"])
    m, k, n, scaling = case["m"], case["k"], case["n"], case["scaling"]
    codes = torch.randint(0, 256, (n, k), generator=gen, dtype=torch.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0
    if case["nan"] and codes.numel():
        codes[0, 0] = 0x7F
    ops = {
        "x": torch.randn(m, k, generator=gen).bfloat16(),
        "w.data": codes.view(torch.float8_e4m3fn),
        "w.scale_inv": torch.rand(_scales(scaling, n, k), generator=gen) + 0.5,
        "w.scaling": scaling,
        "out": torch.empty(n, k, dtype=torch.bfloat16),
    }
    ops["workspace"] = ops["out"]
    damage = dict(case["damage"])
    for name, kind in damage.items():
        if name != "w":
            ops[name] = _damaged(ops, name, kind, case)
    w = Fp8Weight(ops["w.data"], ops["w.scale_inv"], ops["w.scaling"])
    w = tuple(w) if "w" in damage else w
    x, fn, bf16 = ops["x"], case["fn"], torch.bfloat16
    buffer = {"c_dequantize_weight": "out", "c_dequant_linear": "workspace"}.get(fn)
    out = ops[buffer] if buffer and (case["out"] or buffer in damage) else None
    if fn == "c_dequantize_weight":

        def check(got):
            if out is not None and got is not out:
                return "the result is not `out`"
            return compare(got, dequantize_weight(w, bf16).double(), bf16, 0.0)

        return lambda: c_dequantize_weight(w, out), check

    def call():
        if fn == "c_w8a16_linear":
            return c_w8a16_linear(x, w)
        return c_dequant_linear(x, w, workspace=out)

    def check(got):
        if fn == "c_w8a16_linear":
            ref = weight_only_reference(x, w)
        else:  # fp64 of the kernel's W, rounded to bf16 once: against the exact W, that
            # rounding of each product can pass bf16_out where the few outputs cancel
            ref = x.double() @ dequantize_weight(w, bf16).double().t()
        return compare(got, ref, bf16, TOLERANCES["bf16_out"].value)

    return (lambda: _capped(call)) if case.get("capped") else call, check


@pytest.mark.parametrize("fn", list(OPERANDS))
@settings(max_examples=CASES, deadline=None)
@given(data=st.data())
def test_every_case_is_right_or_one_clear_error(fn, data, worker):
    worker.check(data.draw(cases(fn), label="case"))


@pytest.mark.parametrize(
    "case",
    [
        param
        for fn, names in OPERANDS.items()
        for scaling in ("channel", "block")
        for param in alone(
            dict(
                fn=fn, m=5, k=131, n=130, scaling=scaling, nan=False, out=False, threads=2, seed=0
            ),
            {name: DAMAGES[name] for name in names},
            f"{fn}-{scaling}-",
        )
    ],
)
def test_each_damage_alone_is_right_or_one_clear_error(case, worker):
    worker.check(case)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_buffers_that_do_not_fit_are_a_memory_error(worker):
    """M = 2^25, K = 1: x and out take 64 MiB each, the kernel's padded copy of x 2 or 4 GiB."""
    case = dict(fn="c_w8a16_linear", m=2**25, k=1, n=1, scaling="channel", nan=False, out=False)
    case.update(threads=1, seed=0, damage=[], capped=True)
    result = worker.run(case)
    assert result[:2] == ("raised", "MemoryError"), result
