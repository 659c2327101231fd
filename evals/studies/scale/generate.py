"""A generator of semi-structured knowledge bases with the shape of STaRK's graphs, at any size.

Why: nothing was known about how build time, memory and latency grow past the 37k nodes of the
largest bundled dataset, and the graphs users bring (STaRK: 129k to 1.9M nodes, 8 to 40 million
edges) are that size. The generated graph has what matters for cost -- typed nodes carrying text of
realistic length and word frequencies (Zipf), several relation types, power-law degrees (a few hubs,
a long tail), about ``edges_per_node`` edges per node -- and nothing domain-specific: labels and
relation names are neutral, words are pronounceable nonsense built from syllables.

Deterministic for a seed: the same ``(nodes, seed)`` gives byte-identical files (one numpy
``Generator`` drives every choice; nothing reads the clock or Python's salted ``hash``).

Output is the generic exchange format (``nodes.jsonl.gz``, ``edges.jsonl.gz``, ``schema.json``), so
``skb index --dataset jsonl --data DIR`` builds it like any user's graph.

    python -m evals.studies.scale.generate --nodes 100000 --seed 0 --out .skb/scale-data/100k
"""

from __future__ import annotations

import argparse
import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Node types: (label, share of nodes, words in the name, words in the description or 0 for none).
TYPES: tuple[tuple[str, float, tuple[int, int], tuple[int, int]], ...] = (
    ("Document", 0.50, (4, 9), (25, 60)),
    ("Person", 0.30, (2, 3), (0, 0)),
    ("Organization", 0.05, (2, 4), (6, 14)),
    ("Concept", 0.15, (1, 3), (8, 20)),
)

#: Relation types: (rel, source label, target label, mean edges per source node, Zipf exponent of the
#: target's popularity). Means sum to about 10 edges per node over the node mix above.
RELATIONS: tuple[tuple[str, str, str, float, float], ...] = (
    ("CITES", "Document", "Document", 9.0, 1.1),
    ("WRITTEN_BY", "Document", "Person", 5.5, 1.0),
    ("ABOUT", "Document", "Concept", 7.5, 1.2),
    ("MEMBER_OF", "Person", "Organization", 1.0, 1.1),
    ("BROADER", "Concept", "Concept", 1.0, 1.3),
)

_ONSETS = ("b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr", "pl", "gr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou", "io")
_CODAS = ("", "", "n", "r", "s", "l", "x", "nd", "st")


@dataclass(frozen=True)
class GeneratedGraph:
    """What was written, for reports."""

    nodes: int
    edges: int
    per_label: dict[str, int]
    per_rel: dict[str, int]


def vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    """``size`` distinct pronounceable words (2-4 syllables), in a seeded order."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        n_syll = int(rng.integers(2, 5))
        parts = [
            _ONSETS[int(rng.integers(len(_ONSETS)))] + _VOWELS[int(rng.integers(len(_VOWELS)))]
            for _ in range(n_syll)
        ]
        word = "".join(parts) + _CODAS[int(rng.integers(len(_CODAS)))]
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def zipf_choice(rng: np.random.Generator, n: int, size: int, exponent: float) -> np.ndarray:
    """``size`` draws from ``range(n)`` with probability proportional to ``(rank + 1) ** -exponent``
    over a seeded permutation (the popular items are not simply the first keys)."""
    weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ranks = np.searchsorted(cdf, rng.random(size), side="right")
    ranks = np.minimum(ranks, n - 1)
    return rng.permutation(n)[ranks]


def _texts(rng: np.random.Generator, words: list[str], count: int, span: tuple[int, int]) -> list[str]:
    """``count`` texts of ``span`` words (inclusive range), words drawn by Zipf frequency."""
    lo, hi = span
    if hi <= 0:
        return [""] * count
    lengths = rng.integers(lo, hi + 1, size=count)
    draws = zipf_choice(rng, len(words), int(lengths.sum()), 1.05)
    out: list[str] = []
    pos = 0
    for length in lengths.tolist():
        out.append(" ".join(words[i] for i in draws[pos : pos + length].tolist()))
        pos += length
    return out


def _schema() -> dict[str, object]:
    text = {"Document": ["name", "description"], "Organization": ["name", "description"], "Concept": ["name", "description"]}
    node_types = []
    for label, *_ in TYPES:
        node_types.append({"label": label, "description": f"generated {label.lower()} nodes",
                           "name_field": "name", "text_fields": text.get(label, ["name"])})
    return {"format_version": 1, "name": "scale", "node_types": node_types}


def generate(nodes: int, out: Path, seed: int = 0, edges_per_node: float = 10.0) -> GeneratedGraph:
    """Write a graph of ``nodes`` nodes (about ``edges_per_node`` edges each) into ``out``."""
    if nodes < len(TYPES) * 10:
        raise ValueError(f"--nodes {nodes} is too small; use at least {len(TYPES) * 10}")
    rng = np.random.default_rng(seed)
    words = vocabulary(max(2000, min(200_000, nodes // 5)), rng)
    counts = [max(10, round(nodes * share)) for _, share, _, _ in TYPES]
    counts[0] += nodes - sum(counts)
    ids: dict[str, tuple[int, int]] = {}  # label -> (first global id, count)
    start = 0
    for (label, *_), count in zip(TYPES, counts, strict=True):
        ids[label] = (start, count)
        start += count
    scale = edges_per_node / 10.0
    out.mkdir(parents=True, exist_ok=True)

    per_label: dict[str, int] = {}
    with gzip.open(out / "nodes.jsonl.gz", "wb", compresslevel=1) as fh:
        for (label, _, name_span, desc_span), count in zip(TYPES, counts, strict=True):
            names = _texts(rng, words, count, name_span)
            descs = _texts(rng, words, count, desc_span)
            first = ids[label][0]
            lines = []
            for i in range(count):
                props: dict[str, str] = {"name": names[i].title()}
                if descs[i]:
                    props["description"] = descs[i]
                lines.append(json.dumps({"key": f"n{first + i}", "label": label, "props": props},
                                        separators=(",", ":")))
            fh.write(("\n".join(lines) + "\n").encode())
            per_label[label] = count

    per_rel: dict[str, int] = {}
    total = 0
    with gzip.open(out / "edges.jsonl.gz", "wb", compresslevel=1) as fh:
        for rel, src_label, dst_label, mean, exponent in RELATIONS:
            s0, sn = ids[src_label]
            d0, dn = ids[dst_label]
            fan = rng.poisson(mean * scale, size=sn)
            if rel == "BROADER":
                fan = np.minimum(fan, 1)
            srcs = np.repeat(np.arange(sn), fan)
            dsts = zipf_choice(rng, dn, len(srcs), exponent)
            pairs = np.unique(np.stack([srcs, dsts], axis=1), axis=0)  # no parallel duplicates
            if src_label == dst_label:
                pairs = pairs[pairs[:, 0] != pairs[:, 1]]  # no self loops
            lines = [f'{{"src":"n{s0 + s}","rel":"{rel}","dst":"n{d0 + d}"}}' for s, d in pairs.tolist()]
            for i in range(0, len(lines), 1_000_000):
                fh.write(("\n".join(lines[i : i + 1_000_000]) + "\n").encode())
            per_rel[rel] = len(lines)
            total += len(lines)
    (out / "schema.json").write_text(json.dumps(_schema(), indent=1) + "\n", encoding="utf-8")
    summary = GeneratedGraph(nodes=sum(counts), edges=total, per_label=per_label, per_rel=per_rel)
    (out / "generated.json").write_text(
        json.dumps({"seed": seed, "edges_per_node": edges_per_node, **summary.__dict__}, indent=1) + "\n",
        encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, required=True, help="number of nodes (e.g. 10000, 100000, 1000000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--edges-per-node", type=float, default=10.0)
    parser.add_argument("--out", type=Path, required=True, help="directory to write the jsonl files into")
    args = parser.parse_args(argv)
    try:
        summary = generate(args.nodes, args.out, seed=args.seed, edges_per_node=args.edges_per_node)
    except ValueError as exc:
        parser.error(str(exc))
    print(json.dumps(summary.__dict__))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
