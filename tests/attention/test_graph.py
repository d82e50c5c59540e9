"""Graphormer's graph: breadth-first hop distances agree with Floyd-Warshall, and the pattern's
bias is the table looked up at those distances."""

import pytest
import torch

from kernel_lib.attention import graph
from kernel_lib.attention.patterns import PatternConfig, materialise
from kernel_lib.attention.reference import dense_bias


@pytest.mark.parametrize(
    "num_nodes, seed, max_distance", [(1, 0, 1), (2, 1, 3), (37, 2, 2), (97, 3, 40)]
)
def test_breadth_first_distances_match_floyd_warshall(num_nodes, seed, max_distance):
    fast = graph.shortest_paths(num_nodes, seed, max_distance)
    assert torch.equal(fast, graph.shortest_paths_reference(num_nodes, seed, max_distance))
    assert torch.equal(fast, fast.T) and (fast.diagonal() == 0).all()


def test_ring_neighbours_are_one_hop_and_far_pairs_share_the_last_bucket():
    distances = graph.shortest_paths(50, 0, 1)
    assert (distances[torch.arange(50), (torch.arange(50) + 1) % 50] == 1).all()
    assert distances.max() == 2  # M + 1: everything farther than M = 1


def test_graphormer_bias_reads_the_table_at_the_distance():
    config = PatternConfig("graphormer", max_distance=3, seed=1)
    _, bias = materialise(config, seq_len=23, num_heads=2)
    table = graph.spatial_bias_table(2, 3, 1)
    distances = graph.shortest_paths_reference(23, 1, 3)
    assert torch.equal(bias.float(), table[:, distances])
    shifted = table[:, (distances - 1).clamp(min=0)]  # teeth: an off-by-one distance differs
    assert not torch.allclose(dense_bias(config, 23, 2).float(), shifted)
