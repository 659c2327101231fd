"""Clause linking: a question that *describes* its terms instead of naming them.

Why: "a patient with the palpebral fissure inclination more than two standard deviations below
the mean; high palate; ..." names one term ("high palate") and describes another by its
definition. Exact and fuzzy matching find nothing for the description, or worse, link an
incidental word inside it ("mean", "skull"). Here the question is cut into clauses (at
semicolons when it has any, else at commas and conjunctions); a clause with several content
words that no lexicon entry covers is a *description*, and it is matched as a whole against one
vector per name, synonym and definition sentence of the vocabulary nodes (``graphs.phrase_index``).
Several candidates are kept per clause, each weighted by its similarity relative to the best, and
the ranking takes, per clause, the candidate that best explains each target (a soft "or").

Nothing here knows a domain: the vocabulary labels and definition fields come from the profile,
the frame words from the lexicon, and the thresholds from ``AgentConfig`` (defaults there).
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from graphs.skb_state import PerSKB

if TYPE_CHECKING:
    import numpy as np

    from graphs.model import SKB

#: Characters that end a clause when the question has no semicolon.
_SOFT_BREAK = re.compile(r",|\s(?:and|or)\s|\s(?:and|or)$")
#: A semicolon (or a line break) separates clauses that may contain commas themselves.
_HARD_BREAK = re.compile(r";|\n")


def clause_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the clauses of ``text``.

    Semicolons, when present, are the only separators (definitions contain commas and "and";
    a question that lists descriptions separates them with semicolons). Otherwise commas and
    the conjunctions "and"/"or" separate clauses, as in a list of names.
    """
    pattern = _HARD_BREAK if _HARD_BREAK.search(text) else _SOFT_BREAK
    spans: list[tuple[int, int]] = []
    start = 0
    for match in pattern.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    return [(s, e) for s, e in spans if text[s:e].strip()]


@dataclass(frozen=True)
class ClauseSettings:
    """Clause-linking thresholds; ``AgentConfig.clause_settings()`` fills them from its fields (the defaults
    live there; these mirror them for direct callers, and a test keeps the two equal)."""

    candidates: int = 5
    min_similarity: float = 0.45
    margin: float = 0.05
    min_tokens: int = 3
    max_exact_coverage: float = 0.75
    confidence_power: float = 1.0
    definition_match: bool = True
    definition_coverage: float = 0.75
    name_confidence: float = 0.6


def is_description(content_tokens: int, exact_tokens: int, settings: ClauseSettings) -> bool:
    """A clause is a description when it has enough content words and exact matches cover few of them."""
    if content_tokens < settings.min_tokens:
        return False
    return exact_tokens <= settings.max_exact_coverage * content_tokens


def weighted_candidates(
    hits: Sequence[tuple[str, float]], settings: ClauseSettings
) -> list[tuple[str, float, float]]:
    """(key, similarity, weight) for the hits kept: within ``margin`` of the best and above ``min_similarity``.

    The weight is (similarity / best similarity) ** confidence_power times the best similarity's own
    confidence (its share above ``min_similarity``, capped at 1): a clause matched loosely counts
    less than one matched closely, and a runner-up counts less than the best. ``confidence_power``
    0 gives every kept candidate weight 1 (link confidence ignored).
    """
    kept = [(k, s) for k, s in hits if s >= settings.min_similarity]
    if not kept:
        return []
    best = max(s for _, s in kept)
    kept = [(k, s) for k, s in kept if s >= best - settings.margin][: settings.candidates]
    power = settings.confidence_power
    if power <= 0:
        return [(k, s, 1.0) for k, s in kept]
    span = max(1e-6, 1.0 - settings.min_similarity)
    clause_conf = min(1.0, 0.5 + 0.5 * (best - settings.min_similarity) / span)
    return [(k, s, float(clause_conf * (s / best) ** power)) for k, s in kept]


def embed_clauses(embedder: object, clauses: Sequence[str]) -> np.ndarray:
    """Clause vectors, L2-normalised, in one batch (bypassing an on-disk cache: questions do not repeat)."""
    import numpy as np

    inner = getattr(embedder, "inner", embedder)
    vecs = np.asarray(inner.embed(list(clauses)), dtype=np.float32)  # type: ignore[attr-defined]
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs / np.maximum(norms, 1e-12)


# -- definitions quoted in the question ---------------------------------------------------------------


#: Shortest definition sentence (in tokens, frame words trimmed at its edges) worth matching word for word.
MIN_DEFINITION_TOKENS = 3


@dataclass(frozen=True)
class Quote:
    """A definition found in a clause: the keys it defines and the clause tokens ``[start, end)`` it spans."""

    keys: list[str]
    start: int
    end: int


