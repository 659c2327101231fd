"""What the schema and the graph's values say about relations, for the path planner: each relation's
(head, tail) signature, which relations classify their nodes (genres), which describe them in free words
(tags), which labels hold times; and the word tables and thresholds the planner reads questions with.

Why apart: these are statistics of one SKB, computed once per planner; ``agent.planning.paths`` scores
paths with them and ``agent.planning.mentions`` reads a question's relation words against them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from graphs.skb.language import (
    QUESTION_WORDS,
    root,
    singular,
    words_of,
)
from graphs.skb.model import SKB
from graphs.skb.profile import Profile

Direction = Literal["out", "in"]

_BRACKET = re.compile(r"\[([^\[\]]{1,300})\]")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(\.\d+)?%?")
_DATE = re.compile(r"[12]\d{3}|\d{4}-\d{1,2}(-\d{1,2})?([T ][\d:.]+Z?)?|\d{1,2}[/.]\d{1,2}[/.]\d{2,4}")
#: Words that introduce the asked-for thing in English questions (generic, not domain words).
#: Words that make one mention stand for a there-and-back pair of hops ("films that share actors").
_PIVOT_WORDS = frozenset({"share", "shares", "shared", "sharing", "same", "also", "co", "together", "other"})
_INTERROGATIVES = QUESTION_WORDS
_ARTICLES = frozenset({"the", "a", "an"})
#: A question word names a relation by meaning when its embedding is this close to the relation's words ...
MEANING_MIN_SIMILARITY = 0.30
#: ... and closer by this much than to any other relation's words (single words embed noisily).
MEANING_MARGIN = 0.10
#: Question words whose embedding ``meaning_mentions`` keeps per planner (a server sees an open vocabulary).
MAX_WORD_VECTORS = 20_000
#: A relation classifies its nodes (``classifier_relations``) when it reaches at least this share of them ...
CLASSIFIER_MIN_COVERAGE = 0.2
#: ... and each of its values is shared by this many nodes on average (a class, not a property or a name).
CLASSIFIER_MIN_SHARE = 5.0
#: A relation describes its nodes (``descriptor_relations``) when at least this share of its sampled values is
#: written in lower case (free words and phrases) ...
DESCRIPTOR_MIN_LOWER = 0.8
#: ... and at most this share of the described nodes' own names is (names, titles: written otherwise).
DESCRIPTOR_MAX_NEAR_LOWER = 0.2
#: ... and each value is attached to this many nodes on average (words recur; a thing's own name does not).
DESCRIPTOR_MIN_SHARE = 2.0
#: Values and names sampled per relation for ``descriptor_relations``.
DESCRIPTOR_SAMPLE = 200
#: A question naming no relation by its words asks for the descriptor unless a word means the class this surely.
DESCRIPTOR_OVER_MEANING = 0.5
#: Question words after which the asked thing is a person, a time, a place or an amount, never free words.
_NOT_DESCRIPTIVE = frozenset({"who", "whom", "whose", "when", "where", "how"})





_words = words_of


def _roots(text: str) -> list[str]:
    """The text's words reduced to their roots (``graphs.skb.language.root``): relation and label words
    are compared by root, so *directed*, *directing* and *director* all name a ``directed_by``."""
    return [root(w) for w in words_of(text)]



def signatures(skb: SKB, profile: Profile) -> dict[str, tuple[str, str]]:
    """(head label, tail label) per relation: the profile's signature, else the most frequent pattern."""
    counts: Counter[tuple[str, str, str]] = Counter()
    patterns = getattr(skb, "relation_patterns", None)
    if callable(patterns):  # an index's memory-mapped SKB counts them from its arrays, without a scan
        counts = patterns()
    else:
        nodes = skb.nodes
        for edge in skb.edges:
            counts[(edge.rel, nodes[edge.src].label, nodes[edge.dst].label)] += 1
    best: dict[str, tuple[str, str]] = {}
    for (rel, src, dst), _ in counts.most_common():
        best.setdefault(rel, (src, dst))
    for rel, spec in profile.relations.items():
        if rel in best:
            best[rel] = (spec.head_label, spec.tail_label)
    return best


