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
import re
import threading
import weakref
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from agent.linking.lexicon import FRAME_WORDS
from graphs.skb.language import (
    CATEGORY_WORDS,
    FUNCTION_WORDS,
    QUESTION_WORDS,
    TIME_WORDS,
    content_words,
    relation_words,
    root,
    singular,
    words_of,
)
from graphs.skb.model import SKB
from graphs.skb.profile import Profile, profile_for
from graphs.store.aggregate import path_walk_query

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


def _asked_nouns(words: Sequence[str]) -> set[str]:
    """Plain nouns (not verbs, not agent nouns) within two words after a question word: "which *films*",
    "what *year*". They name the asked nodes, not a relation: "which films" asks for films and names no relation
    whose words mean films; "which *actors*" (an agent noun) and "which *starred*" still name one."""
    return {
        w for i, w in enumerate(words)
        if root(w) == singular(w) and any(x in _INTERROGATIVES for x in words[max(0, i - 2) : i])
    }


class PathPlanner:
    """Scores relation paths for a question and a topic node; one instance per SKB (see ``planner_for``)."""

    def __init__(self, skb: SKB, embedder: Any, profile: Profile | None = None) -> None:
        self.skb = skb
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

    # -- text ------------------------------------------------------------------------------
    def _alias_table(self) -> dict[str, list[tuple[str, ...]]]:
        table: dict[str, list[tuple[str, ...]]] = {}
        for rel in self.sigs:
            spec = self.profile.relations.get(rel)
            phrases = list(spec.aliases) if spec is not None else []
            if not phrases:
                phrases = content_words(relation_words(rel))
            table[rel] = list(dict.fromkeys(tuple(_roots(p)) for p in phrases if _words(p)))
        return table

    def mentioned_relations(self, text: str) -> set[str]:
        return set(self.relation_mentions(text)[0])

    def relation_mentions(self, text: str, topic_at: int | None = None) -> tuple[Counter[str], int]:
        """How often each relation is named (alias occurrences, longest phrase first, no overlaps)
        and how many pivot words ("share", "same", "also", "co-") the text has. ``topic_at``: the word
        position the topic mention was taken out at (no mention is joined across it)."""
        surface = words_of(text)
        words = [root(w) for w in surface]
        used = [False] * len(words)
        spans: dict[str, list[tuple[int, int, tuple[str, ...]]]] = {}
        phrases = sorted(
            ((p, rel) for rel, plist in self._aliases.items() for p in plist), key=lambda pr: -len(pr[0])
        )
        for phrase, rel in phrases:
            n = len(phrase)
            for i in range(len(words) - n + 1):
                if tuple(words[i : i + n]) == phrase and not any(used[i : i + n]):
                    spans.setdefault(rel, []).append((i, i + n, phrase))
                    # the same words may name several relations; mark them used only for longer phrases
                    if n > 1:
                        for j in range(i, i + n):
                            used[j] = True
        counts: Counter[str] = Counter()
        for rel, found in spans.items():
            found = [span for span in found if not self._names_a_node_type(rel, words, surface, span, topic_at)]
            qualifiers = self._qualifiers.get(rel)
            if qualifiers and all(phrase in qualifiers for _, _, phrase in found):
                found = []
            if not found:
                continue
            found.sort()
            # "starred which actors", "the director that directed": one mention said twice. Words read
            # from a relation's name are one mention only side by side or across a question word or
            # relative pronoun: "movies directed by the director of X" names the relation twice.
            # Two different words of one multi-word name with only function words between them are one
            # mention too ("released in which years" for a release-year relation).
            joins = _INTERROGATIVES | {"that"} if rel in self._named_set else self._filler
            merged = 1
            for (_, prev_end, prev), (start, _, phrase) in itertools.pairwise(found):
                gap = words[prev_end:start]
                across_topic = topic_at is not None and prev_end <= topic_at <= start
                parts_of_name = rel in self._named_set and phrase != prev and not across_topic and all(
                    w in FUNCTION_WORDS or w in _INTERROGATIVES for w in gap
                )
                if not parts_of_name and not all(w in joins for w in gap):
                    merged += 1
            counts[rel] = merged
        # pivot words in one run ("share the same", "also co-starred") are one pivot
        pivots, previous = 0, False
        for w in _words(text):
            if w in _PIVOT_WORDS:
                pivots += 0 if previous else 1
                previous = True
            elif w not in FUNCTION_WORDS:
                previous = False
        return counts, pivots

    def _names_a_node_type(
        self, rel: str, words: Sequence[str], surface: Sequence[str], span: tuple[int, int, tuple[str, ...]],
        topic_at: int | None,
    ) -> bool:
        """A word of a multi-word relation name used as the noun of a node rather than for the relation:
        a plain noun (not a verb, not an agent noun) right after a question word ("which *films*") or just
        before the topic ("the *film* [X]"), and not a word of the relation's own tail type. A name like
        "original language of film" carries the word for what it describes; "which films did X direct"
        asks for films, not for their languages; "who *acted* in" still names an acting relation."""
        start, end, phrase = span
        if rel not in self._named_set or len(self._aliases.get(rel, ())) < 2 or end - start != 1:
            return False
        if root(surface[start]) != singular(surface[start]):
            return False
        if set(phrase) & self._tail_nouns.get(rel, set()):
            return False
        asked = any(w in _INTERROGATIVES for w in words[max(0, start - 2) : start])
        before_topic = topic_at is not None and end <= topic_at and all(
            w in _ARTICLES for w in words[end:topic_at]
        )
        return asked or before_topic

    def meaning_mentions(
        self, text: str, found: Counter[str], strength: dict[str, float] | None = None
    ) -> Counter[str]:
        """Relations named by meaning: a content word of the question that no alias, label word or frame
        word covers, whose embedding is closest to one relation's own words (at least
        ``MEANING_MIN_SIMILARITY``, ahead of the next relation by ``MEANING_MARGIN``), counts as a
        mention of it. Only relations whose words were read from their names take part: a written alias
        list is the user's word on what names a relation. ``strength`` receives each mentioned relation's best
        similarity (how sure the reading is)."""
        words = _words(text)
        leftover = [
            w for w in dict.fromkeys(words)
            if len(w) > 2 and not w.isdigit() and root(w) not in self._alias_roots and root(w) not in self._filler
            and w not in _PIVOT_WORDS and singular(w) not in self._label_nouns and singular(w) not in CATEGORY_WORDS
            and w not in _asked_nouns(words)
        ]
        out: Counter[str] = Counter()
        if not leftover:
            return out
        if self._rel_vecs is None:
            self._rel_vecs = self._embed([
                " ".join(content_words(relation_words(r)) or relation_words(r)) for r in self._named_only
            ])
        known = self._word_vecs
        with self._lock:
            present = {w: known[w] for w in leftover if w in known}
        missing = [w for w in leftover if w not in present]
        vecs = dict(zip(missing, self._embed(missing))) if missing else {}
        with self._lock:
            if len(known) + len(vecs) > MAX_WORD_VECTORS:
                known.clear()  # bounded: a long-running server's question vocabulary has no end
            known.update(vecs)
        present.update(vecs)
        sims = np.stack([present[w] for w in leftover]) @ self._rel_vecs.T
        for row in sims:
            order = np.argsort(-row)
            best = float(row[order[0]])
            second = float(row[order[1]]) if len(order) > 1 else 0.0
            rel = self._named_only[int(order[0])]
            # a relation the question already names by a word is not named again ("release dates")
            if best >= MEANING_MIN_SIMILARITY and best - second >= MEANING_MARGIN and not found.get(rel):
                out[rel] += 1
                if strength is not None:
                    strength[rel] = max(strength.get(rel, 0.0), best)
        return out

    def temporal_labels(self) -> list[str]:
        """Labels whose nodes are mostly years or dates (read from a sample of their names, once)."""
        if self._temporal is None:
            found = temporal_labels(self.skb)
            with self._lock:
                self._temporal = found
        return self._temporal

    def classifiers(self) -> dict[str, tuple[str, Direction]]:
        """``classifier_relations`` of this SKB, computed on first use (one pass over the edges)."""
        if self._classifiers is None:
            found = classifier_relations(self.skb, self.sigs)
            with self._lock:
                self._classifiers = found
        return self._classifiers

    def time_mention(self, text: str, found: Counter[str]) -> str | None:
        """The relation a time question asks for when it names none: "when", or a time noun right after a question
        word ("in which *years*"), asks for the one relation whose values are years or dates (``temporal_labels``),
        as a category word asks for the classifier. None when the graph has several such relations (the words must
        choose) or the question already names one."""
        words = _words(text)
        if "when" not in words and not any(singular(w) in TIME_WORDS for w in _asked_nouns(words)):
            return None
        temporal = set(self.temporal_labels())
        rels = {rel for rel, (head, tail) in self.sigs.items() if head in temporal or tail in temporal}
        if len(rels) != 1 or any(found.get(rel) for rel in rels):
            return None
        return next(iter(rels))

    def descriptors(self) -> dict[str, tuple[str, Direction]]:
        """``descriptor_relations`` of this SKB, computed on first use (one pass over the edges)."""
        if self._descriptors is None:
            found = descriptor_relations(self.skb, self.sigs)
            with self._lock:
                self._descriptors = found
        return self._descriptors

    def descriptor_mention(self, text: str, topic_label: str | None) -> str | None:
        """The relation a question asks for when it names none: "describe X", "what words describe X",
        "which topics is X about" ask for what describes X, i.e. the topic label's descriptor relation
        (``descriptor_relations``). Only for a question that names no relation and no label and whose
        question word does not ask for a person, time, place or amount ("who stars in X"), and only for a
        relation whose words were read from its name (as ``meaning_mentions``)."""
        if topic_label is None or set(_words(text)) & _NOT_DESCRIPTIVE:
            return None
        found = self.descriptors().get(topic_label)
        # a relation with written aliases is named by them: the user has said which words ask for it
        return found[0] if found is not None and found[0] in self._named_set else None

    def category_mentions(self, text: str, found: Counter[str], topic_label: str | None) -> Counter[str]:
        """Relations a category word asks for: "what *kind* of film is X", "which *types* are the films
        written by X" ask for the class of a node, i.e. its label's classifier relation (the label named
        right after the word, else the topic's label, else the one classifier the graph has). A word an
        alias or label word covers is the profile's, and a relation already named is not named again."""
        out: Counter[str] = Counter()
        words = _words(text)
        for i, word in enumerate(words):
            if singular(word) not in CATEGORY_WORDS or root(word) in self._alias_roots:
                continue
            classes = self.classifiers()
            named = [self._noun_labels[singular(w)] for w in words[i + 1 : i + 4] if singular(w) in self._noun_labels]
            label = next((lab for lab in named if lab in classes), None)
            if label is None and topic_label in classes:
                label = topic_label
            rels = {rel for rel, _ in classes.values()}
            rel = classes[label][0] if label is not None else (next(iter(rels)) if len(rels) == 1 else None)
            if rel is not None and not found.get(rel) and not out.get(rel):
                out[rel] += 1
        return out

    def anchor_relation(self, masked: str, firsts: set[str]) -> str | None:
        """The relation named closest to the topic (``X``), among those a first hop can take.

        Why: when the topic has several relations ("who directed the films written by X" about a
        writer-director), the relation word attached to the topic is the first hop; words on its
        left ("written by X", "the director of X") attach more often than words on its right.
        """
        words = _roots(masked)
        try:
            at = words.index("x")
        except ValueError:
            return None
        best: tuple[float, str] | None = None
        for rel, plist in self._aliases.items():
            if rel not in firsts:
                continue
            for phrase in plist:
                n = len(phrase)
                for i in range(len(words) - n + 1):
                    if tuple(words[i : i + n]) != phrase:
                        continue
                    between = words[i + n : at] if i < at else words[at + 1 : i]
                    gap = 1 + sum(1 for w in between if w not in self._filler)
                    dist = gap if i < at else gap + 0.5
                    after = words[i + n] if i + n < len(words) else ""
                    if i == at + 1 and after in self._label_words and after not in _INTERROGATIVES:
                        dist = 0.5  # "[X] directed movies": the topic is the subject of the relation

                    if best is None or dist < best[0]:
                        best = (float(dist), rel)
        return best[1] if best else None

    def asked_labels(self, text: str) -> dict[str, float]:
        """Labels the question asks for, from the profile's label words: 1.0 right after an
        interrogative ("which genres", "who", "when"), 0.5 elsewhere in the question."""
        # label words are nouns: compared by their singular, not by root ("director" asks for a person,
        # "direct" names the relation)
        words = [singular(w) for w in _words(text)]
        out: dict[str, float] = {}
        # asks for a time ("when", "in which year"): the labels whose nodes are years or dates, whatever their names
        if "when" in words or any(singular(w) in TIME_WORDS for w in _asked_nouns(words)):
            out.update(dict.fromkeys(self.temporal_labels(), 1.0))
        for label, spec in self.profile.labels.items():
            vocab = {singular(w) for w in spec.words}
            for i, w in enumerate(words):
                if w not in vocab:
                    continue
                near = w in _INTERROGATIVES or any(x in _INTERROGATIVES for x in words[max(0, i - 2) : i])
                if not near and label in self._weak_labels:
                    continue
                out[label] = max(out.get(label, 0.0), 1.0 if near else 0.5)
        return out

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        embedder = getattr(self.embedder, "inner", self.embedder)  # keep planner texts out of the index cache
        return np.asarray(embedder.embed(list(texts)), dtype=np.float32)

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
            planner = _PLANNERS[skb] = PathPlanner(skb, bundle.embedder)
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
        key=lambda e: (order.get(str(e.get("method")), 0), len(_words(str(e.get("mention") or ""))),
                       float(e.get("score") or 0.0)),
    )
