"""Typed tool results: one pydantic model per result kind, read by every consumer.

Why typed: the agent graph, the offline planner, the trace viewer, the MCP server and the toolkit
all read tool results. With string-keyed dicts each of them guessed at the shape (and at whether a
query used explicit edges); with one model per kind they share one validated shape, one error
payload and one compact text form. A result has two faces:

* the *artifact* (the model instance, ``response_format="content_and_artifact"``) for code: complete,
  typed, lossless;
* the *model text* (``model_text(budget_tokens)``) for an LLM's context: compact lines, cut at a
  token budget with a note saying how much was left out and how to narrow the call.

Adding a tool means adding its result model here and a branch in ``RESULT_TYPES``; nothing else
needs to know the shape.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from graphs.errors import CypherValidationError
from graphs.store.cypher_guard import extract_refs
from graphs.text_safety import clean_text
from graphs.tokens import count_tokens, count_tokens_many, token_bound

#: Default token budget of one tool result's model-facing text (real tokens, ``graphs.tokens``).
DEFAULT_BUDGET_TOKENS = 1500
#: Characters per token of English prose: only to size string cuts (a name cut to so many characters),
#: never to count a budget (JSON and keys run at 2-3 characters per token).
CHARS_PER_TOKEN = 4
#: Most items measured per tokenizer batch while a result is fitted to its budget.
_FIT_BATCH = 32
#: Tokens per character of a result item's JSON before any is counted (keys, numbers and punctuation run
#: at 2-3 characters per token); only sizes the first batch, never decides what is kept.
_FIT_TOKENS_PER_CHAR = 0.4
#: Answer keys the finish text echoes back.
FINISH_ECHO = 20
#: Longest name or text fragment one line of model text shows.
LINE_TEXT_CHARS = 80


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` as the budgets count them: ``graphs.tokens.count_tokens`` (a real tokenizer)."""
    return count_tokens(text)


#: True where no model reads the tools' text (see ``unread_by_model``).
_UNREAD: ContextVar[bool] = ContextVar("skb_tool_text_unread", default=False)


@contextmanager
def unread_by_model(unread: bool = True) -> Iterator[None]:
    """Within it (in this context and the threads it is copied into), tool text is read by no model: budgets
    are held by ``graphs.tokens.token_bound``, which needs no tokenizer.

    Why: the offline planner reads a result's typed artifact, never its text; counting that text with a real
    tokenizer was about a tenth of an offline question's CPU. The text still fits its budget in real tokens
    (the bound is an upper bound); it may hold fewer items than a counted fit would."""
    token = _UNREAD.set(unread)
    try:
        yield
    finally:
        _UNREAD.reset(token)


def budget_measure(text: str) -> int:
    """What a budget holds ``text`` to: its real tokens, or where no model reads it, their upper bound."""
    return token_bound(text) if _UNREAD.get() else count_tokens(text)


def _bounds(texts: Sequence[str]) -> list[int]:
    return [token_bound(text) for text in texts]


