"""The attention candidates: each path of a case (compiled flex as a variant, through its FLASH
backend, each SDPA backend, FlashAttention-2/3, the naive reference, the plain compiled
comparator; a user's `attention.forward` kernel, kernel_lib.plugins, eager) as a call raising
`Unsupported` where it cannot run, and flex's first call as a record of mode `first_call`
carrying the check of that call's output. bench.py's sections check then time them.

Legend: B batch, H heads, S sequence length, D head dim.
"""

from __future__ import annotations

from functools import partial

import torch

from kernel_lib import records as rec
from kernel_lib.attention.baselines import (
    SDPA_BACKENDS,
    attention_naive,
    flash_attention,
    flash_attn_function,
    flash_attn_kwargs,
    sdpa_attention,
    sdpa_inputs,
)
from kernel_lib.attention.flex import (
    FlexVariant,
    first_call,
    flex_attention_compiled,
    flex_attention_flash,
)
from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.attention.plain import attention_naive_compiled, check_score_memory
from kernel_lib.attention.shapes import AttentionShape
from kernel_lib.checks import Unsupported
from kernel_lib.measure import Candidate, Case
from kernel_lib.platform import DeviceFacts
from kernel_lib.plugins import FORWARD_ONLY, Plugin, registered

TOPIC = "attention"
FLEX = "flex_attention_compiled"
FLEX_FLASH = "flex_attention_compiled_flash"  # flex through its FLASH backend (causal forward)
FLASH_VERSIONS = ("flash_attn_2", "flash_attn_3")
NAIVE = "attention_naive"
PLAIN = "attention_naive_compiled"  # the plain comparator of the tuned flex
FIRST_CALL = "first_call"
SLOT = "attention.forward"  # the plug-ins' slot (kernel_lib.plugins.SLOTS)


def raise_unsupported(reason: str):
    """The timed call of a path that cannot run here: its record becomes `skipped: reason`."""
    raise Unsupported(reason)


def _flash(q, k, v, *, version: str, config: PatternConfig):
    flash_attn_function(version)  # "not installed" comes before "cannot express"
    return flash_attention(q, k, v, version=version, fa_kwargs=flash_attn_kwargs(config))


def _sdpa_math(q, k, v, *, sdpa_kwargs: dict):
    """SDPA's math backend, refused in fp32 past the naive's score memory (check_score_memory):
    it materialises the same fp32 scores (16 GiB at B=4, H=16, S=8192), and the fused backends
    that run give the ratio."""
    if q.dtype == torch.float32:
        check_score_memory(q)
    return sdpa_attention(q, k, v, backend="sdpa_math", sdpa_kwargs=sdpa_kwargs)


def _naive(q, k, v, *, config: PatternConfig):
    check_score_memory(q)
    return attention_naive(q, k, v, config)


def variant_name(variant: FlexVariant) -> str:
    """The implementation name of one flex variant in the tuning records (and in `variant`)."""
    return f"{FLEX}_{variant.name}"


def flex_call(qkv, config: PatternConfig, variant: FlexVariant):
    return partial(flex_attention_compiled, *qkv, config, **variant._asdict())


def baseline_calls(config: PatternConfig, shape: AttentionShape, q) -> dict:
    """Implementation name -> call(q, k, v) of every non-flex path (raising Unsupported where
    it cannot run the case)."""
    try:
        kwargs = sdpa_inputs(config, shape.seq_len, shape.heads, dtype=q.dtype, device=q.device)
        calls = {b: partial(sdpa_attention, backend=b, sdpa_kwargs=kwargs) for b in SDPA_BACKENDS}
        calls["sdpa_math"] = partial(_sdpa_math, sdpa_kwargs=kwargs)
    except Unsupported as why:
        calls = {b: lambda *qkv, why=str(why): raise_unsupported(why) for b in SDPA_BACKENDS}
    calls.update({v: partial(_flash, version=v, config=config) for v in FLASH_VERSIONS})
    calls[NAIVE] = partial(_naive, config=config)
    return calls


