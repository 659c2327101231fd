"""Reading a question's relation words: aliases, meaning, category and time words, the descriptor, the
anchor relation and the asked labels -- the text half of the path planner.

Why a base class of its own: ``PathPlanner`` (``agent.planning.paths``) scores paths; this reads the
question against the planner's tables (built in ``PathPlanner.__init__``), one job per module.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from agent.planning.relations import (
    _ARTICLES,
    _INTERROGATIVES,
    _NOT_DESCRIPTIVE,
    _PIVOT_WORDS,
    MAX_WORD_VECTORS,
    MEANING_MARGIN,
    MEANING_MIN_SIMILARITY,
    Direction,
    _asked_nouns,
    _roots,
    _words,
    classifier_relations,
    descriptor_relations,
    temporal_labels,
)
from graphs.skb.language import (
    CATEGORY_WORDS,
    FUNCTION_WORDS,
    TIME_WORDS,
    content_words,
    relation_words,
    root,
    singular,
    words_of,
)
from graphs.skb.model import SKB
from graphs.skb.profile import Profile


class QuestionReader:
    """The text methods of ``PathPlanner``: which relations and labels a question names."""

    # set by PathPlanner.__init__ (the planner's tables; see there)
    skb: SKB
    profile: Profile
    embedder: Any
    sigs: dict[str, tuple[str, str]]
    _lock: threading.Lock
    _aliases: dict[str, list[tuple[str, ...]]]
    _alias_roots: set[str]
    _named_only: list[str]
    _named_set: set[str]
    _qualifiers: dict[str, set[tuple[str, ...]]]
    _word_vecs: dict[str, np.ndarray]
    _rel_vecs: np.ndarray | None
    _label_words: set[str]
    _label_nouns: set[str]
    _noun_labels: dict[str, str]
    _classifiers: dict[str, tuple[str, Direction]] | None
    _descriptors: dict[str, tuple[str, Direction]] | None
    _temporal: list[str] | None
    _tail_nouns: dict[str, set[str]]
    _weak_labels: set[str]
    _filler: set[str]

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

