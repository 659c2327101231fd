"""Domain profiles: what generic code must know about one dataset, as a validated data file.

Why a file and not code: a triples file says nothing about node types, the words people use
for its relations, or which constants the scorers should use. Everything dataset-specific the
loader, the linker, the planners and the scorers need lives in a profile (TOML, read with the
standard library's ``tomllib``, or JSON), validated by :class:`Profile`; a bad profile is refused
with a message naming the field. Profiles for the shipped datasets live next to this module
(``metaqa.toml``, ``hpo.toml``) and are found by the SKB's name, so an index built before
profiles existed still gets its dataset's knobs.

Format (all sections optional except what a triples file needs: ``relations`` with signatures)::

    name = "metaqa"
    default_label = "Entity"            # label of a name no signature decides
    label_precedence = ["Movie", ...]   # a name in several roles takes the earliest label
    literal_labels = ["Year", ...]      # labels of literal-like values (short text, no description)

    [labels.Movie]
    description = "a film"
    words = ["movie", "film"]           # words that ask for this label

    [relations.directed_by]
    signature = "Movie -> Person"
    description = "the person who directed a movie"
    forward = "the director of {x}"     # noun phrase of the tail, given the head {x}
    inverse = "the movies directed by {x}"   # noun phrase of the head, given the tail {x}
    aliases = ["directed", "director"]

    [[exemplars]]                        # at most 50
    question = "who directed [X]"
    path = [">directed_by"]              # ">rel": along the arrow, "<rel": against it

    [linking]
    frame_words = ["patient", ...]       # extra question-frame words (never linked)
    vocabulary_labels = ["Term"]         # labels questions name or describe (phrase index, clause linking)
    definition_fields = ["definition"]   # their definition properties

    [scoring]
    edge_weight_property = "freq"        # numeric edge property in [0, 1] weighting annotations
    frequency_mix = 0.1
    size_penalty = 0.5
    symmetric = 0.0                      # weight of the target->query best-match mean
    partial_credit_power = 1.0           # credit through a broader shared term: IC(q) * (IC(c)/IC(q)) ** power

    [planner]
    relation_paths = true                # predict multi-hop relation paths from the wording
    max_hops = 3
    default_answer_label = "Movie"       # the answer type when a question names none
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from graphs.errors import LoaderError
from graphs.skb.names import NAME_FIX, name_problem

if TYPE_CHECKING:
    from graphs.skb.model import SKB

#: Few-shot exemplars per profile: more would cost prompt tokens without adding path types.
MAX_EXEMPLARS = 50
_SIGNATURE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*->\s*([A-Za-z_][A-Za-z0-9_]*)\s*$")
_STEP = re.compile(r"^([<>])([A-Za-z_][A-Za-z0-9_.:-]*)$")


class _BadName(ValueError):
    """A label or relation name no store can hold; carries the name so the file's line can be found."""

    def __init__(self, what: str, name: str, problem: str) -> None:
        super().__init__(f"{what} {name!r} {problem}; {NAME_FIX}")
        self.name = name


def _check_names(names: Any, what: str) -> Any:
    for name in names if isinstance(names, list | dict) else [names]:
        if isinstance(name, str):
            problem = name_problem(name)
            if problem:
                raise _BadName(what, name, problem)
    return names


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LabelSpec(_Strict):
    description: str = ""
    words: list[str] = Field(default_factory=list)


class RelationSpec(_Strict):
    signature: str
    description: str = ""
    forward: str = ""
    inverse: str = ""
    aliases: list[str] = Field(default_factory=list)

    @field_validator("signature")
    @classmethod
    def _sig(cls, value: str) -> str:
        if not _SIGNATURE.match(value):
            raise ValueError(f"{value!r} is not 'HeadLabel -> TailLabel'")
        return value

    @field_validator("forward", "inverse")
    @classmethod
    def _template(cls, value: str) -> str:
        if value and "{x}" not in value:
            raise ValueError(f"{value!r} must contain {{x}} where the other end goes")
        return value

    @property
    def head_label(self) -> str:
        m = _SIGNATURE.match(self.signature)
        assert m is not None
        return m.group(1)

    @property
    def tail_label(self) -> str:
        m = _SIGNATURE.match(self.signature)
        assert m is not None
        return m.group(2)


