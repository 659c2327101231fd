"""Profile induction: what a graph's own data says about its types and relation words.

Why: a user brings triples or JSON lines with relation names (``directed_by``, ``film.film.directed_by``,
``hasDirector``, ``cast member``) and nothing else. Without a profile every node had one label and the
planner had no words for any relation, so relational questions got nothing. Everything a hand-written
profile says about relations can be read, less richly but without help, from the data:

- **node types**: each relation gives two *roles* (its heads, its tails); roles whose entity sets
  overlap (at least ``MERGE_SHARE`` of the smaller set, ``MERGE_MIN`` names) are one type, so the
  heads of ``directed_by`` and ``release_year`` are one type and the tails of ``directed_by`` and
  ``written_by`` another; a type whose values are mostly numbers is a literal type;
- **type names**: from the relation names around the type (the tail of ``release_year`` is a ``Year``,
  of ``starred_actors`` an ``Actor``; a dotted ``film.film.directed_by`` names its head ``Film``);
- **relation words and phrases**: the content words of each relation name (morphology is matched at
  query time through ``graphs.skb.language.root``) and forward / inverse noun phrases for the planner's
  meaning score.

A given profile always wins, field by field: ``merge`` keeps every field the user wrote and fills only
the others, recording each induced field in ``Profile.induced`` (``skb profile show`` marks them).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from operator import attrgetter

from graphs.skb.language import FUNCTION_WORDS, content_words, name_segments, relation_words, singular, split_name
from graphs.skb.model import SKB
from graphs.skb.profile import LabelSpec, PlannerSpec, Profile, RelationSpec

#: Two roles are one type when they share at least this share of the smaller role's names ...
MERGE_SHARE = 0.5
#: ... and at least this many names (three shared values between two small literal sets prove nothing).
MERGE_MIN = 5
#: A type whose values are numbers or dates this often is a literal type.
LITERAL_SHARE = 0.8
#: Prepositions that end a relation name read as "<verb> <preposition>" (``directed_by``, ``in_language``).
_PREPOSITIONS = frozenset({"by", "in", "of", "for", "from", "with", "to", "on", "at", "into", "as", "about"})
_NUMBER = re.compile(r"^[+-]?\d+([.,:/-]\d+)*$")
_LABEL_OK = re.compile(r"[^A-Za-z0-9_]")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Roles:
    """Union-find over relation roles (``(rel, "head")``, ``(rel, "tail")``)."""

    def __init__(self, roles: Sequence[tuple[str, str]]) -> None:
        self.parent = {r: r for r in roles}

    def find(self, r: tuple[str, str]) -> tuple[str, str]:
        while self.parent[r] != r:
            self.parent[r] = self.parent[self.parent[r]]
            r = self.parent[r]
        return r

    def union(self, a: tuple[str, str], b: tuple[str, str]) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _camel(words: Iterable[str]) -> str:
    name = "".join(w[:1].upper() + w[1:] for w in words if w)
    name = _LABEL_OK.sub("", name)
    return name if name and not name[0].isdigit() else f"T{name}"


def _role_name(rel: str, side: str) -> str | None:
    """A type name one role suggests: a tail is named by the relation's last content noun (``release_year``
    -> Year, ``starred_actors`` -> Actor) or, for "<verb> by" names, by the relation's words (DirectedBy);
    a head is named only by a dotted name's type segment (``film.film.directed_by`` -> Film)."""
    if side == "head":
        segments = name_segments(rel)
        return _camel(split_name(segments[-2])) if len(segments) >= 2 else None
    words = relation_words(rel)
    if "of" in words[1:]:  # "original language of film": the head noun comes before "of"
        words = words[: words.index("of", 1)]
    content = content_words(words)
    if not content:
        return None
    if words[-1] in _PREPOSITIONS or (words[-1] == content[-1] and _is_participle(content[-1])):
        return _camel(words)
    return _camel([singular(content[-1])])


def _is_participle(word: str) -> bool:
    return word.endswith(("ed", "en")) and len(word) > 4