def _keep_first(check, kept: list):
    """`check`, remembering its first result (compare checks the first call's output)."""

    def checked(out):
        kept.append(check(out))
        return kept[-1]

    return checked


class FlexCompile:
    """The flex candidate of one case, and the record of its first call when that call compiled
    during this case (its check is the check of that very output)."""

    def __init__(self, config: PatternConfig, q, variant: FlexVariant):
        self.config, self.q, self.variant = config, q, variant
        self.new = first_call(config, q, **variant._asdict()) is None
        self.checks: list = []

    def candidate(self, name: str, fn, check, **fields) -> Candidate:
        return Candidate(name, fn, _keep_first(check, self.checks), **fields)

    def records(self, case: Case, facts: DeviceFacts, name: str = FLEX) -> list[rec.Record]:
        call = first_call(self.config, self.q, **self.variant._asdict())
        if not (self.new and call is not None and self.checks):
            return []
        common = {"facts": facts, "dtype": case.dtype, "shape": case.shape, "mode": FIRST_CALL}
        check = self.checks[0]
        if not check.passed:
            return [rec.wrong(TOPIC, case.case, name, check, **common)]
        metrics = {"section": "compile", "new_graphs": call.new_graphs, **self.variant._asdict()}
        return [
            rec.measured(
                TOPIC, case.case, name, call.timing, check=check, metrics=metrics, **common
            )
        ]


def plain_candidate(qkv, config: PatternConfig, check, *, flops: float) -> Candidate:
    """The plain comparator: the same attention written plainly, through torch.compile."""
    return Candidate(PLAIN, partial(attention_naive_compiled, *qkv, config), check, flops=flops)


def flash_candidate(qkv, config: PatternConfig, check, *, block_size: int, **fields) -> Candidate:
    """Flex through its FLASH backend, tiles of `block_size` (it runs in the input dtype)."""
    call = partial(flex_attention_flash, *qkv, config, block_size=block_size)
    return Candidate(FLEX_FLASH, call, check, **fields)


def baseline_candidates(
    config: PatternConfig,
    shape: AttentionShape,
    qkv,
    check,
    *,
    flops: float,
    among: tuple[str, ...] | None = None,
    grad_out=None,
) -> list[Candidate]:
    """The non-flex paths (`among` only, if given) on qkv: forward, or with `grad_out` forward +
    backward (dq, dk, dv of sum(out * grad_out))."""
    return [
        Candidate(name, _timed(call, qkv, grad_out), check, flops=flops)
        for name, call in baseline_calls(config, shape, qkv[0]).items()
        if among is None or name in among
    ]


def plugin_candidates(qkv, pattern, check, *, grad_out=None, **fields) -> list[Candidate]:
    """Every `attention.forward` plug-in called eager as fn(q, k, v, pattern) on qkv, with the
    built-ins' `check` (its cached reference): forward, or with `grad_out` forward + backward
    where registered with backward=True (else skipped: FORWARD_ONLY)."""
    return [_plugin(p, qkv, pattern, check, grad_out, fields) for p in registered(SLOT)]


def _plugin(p: Plugin, qkv, pattern, check, grad_out, fields: dict) -> Candidate:
    if grad_out is not None and not p.backward:
        fn = partial(raise_unsupported, FORWARD_ONLY)
    else:
        fn = _timed(partial(_plugin_call, p.fn, pattern=pattern), qkv, grad_out)
    return Candidate(p.name, fn, check, plugin=p.source, **fields)


def _plugin_call(fn, q, k, v, *, pattern):
    return fn(q, k, v, pattern)


def flex_grads(qkv, grad_out, config: PatternConfig, variant: FlexVariant):
    """The timed call of flex's forward + backward as `variant`."""
    call = partial(flex_attention_compiled, config=config, **variant._asdict())
    return _timed(call, qkv, grad_out)


def _timed(call, qkv, grad_out):
    return partial(call, *qkv) if grad_out is None else partial(_grads, call, qkv, grad_out)


def _grads(call, qkv, grad_out):
    return torch.autograd.grad(call(*qkv), qkv, grad_out)
