"""Graphormer's spatial and edge encodings (Ying et al. 2021, arXiv 2106.05234): per-head biases by
shortest-path distance between graph nodes, and by the types of the edges along that path, on a
seeded small-world graph whose nodes are the tokens.

Legend: H heads, S tokens = graph nodes, M the largest distance with its own bias bucket
(farther pairs share bucket M + 1), K edge types. The edge encoding's path from i to j is the
canonical shortest one: each node's predecessor is its smallest-index neighbour one hop closer
to i.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

EDGE_TYPES = (
    4  # K: kinds of edge feature (a molecule's bond types), a learned scalar per head each
)


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


def typed_edges(num_nodes: int, seed: int) -> tuple[Tensor, Tensor]:
    """((E, 2) the graph's distinct edges as u < v in sorted order (no self-loops), (E,) their
    seeded types in [0, K))."""
    pairs = graph_edges(num_nodes, seed).sort(dim=1).values
    edges = torch.unique(pairs[pairs[:, 0] != pairs[:, 1]], dim=0)
    generator = torch.Generator().manual_seed(seed)
    return edges, torch.randint(EDGE_TYPES, (len(edges),), generator=generator)


@functools.lru_cache(maxsize=8)
def path_edge_shares(num_nodes: int, seed: int) -> Tensor:
    """(K, S, S) fp32: each type's share of the edges on the path from i to j (0 for i = j).
    Built hop by hop from breadth-first distances: the counts of (i, j) are those of (i, p), p
    the predecessor of j, plus the edge (p, j)."""
    edges, types = typed_edges(num_nodes, seed)
    kind = torch.full((num_nodes, num_nodes), -1)
    kind[edges[:, 0], edges[:, 1]] = kind[edges[:, 1], edges[:, 0]] = types
    nodes = torch.arange(num_nodes).expand(num_nodes, -1)
    degree = int((kind >= 0).sum(1).max()) if len(edges) else 0
    # sorted neighbours, padded with node S, whose distance column (-1) never matches
    neighbours = torch.where(kind >= 0, nodes, num_nodes).sort(dim=1).values[:, :degree]
    distance = F.pad(shortest_paths(num_nodes, seed, num_nodes), (0, 1), value=-1)
    counts = torch.zeros(EDGE_TYPES, num_nodes, num_nodes)
    for hop in range(1, int(distance.max()) + 1):
        source, target = (distance[:, :-1] == hop).nonzero(as_tuple=True)
        candidates = neighbours[target]
        closer = distance[source[:, None], candidates] == hop - 1
        previous = candidates.gather(1, closer.int().argmax(1, keepdim=True))[:, 0]
        counts[:, source, target] = counts[:, source, previous]
        counts[kind[previous, target], source, target] += 1
    return counts / distance[:, :-1].clamp(min=1)


@functools.lru_cache(maxsize=8)
def path_edge_counts_reference(num_nodes: int, seed: int) -> Tensor:
    """(K, S, S) int64 edges of each type on the path from i to j, walked back from j: step to
    the smallest-index neighbour one hop closer to i (Floyd-Warshall distances), count that
    edge's type, until i is reached; every pair walks at once."""
    adjacent: list[dict[int, int]] = [{} for _ in range(num_nodes)]
    for (u, v), kind in zip(*(t.tolist() for t in typed_edges(num_nodes, seed))):
        adjacent[u][v] = adjacent[v][u] = kind
    degree = max(len(a) for a in adjacent)
    table = torch.full((num_nodes + 1, degree), num_nodes)  # row S: the padding node's
    kinds = torch.zeros(num_nodes + 1, degree, dtype=torch.int64)
    for node, neighbours in enumerate(adjacent):
        for slot, neighbour in enumerate(sorted(neighbours)):
            table[node, slot], kinds[node, slot] = neighbour, neighbours[neighbour]
    far = shortest_paths_reference(num_nodes, seed, num_nodes)
    distance = F.pad(far, (0, 1), value=-1)
    source = torch.arange(num_nodes)[:, None].expand(-1, num_nodes)
    target = source.T
    current = target.clone()
    counts = torch.zeros(EDGE_TYPES, num_nodes, num_nodes, dtype=torch.int64)
    for _ in range(int(far.max())):
        walking = current != source
        step = distance[source, current] - 1
        closer = distance[source[..., None], table[current]] == step[..., None]
        slot = closer.int().argmax(-1, keepdim=True)
        kind = kinds[current].gather(-1, slot)[..., 0]
        counts[kind[walking], source[walking], target[walking]] += 1
        current = torch.where(walking, table[current].gather(-1, slot)[..., 0], current)
    return counts


def edge_bias_table(num_heads: int, seed: int, device="cpu") -> Tensor:
    """A seeded stand-in for the learned (H, K) table of edge-type scalars, fp32."""
    generator = torch.Generator().manual_seed(seed + 1)
    return torch.randn(num_heads, EDGE_TYPES, generator=generator).to(device)
