"""Graphormer's graph: breadth-first hop distances agree with Floyd-Warshall, the edge types along
each path built hop by hop agree with the paths walked back, and the patterns' biases are the
tables looked up at those distances and averaged over those paths."""

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


@pytest.mark.parametrize("num_nodes, seed", [(1, 0), (2, 1), (37, 2), (97, 3)])
def test_edge_shares_built_hop_by_hop_match_the_walked_paths(num_nodes, seed):
    counts = graph.path_edge_counts_reference(num_nodes, seed)
    hops = graph.shortest_paths_reference(num_nodes, seed, num_nodes)
    assert torch.equal(counts.sum(0), hops)  # one edge per hop, on a shortest path
    shares = graph.path_edge_shares(num_nodes, seed)
    assert torch.allclose(shares.double(), counts.double() / hops.clamp(min=1), atol=1e-7)


def test_edge_path_takes_the_smallest_index_predecessor():
    # seed 7: the 4-ring 0-1-2-3-0 alone, each edge its own type; both ways round are shortest
    edges, types = graph.typed_edges(4, 7)
    kind = dict(zip(map(tuple, edges.tolist()), types.tolist()))
    assert sorted(kind) == [(0, 1), (0, 3), (1, 2), (2, 3)] and len(set(kind.values())) == 4
    counts = graph.path_edge_counts_reference(4, 7)
    shares = graph.path_edge_shares(4, 7)
    # 0 -> 2 and 2 -> 0 through 1 (not 3), 1 -> 3 through 0 (not 2)
    for (i, j), path in {
        (0, 2): [(0, 1), (1, 2)],
        (2, 0): [(0, 1), (1, 2)],
        (1, 3): [(0, 1), (0, 3)],
    }.items():
        expected = torch.bincount(torch.tensor([kind[e] for e in path]), minlength=4)
        assert torch.equal(counts[:, i, j], expected) and torch.equal(
            shares[:, i, j], expected / 2
        )


def test_graphormer_edge_bias_is_the_mean_of_the_path_types():
    config = PatternConfig("graphormer_edges", seed=2)
    bias = dense_bias(config, 30, 3)
    table = graph.edge_bias_table(3, 2).double()
    counts = graph.path_edge_counts_reference(30, 2)
    i, j = 4, 21
    mean = (table @ counts[:, i, j].double()) / counts[:, i, j].sum()
    assert torch.allclose(bias[:, i, j], mean) and (bias.diagonal(dim1=1, dim2=2) == 0).all()
