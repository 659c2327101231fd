"""Training pairs the graph itself provides, each with the node key and field it came from.

A pair is (query-side text, name-side text): the query side is how someone might *say* a thing
(a synonym, a definition sentence, a relation's description or alias), the name side is the name
the graph uses for it. Every pair records its sources -- ``(node key, field)`` for node pairs,
``(relation or label, profile field)`` for profile pairs -- so the tuned model can be shown to have
seen nothing but the graph (``pairs.jsonl`` beside the model).

Which fields are synonyms and definitions comes from the graph's own declarations: a node type's
``synonym_field``, the profile's ``[linking] definition_fields``, the profile's relation
descriptions, aliases and templates, and its label words. Nothing here names a dataset.

Hard negatives, also from the graph: a *sibling* (another child of one of the node's parents,
where a relation links a label to itself, as an ``is_a`` hierarchy does) or, failing that, a
node of the same label whose name shares a word with this one. Both are names the encoder must
learn to tell apart from the right one.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphs.skb.model import SKB

__all__ = ["PAIR_KINDS", "Pair", "mine_pairs", "restates"]

#: The kinds of pairs, in the order they are listed; ``mine_pairs(kinds=...)`` selects among them.
PAIR_KINDS = ("synonym", "definition", "relation", "label")
#: Definition sentences per node used as query sides (the first ones say what the term is).
MAX_DEFINITION_SENTENCES = 3
#: Query sides shorter than this are fragments ("e.g."), longer ones are cut by the tokenizer anyway.
MIN_CHARS = 3
#: Words too common to make two names confusable.
_WORD = re.compile(r"[a-z0-9]+")
_SHORT_WORD = 3


@dataclass(frozen=True)
class Pair:
    """One training example: ``query`` should embed next to ``name`` and away from ``negative``."""

    query: str
    name: str
    kind: str
    group: str
    """The item the name stands for (a node key, ``relation:<name>``): two pairs of one group never share a batch."""
    sources: tuple[tuple[str, str], ...]
    """Where both texts came from: (node key or profile entry, field)."""
    negative: str | None = None
    negative_source: tuple[str, str] | None = field(default=None)

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "query": self.query,
            "name": self.name,
            "sources": [list(s) for s in self.sources],
        }
        if self.negative is not None and self.negative_source is not None:
            out["negative"] = self.negative
            out["negative_source"] = list(self.negative_source)
        return out


def _texts(value: Any) -> list[str]:
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    return [" ".join(str(v).split()) for v in items if v is not None and str(v).strip()]


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > _SHORT_WORD}


def _humanise(name: str) -> str:
    """``directed_by`` / ``hasPart`` -> ``directed by`` / ``has part``: the words a relation name is made of."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return " ".join(re.sub(r"[_\-.:/]+", " ", spaced).lower().split())


def _node_pairs(skb: SKB, kinds: set[str]) -> list[Pair]:
    from graphs.index.phrases import definition_sentences
    from graphs.skb.profile import profile_for

    definition_fields = list(profile_for(skb).linking.definition_fields)
    out: list[Pair] = []
    for node in skb.nodes.values():
        name = " ".join(node.name.split())
        if not name:
            continue
        ntype = skb.node_types.get(node.label)
        name_field = node.name_field
        seen = {name.lower()}
        candidates: list[tuple[str, str, str]] = []  # (kind, text, field)
        if "synonym" in kinds and ntype is not None and ntype.synonym_field:
            candidates += [("synonym", t, ntype.synonym_field) for t in _texts(node.props.get(ntype.synonym_field))]
        if "definition" in kinds:
            for fld in definition_fields:
                for text in _texts(node.props.get(fld)):
                    candidates += [("definition", s, fld) for s in definition_sentences(text, MAX_DEFINITION_SENTENCES)]
        for kind, text, fld in candidates:
            if len(text) < MIN_CHARS or text.lower() in seen:
                continue
            seen.add(text.lower())
            out.append(Pair(text, name, kind, node.key, ((node.key, fld), (node.key, name_field))))
    return out


def _profile_pairs(skb: SKB, kinds: set[str]) -> list[Pair]:
    """Relation names against their descriptions, aliases and templates (the other end as its label's word),
    and label names against their words and description: what the profile says each name means."""
    from graphs.skb.profile import profile_for

    profile = profile_for(skb)
    out: list[Pair] = []

    def word(label: str) -> str:
        spec = profile.labels.get(label)
        return spec.words[0] if spec is not None and spec.words else _humanise(label)

    if "relation" in kinds:
        for rel, spec in sorted(profile.relations.items()):
            name = _humanise(rel)
            entry = f"relation:{rel}"
            texts: list[tuple[str, str]] = [(a, "aliases") for a in spec.aliases]
            if spec.description:
                texts.append((spec.description, "description"))
            if spec.forward:
                texts.append((spec.forward.replace("{x}", word(spec.tail_label)), "forward"))
            if spec.inverse:
                texts.append((spec.inverse.replace("{x}", word(spec.head_label)), "inverse"))
            seen = {name}
            ends = (word(spec.head_label), word(spec.tail_label), _humanise(spec.head_label), _humanise(spec.tail_label))
            for text, fld in texts:
                text = " ".join(text.split())
                if len(text) >= MIN_CHARS and text.lower() not in seen and not restates(text, name, ends):
                    seen.add(text.lower())
                    out.append(Pair(text, name, "relation", entry, ((entry, fld), (entry, "name"))))
    if "label" in kinds:
        for label, lspec in sorted(profile.labels.items()):
            name = _humanise(label)
            entry = f"label:{label}"
            texts = [(w, "words") for w in lspec.words]
            if lspec.description:
                texts.append((lspec.description, "description"))
            seen = {name}
            for text, fld in texts:
                text = " ".join(text.split())
                if len(text) >= MIN_CHARS and text.lower() not in seen and not restates(text, name, ()):
                    seen.add(text.lower())
                    out.append(Pair(text, name, "label", entry, ((entry, fld), (entry, "name"))))
    return out


