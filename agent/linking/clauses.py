"""Clause linking: a question that *describes* its terms instead of naming them.

Why: "a patient with the palpebral fissure inclination more than two standard deviations below
the mean; high palate; ..." names one term ("high palate") and describes another by its
definition. Exact and fuzzy matching find nothing for the description, or worse, link an
incidental word inside it ("mean", "skull"). Here the question is cut into clauses (at
semicolons when it has any, else at commas and conjunctions); a clause with several content
words that no lexicon entry covers is a *description*, and it is matched as a whole against one
vector per name, synonym and definition sentence of the vocabulary nodes (``graphs.index.phrases``).
Several candidates are kept per clause, each weighted by its similarity relative to the best, and
the ranking takes, per clause, the candidate that best explains each target (a soft "or").

Nothing here knows a domain: the vocabulary labels and definition fields come from the profile,
the frame words from the lexicon, and the thresholds from ``AgentConfig`` (defaults there).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agent.linking.settings import ClauseSettings

if TYPE_CHECKING:
    import numpy as np


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
