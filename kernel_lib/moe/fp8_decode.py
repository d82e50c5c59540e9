"""FP8 MoE decode (#66): the CPU workload of FP8 checkpoints (DeepSeek-V3/R1, Qwen3 FP8 served by
KTransformers and SGLang), where each token reads its top-k experts' FP8 weights once.

Per preset (scaled) and token count T, one interleaved compare on the preset's own routing
(bench_presets.preset_case) of: `c_decode_bf16` (the baseline: the C kernel on the FP8 experts
dequantised to bf16, the same model), `c_decode_fp8` (the C kernel on the FP8 experts,
converting them in registers; both prefetch each weight line PREFETCH_BYTES ahead),
`c_decode_fp8_unprefetched` (the same without that prefetch, what it buys on this machine),
`dequant_then_decode` (the plain comparator: the chosen experts
dequantised to bf16 with torch ops, then the bf16 kernel) and `read` (the read ceiling: an int32
amax over a buffer of exactly the chosen experts' FP8 bytes and scales). Each is checked against
one fp64 loop over the experts on the exact FP8 weights. A step reads only its chosen experts, so
the timed calls hold those alone (`touched`: the same bits as on all E), and each call takes the
next of `weight_copies` copies of them (twice the last-level cache in all): every call reads its
experts from memory, as a decode step does, where the whole expert set's copies would leave a
small step's experts in the cache. metrics: expert_bytes (the chosen experts' bytes as the
candidate reads them: FP8 and scales, or bf16), experts_touched, weight_copies,
fraction_of_read (its expert bytes per second over the read's, from medians). The headline:
c_decode_fp8 vs c_decode_bf16 on deepseek-v3 at T = 1."""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from kernel_lib import records as rec
from kernel_lib.checks import against, exact
from kernel_lib.fp8.bench_blocks import declare
from kernel_lib.fp8.bench_weight_only import rotating, weight_copies
from kernel_lib.fp8.weight_only import FORMAT, Fp8Weight, dequantize_weight
from kernel_lib.fp8.weight_only_peers import read, read_buffer
from kernel_lib.measure import Candidate, Case, check_then_time
from kernel_lib.moe.bench import TOPIC, WARMUP
from kernel_lib.moe.bench_presets import preset_case, preset_metrics, preset_record_shape
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.experts import FeedForwardExperts
from kernel_lib.moe.fp8_experts import (
    DecodeExperts,
    bf16_experts,
    c_moe_decode,
    decode_reference,
    fp8_experts,
)  # fmt: skip
from kernel_lib.moe.presets import MoEPreset, preset
from kernel_lib.moe.routing import Routing
from kernel_lib.moe.tolerances import tolerance
from kernel_lib.platform import DeviceFacts

# the notebook's defaults: moe_fp8_decode_presets, moe_fp8_decode_tokens, moe_preset_scale
PRESETS = MoEBenchConfig.fp8_decode_presets
TOKENS = MoEBenchConfig.fp8_decode_tokens
SCALE = MoEBenchConfig.preset_scale
BASELINE = "c_decode_bf16"
NAMES = (BASELINE, "c_decode_fp8", "c_decode_fp8_unprefetched", "dequant_then_decode", "read")
HEADLINE, HEADLINE_AT = "moe.fp8_decode_vs_bf16", ("deepseek-v3", 1)
FP8_DTYPE = f"float8_{FORMAT}"
REFERENCE = "fp64 loop over experts of the FP8 weights times their block scales, bf16 x"
# The bf16 model's weights are rounded once more than the FP8 kernel's h and output (bf16_out,
# 2^-7, measured to 6.9e-3 for them at D=200, F=72): MoE's bf16 forward bound covers all three.
TOLERANCE = tolerance("forward", "bfloat16")


def decode_check(x: Tensor, routing: Routing, experts: DecodeExperts):
    """The check of every decode candidate but the read: against the one fp64 reference of the
    FP8 `experts` (`decode_reference`, computed once), TOLERANCE."""
    reference = lambda: decode_reference(x, routing, experts)  # noqa: E731
    return against(reference, reference=REFERENCE, tolerance=TOLERANCE)