def induce_types(triples: Sequence[tuple[str, str, str]]) -> tuple[dict[str, tuple[str, str]], list[str], list[str]]:
    """``(signatures, label_precedence, literal_labels)`` read from the triples alone.

    Roles merge by shared names (see module docstring); each type is named by its roles (the largest
    role's name first), a head type no relation name can name is ``Entity``. Types that head relations
    come first in the precedence, then the others by size, literal types last."""
    values: dict[tuple[str, str], set[str]] = defaultdict(set)
    for head, rel, tail in triples:
        values[(rel, "head")].add(head)
        values[(rel, "tail")].add(tail)
    roles = sorted(values)
    index = {r: i for i, r in enumerate(roles)}
    member: dict[str, list[int]] = defaultdict(list)
    for r in roles:
        for v in values[r]:
            member[v].append(index[r])
    shared: Counter[tuple[int, int]] = Counter()
    for idx in member.values():
        if len(idx) > 1:
            for i, a in enumerate(idx):
                for b in idx[i + 1 :]:
                    shared[(a, b)] += 1
    uf = _Roles(roles)
    for (a, b), n in shared.items():
        small = min(len(values[roles[a]]), len(values[roles[b]]))
        if n >= MERGE_MIN and n >= MERGE_SHARE * small:
            uf.union(roles[a], roles[b])
    clusters: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for r in roles:
        clusters[uf.find(r)].append(r)
    members_values = {r: set().union(*(values[m] for m in members)) for r, members in clusters.items()}
    heading_roles = {r for r, members in clusters.items() if any(side == "head" for _, side in members)}
    named: dict[tuple[str, str], str] = {}
    taken: set[str] = set()
    # per base name, the first suffix not yet known to be taken: names are only ever added to ``taken``,
    # so the search resumes there (thousands of roles sharing one base name made it quadratic)
    suffix: dict[str, int] = {}
    # bigger types choose their names first
    for root_role, members in sorted(clusters.items(), key=lambda kv: -len(members_values[kv[0]])):
        by_size = sorted(members, key=lambda m: (-len(values[m]), m))
        names = [n for n in (_role_name(rel, side) for rel, side in by_size) if n]
        name = next((n for n in names if n not in taken), None) or ("Entity" if root_role in heading_roles else "Value")
        base = name
        if name in taken:
            k = suffix.get(base, 2)
            while f"{base}{k}" in taken:
                k += 1
            name = f"{base}{k}"
            suffix[base] = k + 1
        taken.add(name)
        named[root_role] = name
    sigs = {rel: (named[uf.find((rel, "head"))], named[uf.find((rel, "tail"))]) for rel, _ in roles}
    size = {named[r]: len(vals) for r, vals in members_values.items()}
    numeric = {named[r]: sum(1 for v in vals if _NUMBER.match(v)) for r, vals in members_values.items()}
    heading = {named[r] for r in heading_roles}
    literal = sorted(n for n in size if n not in heading and numeric[n] >= LITERAL_SHARE * size[n])
    precedence = sorted((n for n in size if n not in literal), key=lambda n: (n not in heading, -size[n], n))
    return sigs, precedence, literal


def verbalise(rel: str) -> RelationSpec:
    """Words and noun phrases for one relation from its name alone (the signature is filled by the caller):
    aliases are its content words; ``forward`` names the tail given the head, ``inverse`` the head given
    the tail, in the form the name suggests ("has X" / "<verb> by" / plain noun)."""
    words = relation_words(rel) or [rel.lower()]
    content = content_words(words)
    phrase = " ".join(words)
    if words[0] in _PREPOSITIONS and len(words) > 1:  # in_language
        rest = " ".join(words[1:])
        forward, inverse = f"the {rest} of {{x}}", f"what is {phrase} {{x}}"
    elif words[0] in {"has", "have", "had"} and len(words) > 1:
        rest = " ".join(words[1:])
        forward, inverse = f"the {rest} of {{x}}", f"what has {rest} {{x}}"
    elif words[-1] in _PREPOSITIONS and len(words) > 1:
        forward, inverse = f"what {{x}} is {phrase}", f"what is {phrase} {{x}}"
    elif words[0] in {"is", "was", "are"}:
        forward, inverse = f"what {{x}} {phrase}", f"what {phrase} {{x}}"
    else:
        forward, inverse = f"the {phrase} of {{x}}", f"what has {phrase} {{x}}"
    return RelationSpec(signature="A -> B", aliases=list(dict.fromkeys(content)), forward=forward, inverse=inverse)


def label_words(label: str) -> list[str]:
    """Words that ask for a label: its name's words, singular and plural (``ReleaseYear`` -> release, year, years)."""
    from lemminflect import getAllLemmas, getInflection

    out: list[str] = []
    for w in split_name(label):
        if w in FUNCTION_WORDS or len(w) < 2 or w.isdigit():
            continue
        one = singular(w)
        if one != w:  # a plural already (``Votes``): its singular, not a plural of a plural
            out.extend([one, w])
            continue
        plural = getInflection(w, tag="NNS") if "NOUN" in getAllLemmas(w) else None
        out.extend([w, *(plural or [])])
    return list(dict.fromkeys(out))