class Exemplar(_Strict):
    question: str = Field(min_length=3)
    path: list[str] = Field(min_length=1, max_length=4)

    @field_validator("path")
    @classmethod
    def _steps(cls, value: list[str]) -> list[str]:
        for step in value:
            if not _STEP.match(step):
                raise ValueError(f"step {step!r} must be '>relation' (along the arrow) or '<relation' (against it)")
        return value

    def steps(self) -> list[tuple[str, Literal["out", "in"]]]:
        return [(s[1:], "out" if s[0] == ">" else "in") for s in self.path]


class LinkingSpec(_Strict):
    frame_words: list[str] = Field(default_factory=list)
    vocabulary_labels: list[str] = Field(default_factory=list)
    """Labels whose nodes questions name *or describe* (HPO: phenotypes). Their names, synonyms and
    definition sentences get one vector each at index time (``graphs.index.phrases``), and question
    clauses are linked against them with several weighted candidates (``agent.linking.clauses``)."""
    definition_fields: list[str] = Field(default_factory=list)
    """Node properties holding a definition of a vocabulary node (embedded sentence by sentence)."""


class ScoringSpec(_Strict):
    edge_weight_property: str | None = None
    frequency_mix: float = Field(default=0.1, ge=0.0, le=1.0)
    size_penalty: float = Field(default=0.5, ge=0.0)
    direct_weight: float = Field(default=0.01, ge=0.0)
    """Weight of a target's own annotations when a finer-annotated intermediate also scores it (a gene
    through its diseases): the intermediate's best score leads, the direct score is added times this."""
    intermediate_temperature: float = Field(default=0.0, ge=0.0)
    """Soft maximum over a target's intermediates (a gene's diseases): 0 takes the best one; T > 0
    adds ``T * log(sum exp((s_i - best) / T))``, so several good intermediates count (see rank_targets)."""
    symmetric: float = Field(default=0.0, ge=0.0)
    """Weight of the target->query match (mean over a target's annotations of their best match in the
    query, times the query size): rewards targets whose own annotations the question explains."""
    partial_credit_power: float = Field(default=1.0, ge=1.0, le=10.0)
    """How steeply a query term's credit falls when a target matches it only through a broader term:
    ``IC(q) * (IC(shared) / IC(q)) ** power`` (``agent.scoring.ontology.match_value``); 1 is Resnik."""


class PlannerSpec(_Strict):
    """Relation-path planning (agent.planning.paths): whether to use it and how to weigh its evidence."""

    relation_paths: bool = False
    max_hops: int = Field(default=3, ge=1, le=3)
    render_weight: float = Field(default=1.0, ge=0.0)
    exemplar_weight: float = Field(default=1.0, ge=0.0)
    words_weight: float = Field(default=1.0, ge=0.0)
    extra_relation_penalty: float = Field(default=0.5, ge=0.0)
    answer_weight: float = Field(default=0.5, ge=0.0)
    order_weight: float = Field(default=0.3, ge=0.0)
    unnamed_hop_penalty: float = Field(default=0.0, ge=0.0)
    """Cost per hop beyond the first when the question names no relation at all: such a question is
    read as one hop, not as a detour the meaning score happened to prefer (induced profiles turn it on)."""
    pivot_weight: float = Field(default=0.0, ge=0.0)
    """Bonus of a there-and-back pair of hops (">r <r") when the question has a pivot word ("share",
    "same", "also", "co-"): with no label words to say the answer comes back to the topic's type, the
    pivot word is the only evidence for the return hop (induced profiles turn it on)."""
    embed_margin: float = Field(default=0.5, ge=0.0)
    """Wording-score lead over the runner-up above which the question is not embedded."""
    paths_walked: int = Field(default=2, ge=1, le=5)
    default_answer_label: str | None = None
    """The answer type assumed when a question names none ("my son has A and B -- what could he have?"),
    if the SKB has that label; None: such questions go to semantic search over every label."""


