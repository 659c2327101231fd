"""Re-scoring a described clause's shortlist: every phrase of a candidate, and the words it shares with them.

Why: a clause in the speaker's own words ("flattening boards by shaving the surface") is compared with one
vector per name, synonym and definition sentence, and its nearest *single* phrase is often a neighbour
of the right term whose name happens to be close ("board flattener", a press), while the right term is
close on several of its phrases at once and shares the clause's content words across its synonyms and
definition ("hand plane": "shaves thin curls from the surface of a board to flatten it"). So each
candidate of the clause's embedding shortlist is scored jointly from

- a soft maximum over its phrase similarities (``temperature * log sum exp(sim / temperature)``):
  equal to the best phrase when one phrase stands out, a little above it when several agree;
- the share of the clause's content words (reduced to their roots, so *shaving* meets *shaves*) that
  occur anywhere in the candidate's names, synonyms and definitions;

averaged with weights 1 and ``lexical_weight``, so the result stays between 0 and 1 like the cosines the
clause thresholds were set on. (Counting the coverage as a shortfall against the shortlist's best instead,
which keeps the best-covering candidate at its own cosine, kept fewer runner-ups and measured lower.)
On the paraphrase benchmark's development cases the right term is a clause's first candidate for 0.527 of
the clauses before and 0.623 after (numbers, and why the answer ranking moves less, in the evals report on
paraphrased clauses).

Nothing here knows a domain: the phrases are the profile's vocabulary names, synonyms and definition
fields (``graphs.index.phrases.node_phrases``), the word roots English morphology
(``graphs.skb.language.root``).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from graphs.index.hybrid import content_words
from graphs.index.phrases import node_phrases
from graphs.skb.language import root

if TYPE_CHECKING:
    from graphs.skb.model import SKB

#: Node word sets kept per process (a bound: a long-running server sees many nodes).
MAX_CACHED_NODES = 20_000


def words(text: str) -> frozenset[str]:
    """Content words of ``text`` reduced to their roots (one-letter words and numbers kept as they are)."""
    return frozenset(root(w) for w in content_words(text))


class NodeWords:
    """The root words of each vocabulary node's phrases, computed on first use and kept in a bounded LRU."""

    def __init__(self, skb: SKB, limit: int = MAX_CACHED_NODES) -> None:
        self.skb = skb
        self.limit = limit
        self._cache: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, key: str) -> frozenset[str]:
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                return found
        found = frozenset().union(*(words(text) for _, text in node_phrases(self.skb, key))) if key in self.skb.nodes else frozenset()
        with self._lock:
            self._cache[key] = found
            while len(self._cache) > self.limit:
                self._cache.popitem(last=False)
        return found


def coverage(clause: frozenset[str], node: frozenset[str]) -> float:
    """Share of the clause's words found in the node's words (0.0 for a clause with no content word)."""
    return len(clause & node) / len(clause) if clause else 0.0


def soft_max(sims: Sequence[float], temperature: float) -> float:
    """``temperature * log(sum(exp(sims / temperature)))``, computed stably; the plain max at temperature 0.

    Plain floats, not numpy: a term has a handful of phrases, where array overhead costs more than the sum."""
    if not sims:
        return 0.0
    best = max(sims)
    if temperature <= 0:
        return float(best)
    return float(best + temperature * math.log(sum(math.exp((s - best) / temperature) for s in sims)))


def rescore(
    clause: str,
    hits: Sequence[tuple[str, Sequence[float]]],
    node_words: NodeWords,
    *,
    lexical_weight: float,
    temperature: float,
) -> list[tuple[str, float]]:
    """The shortlist ``hits`` (key, cosines of its phrases near the clause) re-scored jointly, best first."""
    if not hits:
        return []
    clause_words = words(clause)
    dense = [soft_max(sims, temperature) for _, sims in hits]
    lexical = [coverage(clause_words, node_words(key)) if lexical_weight > 0 else 0.0 for key, _ in hits]
    scored = [(key, (d + lexical_weight * lex) / (1.0 + lexical_weight)) for (key, _), d, lex in zip(hits, dense, lexical)]
    scored.sort(key=lambda kv: -kv[1])
    return scored
