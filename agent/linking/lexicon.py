"""The linker's vocabulary: question and name normalisation, frame words, and the name lexicon.

Why a module of its own: the lexicon is computed at index time (``agent.linking.stored``) and read by
the linker at query time; both need these functions, and neither should need the other.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import defaultdict
from dataclasses import dataclass

from graphs.skb.model import SKB
from graphs.skb.profile import profile_for

# -- normalisation ---------------------------------------------------------------------

_TOKEN = re.compile(r"[a-z0-9]+")
_BRACKET = re.compile(r"\[([^\[\]]{1,300})\]")
_ACRONYM = re.compile(r"^[A-Z0-9][A-Z0-9-]{0,9}$")

#: Words that frame a question rather than name an entity (any domain). Label names of the
#: schema and their plurals are added per SKB, and so are the domain profile's ``linking.frame_words``
#: (e.g. the clinical frame "patient", "proband", "newborn" lives in the HPO profile).
FRAME_WORDS = frozenset(
    """
    a an the of in on at by for to from with without and or nor but not no is are was were be been being
    has have had having do does did can could would should may might must will shall which what who whom
    whose where when why how that this these those there their its his her our your my me we you they he
    she it i am most more less least likely likeliest probable probably possible possibly best one ones any
    some all each every other such same also only very well just about into onto than then as so if
    find identify name list show give tell suggest explain explains explained cause causes caused causing
    drug drugs medication medications medicine medicines treatment treatments product products item items
    paper papers article articles publication publications
    following combination together plus along alongside both either
    """.split()  # noqa: SIM905 - a word list reads better as text
)

#: Conjunctions and separators that split a leftover span into independent mentions.
_SPLIT_WORDS = frozenset({"and", "or", "with", "plus", "as", "well", "also", "including", "but", "without"})


def _fold(text: str) -> str:
    if not text.isascii():  # ASCII has nothing to decompose or strip (most names: a per-character pass saved)
        text = unicodedata.normalize("NFKD", text)
        text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return text.lower().replace("'s ", " ").replace("\u2019s ", " ")


def stem(token: str) -> str:
    """A light plural/inflection stem, applied identically to the lexicon and the question."""
    if len(token) <= 3 or token.isdigit():
        return token
    if token.endswith("ies") and len(token) > 4:
        return token[:-3] + "y"
    if token.endswith(("sses", "shes", "ches", "xes", "zes")):
        return token[:-2]
    if token.endswith("s") and not token.endswith(("ss", "us", "is", "ys")):
        return token[:-1]
    return token


def normalise(text: str) -> list[str]:
    """Lower-case, strip accents and punctuation, split on non-alphanumerics, stem."""
    return [stem(t) for t in _TOKEN.findall(_fold(text + " "))]


@dataclass(frozen=True)
class _Token:
    norm: str
    raw: str
    start: int
    end: int
    boundary_before: bool  # a comma/semicolon/sentence break precedes this token


def _abbrev(tokens: list[_Token], nxt: str) -> bool:
    """Whether a ". " after the last token is an initial or short title inside a name, not a sentence end.

    Why: without brackets, "written by John N. Smith" or "Looking for Mr. Goodbar" must stay one span.
    """
    if not tokens or not nxt[:1].isupper():
        return False
    prev = tokens[-1].raw
    return prev[:1].isupper() and len(prev) <= 3


@functools.lru_cache(maxsize=1 << 16)
def _normalise_word(raw: str) -> tuple[str, ...]:
    """``normalise`` of one question word, cached: questions repeat their vocabulary, and long described
    questions spent a third of their tokenising time folding and stemming the same words."""
    return tuple(normalise(raw))


_WORD = re.compile(r"[A-Za-z0-9\u00C0-\u024F]+(?:'s)?")
_GAP_BREAK = re.compile(r"[,;?!]")
_GAP_SENTENCE = re.compile(r"\.\s")


def _tokenise(question: str) -> list[_Token]:
    tokens: list[_Token] = []
    last_end = 0
    for m in _WORD.finditer(question):
        raw = m.group(0)
        raw = raw.removesuffix("'s")
        gap = question[last_end : m.start()]
        boundary = bool(_GAP_BREAK.search(gap) or (_GAP_SENTENCE.search(gap) and not _abbrev(tokens, raw))) or not tokens
        for norm in _normalise_word(raw) or ("",):
            if norm:
                tokens.append(_Token(norm, raw, m.start(), m.start() + len(raw), boundary))
                boundary = False
        last_end = m.end()
    return tokens


# -- lexicon ---------------------------------------------------------------------------


@dataclass
class _Entry:
    key: str
    primary: bool
    case_sensitive: str | None  # original surface form when the name is a code/acronym


@dataclass
class Lexicon:
    """Normalised name/synonym token tuples -> nodes, plus an inverted index for fuzzy lookups."""

    table: dict[tuple[str, ...], list[_Entry]]
    max_len: int
    by_token: dict[str, list[tuple[str, ...]]]
    token_df: dict[str, int]
    vocab_by_prefix: dict[str, list[str]]
    frame: frozenset[str]


def _label_words(label: str) -> set[str]:
    words = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", label)
    out = set()
    for w in words + [label]:
        w = w.lower()
        out.add(w)
        out.add(stem(w))
        out.add(w + "s")
    return out


def frame_words(skb: SKB) -> frozenset[str]:
    """Words that frame a question on ``skb``: the generic ones, the profile's, the schema's label names
    (each also stemmed, as question tokens are)."""
    frame = set(FRAME_WORDS) | {w.lower() for w in profile_for(skb).linking.frame_words}
    for label in skb.node_types:
        frame |= _label_words(label)
    return frozenset({stem(w) for w in frame} | frame)


def build_lexicon(skb: SKB) -> Lexicon:
    table: dict[tuple[str, ...], list[_Entry]] = defaultdict(list)
    frame = frame_words(skb)
    for node in skb.nodes.values():
        ntype = skb.node_types.get(node.label)
        names: list[tuple[str, bool]] = [(node.name, True)]
        syn_field = ntype.synonym_field if ntype is not None else None
        if syn_field:
            syn = node.props.get(syn_field) or []
            names.extend((str(s), False) for s in (syn if isinstance(syn, list) else [syn]))
        seen: set[tuple[str, ...]] = set()
        for name, primary in names:
            toks = tuple(normalise(name))
            if not toks or toks in seen:
                continue
            if all(t in frame for t in toks):
                continue  # a node named "Disease" must not swallow the question frame
            seen.add(toks)
            cs = name.strip() if _ACRONYM.match(name.strip()) and any(c.isalpha() for c in name) else None
            table[toks].append(_Entry(node.key, primary, cs))
    by_token: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for toks in table:
        for t in dict.fromkeys(toks):  # not a set: the stored vocabulary's order must not change with the hash seed
            by_token[t].append(toks)
    token_df = {t: len(v) for t, v in by_token.items()}
    vocab_by_prefix: dict[str, list[str]] = defaultdict(list)
    for t in by_token:
        if len(t) >= 4 and not t.isdigit():
            vocab_by_prefix[t[:2]].append(t)
    return Lexicon(
        table=dict(table),
        max_len=min(16, max((len(k) for k in table), default=1)),
        by_token=dict(by_token),
        token_df=token_df,
        vocab_by_prefix=dict(vocab_by_prefix),
        frame=frame,
    )