class Profile(_Strict):
    """A dataset's domain knowledge; see the module docstring for the file format."""

    name: str = "custom"
    description: str = ""
    default_label: str = "Entity"
    label_precedence: list[str] = Field(default_factory=list)
    literal_labels: list[str] = Field(default_factory=list)
    labels: dict[str, LabelSpec] = Field(default_factory=dict)
    relations: dict[str, RelationSpec] = Field(default_factory=dict)
    exemplars: list[Exemplar] = Field(default_factory=list, max_length=MAX_EXEMPLARS)
    linking: LinkingSpec = Field(default_factory=LinkingSpec)
    scoring: ScoringSpec = Field(default_factory=ScoringSpec)
    planner: PlannerSpec = Field(default_factory=PlannerSpec)
    induced: list[str] = Field(default_factory=list)
    """Fields filled from the data rather than written by the user (``graphs.skb.induce``), as dotted
    paths (``relations.directed_by``, ``labels.Year.words``, ``planner.relation_paths``)."""

    @field_validator("default_label", "label_precedence", "literal_labels", "labels")
    @classmethod
    def _label_names(cls, value: Any) -> Any:
        return _check_names(value, "label")

    @field_validator("relations")
    @classmethod
    def _relation_names(cls, value: Any) -> Any:
        return _check_names(value, "relation")

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        for i, ex in enumerate(self.exemplars):
            for rel, _ in ex.steps():
                if self.relations and rel not in self.relations:
                    raise ValueError(
                        f"exemplars[{i}].path names relation {rel!r}, which is not in [relations] "
                        f"({', '.join(sorted(self.relations))})"
                    )
        return self

    def precedence(self, label: str) -> int:
        """Rank of a label when one name plays several roles (lower wins)."""
        return self.precedences([label])[label]

    def precedences(self, labels: Iterable[str]) -> dict[str, int]:
        """``precedence`` of each label, the lists read once (a graph with thousands of labels made one
        lookup per label quadratic)."""
        order = self.label_precedence or []
        first: dict[str, int] = {}
        for i, lab in enumerate(order):
            first.setdefault(lab, i)
        literal: dict[str, int] = {}
        for i, lab in enumerate(self.literal_labels):
            literal.setdefault(lab, len(order) + 1 + i)
        return {lab: first.get(lab, literal.get(lab, len(order))) for lab in labels}


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(top level)"
    return f"field {where}: {err['msg']}"


def _line_of(text: str | None, exc: ValidationError) -> str | None:
    """``line N`` of the profile file where the first error's bad name (or its field) is written."""
    if not text:
        return None
    err = exc.errors()[0]
    cause = (err.get("ctx") or {}).get("error")
    needles: list[str] = []
    if isinstance(cause, _BadName):
        needles += [cause.name, json.dumps(cause.name)[1:-1], cause.name.encode("unicode_escape").decode("ascii")]
    needles += [str(p) for p in reversed(err["loc"]) if isinstance(p, str)]
    lines = text.splitlines()
    for needle in needles:
        for lineno, line in enumerate(lines, 1):
            if needle and needle in line:
                return f"line {lineno}"
    return None


def parse_profile(data: Any, source: str = "<profile>", text: str | None = None) -> Profile:
    """Validate profile data; the error names the first bad field (and its line, given the file's ``text``)."""
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        bad_name = isinstance((exc.errors()[0].get("ctx") or {}).get("error"), _BadName)
        raise LoaderError(
            source,
            f"invalid profile: {_first_error(exc)}",
            record=_line_of(text, exc),
            fix=NAME_FIX if bad_name else "see the profile format in graphs/skb/profile.py (e.g. metaqa.toml)",
        ) from exc


def load_profile(path: Path) -> Profile:
    """Read a profile from a ``.toml`` or ``.json`` file."""
    path = Path(path)
    src = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LoaderError(src, f"cannot read the profile ({exc})", fix="pass an existing .toml or .json file") from exc
    try:
        if path.suffix == ".json":
            data = json.loads(raw)
        else:
            data = tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise LoaderError(src, f"the profile is not valid {path.suffix.lstrip('.') or 'TOML'} ({exc})",
                          fix="fix the syntax at the position named") from exc
    return parse_profile(data, src, raw.decode("utf-8", "replace"))


def packaged_profile(name: str) -> Profile | None:
    """The profile shipped for dataset ``name`` (``graphs/loaders/profiles/<name>.toml``), if any."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name or ""):
        return None
    res = resources.files("graphs.skb").joinpath(f"profiles/{name}.toml")
    if not res.is_file():
        return None
    data = tomllib.loads(res.read_text(encoding="utf-8"))
    return parse_profile(data, f"graphs/loaders/profiles/{name}.toml")


_DEFAULT = Profile()


def is_default(profile: Profile) -> bool:
    """True for the built-in defaults (nothing to persist with an index)."""
    return profile is _DEFAULT


def profile_for(skb: SKB) -> Profile:
    """The SKB's profile: the one it was loaded with, else the packaged one of its name, else defaults."""
    own = getattr(skb, "profile", None)
    if isinstance(own, Profile):
        return own
    if isinstance(own, dict):
        prof = parse_profile(own, f"profile of SKB {skb.name!r}")
        skb.profile = prof
        return prof
    found = packaged_profile(skb.name)
    prof = found if found is not None else _DEFAULT
    skb.profile = prof  # cached: the lookup reads a file
    return prof
