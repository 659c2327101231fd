"""The speed guard's workload: a small generated graph of neutral labels (no dataset) and questions over it.

Why generated: the guard must run anywhere ``make test`` runs, with no data and no model (the index uses the hash
embedder), and its questions must exercise the whole question path: linking trait names, a relation to follow, an
item to rank. Deterministic for a seed, so both sides of the A/B index and ask exactly the same.
"""

from __future__ import annotations

import random
from typing import Any

from graphs.skb.model import SKB, Edge, Node

#: Graph size: items, traits (each item shows a few) and families.
ITEMS, TRAITS, FAMILIES = 400, 160, 10

_SYLLABLES = ("ka", "lo", "mi", "ner", "ta", "vu", "sel", "dor", "pha", "qui", "ren", "zo", "bel", "gan", "tri")


def _word(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(parts))


def guard_skb(seed: int = 11) -> SKB:
    """The generated graph: ``Item`` nodes that ``SHOWS`` a few ``Trait`` nodes and are ``MEMBER_OF`` one
    ``Family``; traits are ``NARROWER_THAN`` broader traits. Deterministic for a seed."""
    rng = random.Random(seed)
    skb = SKB("speed-guard")
    traits = [f"T:{i:04d}" for i in range(TRAITS)]
    used: set[str] = set()

    def fresh(parts: int) -> str:
        while True:
            name = _word(rng, parts)
            if name not in used:
                used.add(name)
                return name

    for i, key in enumerate(traits):
        skb.add_node(Node(key, "Trait", {"name": f"{fresh(2)} {fresh(3)}", "rank": i % 7}))
    for i in range(FAMILIES):
        skb.add_node(Node(f"F:{i:02d}", "Family", {"name": f"{fresh(3)} family"}))
    for i, key in enumerate(traits[8:], 8):
        skb.add_edge(Edge(key, "NARROWER_THAN", traits[rng.randrange(0, min(i, 8 + i // 4))]))
    for i in range(ITEMS):
        key = f"I:{i:04d}"
        skb.add_node(Node(key, "Item", {"name": f"{fresh(3)} {fresh(4)} item", "code": i}))
        skb.add_edge(Edge(key, "MEMBER_OF", f"F:{rng.randrange(FAMILIES):02d}"))
        for trait in rng.sample(traits, rng.randint(3, 7)):
            skb.add_edge(Edge(key, "SHOWS", trait))
    return skb


def guard_questions(skb: SKB, n: int, seed: int = 5) -> list[tuple[str, str]]:
    """``n`` (question, item key) pairs: an item asked for by the names of three of its traits."""
    rng = random.Random(seed)
    items = sorted(k for k, node in skb.nodes.items() if node.label == "Item")
    out: list[tuple[str, str]] = []
    for key in rng.sample(items, n):
        names = [skb.nodes[e.dst].name for e in skb.out_edges(key) if e.rel == "SHOWS"][:3]
        out.append((f"Which item shows {', '.join(names[:-1])} and {names[-1]}?", key))
    return out


def graph_document(skb: SKB) -> dict[str, list[list[Any]]]:
    """The graph as the worker's ``build`` reads it: plain lists, so any build of the project can index it."""
    nodes = [[key, node.label, dict(node.props)] for key, node in skb.nodes.items()]
    edges = [[e.src, e.rel, e.dst] for e in skb.edges]
    return {"nodes": nodes, "edges": edges}
