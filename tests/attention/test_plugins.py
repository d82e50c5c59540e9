"""`attention.forward` plug-ins (kernel_lib.plugins) in the attention sections: called eager as
fn(q, k, v, pattern) beside the built-ins of each case, checked against the same reference,
timed with the same baseline, never a headline; the built-ins' records as without them.
Flex is refused (or stood in for) so nothing here compiles."""

import math

import pytest
import torch
import torch.nn.functional as F

from kernel_lib import records as rec
from kernel_lib.attention import bench, bench_decode, checks, decode, paged, reference
from kernel_lib.attention.baselines import SDPA_BACKENDS
from kernel_lib.attention.candidates import FLEX, FORWARD_ONLY, SLOT
from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.attention.flex import FlexVariant
from kernel_lib.attention.paged import PagedCache
from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.checks import Unsupported
from kernel_lib.plugins import kernel

pytestmark = pytest.mark.usefixtures("plugin_registry")

CFG = AttentionBenchConfig(
    batch=1, heads=2, seq_len=64, head_dim=16, window=8, windows=(8,), windows_seq_len=64,
    prefix_len=8, patterns=("causal", "softcap"), reps=6, min_time_s=0.001,
    decode_heads=4, decode_kv_heads=2, decode_head_dim=16, decode_kv_len=40, decode_q_len=3,
    decode_dtype="float32", decode_kv_lens=(40,), cross_q_len=5, cross_kv_len=20, page_size=16,
)  # fmt: skip
BROKE = "my kernel broke"


def _attend(q, k, v, mask):
    """Softmax attention under an (Lq, Lk) bool mask, KV head h read by its group of q heads."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~mask.to(q.device), float("-inf")).softmax(-1) @ v


def plain(q, k, v, pattern):
    """A user's kernel for masks only: a pattern, a decode shape or a paged cache."""
    if isinstance(pattern, PatternConfig):
        if pattern.pattern.score_mod:
            raise Unsupported(f"{pattern.name}: masks only")
        return _attend(q, k, v, reference.dense_mask(pattern, q.shape[2]))
    if isinstance(pattern, PagedCache):
        k, v = paged.gather(pattern)
        Lq, L = q.shape[2], pattern.kv_len
        return _attend(q, k, v, torch.ones(Lq, L, dtype=torch.bool).tril(L - Lq))
    return _attend(q, k, v, decode.dense_mask(pattern))


def _raises(q, k, v, pattern):
    raise RuntimeError(BROKE)


def _without_and_with(section):
    """(the section's records with no plug-in, with plain (backward too), off by 10 %, raises)."""
    before = section()
    kernel(SLOT, name="plain", backward=True)(plain)
    kernel(SLOT, name="off")(lambda q, k, v, pattern: 1.1 * plain(q, k, v, pattern))
    kernel(SLOT, name="raises")(_raises)
    return before, section()


def _same_builtins(before, after):
    def key(r):
        return rec.record_id(r, "p"), r.status, r.reason if r.status != "ok" else ""

    assert all(r.plugin is None for r in before)
    assert [key(r) for r in after if r.plugin is None] == [key(r) for r in before]
    assert not any(r.headline for r in after if r.plugin)


def _best_sdpa(records, case, mode="forward"):
    """The case's baseline: its fastest SDPA backend that ran."""
    ran = [r for r in records if r.implementation in SDPA_BACKENDS and r.status == "ok"]
    return min((r for r in ran if (r.case, r.mode) == (case, mode)), key=lambda r: r.median_ms)


def _theirs(records, case, mode="forward"):
    return {r.implementation: r for r in records if r.plugin and (r.case, r.mode) == (case, mode)}


def _ok_off_raises(theirs, baseline):
    """plain timed with its ratio over `baseline`, off wrong and untimed, raises failed."""
    mine, off, raises = theirs["plain"], theirs["off"], theirs["raises"]
    assert mine.status == "ok" and mine.check["pass"] and mine.ratio_vs_baseline > 0
    assert mine.baseline == baseline and mine.plugin["slot"] == SLOT
    assert mine.plugin["name"] == "plain" and mine.plugin["file"] == __file__
    assert off.status == "wrong" and off.median_ms is None and not off.samples_ms
    assert raises.status == "failed" and raises.reason == f"RuntimeError: {BROKE}"


def test_every_pattern_and_the_backward_case_time_the_plugins(refused_compile, cpu_facts):
    before, after = _without_and_with(
        lambda: bench.time_patterns(CFG, facts=cpu_facts, variant=FlexVariant(16))
    )
    _same_builtins(before, after)
    causal, sdpa = _theirs(after, "causal"), _best_sdpa(after, "causal")
    _ok_off_raises(causal, sdpa.implementation)
    assert causal["plain"].check["reference"] == sdpa.check["reference"]
    assert causal["plain"].flops == sdpa.flops
    softcap = _theirs(after, "softcap")
    assert softcap["plain"].status == softcap["off"].status == "skipped"
    assert softcap["plain"].reason == "softcap: masks only"
    backward = _theirs(after, "causal", "forward_backward")
    best = _best_sdpa(after, "causal", "forward_backward").implementation
    assert backward["plain"].status == "ok" and backward["plain"].baseline == best
    assert "gradients" in backward["plain"].check["reference"]
    assert {(backward[n].status, backward[n].reason) for n in ("off", "raises")} == {
        ("skipped", FORWARD_ONLY)
    }


def test_every_decode_case_times_the_plugins_on_gqa_and_mqa_heads(refused_compile, cpu_facts):
    before, after = _without_and_with(lambda: bench_decode.time_decode(CFG, facts=cpu_facts))
    _same_builtins(before, after)
    for case, shape in bench_decode.decode_shapes(CFG).items():
        theirs = _theirs(after, case)
        _ok_off_raises(theirs, _best_sdpa(after, case).implementation)
        assert theirs["plain"].bytes == decode.kv_bytes(shape)


def test_ours_and_theirs_share_one_reference_per_case(refused_compile, cpu_facts, monkeypatch):
    calls = []

    def counted(reference):
        return lambda *args, **kwargs: calls.append(1) or reference(*args, **kwargs)

    monkeypatch.setattr(checks, "reference_output", counted(reference.reference_output))
    monkeypatch.setattr(bench_decode, "gqa_reference", counted(reference.gqa_reference))
    kernel(SLOT, name="plain")(plain)
    causal = CFG.pattern("causal")
    records = bench.forward_case(
        CFG, causal, CFG.shape(), facts=cpu_facts, variant=FlexVariant(16), case="causal",
        section="patterns",
    )  # fmt: skip
    shape = bench_decode.decode_shapes(CFG)["gqa_decode"]
    records += bench_decode.decode_case(
        CFG, shape, facts=cpu_facts, case="gqa_decode", section="decode"
    )
    assert len(calls) == 2
    assert [r.status for r in records if r.plugin] == ["ok", "ok"]


def test_the_paged_case_times_the_plugins_over_the_pool(refused_compile, monkeypatch, cpu_facts):
    """Flex on the contiguous cache (the baseline) stood in for by SDPA: one query sees every
    key; flex over the pool refused."""

    def contiguous(q, k, v, shape, block_size):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    monkeypatch.setattr(bench_decode, "flex_decode", contiguous)
    before, after = _without_and_with(lambda: bench_decode.paged_case(CFG, facts=cpu_facts))
    _same_builtins(before, after)
    _ok_off_raises(_theirs(after, "paged_gqa_decode"), FLEX)
    headline = [r.implementation for r in after if r.headline]
    assert headline == [bench_decode.FLEX_PAGED]
