"""What an encoder or a perfect linker would give the answers: ``skb eval`` with clause linking swapped.

Why: an encoder can rank a described clause's own term first far more often and the answers still not
follow (``docs/guides/encoder-tuning.md``). Building a whole index per candidate encoder costs ~20 min of
CPU and changes every embedding at once; this runs the ordinary evaluation with only the clause linker's
encoder and phrase vectors replaced, or its links replaced by gold ones, everything else as indexed:

- ``--clause-phrases DIR --clause-embedder SPEC``: described clauses are embedded with SPEC and matched
  against the phrase vectors in DIR (``PhraseIndex.save``, built with the same SPEC over the same graph);
  ``--fuse W`` (0 < W < 1) instead averages each shortlisted term's re-scoring input from both encoders,
  ``(1 - W) * index's own + W * SPEC`` (a term missing from one shortlist takes that shortlist's lowest);
  ``--combine max`` takes the union of the two shortlists instead, each term at the higher of its two inputs;
- ``--oracle gold|add|keep --twins NAMES.csv --vocabulary LABEL``: each question's links of LABEL are
  replaced by the gold terms (``gold``), completed with them (``add``) or cut to them (``keep``). The gold
  terms of a question are those its twin of the same ``case_id`` names (``encoder_probe.align``): an upper
  bound for linking, as ranking every target is for the agent's tools. Evaluation only.

    python -m evals.studies.clause_linking_swap [--clause-phrases DIR --clause-embedder SPEC [--fuse W [--combine max]]] \\
        [--oracle gold --twins NAMES.csv --vocabulary LABEL] -- --bench P.csv --index-dir IDX --method agent --out RUN
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Literal, get_args
from unittest.mock import patch

import numpy as np

from agent.linking import entities
from agent.linking.rescoring import soft_max
from evals.studies.encoder_probe import align

ORACLE_MODES = ("gold", "add", "keep")
Combine = Literal["mean", "max"]
COMBINE_MODES: tuple[str, ...] = get_args(Combine)


class FusedPhrases:
    """Two phrase indexes searched with the two halves of a stacked query vector, shortlists merged.

    ``combine`` "mean" weighs the other encoder's input by ``weight``; "max" is the union of the shortlists, a
    term at the higher of its two inputs (a term the shipped encoder misses and the other finds comes in whole).
    """

    def __init__(self, own: Any, other: Any, weight: float, temperature: float, combine: Combine = "mean") -> None:
        self.own, self.other, self.weight, self.temperature, self.combine = own, other, weight, temperature, combine

    def search_phrases(self, queries: np.ndarray, k: int, pool: int) -> list[list[tuple[str, list[float]]]]:
        half = queries.shape[1] // 2
        mine = self.own.search_phrases(np.ascontiguousarray(queries[:, :half]), k, pool)
        theirs = self.other.search_phrases(np.ascontiguousarray(queries[:, half:]), k, pool)
        out: list[list[tuple[str, list[float]]]] = []
        for a_hits, b_hits in zip(mine, theirs, strict=True):
            a = {key: soft_max(sims, self.temperature) for key, sims in a_hits}
            b = {key: soft_max(sims, self.temperature) for key, sims in b_hits}
            a_floor, b_floor = min(a.values(), default=0.0), min(b.values(), default=0.0)
            if self.combine == "max":
                merged = {key: max(a.get(key, a_floor), b.get(key, b_floor)) for key in a | b}
            else:
                merged = {key: (1 - self.weight) * a.get(key, a_floor) + self.weight * b.get(key, b_floor) for key in a | b}
            out.append(sorted(((key, [v]) for key, v in merged.items()), key=lambda kv: -kv[1][0]))
        return out


@contextmanager
def clause_encoder(
    phrase_dir: Path, spec: str, fuse: float | None = None, temperature: float = 0.05, combine: Combine = "mean"
) -> Iterator[None]:
    """Clause linking with another encoder's phrase vectors (or both encoders', ``fuse`` the other's weight,
    ``combine`` how the two shortlists merge)."""
    if combine not in COMBINE_MODES:
        raise ValueError(f"combine {combine!r}: use one of {', '.join(COMBINE_MODES)}")
    from graphs.embedding.embedder import get_embedder
    from graphs.index.phrases import PhraseIndex

    embedder = get_embedder(spec)
    phrases = PhraseIndex.load(phrase_dir, embedder.dim)
    own_index, own_embed = entities.phrase_index_for, entities.embed_clauses
    index_for: Callable[[Any], Any]
    embed: Callable[[Any, Sequence[str]], np.ndarray]
    if fuse is None:
        index_for = lambda bundle: phrases
        embed = lambda _embedder, clauses: own_embed(embedder, clauses)
    else:
        index_for = lambda bundle: FusedPhrases(own_index(bundle), phrases, fuse, temperature, combine)
        embed = lambda own, clauses: np.hstack([own_embed(own, clauses), own_embed(embedder, clauses)])
    with patch.object(entities, "phrase_index_for", index_for), patch.object(entities, "embed_clauses", embed):
        yield


def gold_terms(bench: Path, twins: Path) -> dict[str, set[str]]:
    """Question text -> the (lower-case) names its twin lists, for the questions ``align`` pairs."""
    by_case: dict[str, set[str]] = defaultdict(set)
    for case, _, term in align(bench, twins):
        by_case[case].add(term.lower())
    with bench.open(encoding="utf-8") as handle:
        return {row["query"]: by_case[row["case_id"]] for row in csv.DictReader(handle) if row["case_id"] in by_case}


@contextmanager
def oracle_links(gold: dict[str, set[str]], label: str, mode: str) -> Iterator[None]:
    """The linker's links of ``label`` replaced by (``gold``), completed with (``add``) or cut to (``keep``) the gold terms."""
    if mode not in ORACLE_MODES:
        raise ValueError(f"oracle mode {mode!r}: use one of {', '.join(ORACLE_MODES)}")
    link = entities.EntityLinker.link
    keys_by_name: dict[int, dict[str, str]] = {}

    def oracle(self: entities.EntityLinker, question: str, *args: Any, **kwargs: Any) -> list[entities.LinkedEntity]:
        found = link(self, question, *args, **kwargs)
        names = keys_by_name.get(id(self.skb))
        if names is None:
            names = keys_by_name[id(self.skb)] = {}
            for node in self.skb.nodes.values():
                if node.label == label:
                    names.setdefault(node.name.lower(), node.key)
        wanted = {names[t] for t in gold.get(question, set()) if t in names}
        if not wanted:
            return found
        others = [e for e in found if e.label != label]
        mine = [e for e in found if e.label == label and (mode == "add" or e.key in wanted)] if mode != "gold" else []
        have = {e.key for e in mine}
        extra = [] if mode == "keep" else [self._entity(k, "gold", 1.0, "exact") for k in sorted(wanted - have)]
        return others + mine + extra

    with patch.object(entities.EntityLinker, "link", oracle):
        yield