def chosen_experts(routing: Routing) -> Tensor:
    """The experts with at least one assignment (ascending)."""
    return routing.counts.nonzero().flatten()


def touched(experts: FeedForwardExperts, routing: Routing) -> tuple[DecodeExperts, Routing]:
    """The chosen experts alone as FP8 (`fp8_experts`, ascending) and `routing` renumbered to
    them: what one decode step reads. moe_decode visits only the chosen experts, in that order,
    so its output on them is the same bits as on all E (tests/moe/test_fp8_decode.py)."""
    chosen = chosen_experts(routing)
    renumber = torch.full((routing.num_experts,), -1, dtype=torch.int64)
    renumber[chosen] = torch.arange(chosen.numel())
    step = routing._replace(
        expert_idx=renumber[routing.expert_idx],
        counts=routing.counts[chosen],
        dropped=routing.dropped[chosen],
        num_experts=chosen.numel(),
        logits=None if routing.logits is None else routing.logits[:, chosen],
    )
    return fp8_experts(experts, chosen), step


def dequant_then_decode(
    x: Tensor, routing: Routing, experts: DecodeExperts, workspace: DecodeExperts
) -> Tensor:
    """The plain comparator: each chosen expert's FP8 weights dequantised to bf16 with torch ops
    (`dequantize_weight`) into the bf16 `workspace` (all E experts' shape, as a server keeps
    one), then the bf16 kernel on it."""
    for e in chosen_experts(routing).tolist():
        w_in, w_out = experts.weights(e)
        workspace.w_in[e].copy_(dequantize_weight(w_in, torch.bfloat16))
        workspace.w_out[e].copy_(dequantize_weight(w_out, torch.bfloat16))
    return c_moe_decode(x, routing, workspace)


def read_ceiling_buffer(experts: DecodeExperts, chosen: Tensor) -> Tensor:
    """`read_buffer` of exactly the chosen experts' FP8 weights and their scales."""
    as_bytes = lambda t: t[chosen].reshape(-1).view(torch.uint8)  # noqa: E731
    data = torch.cat([as_bytes(experts.w_in), as_bytes(experts.w_out)])
    scales = torch.cat([as_bytes(experts.s_in), as_bytes(experts.s_out)])
    return read_buffer(Fp8Weight(data, scales, "block"))


def expert_sets(experts: DecodeExperts, facts: DeviceFacts) -> dict[str, list[DecodeExperts]]:
    """`experts` (FP8: a step's, `touched`) and its bf16 model (`bf16_experts`), each with equal
    copies in other memory: `weight_copies` of their FP8 bytes, as lists under "fp8" and "bf16"."""
    copies = weight_copies(experts.expert_bytes(torch.arange(experts.num_experts)), facts.device)

    def copied(first: DecodeExperts) -> list[DecodeExperts]:
        tensors = {k: v for k, v in first._asdict().items() if isinstance(v, Tensor)}
        clone = lambda: first._replace(**{k: v.clone() for k, v in tensors.items()})  # noqa: E731
        return [first] + [clone() for _ in range(copies - 1)]

    return {"fp8": copied(experts), "bf16": copied(bf16_experts(experts))}


