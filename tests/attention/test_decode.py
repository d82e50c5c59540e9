"""GQA/MQA decode and cross-attention: masks vs explicit definitions, compiled flex and SDPA vs
the fp64 reference on odd shapes, bad shapes, and checks with teeth (a misaligned causal offset
or a missing document mask fails)."""

import pytest
import torch
import torch.nn.functional as F

from kernel_lib.attention import bench_decode, decode
from kernel_lib.attention.baselines import sdpa_attention
from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.attention.decode import DecodeShape
from kernel_lib.attention.reference import gqa_reference
from kernel_lib.checks import Unsupported
from kernel_lib.platform import device_facts

# Odd shapes shared by the compiled tests (each (Lq, Lk) is one flex compile).
SHAPES = {
    "gqa_decode_q3": DecodeShape(2, 6, 2, 3, 77, 16),
    "mqa_decode": DecodeShape(1, 4, 1, 1, 77, 16),
    "cross": DecodeShape(2, 4, 2, 13, 50, 16, mask="none"),
    "cross_document": DecodeShape(2, 4, 2, 13, 50, 16, mask="document", docs=((1, 20), (12, 30))),
}
BLOCK = 32


def _reference(shape, q, k, v):
    return gqa_reference(q.double(), k.double(), v.double(), mask=decode.dense_mask(shape))


def test_bottom_right_causal_mask_by_its_definition():
    shape = DecodeShape(1, 2, 1, 3, 7, 16)
    expected = torch.tensor([[j <= 7 - 3 + i for j in range(7)] for i in range(3)])
    assert torch.equal(decode.dense_mask(shape), expected)
    mod = decode.mask_mod(shape, "cpu")
    got = mod(0, 0, torch.arange(3)[:, None], torch.arange(7)[None, :])
    assert torch.equal(got, expected)


def test_one_decode_query_sees_every_key_and_sdpa_gets_no_mask():
    shape = DecodeShape(1, 8, 2, 1, 33, 16)
    assert decode.dense_mask(shape).all()
    assert decode.sdpa_kwargs(shape, device="cpu") == {"enable_gqa": True}
    assert "attn_mask" in decode.sdpa_kwargs(SHAPES["gqa_decode_q3"], device="cpu")


def test_cross_document_mask_by_its_definition():
    shape = SHAPES["cross_document"]
    q_doc = [0] * 1 + [1] * 12
    kv_doc = [0] * 20 + [1] * 30
    expected = torch.tensor([[a == b for b in kv_doc] for a in q_doc])
    assert torch.equal(decode.dense_mask(shape), expected)
    mod = decode.mask_mod(shape, "cpu")
    assert torch.equal(mod(0, 0, torch.arange(13)[:, None], torch.arange(50)[None, :]), expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA/AMD GPU")
def test_cross_document_mask_on_the_gpu():
    """Its document ids are built on the mask's device (an H100 run failed here on CPU ids)."""
    shape = SHAPES["cross_document"]
    mod = decode.mask_mod(shape, "cuda")
    idx = torch.arange(13, device="cuda")[:, None], torch.arange(50, device="cuda")[None, :]
    assert torch.equal(mod(0, 0, *idx).cpu(), decode.dense_mask(shape))


@pytest.mark.parametrize("name", list(SHAPES))
def test_compiled_flex_matches_reference(name):
    shape = SHAPES[name]
    q, k, v = decode.make_inputs(shape, device="cpu", seed=1)
    out = decode.flex_decode(q, k, v, shape, block_size=BLOCK)
    error = float((out.double() - _reference(shape, q, k, v)).abs().max())
    assert out.shape == q.shape and error < 1e-5, f"{name}: max error {error:.2e} (fp32 in)"


@pytest.mark.parametrize("name", list(SHAPES))
def test_sdpa_flash_matches_reference(name):
    shape = SHAPES[name]
    q, k, v = decode.make_inputs(shape, device="cpu", seed=1)
    kwargs = decode.sdpa_kwargs(shape, device="cpu")
    out = sdpa_attention(q, k, v, backend="sdpa_flash", sdpa_kwargs=kwargs)
    error = float((out.double() - _reference(shape, q, k, v)).abs().max())
    assert error < 1e-5, f"{name}: max error {error:.2e}"


def test_a_refused_compile_is_unsupported_in_inductors_words(refused_compile):
    shape = SHAPES["gqa_decode_q3"]
    q, k, v = decode.make_inputs(shape, device="cpu", seed=1)
    with pytest.raises(Unsupported, match="D=16") as refused:
        decode.flex_decode(q, k, v, shape, block_size=BLOCK)
    assert refused_compile in str(refused.value)


def test_check_catches_top_left_causal():
    # SDPA's is_causal aligns the first query with the first key: wrong for decode.
    shape = SHAPES["gqa_decode_q3"]
    q, k, v = decode.make_inputs(shape, device="cpu", seed=1)
    check = bench_decode.decode_check(shape, q, k, v)
    misaligned = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert not check(misaligned).passed
    assert check(decode.flex_decode(q, k, v, shape, block_size=BLOCK)).passed


def test_check_catches_a_missing_document_mask_and_wrong_head_groups():
    shape = SHAPES["cross_document"]
    q, k, v = decode.make_inputs(shape, device="cpu", seed=1)
    check = bench_decode.decode_check(shape, q, k, v)
    assert not check(F.scaled_dot_product_attention(q, k, v, enable_gqa=True)).passed
    mask = decode.dense_mask(shape)
    # query head h reading KV head h % Hkv instead of h // (Hq / Hkv)
    interleaved = F.scaled_dot_product_attention(
        q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1), attn_mask=mask
    )
    assert not check(interleaved).passed


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"heads": 6, "kv_heads": 4}, "heads=6 must be a multiple of kv_heads=4"),
        ({"q_len": 9, "kv_len": 8}, "q_len=9 must be <= kv_len=8"),
        ({"mask": "sliding"}, "mask='sliding'"),
        ({"mask": "document", "docs": ((1, 4),)}, "docs="),
        ({"kv_len": 0}, "kv_len=0"),
    ],
)
def test_bad_shapes_name_the_field(kwargs, match):
    base = {"batch": 1, "heads": 4, "kv_heads": 2, "q_len": 2, "kv_len": 8, "head_dim": 16}
    with pytest.raises(ValueError, match=match):
        DecodeShape(**{**base, **kwargs})