def main(argv: list[str] | None = None) -> None:
    args_in = list(sys.argv[1:] if argv is None else argv)
    split = args_in.index("--") if "--" in args_in else len(args_in)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clause-phrases", type=Path)
    parser.add_argument("--clause-embedder")
    parser.add_argument("--fuse", type=float)
    parser.add_argument("--combine", choices=COMBINE_MODES, help="how --fuse merges the two shortlists [default: mean]")
    parser.add_argument("--oracle", choices=ORACLE_MODES)
    parser.add_argument("--twins", type=Path)
    parser.add_argument("--vocabulary", help="the label whose links the oracle replaces")
    args = parser.parse_args(args_in[:split])
    eval_args = args_in[split + 1 :]
    if (args.clause_phrases is None) != (args.clause_embedder is None):
        parser.error("--clause-phrases and --clause-embedder go together")
    if args.fuse is not None and not 0.0 < args.fuse < 1.0:
        parser.error("--fuse is the other encoder's weight, between 0 and 1")
    if args.combine is not None and args.fuse is None:
        parser.error("--combine says how --fuse merges the two shortlists: give --fuse W with it")
    if args.oracle and (args.twins is None or args.vocabulary is None or "--bench" not in eval_args):
        parser.error("--oracle needs --twins, --vocabulary and the evaluation's --bench")
    from agent.cli import app

    with ExitStack() as stack:
        if args.clause_phrases is not None:
            stack.enter_context(clause_encoder(args.clause_phrases, args.clause_embedder, args.fuse, combine=args.combine or "mean"))
        if args.oracle:
            bench = Path(eval_args[eval_args.index("--bench") + 1])
            stack.enter_context(oracle_links(gold_terms(bench, args.twins), args.vocabulary, args.oracle))
        app(["eval", *eval_args], standalone_mode=False)


if __name__ == "__main__":
    main()