def _cut(text: str, limit: int = LINE_TEXT_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _fit_json(
    head: dict[str, Any],
    field: str,
    items: Sequence[Any] | Iterable[Any],
    budget_tokens: int,
    narrow_hint: str,
    total: int | None = None,
) -> str:
    """Compact JSON of ``head`` with as many ``items`` under ``field`` as fit in the budget; when some are
    left out, ``omitted`` counts them and ``note`` says how to narrow the call.

    Why JSON: planners (and scripts) parse it without a bespoke grammar; compact separators and short
    item dicts keep it close to a table's size."""
    budget = max(1, budget_tokens)
    head = _shrink(head, budget * CHARS_PER_TOKEN // 8)
    count = total if total is not None else len(items)  # type: ignore[arg-type]
    empty = _compact({**head, field: []})  # ...,"<field>":[]}
    tail_text = _compact({"omitted": count, "note": f"token budget {budget_tokens}: {narrow_hint}"})
    # A result that fits by the tokenizer's cheap upper bound (``graphs.tokens.token_bound``) is whole: the
    # exact counts below would keep every item and pass the final check, so none is made.
    rendered: list[str] = []
    bound = token_bound(empty) + token_bound(tail_text) + 2
    source = iter(items)
    for item in source:
        rendered.append(_compact(item))
        bound += token_bound(rendered[-1]) + 1
        if bound > budget:
            break
    else:
        if len(rendered) >= count:
            return "".join([empty[:-2], ",".join(rendered), "]}"])
    measure, measure_many = (token_bound, _bounds) if _UNREAD.get() else (count_tokens, count_tokens_many)
    reserve = measure(tail_text) + 2
    used = measure(empty)
    kept: list[str] = []
    sizes: list[int] = []
    iterator = itertools.chain(rendered, (_compact(item) for item in source))
    full = False
    # Items are counted in batches sized to what is predicted to fit (from the tokens per character of the
    # items counted so far), not a fixed 32: the tokenizer's cost is per character, and a fixed batch
    # counted up to 31 items past the cut (twice the budget's text on a large result). Which items are
    # kept depends only on the exact counts, so the text is the same for any batch size.
    per_char, counted_chars, counted_tokens = _FIT_TOKENS_PER_CHAR, 0, 0
    while not full:
        room = budget - reserve - used
        chunk: list[str] = []
        predicted = 0.0
        for text in iterator:
            chunk.append(text)
            predicted += per_char * len(chunk[-1]) + 1
            if predicted > room or len(chunk) >= _FIT_BATCH:
                break
        if not chunk:
            break
        counts = measure_many(chunk)
        counted_chars += sum(map(len, chunk))
        counted_tokens += sum(counts)
        per_char = counted_tokens / max(1, counted_chars)
        for text, tokens in zip(chunk, counts, strict=True):
            if used + tokens + 1 > budget - reserve:
                full = True
                break
            kept.append(text)
            sizes.append(tokens)
            used += tokens + 1

    def render(kept: list[str]) -> str:
        # the items' JSON, measured above, is spliced in rather than encoded a second time
        parts = [empty[:-2], ",".join(kept), "]"]
        if len(kept) < count:
            tail = {"omitted": count - len(kept), "note": f"token budget {budget_tokens}: {narrow_hint}"}
            parts.append("," + _compact(tail)[1:-1])
        parts.append("}")
        return "".join(parts)

    text = render(kept)
    # the sum of the parts' counts is close, not exact, at the joins: the whole is checked once
    while kept and measure(text) > budget:
        kept.pop()
        text = render(kept)
    return text


def _shrink(value: Any, chars: int) -> Any:
    """``value`` with every string cut to ``chars`` and every list to 10 items (head fields are echoes of
    the input, e.g. unknown keys, which may be hostile and huge), so the JSON stays whole."""
    if isinstance(value, str):
        return _cut(value, max(8, chars))
    if isinstance(value, dict):
        return {k: _shrink(v, chars) for k, v in value.items()}
    if isinstance(value, list):
        return [_shrink(v, chars) for v in value[:10]]
    return value


class Evidence(NamedTuple):
    """One node a result supports as a candidate answer: how strongly, and from how many sources.

    A tuple, not a model: a result yields one per neighbour, hundreds per call, read once by the
    agent's pool merge (validated models cost more there than the merge itself)."""

    key: str
    label: str
    score: float
    support: int = 1


class ToolProvenance(BaseModel):
    """Which tool call, in which step, with which query produced a result (applies to every node it names)."""

    tool: str
    step: int = 0
    query: str = ""


class ToolErrorDetail(BaseModel):
    type: str
    message: str
    hint: str = ""


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provenance: ToolProvenance

    @property
    def is_error(self) -> bool:
        return False

    @property
    def explicit_edges(self) -> bool:
        """Whether the result came from following typed edges (SAGE skips expansion after those)."""
        return False

    def found_keys(self) -> list[str]:
        """Node keys this result names as findings (not the keys it was asked about), in result order."""
        return []

    def evidence(self, nodes: Mapping[str, Any]) -> list[Evidence]:
        """The candidate evidence this result adds to the agent's pool (``nodes``: the graph's nodes by key)."""
        return []

    def model_text(self, budget_tokens: int = DEFAULT_BUDGET_TOKENS) -> str:
        raise NotImplementedError


class SemanticHit(BaseModel):
    key: str
    label: str
    name: str
    score: float
    text: str = ""


class SemanticHits(_Result):
    """``semantic_search``: nodes closest in meaning to a description, best first."""

    kind: Literal["semantic_hits"] = "semantic_hits"
    hits: list[SemanticHit] = Field(default_factory=list)
    note: str | None = None
    """Why there are no hits when the index cannot answer (a staged index without its vectors)."""

    def found_keys(self) -> list[str]:
        return [h.key for h in self.hits]

    def evidence(self, nodes: Mapping[str, Any]) -> list[Evidence]:
        return [Evidence(key=h.key, label=h.label, score=h.score) for h in self.hits]

    def model_text(self, budget_tokens: int = DEFAULT_BUDGET_TOKENS) -> str:
        items = (
            {"key": h.key, "label": h.label, "name": _cut(h.name), "score": h.score, "text": _cut(h.text, 100)}
            for h in self.hits
        )
        hint = "ask for fewer (k) or restrict the label"
        return _fit_json({"note": self.note} if self.note else {}, "hits", items, budget_tokens, hint, total=len(self.hits))


class Neighbor(BaseModel):
    """One neighbour of the expanded keys, aggregated over every edge that reaches it."""

    key: str
    label: str
    name: str
    seeds: list[str] = Field(description="the expanded keys it is adjacent to")
    rels: list[str] = Field(description="the relationship types that reach it")
    paths: int = Field(description="how many edges reach it from the expanded keys")
    weight: float | None = Field(default=None, description="sum of the configured edge weight property")
    score: float | None = Field(default=None, description="relevance to the question (cosine), when ranked")


class TripleRow(BaseModel):
    """One raw edge, oriented as stored (only on explicit request)."""

    src: str
    rel: str
    dst: str
    props: dict[str, Any] = Field(default_factory=dict)


class Neighborhood(_Result):
    """``search_nodes``: the one-hop neighbourhood of some keys, one row per neighbour."""

    kind: Literal["neighborhood"] = "neighborhood"
    keys: list[str] = Field(description="the expanded keys that exist in the graph")
    rel_types: list[str] | None = None
    neighbors: list[Neighbor] = Field(default_factory=list)
    triples: list[TripleRow] = Field(default_factory=list, description="raw edges, only when asked for")
    truncated: bool = False
    ranked: bool = False
    unknown_keys: list[str] = Field(default_factory=list)
    sampled: dict[str, int] = Field(
        default_factory=dict, description="hub keys expanded from a sample: key -> edges it has (all were not read)"
    )
    sample_edges: int | None = Field(default=None, description="edges read per sampled key")

    @property
    def explicit_edges(self) -> bool:
        return bool(self.neighbors) and bool(self.rel_types)

    def found_keys(self) -> list[str]:
        return [n.key for n in self.neighbors]

    def evidence(self, nodes: Mapping[str, Any]) -> list[Evidence]:
        """A neighbour reached from several keys is supported by each (unranked neighbours score 0.5)."""
        return [
            Evidence(
                key=n.key, label=n.label, score=max(n.score if n.score is not None else 0.5, 0.0), support=len(n.seeds)
            )
            for n in self.neighbors
        ]

    def model_text(self, budget_tokens: int = DEFAULT_BUDGET_TOKENS) -> str:
        def items() -> Iterator[dict[str, Any]]:  # lazily: only what fits is rendered
            for n in self.neighbors:
                item: dict[str, Any] = {"key": n.key, "label": n.label, "name": _cut(n.name)}
                item["via"] = n.seeds[:5] + ([f"+{len(n.seeds) - 5}"] if len(n.seeds) > 5 else [])
                item["rels"] = n.rels
                item["edges"] = n.paths
                if n.weight is not None:
                    item["weight"] = round(n.weight, 4)
                if n.score is not None:
                    item["score"] = n.score
                yield item

        head: dict[str, Any] = {"truncated": self.truncated}
        if self.unknown_keys:
            head["unknown_keys"] = self.unknown_keys[:10]
        if self.sampled:
            head["sampled"] = {
                "edges_read_per_key": self.sample_edges,
                "edges": dict(list(self.sampled.items())[:10]),
                "hint": "a hub: neighbours come from a sample of its edges; expand a rarer key to check membership",
            }
        if self.triples:
            head["triples"] = [t.model_dump(mode="json", exclude_defaults=True) for t in self.triples]
        hint = "narrow with rel_types/target_label or lower limit"
        return _fit_json(head, "neighbors", items(), budget_tokens, hint, total=len(self.neighbors))

    def _weighted(self) -> bool:
        return any(n.weight is not None for n in self.neighbors)


class Rows(_Result):
    """``cypher``: a read-only query's columns and rows."""

    kind: Literal["rows"] = "rows"
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)
    truncated: bool = False
    typed_edges: bool = Field(default=False, description="the query matched relationships by type")

    @property
    def explicit_edges(self) -> bool:
        return self.typed_edges and bool(self.rows)

    def found_keys(self) -> list[str]:
        found: list[str] = []
        for row in self.rows:
            for cell in row:
                for key in _strings_in(cell):
                    if key not in found:
                        found.append(key)
        return found

    def evidence(self, nodes: Mapping[str, Any]) -> list[Evidence]:
        """Cells that are node keys, in row order, scored from 1.0 down to 0.5 (queries order their rows)."""
        found = [key for key in self.found_keys() if key in nodes]
        n = max(len(found), 1)
        return [Evidence(key=k, label=nodes[k].label, score=1.0 - 0.5 * i / n) for i, k in enumerate(found)]

    def model_text(self, budget_tokens: int = DEFAULT_BUDGET_TOKENS) -> str:
        head = {"columns": self.columns, "truncated": self.truncated}
        return _fit_json(head, "rows", self.rows, budget_tokens, "add LIMIT or aggregate (count, collect)")


class Finish(_Result):
    """``finish``: the answer keys the planner settled on."""

    kind: Literal["finish"] = "finish"
    keys: list[str] = Field(default_factory=list)
    scores: list[float] = Field(default_factory=list)
    confidence: float | None = None
    unknown: list[str] = Field(default_factory=list)

    def found_keys(self) -> list[str]:
        return list(self.keys)

    def model_text(self, budget_tokens: int = DEFAULT_BUDGET_TOKENS) -> str:
        head: dict[str, Any] = {"accepted": len(self.keys), "confidence": self.confidence}
        if self.unknown:
            head["unknown"] = self.unknown[:10]
        # the planner chose these keys; echoing the first few confirms them, the artifact holds all
        return _fit_json(head, "keys", self.keys[:FINISH_ECHO], budget_tokens, "")


class ToolError(_Result):
    """Any tool's failure, with a hint a planner can act on."""

    kind: Literal["error"] = "error"
    error: ToolErrorDetail

    @property
    def is_error(self) -> bool:
        return True

    def model_text(self, budget_tokens: int = DEFAULT_BUDGET_TOKENS) -> str:
        error = self.error.model_dump()
        text = _compact({"error": error})
        limit = max(1, budget_tokens) * CHARS_PER_TOKEN
        if budget_measure(text) > budget_tokens:  # keep it JSON: shorten the message and hint, not the structure
            room = max(20, (limit - 80 - len(error["type"])) // 2)
            error = {**error, "message": _cut(error["message"], room), "hint": _cut(error["hint"], room)}
            text = _compact({"error": error})
        return text


ToolResult = Annotated[SemanticHits | Neighborhood | Rows | Finish | ToolError, Field(discriminator="kind")]
RESULT_TYPES: dict[str, type[_Result]] = {
    "semantic_search": SemanticHits,
    "search_nodes": Neighborhood,
    "cypher": Rows,
    "finish": Finish,
}
#: The result model classes, for isinstance checks (a ToolResult is one of these).
TYPED_RESULTS: tuple[type[_Result], ...] = (SemanticHits, Neighborhood, Rows, Finish, ToolError)
_ADAPTER: TypeAdapter[SemanticHits | Neighborhood | Rows | Finish | ToolError] = TypeAdapter(ToolResult)


def tool_error(tool: str, step: int, query: str, type_: str, message: str, hint: str) -> ToolError:
    """The one place error results are built."""
    return ToolError(
        provenance=ToolProvenance(tool=tool, step=step, query=_cut(query, 500)),
        error=ToolErrorDetail(type=type_, message=message, hint=hint),
    )


def parse_result(tool: str, value: Any) -> SemanticHits | Neighborhood | Rows | Finish | ToolError | None:
    """A typed result from whatever a tool handed back or a trace recorded: a model, its dict dump,
    a legacy dict (traces recorded before every tool answered with a model), or JSON text. None when it
    is none of these."""
    if isinstance(value, _Result):
        return value  # type: ignore[return-value]  # one of the union's members
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping):
        return None
    data = dict(value)
    prov = data.get("provenance") if isinstance(data.get("provenance"), Mapping) else {"tool": tool}
    try:
        if "kind" in data:
            return _ADAPTER.validate_python(data)
        if isinstance(data.get("error"), Mapping):
            return ToolError(provenance=ToolProvenance.model_validate(prov), error=data["error"])
        if tool == "cypher" or "rows" in data:
            query = str(data.get("query") or (prov or {}).get("query") or "")
            return Rows(
                provenance=ToolProvenance.model_validate(prov),
                columns=[str(c) for c in data.get("columns") or []],
                rows=list(data.get("rows") or []),
                truncated=bool(data.get("truncated")),
                typed_edges=bool(data.get("typed_edges", names_relationship_types(query))),
            )
    except ValidationError:
        return None
    return None


def names_relationship_types(cypher: str) -> bool:
    """Whether a Cypher query matches relationships by type (the guard's tokenizer decides, not a substring)."""
    if not cypher:
        return False
    try:
        return bool(extract_refs(cypher).rel_types)
    except CypherValidationError:  # an unterminated string or name: no edges we could count
        return False


def _strings_in(cell: Any) -> list[str]:
    """Candidate node keys inside a cypher cell: strings, a map's ``key``, list items."""
    if isinstance(cell, str):
        return [cell]
    if isinstance(cell, Mapping):
        key = cell.get("key")
        if isinstance(key, str):
            return [key]
        return [k for v in cell.values() for k in _strings_in(v)]
    if isinstance(cell, list):
        return [k for v in cell for k in _strings_in(v)]
    return []


def tool_output(result: _Result, budget_tokens: int = DEFAULT_BUDGET_TOKENS) -> tuple[str, _Result]:
    """(content, artifact) for ``response_format='content_and_artifact'``: budgeted text and the model."""
    return clean_text(result.model_text(budget_tokens)), result


__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_BUDGET_TOKENS",
    "RESULT_TYPES",
    "TYPED_RESULTS",
    "Evidence",
    "Finish",
    "Neighbor",
    "Neighborhood",
    "Rows",
    "SemanticHit",
    "SemanticHits",
    "ToolError",
    "ToolErrorDetail",
    "ToolProvenance",
    "ToolResult",
    "TripleRow",
    "budget_measure",
    "estimate_tokens",
    "names_relationship_types",
    "parse_result",
    "tool_error",
    "tool_output",
    "unread_by_model",
]