def _candidates(x: Tensor, routing: Routing, sets: dict, model: MoEPreset) -> list[Candidate]:
    """The candidates (NAMES) of one case on `sets` (expert_sets)."""
    chosen = chosen_experts(routing)
    fp8, bf16 = sets["fp8"], sets["bf16"]
    buffers = [read_ceiling_buffer(q, chosen) for q in fp8]
    workspace = bf16_experts(fp8[0])
    act = 2.0 * 2 * x.numel()  # bf16 x read, bf16 out written
    (_, h, d), f = fp8[0].w_in.shape, fp8[0].w_out.shape[2]
    flops = 2.0 * routing.token_idx.numel() * d * (h + f)  # both GEMMs of every assignment
    base = {"experts_touched": chosen.numel(), "weight_copies": len(fp8)} | preset_metrics(model)
    fp8_bytes, bf16_bytes = fp8[0].expert_bytes(chosen), bf16[0].expert_bytes(chosen)
    check = decode_check(x, routing, fp8[0])
    decode = lambda experts: c_moe_decode(x, routing, experts)  # noqa: E731

    def on_fp8(name: str, call) -> Candidate:  # `call` on each FP8 copy in turn
        return Candidate(
            name, rotating(call, fp8), check=check, flops=flops, bytes=act + fp8_bytes,
            dtype=FP8_DTYPE, metrics=base | {"expert_bytes": fp8_bytes},
        )  # fmt: skip

    return [
        Candidate(
            BASELINE, rotating(decode, bf16), check=check, flops=flops,
            bytes=act + bf16_bytes, metrics=base | {"expert_bytes": bf16_bytes},
        ),
        on_fp8("c_decode_fp8", decode),
        on_fp8("c_decode_fp8_unprefetched", lambda q: c_moe_decode(x, routing, q, prefetch=0)),
        on_fp8("dequant_then_decode", lambda q: dequant_then_decode(x, routing, q, workspace)),
        Candidate(
            "read", rotating(read, buffers),
            check=exact(read(buffers[0]), reference="the first copy's int32 maximum"),
            bytes=float(buffers[0].nbytes), dtype=FP8_DTYPE,
            metrics=base | {"expert_bytes": float(buffers[0].nbytes)},
        ),
    ]  # fmt: skip


def _skipped(what: Case, reason: str, facts: DeviceFacts) -> list[rec.Record]:
    ident = {"facts": facts, "shape": what.shape, "mode": what.mode}
    return [
        rec.skipped(
            TOPIC, what.case, n, reason, dtype=what.dtype if n == BASELINE else FP8_DTYPE, **ident
        )
        for n in NAMES
    ]


def with_fraction_of_read(records: list[rec.Record]) -> list[rec.Record]:
    """metrics.fraction_of_read on every ok record: its expert bytes per second over the read
    ceiling's, from their medians (records unchanged where the read did not run)."""
    ceiling = next(r for r in records if r.implementation == "read")
    if ceiling.status != "ok":
        return records
    rate = ceiling.metrics["expert_bytes"] / ceiling.median_ms
    return [
        dataclasses.replace(
            r,
            metrics=r.metrics
            | {"fraction_of_read": r.metrics["expert_bytes"] / r.median_ms / rate},
        )
        if r.status == "ok"
        else r
        for r in records
    ]


def fp8_decode_records(
    presets: list[str] = PRESETS,
    tokens: list[int] = TOKENS,
    scale: float = SCALE,
    *,
    facts: DeviceFacts,
    min_time_s: float = 0.2,
    zipf: float = 0.1,
) -> list[rec.Record]:
    """The records of every preset (scaled by `scale`) and token count (see the module
    docstring), case `fp8_decode_<preset>`: the seeded experts, x and routing of
    bench_presets.preset_case (Zipf exponent `zipf`). Off a CPU every candidate is skipped."""
    out = []
    for name in presets:
        model = preset(name).scaled(scale)
        for t in tokens:
            cfg = MoEBenchConfig(preset_tokens=t, preset_scale=scale, preset_zipf=zipf)
            shape = preset_record_shape(cfg, model)
            what = Case(TOPIC, f"fp8_decode_{name}", shape, "bfloat16", "forward")
            if facts.backend != "cpu":
                out += _skipped(what, f"a C kernel for CPUs, not {facts.backend}", facts)
                continue
            case = preset_case(cfg, facts, model)
            experts, routing = touched(case.feedforward, case.routing)
            records = check_then_time(
                what,
                _candidates(case.x, routing, expert_sets(experts, facts), model),
                facts=facts,
                baseline=BASELINE,
                min_time_s=min_time_s,
                warmup=WARMUP,
            )
            records = with_fraction_of_read(records)
            if (name, t) == HEADLINE_AT:
                records = declare(records, "c_decode_fp8", {"T": t}, HEADLINE)
            out += records
    return out
