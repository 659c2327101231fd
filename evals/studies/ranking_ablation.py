"""Ranking ablation without the agent loop: link each question, rank every node of the target label.

Why: an ablation table needs a dozen configurations x three phrasing styles; the full agent costs
0.1-1 s per question on a shared CPU, while linking plus ``rank_targets`` over all targets costs a
few tens of milliseconds and gives the same Hit@1 as the agent on the HPO dev subsets (the agent
ranks the candidates its tools reached; ranking every target is the upper bound of that and
matched it to within one question per 120 in our runs). Use ``skb eval`` for the final numbers.

    python -m evals.studies.ranking_ablation --index-dir DIR --bench a.csv --bench b.csv \
        [--set clause_candidates=1 ...] [--direct-paths-only] [--no-propagation] [--no-definitions] \
        [--config '{"size_penalty": 0.25}' --config '{"frequency_mix": 0.3}' ...] \
        [--twins named.csv --twin-style names]

Benchmark CSVs need ``query``, ``answer_ids`` (JSON list) and ``target_type`` (a label name or its
lower-case form); an optional ``style`` column splits the report.

``--config`` (repeatable) ranks the same questions under several settings in one process: each is a JSON
object of AgentConfig fields over ``--set``; a question is linked once per distinct linking setting, so a
sweep of scoring weights costs one linking pass. ``--twins`` answers "how much could better linking give?":
for every question with a ``case_id``, the question of the twins file with the same ``case_id`` and
``target_type`` (and ``style`` ``--twin-style``) is ranked too, reported as style ``twin:STYLE`` over the
same cases: the score of the same patients named in the vocabulary's own words.
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


LinkCache = dict[tuple[str, str], list[dict[str, Any]]]
"""Linked entities per (question, linking settings): what ``evaluate`` reuses across scoring settings."""


def _linking_key(cfg: AgentConfig) -> str:
    """The settings that change what a question links to (scoring weights do not)."""
    return repr((cfg.max_entities, cfg.clause_settings(), cfg.link_confidence_power))


def twin_rows(
    rows: Sequence[dict[str, str]], twins: Sequence[dict[str, str]], style: str | None
) -> list[dict[str, str]]:
    """For each row with a ``case_id``, the twin of the same case and target type (of ``style`` when given),
    in the rows' order, with its style renamed ``twin:STYLE``; a row without a twin is skipped.

    Why: a paraphrased question and the same patient's question in the vocabulary's own words share their
    answer, so the twins' score on the same cases bounds what better linking of the paraphrases can give
    under the same ranking."""
    index: dict[tuple[str, str], dict[str, str]] = {}
    for twin in twins:
        if style is not None and (twin.get("style") or "") != style:
            continue
        index.setdefault((twin.get("case_id") or "", twin["target_type"].strip().lower()), twin)
    out: list[dict[str, str]] = []
    for row in rows:
        case = row.get("case_id") or ""
        found = index.get((case, row["target_type"].strip().lower())) if case else None
        if found is not None:
            out.append({**found, "style": f"twin:{found.get('style') or style or 'all'}"})
    return out


def evaluate(
    bundle: IndexBundle,
    rows: Sequence[dict[str, str]],
    cfg: AgentConfig,
    *,
    direct_paths_only: bool = False,
    links: LinkCache | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """Hit@1/5, R@20 (any answer in the top 20) and MRR by style and target type.

    ``links`` (filled as questions are linked) lets several calls with other scoring weights skip linking."""
    skb = bundle.skb
    schema = schema_for(skb)
    labels = sorted(skb.node_types) or sorted({n.label for n in skb.nodes.values()})
    targets: dict[str, list[str]] = defaultdict(list)
    for node in skb.nodes.values():
        targets[node.label].append(node.key)
    linker = EntityLinker(bundle)
    cache: LinkCache = {} if links is None else links
    setting = _linking_key(cfg)
    ranks: dict[tuple[str, str], list[int | None]] = defaultdict(list)
    for row in rows:
        target = _label(row["target_type"], labels)
        linked = cache.get((row["query"], setting))
        if linked is None:
            entities = linker.link(
                row["query"], cfg.max_entities, clauses=cfg.clause_settings(), confidence_power=cfg.link_confidence_power
            )
            linked = cache[(row["query"], setting)] = [e.model_dump() for e in entities]
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
    parser.add_argument("--config", action="append", default=[], metavar="JSON",
                        help="AgentConfig fields over --set, one ranking per --config (questions linked once)")
    parser.add_argument("--twins", type=Path, help="also rank each case's twin question from this CSV (by case_id)")
    parser.add_argument("--twin-style", help="only twins of this style")
    args = parser.parse_args(argv)
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = json.loads(value)
    configs = [json.loads(item) for item in args.config] or [{}]
    rows = [row for path in args.bench for row in csv.DictReader(path.open(encoding="utf-8"))]
    if args.twins is not None:
        rows += twin_rows(rows, list(csv.DictReader(args.twins.open(encoding="utf-8"))), args.twin_style)
    links: LinkCache = {}
    results: dict[str, Any] = {}
    with IndexBundle.open(args.index_dir) as bundle, ExitStack() as stack:
        if args.no_propagation:
            stack.enter_context(no_propagation())
        if args.no_definitions:
            stack.enter_context(without_definitions(bundle))
        for extra in configs:
            cfg = AgentConfig(**{**overrides, **extra})
            results[json.dumps(extra)] = evaluate(bundle, rows, cfg, direct_paths_only=args.direct_paths_only, links=links)
    print(json.dumps(results[json.dumps(configs[0])] if len(configs) == 1 else results, indent=1))


if __name__ == "__main__":
    main()