def tiny_config(**overrides) -> AttentionBenchConfig:
    """Decode sizes of SHAPES["gqa_decode_q3"] so the bench tests reuse its compile."""
    sizes = dict(
        decode_heads=6,
        decode_kv_heads=2,
        decode_head_dim=16,
        decode_kv_len=77,
        decode_q_len=3,
        decode_dtype="float32",
        decode_kv_lens=(77,),
        page_size=BLOCK,
        reps=6,
        min_time_s=0.001,
    )
    return AttentionBenchConfig(**{**sizes, **overrides})


def test_decode_case_records_flex_and_sdpa_against_the_best_sdpa():
    cfg = tiny_config()
    shape = decode.DecodeShape(1, 6, 2, 3, 77, 16)
    out = bench_decode.decode_case(
        cfg, shape, facts=device_facts(), case="gqa_decode_q3", section="decode"
    )
    by_name = {r.implementation: r for r in out}
    assert by_name["flex_attention_compiled"].status == "ok"
    assert by_name["flex_attention_compiled"].ratio_vs_baseline is not None
    assert by_name["sdpa_flash"].status == "ok"
    assert by_name["sdpa_cudnn"].status == "skipped" and by_name["sdpa_cudnn"].reason
    assert "new_graphs" in by_name["flex_attention_compiled"].metrics
    assert all(r.metrics["section"] == "decode" for r in out)


def test_a_refused_flex_compile_skips_only_the_flex_record(refused_compile):
    shape = decode.DecodeShape(1, 6, 2, 3, 77, 16)
    out = bench_decode.decode_case(
        tiny_config(), shape, facts=device_facts(), case="gqa_decode_q3", section="decode"
    )
    by_name = {r.implementation: r for r in out}
    flex = by_name["flex_attention_compiled"]
    assert flex.status == "skipped" and refused_compile in flex.reason
    assert by_name["sdpa_flash"].status == "ok"


def test_decode_shapes_of_the_config():
    shapes = bench_decode.decode_shapes(tiny_config(cross_q_len=13, cross_kv_len=50))
    assert shapes["mqa_decode"].kv_heads == 1 and shapes["gqa_decode"].q_len == 1
    assert shapes["gqa_decode_q3"].q_len == 3
    assert sum(q for q, _ in shapes["cross_document"].docs) == 13
