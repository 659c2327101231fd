"""Relation paths (1-3 hops, with directions) predicted from a question's wording, without an LLM.

Why this exists: multi-hop questions ("who directed the films that share actors with [X]") are
answered by walking one specific path from the topic entity; a wrong hop count or direction
returns plausible but wrong nodes. The prediction uses only the schema and the domain profile
(graphs.skb.profile), never dataset-specific code:

1. **Candidates**: every relation path of up to ``max_hops`` hops whose first hop is a relation the
   topic node actually has (a name in two roles keeps all its edges) and whose later hops chain by
   the relations' signatures (profile ``signature``, else the most frequent label pattern).
2. **Scores**, summed with the profile's planner weights:
   - *rendering*: cosine between the question (topic mention replaced by ``X``) and the path
     rendered as a noun phrase from the profile's ``forward``/``inverse`` templates
     ("the director of the movies starring X");
   - *exemplars*: the best cosine between the question and the profile's exemplar questions whose
     path is this path (few-shot retrieval);
   - *relation words*: the share of the path's relations whose aliases occur in the question,
     minus a penalty per relation named in the question but absent from the path; besides aliases, a
     relation is named by the meaning of an unmatched word, by a category word (its classifier), by a
     time question (the one relation into years or dates), and, when the question names nothing, by
     the question itself (the topic's descriptor: lower-case free words, read from the values' form);
   - a small preference for shorter paths, so a one-hop question is not read as a detour.
3. The walk itself is one read-only Cypher query per path (``walk_query``), built from schema names
   quoted with ``quote_name``; the topic key and the row cap are parameters / trusted integers.

Renderings and exemplars are embedded once per SKB; a question costs one query embedding.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.linking.lexicon import FRAME_WORDS
from agent.planning.mentions import QuestionReader
from agent.planning.relations import _BRACKET, _PIVOT_WORDS, DESCRIPTOR_OVER_MEANING, Direction, signatures
from graphs.skb.language import (
    content_words,
    relation_words,
    root,
    singular,
    words_of,
)
from graphs.skb.model import SKB
from graphs.skb.profile import Profile, profile_for
from graphs.store.aggregate import path_walk_query


@dataclass(frozen=True)
class Hop:
    rel: str
    direction: Direction
    to_label: str

    def spec(self) -> str:
        return (">" if self.direction == "out" else "<") + self.rel


RelPath = tuple[Hop, ...]


@dataclass
class ScoredPath:
    path: RelPath
    score: float
    parts: dict[str, float] = field(default_factory=dict)

    def as_steps(self) -> list[dict[str, str]]:
        """The plan's PathStep form: rel, direction, to_label."""
        return [{"rel": h.rel, "direction": h.direction, "to_label": h.to_label} for h in self.path]


def bracketed_mention(question: str) -> str | None:
    """The text inside the first ``[...]`` of a question, if any (the topic entity by convention)."""
    m = _BRACKET.search(question)
    return m.group(1).strip() if m and m.group(1).strip() else None


def mask_mention(question: str, mention: str | None) -> str:
    """The question with the topic mention (and its brackets) replaced by ``X``."""
    if mention:
        for form in (f"[{mention}]", mention):
            if form in question:
                return question.replace(form, "X", 1)
    return _BRACKET.sub("X", question, count=1)



def render(path: Sequence[Hop], profile: Profile, topic: str = "X") -> str:
    """A path as a noun phrase of its end nodes: the profile's templates composed inside out."""
    text = topic
    for hop in path:
        spec = profile.relations.get(hop.rel)
        template = ""
        if spec is not None:
            template = spec.forward if hop.direction == "out" else spec.inverse
        if not template:
            words = " ".join(relation_words(hop.rel))
            template = f"the {words} of {{x}}" if hop.direction == "out" else f"what has {words} {{x}}"
        text = template.replace("{x}", text)
    return text


def walk_query(start_label: str, path: Sequence[Hop], limit: int) -> str:
    """One read-only Cypher query walking ``path`` from the node ``$key``; the topic is never an answer.

    The text is built in the store layer (``graphs.store.aggregate.path_walk_query``): labels and
    relation types cannot be parameters, and query text is assembled only there, from schema names.
    """
    return path_walk_query(start_label, [(hop.rel, hop.direction) for hop in path], limit)



