"""Graphormer's spatial encoding: a per-head bias by shortest-path distance between graph nodes
(Ying et al. 2021, arXiv 2106.05234), on a seeded small-world graph whose nodes are the tokens.

Legend: H heads, S tokens = graph nodes, M the largest distance with its own bias bucket
(farther pairs share bucket M + 1).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor


def graph_edges(num_nodes: int, seed: int) -> Tensor:
    """(E, 2) undirected edges: a ring (i, i + 1) plus one seeded chord from every node."""
    nodes = torch.arange(num_nodes)
    chords = torch.randint(num_nodes, (num_nodes,), generator=torch.Generator().manual_seed(seed))
    return torch.cat(
        [torch.stack([nodes, (nodes + 1) % num_nodes], 1), torch.stack([nodes, chords], 1)]
    )


def _adjacency(num_nodes: int, seed: int) -> Tensor:
    edges = graph_edges(num_nodes, seed)
    adjacency = torch.zeros(num_nodes, num_nodes, dtype=torch.bool)
    adjacency[edges[:, 0], edges[:, 1]] = True
    adjacency[edges[:, 1], edges[:, 0]] = True
    return adjacency


@functools.lru_cache(maxsize=8)
def shortest_paths(num_nodes: int, seed: int, max_distance: int) -> Tensor:
    """(S, S) int64 hop distances clamped to M + 1, by breadth-first frontiers (one boolean
    matrix product per hop; the small-world graph's diameter keeps the hops few)."""
    adjacency = _adjacency(num_nodes, seed).float()
    distance = torch.full((num_nodes, num_nodes), max_distance + 1, dtype=torch.int64)
    reached = torch.eye(num_nodes, dtype=torch.bool)
    distance[reached] = 0
    for hop in range(1, max_distance + 1):
        grown = reached | (reached.float() @ adjacency > 0)
        if torch.equal(grown, reached):
            break
        distance[grown & ~reached] = hop
        reached = grown
    return distance


@functools.lru_cache(maxsize=8)
def shortest_paths_reference(num_nodes: int, seed: int, max_distance: int) -> Tensor:
    """shortest_paths by Floyd-Warshall (relax through every node in turn), clamped to M + 1."""
    far = num_nodes + max_distance + 1
    distance = torch.where(_adjacency(num_nodes, seed), 1, far).fill_diagonal_(0)
    for k in range(num_nodes):
        distance = torch.minimum(distance, distance[:, k, None] + distance[None, k, :])
    return distance.clamp_max(max_distance + 1)


def spatial_bias_table(num_heads: int, max_distance: int, seed: int, device="cpu") -> Tensor:
    """A seeded stand-in for the learned (H, M + 2) bias table, fp32."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(num_heads, max_distance + 2, generator=generator).to(device)
