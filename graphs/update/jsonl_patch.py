"""The graph files of a new generation with the parent's lines for every record a change set left alone.

Why: writing the graph encodes every node and edge as a JSON line, a Python call per record, though nearly all
are the parent's records unchanged (``apply_changes`` shares their objects and records where each edge was in
the parent's list). Their lines are the parent's bytes; only the changed records are encoded. The files equal
what ``write_jsonl`` writes for the changed graph (a test compares them).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from graphs.loaders.jsonl import EDGES, NODES, edge_line, node_line, record_lines
from graphs.skb.model import SKB, Edge

__all__ = ["spliced_lines"]


def spliced_lines(parent_dir: Path, parent: SKB, skb: SKB, node_source: np.ndarray | None,
                  edge_source: np.ndarray | None) -> tuple[list[bytes], list[bytes]] | None:
    """The node and edge lines of ``skb`` (``parent`` with a change set applied; ``node_source`` and
    ``edge_source``: each record's position in the parent's order, -1 for a new record, as ``ApplyReport``
    holds them) from the parent's files at ``parent_dir`` (``<index>/skb``); None where those files do not
    hold ``parent``'s records one per line."""
    node_lines = record_lines(parent_dir, NODES)
    edge_lines = record_lines(parent_dir, EDGES)
    if (node_lines is None or edge_lines is None or node_source is None or edge_source is None
            or len(node_lines) != len(parent.nodes) or len(edge_lines) != len(parent.edges)
            or len(node_source) != len(skb.nodes) or len(edge_source) != len(skb.edges)):
        return None
    nodes = [node_lines[row] + b"\n" if row >= 0 else node_line(node)
             for row, node in zip(node_source.tolist(), skb.nodes.values(), strict=True)]
    edges: Sequence[Edge] = skb.edges
    out: list[bytes] = [b""] * len(edges)
    for i, row in enumerate(edge_source.tolist()):
        out[i] = edge_lines[row] + b"\n" if row >= 0 else edge_line(edges[i])
    return nodes, out