class PathPlanner(QuestionReader):
    """Scores relation paths for a question and a topic node; one instance per SKB (see ``planner_for``)."""

    def __init__(self, skb: SKB, embedder: Any, profile: Profile | None = None, *, hold: bool = True) -> None:
        """``hold=False``: refer to ``skb`` weakly, for a cache keyed weakly by the SKB (``planner_for``): a value
        that holds its key keeps it for ever, and every replaced build's SKB and the files it maps stayed open."""
        self._skb = weakref.ref(skb)
        self._held: SKB | None = skb if hold else None
        self.profile = profile or profile_for(skb)
        self.embedder = embedder
        self.max_hops = self.profile.planner.max_hops
        self.sigs = signatures(skb, self.profile)
        self._lock = threading.Lock()
        self._render_vecs: dict[RelPath, np.ndarray] = {}
        self._paths_from: dict[tuple[str, str], list[RelPath]] = {}
        self._cand_sets: dict[tuple[Hop, ...], _Candidates] = {}
        self._aliases = self._alias_table()
        # relations whose words were read from their names (no aliases written): question words no alias
        # covers may still name them by meaning ("types" for a genre relation), see ``meaning_mentions``
        self._named_only = sorted(
            rel for rel in self.sigs
            if rel not in self.profile.relations or f"relations.{rel}" in self.profile.induced
            or f"relations.{rel}.aliases" in self.profile.induced
        )
        self._named_set = set(self._named_only)
        # the words after "of" in a name ("original language of *film*", "place of *birth*") qualify its head
        # noun; alone they name the qualifier ("which films"), not the relation
        self._qualifiers: dict[str, set[tuple[str, ...]]] = {}
        for rel in self._named_only:
            words = relation_words(rel)
            if "of" in words[1:]:
                after = words[words.index("of", 1) + 1 :]
                self._qualifiers[rel] = {(root(w),) for w in content_words(after)}
        self._word_vecs: dict[str, np.ndarray] = {}
        self._rel_vecs: np.ndarray | None = None
        # words that carry no relation or entity: generic function words and the label words
        self._label_words = {root(w) for spec in self.profile.labels.values() for w in spec.words}
        self._label_nouns = {singular(w) for spec in self.profile.labels.values() for w in spec.words}
        self._noun_labels = {singular(w): lab for lab, spec in self.profile.labels.items() for w in spec.words}
        self._classifiers: dict[str, tuple[str, Direction]] | None = None
        self._descriptors: dict[str, tuple[str, Direction]] | None = None
        self._temporal: list[str] | None = None
        self._tail_nouns = {
            rel: {singular(w) for w in self.profile.labels[tail].words}
            for rel, (_, tail) in self.sigs.items() if tail in self.profile.labels
        }
        # label words read from relation names name the relation as often as the answer: they count
        # only right after a question word ("which actors"), not anywhere in the question
        self._weak_labels = {lab for lab in self.profile.labels if f"labels.{lab}.words" in self.profile.induced}
        self._alias_roots = {w for plist in self._aliases.values() for p in plist for w in p}
        self._filler = {root(w) for w in FRAME_WORDS} | self._label_words
        self._filler -= self._alias_roots | _PIVOT_WORDS
        ex_paths: list[RelPath] = []
        ex_texts: list[str] = []
        for ex in self.profile.exemplars:
            path = self._typed(ex.steps())
            if path is not None:
                ex_paths.append(path)
                ex_texts.append(mask_mention(ex.question, bracketed_mention(ex.question)))
        self._ex_paths = ex_paths
        self._ex_vecs = self._embed(ex_texts) if ex_texts else np.zeros((0, 1), dtype=np.float32)

    @property
    def skb(self) -> SKB:
        skb = self._skb()
        if skb is None:
            raise ReferenceError("the graph this path planner was built for was released (its index was closed or "
                                 "replaced); get the planner of the current graph with planner_for(bundle)")
        return skb

    @skb.setter
    def skb(self, skb: SKB) -> None:
        self._skb = weakref.ref(skb)
        self._held = skb if self._held is not None else None

    # -- schema ----------------------------------------------------------------------------
    def _typed(self, steps: Sequence[tuple[str, Direction]]) -> RelPath | None:
        hops = []
        for rel, direction in steps:
            sig = self.sigs.get(rel)
            if sig is None:
                return None
            hops.append(Hop(rel, direction, sig[1] if direction == "out" else sig[0]))
        return tuple(hops)

    def _continuations(self, label: str) -> list[Hop]:
        out = []
        for rel, (head, tail) in sorted(self.sigs.items()):
            if head == label:
                out.append(Hop(rel, "out", tail))
            if tail == label:
                out.append(Hop(rel, "in", head))
        return out

    def paths_from(self, first: Hop) -> list[RelPath]:
        """All paths of 1..max_hops hops starting with ``first`` (label chaining by signature)."""
        key = (first.rel, first.direction)
        cached = self._paths_from.get(key)
        if cached is not None:
            return cached
        paths: list[RelPath] = []
        frontier: list[RelPath] = [(first,)]
        while frontier:
            path = frontier.pop(0)
            paths.append(path)
            if len(path) < self.max_hops:
                frontier.extend(path + (hop,) for hop in self._continuations(path[-1].to_label))
        self._paths_from[key] = paths
        return paths

    def first_hops(self, key: str) -> list[Hop]:
        """The relations (with directions) the node actually has."""
        hops: list[Hop] = []
        for rel, direction in self.skb.relations_at(key):
            sig = self.sigs.get(rel)
            if sig:
                hops.append(Hop(rel, direction, sig[1] if direction == "out" else sig[0]))
        return hops

    def _render_matrix(self, paths: Sequence[RelPath]) -> np.ndarray:
        missing = [p for p in paths if p not in self._render_vecs]
        if missing:
            vecs = self._embed([render(p, self.profile) for p in missing])
            with self._lock:
                for p, v in zip(missing, vecs):
                    self._render_vecs[p] = v
        return np.stack([self._render_vecs[p] for p in paths])

    # -- prediction ------------------------------------------------------------------------
    def candidates(self, key: str) -> list[RelPath]:
        return self._candidate_set(key).paths

    def _candidate_set(self, key: str) -> _Candidates:
        firsts = tuple(sorted(self.first_hops(key), key=lambda h: (h.rel, h.direction)))
        cands = self._cand_sets.get(firsts)
        if cands is None:
            paths: list[RelPath] = []
            for first in firsts:
                paths.extend(self.paths_from(first))
            cands = _Candidates(list(dict.fromkeys(paths)), sorted(self.sigs), self._ex_paths)
            with self._lock:
                self._cand_sets[firsts] = cands
        return cands

    def predict(
        self, question: str, key: str, mention: str | None = None, top: int = 3, qvec: np.ndarray | None = None,
        wording_only: bool = False,
    ) -> list[ScoredPath]:
        """The ``top`` best paths from node ``key`` for the question, best first.

        The wording scores (relation words, asked label, topic anchor) come first; the question is
        embedded only when they leave the best paths within ``embed_margin`` of each other, since
        the embedding similarities cannot move a path by more than that (they are cosines, and
        competing paths differ by well under 0.25 each). Most questions skip the embedding.
        """
        cands = self._candidate_set(key)
        if not cands.paths:
            return []
        weights = self.profile.planner
        masked = mask_mention(question, mention)
        plain = masked.replace("X", " ")
        mentions, pivots = self.relation_mentions(plain, len(words_of(masked.split("X", 1)[0])))
        worded = bool(mentions)
        strength: dict[str, float] = {}
        if self._named_only and not wording_only:
            meant = self.meaning_mentions(plain, mentions, strength)
            mentions.update(meant)
        topic = self.skb.nodes.get(key)
        topic_label = topic.label if topic is not None else None
        classed = self.category_mentions(plain, mentions, topic_label)
        mentions.update(classed)
        anchor = self.anchor_relation(masked, {p[0].rel for p in cands.paths})
        asked = self.asked_labels(plain)
        timed = self.time_mention(plain, mentions)
        if timed is not None:
            mentions[timed] += 1
            classed[timed] += 1
        # a question that names nothing by its words asks for what describes the topic; a single word's
        # loose likeness to the topic's class ("describe" ~ a genre relation: a class describes too) does not
        # outweigh the values' form, a likeness to any other relation ("year" ~ a publication date) does
        classifier = self.classifiers().get(topic_label or "", ("", "out"))[0]
        loose = all(rel == classifier and sim < DESCRIPTOR_OVER_MEANING for rel, sim in strength.items())
        if not worded and not classed and not asked and loose:
            described = self.descriptor_mention(plain, topic_label)
            if described is not None:
                mentions = Counter({described: 1})
        # Each hop needs its own mention of its relation, except the second hop of a there-and-back
        # pair (">r <r": "films that *share* actors with X"), which a pivot word can stand for;
        # relations named but not on the path, and extra mentions of path relations, cost.
        c = np.array([mentions.get(r, 0) for r in cands.rels], dtype=np.float64)
        need = cands.need
        named = c > 0
        explained = np.minimum(need, c).sum(axis=1)
        short = (np.maximum(need - c, 0) * named).sum(axis=1)
        explained += np.minimum(np.minimum(cands.pairs, pivots), short)
        leftover = (np.maximum(c - need, 0) * (need > 0)).sum(axis=1)
        extra = (named & (need == 0)).sum(axis=1)
        words = explained / cands.length - weights.extra_relation_penalty * (extra + 0.5 * leftover)
        answer = np.array([asked.get(lab, 0.0) for lab in cands.end_labels])
        order = (np.array(cands.first_rels) == anchor).astype(np.float64) if anchor else np.zeros(len(cands.paths))
        length = -0.01 * cands.length
        pivot = (cands.pairs > 0).astype(np.float64) if pivots else np.zeros(len(cands.paths))
        unnamed = np.maximum(cands.length - 1.0, 0.0) if not mentions else np.zeros(len(cands.paths))
        total = (
            weights.words_weight * words + weights.answer_weight * answer + weights.order_weight * order + length
            + weights.pivot_weight * pivot - weights.unnamed_hop_penalty * unnamed
        )
        ranked = np.argsort(-total, kind="stable")
        clear = len(cands.paths) == 1 or total[ranked[0]] - total[ranked[1]] >= weights.embed_margin
        rend: np.ndarray | None = None
        ex_best: np.ndarray | None = None
        if (not clear or qvec is not None) and not wording_only:  # wording_only: topic_choice's cheap comparison
            if qvec is None:
                embedder = getattr(self.embedder, "inner", self.embedder)
                qvec = np.asarray(embedder.embed_query(masked), dtype=np.float32)
            if cands.render_vecs is None:
                cands.render_vecs = self._render_matrix(cands.paths)
            rend = cands.render_vecs @ qvec
            ex_best = np.zeros(len(cands.paths))
            if len(self._ex_paths):
                sims = self._ex_vecs @ qvec
                for i, rows in cands.exemplar_rows.items():
                    ex_best[i] = float(sims[rows].max())
            total = total + weights.render_weight * rend + weights.exemplar_weight * ex_best
            ranked = np.argsort(-total, kind="stable")
        out = []
        for i in ranked[:top]:
            parts = {"words": float(words[i]), "answer": float(answer[i]), "order": float(order[i]),
                     "length": float(length[i])}
            if rend is not None and ex_best is not None:
                parts["render"] = float(rend[i])
                parts["exemplar"] = float(ex_best[i])
            out.append(ScoredPath(cands.paths[i], round(float(total[i]), 6), parts))
        return out


