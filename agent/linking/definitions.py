"""The vocabulary's definition sentences, for clauses that quote a term's definition.

Why apart from clause linking: the table is built at index time (``agent.linking.stored``) and matched
at query time (``agent.linking.entities``); it needs only the lexicon's normalisation.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agent.linking.lexicon import normalise
from agent.linking.settings import ClauseSettings

# -- definitions quoted in the question ---------------------------------------------------------------


#: Shortest definition sentence (in tokens, frame words trimmed at its edges) worth matching word for word.
MIN_DEFINITION_TOKENS = 3


@dataclass(frozen=True)
class Quote:
    """A definition found in a clause: the keys it defines and the clause tokens ``[start, end)`` it spans."""

    keys: list[str]
    start: int
    end: int


class DefinitionTable:
    """The vocabulary's definition sentences, normalised, each with the nodes it defines.

    Why: a clause that describes a term often quotes its definition, whole or cut short at a comma
    ("a small appliance that browns slices of bread, ..."). The linker then needs no embedding: the
    clause *is* the term's text, as a name is (exact before fuzzy before embedding). Sentences are
    stored with frame words trimmed at both edges, since the linker trims them from clauses ("a small
    appliance ..." and "small appliance ..." match alike), and sorted, so every sentence a clause
    begins is one ``bisect`` away.

    Why each sentence is one string (its tokens joined by a space) and not a tuple of tokens: a tuple holds
    a string object per token, about 20 MB on HPO's 20,000 sentences in every process that links a clause;
    one string a sentence is the stored form itself. The order is the tuples' order, since a normalised token
    (``agent.linking.lexicon.normalise``: letters and digits) holds no character that sorts before the space,
    and a sentence begins with a clause's tokens where its string equals their string or continues it with a
    space.
    """

    def __init__(self, sentences: Sequence[str] | Sequence[tuple[str, ...]],
                 keys: Sequence[tuple[str, ...]]) -> None:
        """``sentences``: sorted and distinct, as token tuples or joined strings; ``keys``: the node keys each
        sentence defines (a sentence several terms share lists them all)."""
        self.sentences: Sequence[str] = [s if isinstance(s, str) else " ".join(s) for s in sentences]
        self.keys = keys
        self._row = {text: i for i, text in enumerate(self.sentences)}
        self._lengths = sorted({text.count(" ") + 1 for text in self.sentences}, reverse=True)

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
        sentences = self.sentences
        for start in range(len(tokens)):
            if content - skipped < need:
                break  # the content words left can no longer cover enough
            tail = " ".join(tokens[start:])
            more = tail + " "
            lo = hi = bisect.bisect_left(sentences, tail)
            while hi < len(sentences) and (sentences[hi] == tail or sentences[hi].startswith(more)):
                hi += 1
            found: list[int] = list(range(lo, hi))  # the clause ends inside (or with) these sentences
            span = len(tokens) - start
            if not found:  # a whole sentence, then words the question adds
                for length in self._lengths:
                    row = self._row.get(" ".join(tokens[start : start + length])) if length < span else None
                    if row is not None:
                        found, span = [row], length
                        break
            cover = sum(1 for t in tokens[start : start + span] if t not in frame)
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
    """The table over ``(node key, kind, text)`` phrase entries (``graphs.index.phrases.phrase_entries``)."""
    by_sentence: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for key, kind, text in entries:
        if kind != "definition":
            continue
        toks = trim_frame(normalise(text), frame)
        if len(toks) >= MIN_DEFINITION_TOKENS and key not in by_sentence[toks]:
            by_sentence[toks].append(key)
    sentences = sorted(by_sentence)
    return DefinitionTable(sentences, [tuple(by_sentence[toks]) for toks in sentences])