def restates(text: str, name: str, ends: Iterable[str]) -> bool:
    """Whether ``text`` says nothing that ``name`` does not: each of its content words is, by its root, a word
    of the name or of the labels at the relation's ends (what a template's ``{x}`` becomes).

    Why: a profile written from the names alone ("directed" and "the genre of genre" for ``has_genre``, or
    the templates read from bare relation names) gives pairs that only tell the encoder a name is near its
    own words; tuned on nothing else, it moved unrelated names together (MetaQA with Wikidata-style relation
    names and no profile: Hit@1 0.89 / 0.84 / 0.65 by hop fell to 0.77 / 0.73 / 0.59). A word the name lacks
    ("filmmaker", "sells") is what a pair can teach."""
    from graphs.skb.language import content_words, root, singular, words_of

    def forms(word: str) -> set[str]:  # a noun that is also a verb keeps its own root (*numbers*): add the singular
        return {word, root(word), singular(word)}

    known = set().union(*(forms(w) for w in content_words(words_of(" ".join([name, *ends])))))
    return all(forms(w) & known for w in content_words(words_of(text)))


class _Negatives:
    """Confusable names for a node: its siblings in a same-label hierarchy, else same-label nodes sharing a word."""

    def __init__(self, skb: SKB, keys: Iterable[str]) -> None:
        self.skb = skb
        wanted = set(keys)
        self.parents: dict[str, list[str]] = defaultdict(list)
        self.children: dict[str, list[str]] = defaultdict(list)
        for key in wanted:
            node = skb.nodes[key]
            for edge in skb.out_edges(key):
                other = skb.nodes.get(edge.dst)
                if other is not None and other.label == node.label and edge.dst != key:
                    self.parents[key].append(edge.dst)
        for child, parents in self.parents.items():
            for parent in parents:
                self.children[parent].append(child)
        self.by_word: dict[tuple[str, str], list[str]] = defaultdict(list)
        for key in sorted(wanted):
            node = skb.nodes[key]
            for w in sorted(_words(node.name)):
                self.by_word[(node.label, w)].append(key)

    def pick(self, key: str, rng: random.Random) -> tuple[str, str] | None:
        """(negative key, how it was found) or None."""
        siblings = sorted({c for p in self.parents.get(key, ()) for c in self.children.get(p, ()) if c != key})
        if siblings:
            return rng.choice(siblings), "sibling"
        node = self.skb.nodes[key]
        # the rarest shared word makes the closest confusable; ties by the word itself (deterministic)
        options = sorted(
            (len(self.by_word[(node.label, w)]), w) for w in _words(node.name) if len(self.by_word[(node.label, w)]) > 1
        )
        for _, w in options:
            others = [k for k in self.by_word[(node.label, w)] if k != key]
            if others:
                return rng.choice(others), "shared word"
        return None


def mine_pairs(
    skb: SKB,
    *,
    kinds: Iterable[str] = PAIR_KINDS,
    hard_negatives: bool = True,
    seed: int = 0,
) -> list[Pair]:
    """Every pair of the selected kinds, in a deterministic order, with a hard negative each where one exists.

    Raises ``ConfigError`` when the graph provides no pair (no synonyms, definitions or profile texts):
    there is nothing to tune on, and the caller should say so rather than train on nothing.
    """
    from graphs.errors import ConfigError

    selected = set(kinds)
    unknown = selected - set(PAIR_KINDS)
    if unknown:
        raise ConfigError(f"unknown pair kinds {sorted(unknown)} -- use some of {', '.join(PAIR_KINDS)}")
    pairs = _node_pairs(skb, selected) + _profile_pairs(skb, selected)
    if not pairs:
        raise ConfigError(
            "the graph provides no training pairs for the encoder: no node type declares a synonym field, the "
            "profile names no definition fields, and no relation description, alias or label word says more than "
            "the names themselves -- add them to the profile, or index without encoder tuning"
        )
    if not hard_negatives:
        return pairs
    rng = random.Random(seed)
    negatives = _Negatives(skb, sorted({p.group for p in pairs if p.group in skb.nodes}))
    out: list[Pair] = []
    for pair in pairs:
        if pair.group in skb.nodes:
            found = negatives.pick(pair.group, rng)
            if found is not None:
                neg_key = found[0]
                neg_node = skb.nodes[neg_key]
                out.append(
                    Pair(pair.query, pair.name, pair.kind, pair.group, pair.sources,
                         " ".join(neg_node.name.split()), (neg_key, neg_node.name_field))
                )
                continue
        out.append(pair)
    return out
