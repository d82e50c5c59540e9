"""The 2-rank expert-parallel worker, in its own module so spawned processes can import it."""

import torch
import torch.distributed as dist

from kernel_lib.moe.dispatch import dispatch_sorted_segments
from kernel_lib.moe.layers import MoELayer, MoELayerConfig
from kernel_lib.moe.parallel import ExpertParallelMoE

WORLD, TOKENS = 2, 30


def layer_and_input():
    torch.manual_seed(0)
    layer = MoELayer(
        MoELayerConfig(hidden=24, ffn=40, num_experts=4, top_k=2, strategy="sorted_segments")
    ).double()
    return layer, torch.randn(TOKENS, 24, dtype=torch.float64)


def worker(rank, path, queue):
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=WORLD)
    try:
        layer, x = layer_and_input()
        part = x.chunk(WORLD)[rank].clone().requires_grad_(True)
        y = ExpertParallelMoE(layer)(part, strategy=dispatch_sorted_segments)
        y.backward(torch.ones_like(y))
        # numpy arrays travel by value: a shared-memory tensor dies with its process, which may
        # exit before the parent has received it.
        queue.put((rank, y.detach().numpy(), part.grad.numpy()))
    finally:
        dist.destroy_process_group()
