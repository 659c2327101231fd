"""Question-level planning: what kind of node is asked for, and which relation paths lead there.

Why deterministic: both planners (LLM and offline) start from the same plan, so the target
type and the candidate paths must be cheap, reproducible and explainable. The target type
is read from the question wording against the schema's *actual* labels (their names,
plurals and a small generic vocabulary of synonyms), never from a fixed list of datasets;
relation paths are a breadth-first search over the schema's relation patterns.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Literal

from pydantic import BaseModel

from graphs.skb.model import GraphSchema


class PathStep(BaseModel):
    rel: str
    direction: Literal["out", "in"]
    to_label: str


#: Generic words that ask for a kind of thing, keyed by canonical concept. A concept applies
#: to a schema label when the label's own name (split on case/underscores) contains the concept
#: or one of its words; e.g. label "Disease" gets "disorder", "syndrome", "condition", ...
TYPE_VOCABULARY: dict[str, tuple[str, ...]] = {
    "disease": ("disease", "disorder", "syndrome", "condition", "diagnosis", "illness"),
    "gene": ("gene", "variant", "mutation", "mutated", "locus", "allele", "protein"),
    "phenotype": ("phenotype", "symptom", "sign", "feature", "finding", "manifestation", "trait", "abnormality"),
    "drug": ("drug", "medication", "medicine", "compound", "treatment", "therapy", "pharmaceutical"),
    "paper": ("paper", "article", "publication", "study", "preprint", "manuscript"),
    "author": ("author", "researcher", "scientist", "writer"),
    "product": ("product", "item", "brand", "model"),
    "institution": ("institution", "university", "affiliation", "organization", "organisation"),
    "field": ("field", "topic", "area", "discipline"),
    "pathway": ("pathway",),
    "anatomy": ("anatomy", "tissue", "organ"),
    "venue": ("venue", "journal", "conference"),
}

# Interrogatives and frames that announce the asked-for type in the next few words.
_ASK = re.compile(
    r"\b(which|what|whose|name|identify|find|list|recommend|suggest|retrieve|search for|looking for|"
    r"most likely|candidate|responsible|diagnosis)\b"
)


def _words(label: str) -> list[str]:
    parts = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", label.replace("_", " ").replace("/", " "))
    return [p.lower() for p in parts] or [label.lower()]


def _forms(word: str) -> set[str]:
    forms = {word, word + "s", word + "es"}
    if word.endswith("y"):
        forms.add(word[:-1] + "ies")
    return forms


def label_vocabulary(label: str) -> set[str]:
    """Surface words that name ``label``: its own words and plurals, plus generic synonyms."""
    words = _words(label)
    vocab: set[str] = set()
    for w in words + [label.lower()]:
        vocab |= _forms(w)
    for concept, synonyms in TYPE_VOCABULARY.items():
        if concept in words or label.lower() == concept or any(s in words for s in synonyms[:1]):
            for s in synonyms:
                vocab |= _forms(s)
    return vocab


def predict_target_type(question: str, schema: GraphSchema) -> str | None:
    """The schema label the question asks for, or None when the wording names none.

    Mentions right after an interrogative ("which gene", "what condition", "the most likely
    diagnosis") win; otherwise the first label word in the question; ties between labels
    sharing a word go to the label whose own name matches.
    """
    labels = schema.label_names()
    if not labels:
        return None
    text = question.lower()
    tokens = [(m.group(0), m.start()) for m in re.finditer(r"[a-z]+", text)]
    vocab = {label: label_vocabulary(label) for label in labels}
    own = {label: {f for w in _words(label) for f in _forms(w)} for label in labels}
    ask_ends = [m.end() for m in _ASK.finditer(text)]

    best: tuple[float, str] | None = None
    for idx, (tok, pos) in enumerate(tokens):
        for label in labels:
            if tok not in vocab[label]:
                continue
            # distance in characters from the closest preceding interrogative
            near = min((pos - e for e in ask_ends if 0 <= pos - e <= 30), default=None)
            score = 0.0
            if near is not None:
                score += 10.0 - near / 5.0
            if tok in own[label]:
                score += 1.0
            score -= idx * 0.01  # earlier mentions first
            if best is None or score > best[0]:
                best = (score, label)
    return best[1] if best else None


def relation_paths(schema: GraphSchema, sources: list[str], target: str, max_hops: int = 2) -> list[list[PathStep]]:
    """All simple label paths from any source label to ``target`` within ``max_hops``, shortest first.

    Edges are walked in both directions (``direction`` says which way relative to the stored
    arrow). A source equal to the target yields the self-relations (e.g. similar nodes), if any.
    """
    adjacency: dict[str, list[PathStep]] = {}
    counts: dict[tuple[str, str, str], int] = {}
    for rel in schema.relations:
        for key in ((rel.rel, "out", rel.dst_label), (rel.rel, "in", rel.src_label)):
            counts[key] = counts.get(key, 0) + rel.count
        adjacency.setdefault(rel.src_label, []).append(PathStep(rel=rel.rel, direction="out", to_label=rel.dst_label))
        adjacency.setdefault(rel.dst_label, []).append(PathStep(rel=rel.rel, direction="in", to_label=rel.src_label))
    for steps in adjacency.values():
        seen: set[tuple[str, str, str]] = set()
        unique = []
        for s in steps:
            sig = (s.rel, s.direction, s.to_label)
            if sig not in seen:
                seen.add(sig)
                unique.append(s)
        steps[:] = unique

    results: list[list[PathStep]] = []
    queue: deque[tuple[str, list[PathStep], tuple[str, ...]]] = deque(
        (src, [], (src,)) for src in dict.fromkeys(sources)
    )
    while queue:
        label, path, visited = queue.popleft()
        if len(path) >= max_hops:
            continue
        for step in adjacency.get(label, []):
            new_path = path + [step]
            if step.to_label == target:
                results.append(new_path)
                continue
            if step.to_label in visited:
                continue  # simple paths only; self-relations are not used as intermediate hops
            queue.append((step.to_label, new_path, visited + (step.to_label,)))
    # shortest first; among equals, the best-populated path first (its weakest hop decides)
    results.sort(key=lambda p: (len(p), -min(counts.get((s.rel, s.direction, s.to_label), 0) for s in p)))
    return results
