"""Topic-entity choice for relation-path planning when the question does not bracket its topic.

Why: without ``[...]`` the linker returns every node whose name appears in the question, and one
name can match several nodes (a person and a literal tag spelled the same in lower case) or a short
name inside a longer one. Picking by mention length alone then walks paths from the wrong node.
Here each plausible candidate is scored by what the profile and the wording say about it:

- how it was linked (exact name > fuzzy > embedding) and how long its mention is;
- whether the node's name occurs in the question with the same case (``Tom Hanks`` vs ``tom hanks``);
- whether its label is an entity label rather than one of ``profile.literal_labels``;
- how well its best relation path explains the question (the path planner's own score), so a topic
  whose paths use the question's relation words wins over one whose paths do not.

A bracketed question keeps the bracket rule (``choose_topic``) unchanged.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agent.planning.paths import bracketed_mention, choose_topic

if TYPE_CHECKING:
    from agent.planning.paths import PathPlanner, ScoredPath

#: Candidates (after the prior) whose paths are scored; bounds the extra planner work per question.
SHORTLIST = 3
#: Bonuses added to the best path's score (path scores of right and wrong topics differ by about 0.5-1).
METHOD_BONUS = {"exact": 0.6, "fuzzy": 0.3, "embedding": 0.0}
CASE_BONUS = 0.3
ENTITY_BONUS = 0.3
WORD_BONUS = 0.05

_CACHE: OrderedDict[tuple[str, tuple[str, ...], int], str] = OrderedDict()
_CACHE_SIZE = 256
_LOCK = threading.Lock()


def _prior(ent: Mapping[str, Any], question: str, name: str, label: str, literal: Sequence[str]) -> float:
    mention = str(ent.get("mention") or "")
    score = METHOD_BONUS.get(str(ent.get("method")), 0.0)
    score += WORD_BONUS * len(mention.split())
    if name and name in question:
        score += CASE_BONUS
    if label not in literal:
        score += ENTITY_BONUS
    return score


def _wording(sp: ScoredPath, planner: PathPlanner) -> float:
    """The path's score from the wording alone (relation words, asked label, topic anchor).

    Why: the planner adds embedding similarities only when the wording leaves paths close, so totals
    of different topics are not comparable; the wording part is computed for every candidate.
    """
    weights = planner.profile.planner
    return (
        sp.score
        - weights.render_weight * sp.parts.get("render", 0.0)
        - weights.exemplar_weight * sp.parts.get("exemplar", 0.0)
    )


def choose_topic_for_paths(
    question: str, linked: Sequence[Mapping[str, Any]], planner: PathPlanner
) -> Mapping[str, Any] | None:
    """The topic entity to walk paths from: the bracketed one, else the best-scored candidate.

    The result is memoised per (question, candidate keys, planner) because the offline planner asks
    again in its finishing round and must get the same answer without paying for it twice.
    """
    if not linked or bracketed_mention(question) is not None:
        return choose_topic(question, linked)
    skb = planner.skb
    present = [e for e in linked if str(e.get("key")) in skb.nodes]
    if len(present) <= 1:
        return present[0] if present else choose_topic(question, linked)
    memo = (question, tuple(str(e.get("key")) for e in present), id(planner))
    with _LOCK:
        hit = _CACHE.get(memo)
    if hit is not None:
        return next(e for e in present if str(e.get("key")) == hit)
    literal = planner.profile.literal_labels
    priors = []
    for ent in present:
        node = skb.nodes[str(ent["key"])]
        priors.append(_prior(ent, question, node.name, node.label, literal))
    order = sorted(range(len(present)), key=lambda i: -priors[i])[:SHORTLIST]
    best_i, best_score = order[0], float("-inf")
    for i in order:
        ent = present[i]
        scored = planner.predict(question, str(ent["key"]), str(ent.get("mention") or "") or None, top=1,
                                 wording_only=True)
        total = priors[i] + (_wording(scored[0], planner) if scored else -1.0)
        if total > best_score:
            best_i, best_score = i, total
    chosen = present[best_i]
    with _LOCK:
        _CACHE[memo] = str(chosen["key"])
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return chosen
