"""Expert parallelism over 2 gloo processes equals the single-process layer (forward, backward)."""

import tempfile

import pytest
import torch
import torch.multiprocessing as mp

from tests.moe.ep_worker import WORLD, layer_and_input, worker


@pytest.mark.slow
def test_two_rank_expert_parallel_equals_single_process():
    layer, x = layer_and_input()
    x.requires_grad_(True)
    ref = layer(x).y
    ref.backward(torch.ones_like(ref))
    ctx = mp.get_context("spawn")  # fresh processes: no inherited thread pools
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=worker, args=(r, f"{tmp}/store", queue)) for r in range(WORLD)]
        for p in procs:
            p.start()
        got = (queue.get(timeout=120) for _ in procs)
        results = {rank: (torch.from_numpy(y), torch.from_numpy(g)) for rank, y, g in got}
        for p in procs:
            p.join(timeout=30)
    assert all(p.exitcode == 0 for p in procs)
    torch.testing.assert_close(torch.cat([results[r][0] for r in range(WORLD)]), ref.detach())
    torch.testing.assert_close(torch.cat([results[r][1] for r in range(WORLD)]), x.grad)


def test_expert_count_must_divide_world_size():
    from kernel_lib.moe.parallel import shard_experts

    layer, _ = layer_and_input()
    with pytest.raises(ValueError, match="world_size"):
        shard_experts(layer.experts, 0, 3)
