"""Words of the question language (English): function words, relation-name splitting, word roots.

Why here: a profile written by hand says which words name a relation ("directed", "director"); a graph
that comes with no profile has only its relation names (``directed_by``, ``film.film.directed_by``,
``hasDirector``, ``DIRECTED``, ``cast member``). Reading those names needs three language-level tools and
nothing about any domain: splitting a name in any common style into words, knowing which words are
function words, and reducing inflected and derived forms to one root so that *directs*, *directed*,
*directing* and *director* meet (``root``). The morphology comes from ``lemminflect`` (its lexicon ships in
the wheel, read through a mapped table: ``graphs.skb.lemmas``); the agent-noun rule (*director* -> *direct*, *writer* -> *write*) is the only rule added here.
"""

from __future__ import annotations

import functools
import re

from graphs.skb.lemmas import lemmas_of

#: English function words: articles, prepositions, conjunctions, auxiliaries, pronouns, question words.
#: A relation name made of them ("has", "is_in") names nothing; they never count as relation words.
FUNCTION_WORDS = frozenset(
    """
    a an the of in on at by for to from with without into onto over under about as than via per
    and or nor but not no yes if then so
    is are was were be been being am has have had having do does did done can could would should may might
    must will shall get gets got
    which what who whom whose where when why how that this these those there here it its they them their
    he him his she her we us our you your i me my one ones
    some any all each every other another such same also only very just more most less least
    """.split()  # noqa: SIM905 - a word list reads better as text
)

#: Question words: they introduce the asked-for thing.
QUESTION_WORDS = frozenset({"which", "what", "who", "whom", "whose", "when", "where", "how"})
#: Nouns that ask for a node's class rather than naming a relation ("what *kind* of film", "which *types* of
#: product"): English words for "category", not domain words. The path planner reads them as a mention of
#: the relation that classifies the asked node (``agent.planning.paths.classifier_relations``).
CATEGORY_WORDS = frozenset({"kind", "type", "sort", "category", "class", "variety"})

#: Nouns for a point in time ("in which *year*", "what *date*"): asked right after a question word they ask, like
#: "when", for the labels whose nodes are years or dates (``agent.planning.paths.temporal_labels``).
TIME_WORDS = frozenset({"year", "date", "day", "month", "decade", "century"})

_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_WORD = re.compile(r"[a-z0-9]+")


def name_segments(name: str) -> list[str]:
    """The segments of a dotted or slashed relation name, last one last (``film.film.directed_by``)."""
    parts = [p for p in re.split(r"[./#:]", name) if p.strip()]
    return parts or [name]


def split_name(name: str) -> list[str]:
    """Lower-case words of one name segment in any style: ``snake_case``, ``camelCase``, ``UPPER_CASE``,
    ``kebab-case``, spaces. ``hasDirector`` -> [has, director]; ``IS_A`` -> [is, a]."""
    words: list[str] = []
    for chunk in re.split(r"[\s_\-]+", name.strip()):
        if not chunk:
            continue
        found = _CAMEL.findall(chunk) if not chunk.isupper() else [chunk]
        words.extend(w.lower() for w in found if w)
    return words


def relation_words(rel: str) -> list[str]:
    """The words of a relation's own name: its last segment, split (``film.film.directed_by`` -> directed, by)."""
    return split_name(name_segments(rel)[-1])


def content_words(words: list[str]) -> list[str]:
    """``words`` without function words and one-letter tokens."""
    return [w for w in words if w not in FUNCTION_WORDS and len(w) > 1]


def words_of(text: str) -> list[str]:
    """Lower-case alphanumeric words of a text."""
    return _WORD.findall(text.lower())


@functools.lru_cache(maxsize=1 << 16)
def root(word: str) -> str:
    """One root for the inflected and derived forms of a word: a verb's lemma first (*directed*, *directing*
    -> direct; *wrote*, *written* -> write), an agent noun's verb (*director* -> direct, *writer* -> write,
    *actors* -> act), else a noun's singular (*genres* -> genre), else the word itself."""
    w = word.lower()
    if len(w) <= 2 or not w.isalpha():
        return w
    lemmas = lemmas_of(w)
    if w in lemmas.get("VERB", ()) and "NOUN" in lemmas:
        return w  # a verb in its own right (*number*, *corner*, *order*) is not an agent noun (*numb-er*)
    noun = str((lemmas.get("NOUN") or (w,))[0])
    verb = _agent_verb(noun)
    if verb is not None:
        return verb
    if "VERB" in lemmas:
        return str(lemmas["VERB"][0])
    # a compound agent noun names its head's verb (*screenwriter* -> writer -> write)
    for cut in range(3, len(noun) - 4):
        verb = _agent_verb(noun[cut:])
        if verb is not None:
            return verb
    if "NOUN" in lemmas:
        return str(noun)
    for tag in ("ADJ", "ADV", "AUX"):
        if tag in lemmas:
            return str(lemmas[tag][0])
    return w


def _agent_verb(noun: str) -> str | None:
    """The verb an agent noun is made from (*director* -> direct, *writer* -> write), else None."""
    for suffix in ("or", "er"):
        stem = noun[: -len(suffix)]
        if noun.endswith(suffix) and len(stem) > 2:
            for verb in (stem, stem + "e"):
                if lemmas_of(verb).get("VERB", ("",))[0] == verb:
                    return verb
    return None


@functools.lru_cache(maxsize=1 << 16)
def singular(word: str) -> str:
    """A noun's singular (*genres* -> genre, *votes* -> vote); other words unchanged.

    Remembered, like ``root``: a question's words are looked up several times per question, and the words of
    questions recur."""
    nouns = lemmas_of(word.lower()).get("NOUN")
    return str(nouns[0]) if nouns else word.lower()