def classifier_relations(skb: SKB, sigs: Mapping[str, tuple[str, str]]) -> dict[str, tuple[str, Direction]]:
    """Per node label, the relation (and the direction from that label) that sorts its nodes into classes.

    Why: "what kind of film is X" names no relation; it asks for X's class. In a graph that class is the
    relation reaching most of a label's nodes whose values are each shared by many of them (a genre, a
    category, a parent term), as opposed to names (one node each) and numbers (years, counts, ratings).
    Read from the edges alone, so it holds for any labels and relation names: among the relations
    touching at least ``CLASSIFIER_MIN_COVERAGE`` of a label's nodes whose other ends are not mostly
    numbers, the one whose other ends are shared by the most nodes on average (at least
    ``CLASSIFIER_MIN_SHARE``).
    """
    rel_names, rel_ids, src, dst = skb.edge_arrays()
    label_names, node_label = skb.label_ids()
    keys = skb.node_keys()
    label_sizes = np.bincount(node_label, minlength=len(label_names))
    label_of = {lab: i for i, lab in enumerate(label_names)}
    best: dict[str, tuple[float, str, Direction]] = {}
    for r, rel in enumerate(rel_names):
        if rel not in sigs:
            continue
        mask = rel_ids == r
        edges = int(mask.sum())
        if not edges:
            continue
        for direction, (near, far) in (("out", (src[mask], dst[mask])), ("in", (dst[mask], src[mask]))):
            label = sigs[rel][0] if direction == "out" else sigs[rel][1]
            size = int(label_sizes[label_of[label]]) if label in label_of else 0
            values = np.unique(far)
            share = edges / len(values)
            if not size or len(np.unique(near)) < CLASSIFIER_MIN_COVERAGE * size or share < CLASSIFIER_MIN_SHARE:
                continue
            sample = [skb.nodes[keys[int(i)]].name for i in values[:50]]
            if sum(_NUMBER.fullmatch(v.strip()) is not None for v in sample) * 2 >= len(sample):
                continue
            if share > best.get(label, (0.0, "", "out"))[0]:
                best[label] = (share, rel, direction)  # type: ignore[assignment]
    return {label: (rel, direction) for label, (_, rel, direction) in best.items()}


def _lower_share(names: Sequence[str]) -> float:
    """The share of ``names`` written in lower case with at least one letter, numbers and dates not counted."""
    if not names:
        return 0.0
    lower = sum(
        1 for v in names
        if v == v.lower() and any(c.isalpha() for c in v) and not _NUMBER.fullmatch(v.strip())
        and not _DATE.fullmatch(v.strip())
    )
    return lower / len(names)


def descriptor_relations(skb: SKB, sigs: Mapping[str, tuple[str, str]]) -> dict[str, tuple[str, Direction]]:
    """Per node label, the relation (and the direction from that label) whose values are free words describing
    its nodes: lower-case words and phrases (``violence``, ``time travel``), each attached to several nodes,
    attached to nodes whose own names are written otherwise (titles, proper names).

    Why: "describe X", "what words describe X", "which topics is X about" name no relation and no label;
    they ask for what describes X. In a graph that is the relation whose values are written as common words
    rather than as names, numbers or dates; the form of the values says so whatever the relation and its
    labels are called. Read from a sample of the names at both ends, so it holds for any labels and relation
    names; a graph whose names are all lower case has no contrast and no descriptor.
    """
    rel_names, rel_ids, src, dst = skb.edge_arrays()
    keys = skb.node_keys()
    best: dict[str, tuple[int, str, Direction]] = {}
    for r, rel in enumerate(rel_names):
        if rel not in sigs:
            continue
        mask = rel_ids == r
        if not mask.any():
            continue
        for direction, (near, far) in (("out", (src[mask], dst[mask])), ("in", (dst[mask], src[mask]))):
            label = sigs[rel][0] if direction == "out" else sigs[rel][1]
            values = np.unique(far)
            if len(far) < DESCRIPTOR_MIN_SHARE * len(values):
                continue
            far_names = [skb.nodes[keys[int(i)]].name for i in values[:DESCRIPTOR_SAMPLE]]
            far_lower = _lower_share(far_names)
            if far_lower < DESCRIPTOR_MIN_LOWER:
                continue
            near_names = [skb.nodes[keys[int(i)]].name for i in np.unique(near)[:DESCRIPTOR_SAMPLE]]
            if _lower_share(near_names) > DESCRIPTOR_MAX_NEAR_LOWER:
                continue
            # the widest vocabulary describes: a scale of a few words ("good", "bad") rates, it does not describe
            if len(values) > best.get(label, (0, "", "out"))[0]:
                best[label] = (len(values), rel, direction)  # type: ignore[assignment]
    return {label: (rel, direction) for label, (_, rel, direction) in best.items()}


def temporal_labels(skb: SKB, sample: int = 50) -> list[str]:
    """Labels at least 80 % of whose sampled node names are a year (1000-2999) or a date (``1994``, ``2003-07-14``,
    ``07/14/2003``): what a "when" question asks for, in a graph that may call them anything."""
    label_names, node_label = skb.label_ids()
    keys = skb.node_keys()
    names = {
        label: [skb.nodes[keys[int(j)]].name for j in np.flatnonzero(node_label == i)[:sample]]
        for i, label in enumerate(label_names)
    }
    return sorted(
        label for label, values in names.items()
        if values and sum(_DATE.fullmatch(v.strip()) is not None for v in values) >= 0.8 * len(values)
    )



def _asked_nouns(words: Sequence[str]) -> set[str]:
    """Plain nouns (not verbs, not agent nouns) within two words after a question word: "which *films*",
    "what *year*". They name the asked nodes, not a relation: "which films" asks for films and names no relation
    whose words mean films; "which *actors*" (an agent noun) and "which *starred*" still name one."""
    return {
        w for i, w in enumerate(words)
        if root(w) == singular(w) and any(x in _INTERROGATIVES for x in words[max(0, i - 2) : i])
    }