@dataclass
class DefinitionTable:
    """The vocabulary's definition sentences as normalised token tuples, each with the nodes it defines.

    Why: a clause that describes a term often quotes its definition, whole or cut short at a comma
    ("a small appliance that browns slices of bread, ..."). The linker then needs no embedding: the
    clause *is* the term's text, as a name is (exact before fuzzy before embedding). Sentences are
    stored with frame words trimmed at both edges, since the linker trims them from clauses ("a small
    appliance ..." and "small appliance ..." match alike), and sorted, so every sentence a clause
    begins is one ``bisect`` away.
    """

    sentences: list[tuple[str, ...]]
    """Sorted, distinct."""
    keys: list[tuple[str, ...]]
    """The node keys each sentence defines (a sentence several terms share lists them all)."""
    _row: dict[tuple[str, ...], int] = field(init=False, repr=False)
    _lengths: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._row = {toks: i for i, toks in enumerate(self.sentences)}
        self._lengths = sorted({len(toks) for toks in self.sentences}, reverse=True)

    def __len__(self) -> int:
        return len(self.sentences)

    def match(self, tokens: Sequence[str], frame: frozenset[str], settings: ClauseSettings) -> Quote | None:
        """The definition a clause quotes (its normalised ``tokens``), or None to embed the clause instead.

        A clause quotes a sentence when, from some token on, the clause continues with the whole
        sentence or stops inside it (cut short). The match must cover ``definition_coverage`` of the
        clause's content words (words before or after it are the question's own) and at least
        ``min_tokens`` of them; the longest match wins. A cut so short that more than ``candidates``
        terms share it is ambiguous: the clause goes to the embedding index, which weighs them.
        """
        content = sum(1 for t in tokens if t not in frame)
        need = max(settings.definition_coverage * content, float(settings.min_tokens))
        if content < need:
            return None
        best_cover, rows, where = 0, [], (0, 0)
        skipped = 0
        for start in range(len(tokens)):
            if content - skipped < need:
                break  # the content words left can no longer cover enough
            tail = tuple(tokens[start:])
            lo = hi = bisect.bisect_left(self.sentences, tail)
            while hi < len(self.sentences) and self.sentences[hi][: len(tail)] == tail:
                hi += 1
            found: list[int] = list(range(lo, hi))  # the clause ends inside (or with) these sentences
            span = len(tail)
            if not found:  # a whole sentence, then words the question adds
                for length in self._lengths:
                    row = self._row.get(tail[:length]) if length < len(tail) else None
                    if row is not None:
                        found, span = [row], length
                        break
            cover = sum(1 for t in tail[:span] if t not in frame)
            if found and cover >= need and cover > best_cover:
                best_cover, rows, where = cover, found, (start, start + span)
            if tokens[start] not in frame:
                skipped += 1
        keys = list(dict.fromkeys(k for row in rows for k in self.keys[row]))
        return Quote(keys, *where) if keys and len(keys) <= settings.candidates else None


def trim_frame(tokens: Sequence[str], frame: frozenset[str]) -> tuple[str, ...]:
    """``tokens`` without the frame words at either edge."""
    s, e = 0, len(tokens)
    while s < e and tokens[s] in frame:
        s += 1
    while e > s and tokens[e - 1] in frame:
        e -= 1
    return tuple(tokens[s:e])


def build_definition_table(entries: Iterable[tuple[str, str, str]], frame: frozenset[str]) -> DefinitionTable:
    """The table over ``(node key, kind, text)`` phrase entries (``graphs.phrase_index.phrase_entries``)."""
    from agent.linking import normalise

    by_sentence: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for key, kind, text in entries:
        if kind != "definition":
            continue
        toks = trim_frame(normalise(text), frame)
        if len(toks) >= MIN_DEFINITION_TOKENS and key not in by_sentence[toks]:
            by_sentence[toks].append(key)
    sentences = sorted(by_sentence)
    return DefinitionTable(sentences, [tuple(by_sentence[toks]) for toks in sentences])


def _stored_definitions(skb: SKB) -> DefinitionTable | None:
    from agent.precomputed import stored_definitions

    return cast("DefinitionTable | None", stored_definitions(skb))


def _build_definitions(skb: SKB) -> DefinitionTable:
    from agent.linking import frame_words
    from graphs.phrase_index import phrase_entries

    return build_definition_table(phrase_entries(skb), frame_words(skb))


definition_table_for = PerSKB(_stored_definitions, _build_definitions)
"""The SKB's definition table: stored by ``skb index`` (``agent.precomputed``) when valid, else built."""
