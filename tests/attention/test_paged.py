"""Paged KV cache: the pool and block table hold exactly the dense cache, compiled flex over the
pool matches the fp64 reference, a page size the kernel refuses is skipped with its reason, and a
wrong block table fails the check."""

import torch

from kernel_lib.attention import bench_decode, decode, paged
from kernel_lib.platform import device_facts

from .test_decode import SHAPES, tiny_config

SHAPE = SHAPES["gqa_decode_q3"]  # L=77 is not a multiple of the page size
PAGE = 32


def _cache(seed: int = 1):
    q, k, v = decode.make_inputs(SHAPE, device="cpu", seed=seed)
    return q, k, v, paged.page_cache(k, v, page_size=PAGE, spare_pages=3, seed=seed)


def test_pool_and_table_hold_the_dense_cache():
    _, k, v, cache = _cache()
    assert cache.block_table.shape == (2, 3)  # B=2 sequences, ceil(77 / 32) pages each
    assert cache.k_pool.shape == (1, 2, (2 * 3 + 3) * PAGE, 16)
    assert len(set(cache.block_table.flatten().tolist())) == 6  # no page shared
    dense_k, dense_v = paged.gather_reference(cache)
    assert torch.equal(dense_k, k) and torch.equal(dense_v, v)
    fast_k, fast_v = paged.gather(cache)
    assert torch.equal(fast_k, k) and torch.equal(fast_v, v)


def test_logical_pages_invert_the_table():
    table = torch.tensor([[4, 0], [1, 3]])
    expected = torch.tensor([[1, -1, -1, -1, 0], [-1, 0, -1, 1, -1]])
    assert torch.equal(paged.logical_pages(table, 5), expected)


def test_flex_over_the_pool_matches_reference():
    q, k, v, cache = _cache()
    out = paged.flex_paged(q, cache)
    check = bench_decode.decode_check(SHAPE, q, k, v)
    result = check(out)
    assert out.shape == q.shape and result.passed, result


def test_the_table_is_read_once_per_tensor():
    table = torch.tensor([[2, 0], [1, 3]])
    assert paged.table_key(table) is paged.table_key(table) == ((2, 0), (1, 3))
    other = table.flip(0)  # another tensor: read on its own
    assert paged.table_key(other) == ((1, 3), (2, 0))


def test_wrong_block_table_fails_the_check():
    q, k, v, cache = _cache()
    swapped = cache.block_table.clone()
    # the first pages of sequences 0 and 1 exchanged: each reads the other's keys
    # (a swap within one sequence's fully visible pages only permutes its keys: softmax can't tell)
    swapped[[0, 1], 0] = swapped[[1, 0], 0]
    out = paged.flex_paged(q, cache._replace(block_table=swapped))
    assert not bench_decode.decode_check(SHAPE, q, k, v)(out).passed


def test_paged_case_records_paged_against_contiguous_flex():
    out = bench_decode.paged_case(tiny_config(), facts=device_facts())
    by_name = {r.implementation: r for r in out}
    assert {r.status for r in out} == {"ok"}
    assert by_name["flex_attention_compiled_paged"].ratio_vs_baseline is not None
    assert by_name["flex_attention_compiled_paged"].headline == bench_decode.PAGED_HEADLINE


def test_a_page_size_the_kernel_refuses_is_skipped_with_its_reason(refused_compile):
    out = bench_decode.paged_case(tiny_config(), facts=device_facts())
    paged_flex = {r.implementation: r for r in out}["flex_attention_compiled_paged"]
    assert paged_flex.status == "skipped" and refused_compile in paged_flex.reason
    assert paged_flex.headline == bench_decode.PAGED_HEADLINE  # its reason is the headline
