"""Ranking ablation without the agent loop: link each question, rank every node of the target label.

Why: an ablation table needs a dozen configurations x three phrasing styles; the full agent costs
0.1-1 s per question on a shared CPU, while linking plus ``rank_targets`` over all targets costs a
few tens of milliseconds and gives the same Hit@1 as the agent on the HPO dev subsets (the agent
ranks the candidates its tools reached; ranking every target is the upper bound of that and
matched it to within one question per 120 in our runs). Use ``skb eval`` for the final numbers.

    python -m evals.ranking_ablation --index-dir DIR --bench a.csv --bench b.csv \
        [--set clause_candidates=1 ...] [--direct-paths-only] [--no-propagation] [--no-definitions]

Benchmark CSVs need ``query``, ``answer_ids`` (JSON list) and ``target_type`` (a label name or its
lower-case form); an optional ``style`` column splits the report.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from agent.config import AgentConfig
from agent.linking.entities import EntityLinker
from agent.planning.offline import rank_targets
from agent.planning.targets import relation_paths
from agent.scoring.ontology import AnnotationModel, schema_for
from graphs.bundle import IndexBundle
from graphs.index.phrases import _LOADED, PhraseIndex, graph_of, phrase_index_for


def _label(target_type: str, labels: Sequence[str]) -> str:
    for label in labels:
        if label.lower() == target_type.strip().lower():
            return label
    raise SystemExit(f"target_type {target_type!r} is not a label of this index ({', '.join(labels)})")


@contextmanager
def no_propagation() -> Iterator[None]:
    """A query term matches only the same term (no broader terms): the ontology's contribution off."""
    original = AnnotationModel.ancestors_of
    AnnotationModel.ancestors_of = lambda self, term: np.array([term])  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        AnnotationModel.ancestors_of = original  # type: ignore[method-assign]


@contextmanager
def without_definitions(bundle: IndexBundle) -> Iterator[None]:
    """Clause linking against names and synonyms only (the phrase graph rebuilt without definition rows)."""
    index = phrase_index_for(bundle)
    if index is None:
        yield
        return
    keep = [i for i, kind in enumerate(index.kinds) if kind != "definition"]
    vectors = np.asarray(index.graph.get_items(keep, return_type="numpy"), dtype=np.float32)
    _LOADED[bundle.skb] = PhraseIndex(graph_of(vectors), [index.keys[i] for i in keep], [index.kinds[i] for i in keep])
    try:
        yield
    finally:
        _LOADED[bundle.skb] = index


def evaluate(
    bundle: IndexBundle, rows: Sequence[dict[str, str]], cfg: AgentConfig, *, direct_paths_only: bool = False
) -> dict[str, dict[str, dict[str, float]]]:
    """Hit@1/5, R@20 (any answer in the top 20) and MRR by style and target type."""
    skb = bundle.skb
    schema = schema_for(skb)
    labels = sorted(skb.node_types) or sorted({n.label for n in skb.nodes.values()})
    targets: dict[str, list[str]] = defaultdict(list)
    for node in skb.nodes.values():
        targets[node.label].append(node.key)
    linker = EntityLinker(bundle)
    ranks: dict[tuple[str, str], list[int | None]] = defaultdict(list)
    for row in rows:
        target = _label(row["target_type"], labels)
        entities = linker.link(
            row["query"], cfg.max_entities, clauses=cfg.clause_settings(), confidence_power=cfg.link_confidence_power
        )
        linked = [e.model_dump() for e in entities]
        sources = list(dict.fromkeys(str(e["label"]) for e in linked if e["label"] != target))
        paths = relation_paths(schema, sources, target, max_hops=cfg.max_hops) if sources else []
        if direct_paths_only:
            paths = [p for p in paths if len(p) == 1]
        plain = [[step.model_dump() for step in path] for path in paths]
        ranked = rank_targets(skb, target, linked, plain, targets[target], top=20, scoring=cfg.scoring_overrides())
        gold = set(json.loads(row["answer_ids"]))
        rank = next((i for i, (key, _) in enumerate(ranked) if key in gold), None)
        style = row.get("style") or "all"
        for cell in ((style, row["target_type"]), (style, "all")):
            ranks[cell].append(rank)
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for (style, ttype), found in ranks.items():
        n = len(found)
        out[style][ttype] = {
            "n": n,
            "hit@1": sum(1 for r in found if r == 0) / n,
            "hit@5": sum(1 for r in found if r is not None and r < 5) / n,
            "r@20": sum(1 for r in found if r is not None) / n,
            "mrr": sum(1.0 / (r + 1) for r in found if r is not None) / n,
        }
    return dict(out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--index-dir", required=True, type=Path)
    parser.add_argument("--bench", action="append", required=True, type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="AgentConfig field (JSON value)")
    parser.add_argument("--direct-paths-only", action="store_true", help="no evidence through intermediates")
    parser.add_argument("--no-propagation", action="store_true", help="exact term matches only")
    parser.add_argument("--no-definitions", action="store_true", help="clause linking on names and synonyms only")
    args = parser.parse_args(argv)
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = json.loads(value)
    cfg = AgentConfig(**overrides)
    rows = [row for path in args.bench for row in csv.DictReader(path.open(encoding="utf-8"))]
    with IndexBundle.open(args.index_dir) as bundle, ExitStack() as stack:
        if args.no_propagation:
            stack.enter_context(no_propagation())
        if args.no_definitions:
            stack.enter_context(without_definitions(bundle))
        result = evaluate(bundle, rows, cfg, direct_paths_only=args.direct_paths_only)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