class _Candidates:
    """The candidate paths of one set of first hops, with the arrays their scores need (cached)."""

    def __init__(self, paths: list[RelPath], rels: list[str], ex_paths: Sequence[RelPath]) -> None:
        self.paths = paths
        self.rels = rels
        col = {r: j for j, r in enumerate(rels)}
        self.need = np.zeros((len(paths), len(rels)), dtype=np.float64)
        for i, path in enumerate(paths):
            for hop in path:
                self.need[i, col[hop.rel]] += 1
        self.pairs = np.array(
            [sum(1 for a, b in itertools.pairwise(p) if a.rel == b.rel and a.direction != b.direction) for p in paths],
            dtype=np.float64,
        )
        self.length = np.array([len(p) for p in paths], dtype=np.float64)
        self.end_labels = [p[-1].to_label for p in paths]
        self.first_rels = [p[0].rel for p in paths]
        index = {p: i for i, p in enumerate(paths)}
        rows: dict[int, list[int]] = {}
        for j, p in enumerate(ex_paths):
            if p in index:
                rows.setdefault(index[p], []).append(j)
        self.exemplar_rows = {i: np.array(r) for i, r in rows.items()}
        self.render_vecs: np.ndarray | None = None


_PLANNERS: weakref.WeakKeyDictionary[SKB, PathPlanner] = weakref.WeakKeyDictionary()
_PLANNERS_LOCK = threading.Lock()


def planner_for(bundle: Any) -> PathPlanner | None:
    """The bundle's path planner, or None when its profile does not enable relation-path planning."""
    skb: SKB = bundle.skb
    if not profile_for(skb).planner.relation_paths:
        return None
    with _PLANNERS_LOCK:
        planner = _PLANNERS.get(skb)
        if planner is None:
            planner = _PLANNERS[skb] = PathPlanner(skb, bundle.embedder, hold=False)
        return planner


def choose_topic(question: str, linked: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The topic entity: the one whose mention is bracketed, else the longest exact/fuzzy mention."""
    if not linked:
        return None
    bracket = bracketed_mention(question)
    if bracket is not None:
        for ent in linked:
            if str(ent.get("mention") or "") == bracket:
                return ent
    order = {"exact": 2, "fuzzy": 1, "embedding": 0}
    return max(
        linked,
        key=lambda e: (order.get(str(e.get("method")), 0), len(words_of(str(e.get("mention") or ""))),
                       float(e.get("score") or 0.0)),
    )