def merge(given: Profile | None, triples: Sequence[tuple[str, str, str]] | None = None,
          schema: Iterable[tuple[str, str, str]] | None = None, *, relation_paths: bool = True) -> Profile:
    """``given`` with every field it leaves unwritten induced from the data; ``Profile.induced`` lists them.

    ``triples`` (a triples file) lets types be induced; ``schema`` (``(rel, head label, tail label)`` of a
    graph whose nodes are already labelled, or a ``Counter`` of them) gives the signatures instead: each relation's
    most frequent pattern, the first seen on a tie. ``relation_paths`` is the
    planner default when the profile does not set it (on for graphs of bare entities, the caller decides)."""
    base = given if given is not None else Profile()
    written = base.model_fields_set
    induced: list[str] = list(base.induced)
    data = base.model_dump(exclude={"induced"})
    if triples is not None:
        sigs, precedence, literal = induce_types(triples)
    else:
        patterns = schema if isinstance(schema, Counter) else Counter((rel, h, t) for rel, h, t in (schema or ()))
        sigs = {}
        for (rel, h, t), _ in patterns.most_common():
            sigs.setdefault(rel, (h, t))
        precedence, literal = [], []
    # a type the user named through a signature keeps the user's name
    rename: dict[str, str] = {}
    for rel, spec in base.relations.items():
        if rel in sigs:
            for induced_label, given_label in zip(sigs[rel], (spec.head_label, spec.tail_label), strict=True):
                rename.setdefault(induced_label, given_label)
    sigs = {rel: (rename.get(h, h), rename.get(t, t)) for rel, (h, t) in sigs.items()}
    precedence = list(dict.fromkeys(rename.get(n, n) for n in precedence))
    literal = list(dict.fromkeys(rename.get(n, n) for n in literal))
    relations = dict(data.get("relations") or {})
    for rel, (head, tail) in sorted(sigs.items()):
        if not (_IDENT.match(head) and _IDENT.match(tail)):
            continue  # a signature names labels as identifiers: the planner reads this one from the data instead
        given_rel = base.relations.get(rel)
        auto = verbalise(rel)
        if given_rel is None:
            relations[rel] = {**auto.model_dump(), "signature": f"{head} -> {tail}"}
            induced.append(f"relations.{rel}")
            continue
        own = dict(relations[rel])
        for field in ("aliases", "forward", "inverse"):
            if field not in given_rel.model_fields_set:
                own[field] = getattr(auto, field)
                induced.append(f"relations.{rel}.{field}")
        relations[rel] = own
    data["relations"] = relations
    for field, value in (("label_precedence", precedence), ("literal_labels", literal)):
        if field not in written and value:
            data[field] = value
            induced.append(field)
    if "default_label" not in written and precedence:
        data["default_label"] = precedence[0]
        induced.append("default_label")
    labels = dict(data.get("labels") or {})
    for label in sorted({lab for pair in sigs.values() for lab in pair}):
        spec_l = base.labels.get(label)
        if spec_l is None or "words" not in spec_l.model_fields_set:
            own_l = dict(labels.get(label) or LabelSpec().model_dump())
            own_l["words"] = label_words(label)
            labels[label] = own_l
            induced.append(f"labels.{label}.words")
    data["labels"] = labels
    planner = dict(data.get("planner") or PlannerSpec().model_dump())
    planner_written = base.planner.model_fields_set if "planner" in written else set()
    induced_words = any(f"relations.{rel}" in induced or f"relations.{rel}.aliases" in induced for rel in sigs)
    defaults: dict[str, bool | float] = {"relation_paths": relation_paths}
    if induced_words:
        # words read from names are thin evidence: weigh the meaning of every question (embed_margin high)
        # and let pivot words ask for the there-and-back hop no label word can ask for
        defaults.update({"embed_margin": 10.0, "pivot_weight": 0.3, "unnamed_hop_penalty": 0.3})
    for knob, setting in defaults.items():
        if knob not in planner_written:
            planner[knob] = setting
            induced.append(f"planner.{knob}")
    data["planner"] = planner
    data["induced"] = list(dict.fromkeys(induced))
    return Profile.model_validate(data)


#: A node property longer than this is text (a description), not a name or a value.
TEXT_CHARS = 40
#: Relation paths are planned by default when fewer nodes than this carry text: a graph of bare entities
#: is answered by walking it; one whose nodes describe themselves is answered by their text first.
BARE_SHARE = 0.1


def merge_for_skb(skb: SKB, given: Profile | None) -> Profile:
    """``merge`` for a graph whose nodes are labelled already (JSON lines): signatures from the label
    patterns of its edges; relation paths on when its nodes are bare entities (see ``BARE_SHARE``)."""
    nodes = skb.nodes
    label_of = {key: node.label for key, node in nodes.items()}
    edges = skb.edges
    # counted as they are read, in C, without a list of one tuple per edge (ten million edges: about 700 MB, and
    # 40 % more time); an end that is no node is None
    counted = Counter(zip(map(attrgetter("rel"), edges), map(label_of.get, map(attrgetter("src"), edges)),
                          map(label_of.get, map(attrgetter("dst"), edges)), strict=True))
    patterns: Counter[tuple[str, str, str]] = Counter(
        {(r, h, t): n for (r, h, t), n in counted.items() if h is not None and t is not None})  # first-seen order kept
    bar = BARE_SHARE * max(1, len(nodes))
    texty = 0
    for node in nodes.values():
        if any(isinstance(v, str) and len(v) > TEXT_CHARS for k, v in node.props.items() if k != "name"):
            texty += 1
            if texty >= bar:  # enough to know the nodes describe themselves
                break
    return merge(given, schema=patterns, relation_paths=texty < bar)
