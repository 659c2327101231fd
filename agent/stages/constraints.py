"""AF-Retriever / FocusedRetriever constraint stage: triplet constraints, a node-set join, and
incremental scope expansion.

Why: a question such as "which films directed by X and starring Y came out after 1990?" names
the answer by *constraints* -- links to grounded entities and conditions on its own attributes.
Searching by similarity blurs them; intersecting the node sets each constraint allows is exact.
When the intersection is too small (an over-specific question, a wrong link, a constraint the
graph does not record), dropping constraints one at a time widens the scope in a controlled
order, and every candidate says which constraints it satisfied.

Pipeline:
1. *extract*: the model returns ``ConstraintSpec`` through structured output (a forced tool call,
   validated against the graph schema, one repair round quoting the errors -- ``agent.llm.structured``);
   without an LLM the same spec comes from the plan (linked entities + one-hop relations between
   their label and the label of the planner's best seed); the graph node keeps such a constraint only
   if one of the planner's seeds satisfies it (else the planner walked a longer path from that
   entity) and joins only when at least two remain (one constraint is the planner's own neighbourhood);
2. *ground*: each triplet's entity mention is linked to nodes by the entity linker (its anchor
   set, at most ``constraint_anchors`` keys, preferring labels the relation can reach);
3. *join*: one read-only Cypher query per constraint set through the store's guarded query path:
   ``MATCH (x:T)-[:R]->(a) WHERE a.key IN $anchors`` per triplet, ``WITH x, count(DISTINCT a)``
   between them (a join on ``x``), then the attribute conditions; candidates are ordered by how
   many anchors they reach;
4. *relax*: while fewer than ``k`` candidates were found, drop one constraint and join again.
   Order (documented, tested): lowest confidence first; among equal confidence, attribute
   conditions before triplets (a condition on a value is the likeliest to be misread), then the
   constraint mentioned last. The stage never queries with no constraints left (that is the whole
   label, not an answer). Each step is recorded (``RelaxationStep``) and stamped on the candidates
   it added (provenance ``tool="constraints"``, ``step`` = relaxation level).

Generic by construction: labels, relations and properties come from the graph schema at run
time and are backtick-quoted; values travel as query parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from agent.llm.structured import OutputMode, bind_structured, compact_schema_text, structured_call
from graphs.errors import SKBError
from graphs.skb.model import SKB, GraphSchema
from graphs.store.aggregate import JoinCondition, JoinTriplet, constraint_join_query
from graphs.store.cypher_guard import check_against_schema
from graphs.text_safety import quoted
from graphs.tokens import count_tokens
from prompts import render_prompt

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

#: Constraints the model may return (each costs one MATCH in the join).
MAX_CONSTRAINTS = 8
#: Tool name of the structured reply.
CONSTRAINT_TOOL = "submit_constraints"
Direction = Literal["out", "in", "any"]
Op = Literal["=", "!=", "<", "<=", ">", ">=", "contains"]


class TripletSpec(BaseModel):
    """``(answer) -[relation]- (entity)``: the answer node is linked to a named entity."""

    entity: str = Field(description="the entity's name as written in the question")
    relation: str | None = Field(default=None, description="relationship type from the schema; null: any")
    direction: Direction = Field(
        default="any", description="out: (answer)-[relation]->(entity); in: (entity)-[relation]->(answer)"
    )
    confidence: float = Field(default=1.0, ge=0.0, le=1.0, description="how sure the question states this")


class AttributeSpec(BaseModel):
    """A condition on a property of the answer node."""

    property: str = Field(description="property name of the answer type (schema)")
    op: Op = "="
    value: str | int | float | bool
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)


class ConstraintSpec(BaseModel):
    """What the model extracts: the answer type and the constraints on it."""

    target_type: str = Field(description="node label of the answer")
    triplets: list[TripletSpec] = Field(default_factory=list, max_length=MAX_CONSTRAINTS)
    attributes: list[AttributeSpec] = Field(default_factory=list, max_length=MAX_CONSTRAINTS)


def validate_spec(spec: ConstraintSpec, schema: GraphSchema) -> list[str]:
    """Schema errors in ``spec``, each naming the valid choices (quoted back in the repair round)."""
    errors: list[str] = []
    labels = schema.label_names()
    if spec.target_type not in labels:
        errors.append(f"target_type {spec.target_type!r} is not a node label; use one of {labels}")
        return errors
    rels = {r.rel for r in schema.relations if spec.target_type in (r.src_label, r.dst_label)}
    for i, triplet in enumerate(spec.triplets):
        if not triplet.entity.strip():
            errors.append(f"triplets.{i}.entity is empty; give the entity's name from the question")
        if triplet.relation is not None and triplet.relation not in rels:
            errors.append(
                f"triplets.{i}.relation {triplet.relation!r} does not touch {spec.target_type}; "
                f"use one of {sorted(rels)} or null"
            )
    props = schema.properties_of(spec.target_type)
    for i, attr in enumerate(spec.attributes):
        if attr.property not in props:
            errors.append(
                f"attributes.{i}.property {attr.property!r} is not a property of {spec.target_type}; use one of {props}"
            )
    if len(spec.triplets) + len(spec.attributes) > MAX_CONSTRAINTS:
        errors.append(f"at most {MAX_CONSTRAINTS} constraints in all")
    return errors


def loosen_relations(spec: ConstraintSpec, schema: GraphSchema) -> list[str]:
    """Set to null (any relation) each triplet relation that exists but does not touch the answer type,
    and say which. Measured on the local 1.5B model: it named the entity right and wrote a relation of
    the entity's own label (``IS_A`` between two terms) for a constraint on the answer, in 3 of 3 first
    extractions on HPO; the whole extraction was then invalid and one repair fixed it once. The entity
    and the direction still hold; "linked to it by some relation" is what such a triplet can mean."""
    if spec.target_type not in schema.label_names():
        return []
    names = {r.rel for r in schema.relations}
    touching = {r.rel for r in schema.relations if spec.target_type in (r.src_label, r.dst_label)}
    fixes: list[str] = []
    for i, triplet in enumerate(spec.triplets):
        if triplet.relation in names and triplet.relation not in touching:
            fixes.append(f"triplets.{i}.relation {triplet.relation!r} does not touch {spec.target_type}: any relation")
            triplet.relation = None
            triplet.direction = "any"
    return fixes


def trim_constraints(spec: ConstraintSpec) -> list[str]:
    """Keep the first ``MAX_CONSTRAINTS`` constraints, triplets first, and say what was dropped. Measured on
    the local 1.5B model: an extraction with one constraint too many was refused whole, and the repair
    sent the same list again; the first ones are the question's own order of mention (the relaxation
    would drop the later ones first anyway)."""
    room = MAX_CONSTRAINTS - len(spec.triplets)
    if room >= len(spec.attributes):
        return []
    dropped = len(spec.attributes) - max(0, room)
    spec.triplets = spec.triplets[:MAX_CONSTRAINTS]
    spec.attributes = spec.attributes[: max(0, room)]
    return [f"{dropped} constraint(s) past the first {MAX_CONSTRAINTS} dropped"]


# -- grounded constraints --------------------------------------------------------------------------
@dataclass
class Constraint:
    """One grounded constraint: a MATCH on anchors, or a condition on the answer's property."""

    kind: Literal["triplet", "attribute"]
    text: str
    """Readable form, used in provenance and relaxation records."""
    confidence: float
    position: int
    """Order of mention (ties in the relaxation order drop the later one first)."""
    relation: str | None = None
    direction: Direction = "any"
    anchors: list[str] = field(default_factory=list)
    property: str | None = None
    op: Op = "="
    value: Any = None


def relaxation_order(constraints: Sequence[Constraint]) -> list[Constraint]:
    """The order constraints are dropped in: lowest confidence, then attributes before triplets,
    then the later-mentioned first."""
    return sorted(constraints, key=lambda c: (c.confidence, 0 if c.kind == "attribute" else 1, -c.position))


def join_query(target: str, constraints: Sequence[Constraint], limit: int) -> tuple[str, dict[str, Any]]:
    """The read-only node-set join for ``constraints`` on answers of label ``target`` (query text is
    built in the store layer: ``graphs.store.aggregate.constraint_join_query``)."""
    if not constraints:
        raise ValueError("a join needs at least one constraint")
    triplets = [JoinTriplet(c.relation, c.direction, list(c.anchors)) for c in constraints if c.kind == "triplet"]
    conditions = [JoinCondition(str(c.property), c.op, c.value) for c in constraints if c.kind == "attribute"]
    return constraint_join_query(target, triplets, conditions, limit)


# -- extraction -----------------------------------------------------------------------------------
def offline_spec(
    target: str | None, linked: Sequence[Mapping[str, Any]], schema: GraphSchema
) -> tuple[ConstraintSpec | None, dict[str, list[str]]]:
    """The constraints the offline plan implies: one triplet per linked entity (or clause group)
    whose label has a one-hop relation with the target type. Returns the spec and the anchors per
    mention (already grounded by the linker, so no second linking pass)."""
    if target is None or target not in schema.label_names():
        return None, {}
    triplets: list[TripletSpec] = []
    anchors: dict[str, list[str]] = {}
    for entity in linked:
        label = str(entity.get("label"))
        if label == target:
            continue
        out = sorted({r.rel for r in schema.relations if r.src_label == target and r.dst_label == label})
        inc = sorted({r.rel for r in schema.relations if r.src_label == label and r.dst_label == target})
        if not out and not inc:
            continue
        mention = str(entity.get("mention") or entity.get("name"))
        keys = anchors.setdefault(mention, [])
        if str(entity["key"]) not in keys:
            keys.append(str(entity["key"]))
        if len(keys) > 1:
            continue  # one constraint per mention (clause candidates share one)
        relation: str | None
        direction: Direction
        if len(out) + len(inc) == 1:
            relation, direction = (out[0], "out") if out else (inc[0], "in")
        else:
            relation, direction = None, "any"
        confidence = float(entity.get("score", 1.0) or 0.0) * float(entity.get("weight", 1.0) or 0.0)
        triplets.append(
            TripletSpec(
                entity=mention, relation=relation, direction=direction, confidence=max(0.0, min(1.0, confidence))
            )
        )
        if len(triplets) >= MAX_CONSTRAINTS:
            break
    if not triplets:
        return None, anchors
    return ConstraintSpec(target_type=target, triplets=triplets), anchors


def constraint_messages(
    question: str, schema: GraphSchema, linked: Sequence[Mapping[str, Any]], budget_tokens: int, mode: OutputMode
) -> list[BaseMessage]:
    """The extraction prompt within ``budget_tokens`` (real tokens, ``graphs.tokens``): linked entities are dropped from the
    end, then the schema shrinks to names only, until it fits."""
    answer = (
        f"Call `{CONSTRAINT_TOOL}` with the fields." if mode == "tool" else "Answer with one JSON object only."
    )

    def render(schema_text: str, entities: Sequence[Mapping[str, Any]]) -> list[BaseMessage]:
        system = render_prompt("constraints.md", schema=schema_text, max_constraints=MAX_CONSTRAINTS, answer=answer)
        lines = "\n".join(f"- {quoted(e.get('name'))} ({e.get('label')})" for e in entities) or "(none)"
        return [SystemMessage(system), HumanMessage(f"Question: {quoted(question)}\nEntities found in it:\n{lines}")]

    def size(messages: Sequence[BaseMessage]) -> int:
        return sum(count_tokens(str(m.content)) for m in messages)

    entities = list(linked)
    messages = render(schema.render(), entities)
    while size(messages) > budget_tokens and entities:
        entities = entities[:-1]
        messages = render(schema.render(), entities)
    if size(messages) > budget_tokens:
        messages = render(compact_schema_text(schema), entities)
    return messages


def extract_constraints(
    model: Any,
    question: str,
    schema: GraphSchema,
    linked: Sequence[Mapping[str, Any]],
    call: Callable[[Any, Sequence[BaseMessage]], AIMessage],
    *,
    structured: OutputMode,
    budget_tokens: int,
    repairs: int,
) -> tuple[ConstraintSpec | None, dict[str, Any]]:
    """Ask the model for the constraints (structured output, schema-validated, ``repairs`` repair
    rounds quoting the errors). ``call(bound_model, messages)`` makes one budgeted call. Returns the
    spec (None when it stayed invalid) and the structured-output report."""
    messages = constraint_messages(question, schema, linked, budget_tokens, structured)
    bound = bind_structured(model, ConstraintSpec, CONSTRAINT_TOOL, "Submit the constraints.", structured)
    loosened: list[str] = []

    def validate(spec: ConstraintSpec) -> list[str]:
        loosened.extend(loosen_relations(spec, schema))
        loosened.extend(trim_constraints(spec))
        return validate_spec(spec, schema)

    outcome = structured_call(
        lambda history: call(bound, history),
        messages,
        ConstraintSpec,
        tool_name=CONSTRAINT_TOOL,
        mode=structured,
        validate=validate,
        max_repairs=repairs,
    )
    report = outcome.report()
    if loosened:
        report["loosened"] = loosened
    return outcome.value, report


# -- grounding, joining and relaxing -------------------------------------------------------------
@dataclass
class RelaxationStep:
    """One join: the constraints in force, what was dropped to get here, and what it found."""

    level: int
    active: list[str]
    dropped: str | None
    dropped_confidence: float | None
    found: int
    added: int
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class ConstraintResult:
    """Candidates (key, relaxation level, support) in rank order, the steps, and the report."""

    target: str | None = None
    candidates: list[tuple[str, int, int]] = field(default_factory=list)
    steps: list[RelaxationStep] = field(default_factory=list)
    constraints: list[Constraint] = field(default_factory=list)
    ungrounded: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        return {
            "target_type": self.target,
            "constraints": [{"text": c.text, "confidence": c.confidence, "anchors": len(c.anchors)}
                            for c in self.constraints],
            "ungrounded": list(self.ungrounded),
            "relaxations": [s.as_dict() for s in self.steps],
            "candidates": len(self.candidates),
            "errors": list(self.errors),
        }


def ground(
    spec: ConstraintSpec,
    schema: GraphSchema,
    link: Callable[[str], Sequence[Mapping[str, Any]]],
    max_anchors: int,
    anchors: Mapping[str, list[str]] | None = None,
) -> tuple[list[Constraint], list[str]]:
    """Constraints with anchor sets; mentions nothing links to are returned separately (they are
    dropped before the first join and reported)."""
    out: list[Constraint] = []
    ungrounded: list[str] = []
    target = spec.target_type
    for i, t in enumerate(spec.triplets):
        keys = list((anchors or {}).get(t.entity) or [])[:max_anchors]
        if not keys:
            reach = {r.dst_label if r.src_label == target else r.src_label
                     for r in schema.relations if target in (r.src_label, r.dst_label)
                     and (t.relation is None or r.rel == t.relation)}
            linked = list(link(t.entity))
            preferred = [e for e in linked if e.get("label") in reach] or linked
            keys = list(dict.fromkeys(str(e["key"]) for e in preferred))[:max_anchors]
        rel = t.relation or "any relation"
        arrow = {"out": f"-[{rel}]->", "in": f"<-[{rel}]-", "any": f"-[{rel}]-"}[t.direction]
        text = f"({target}){arrow}{quoted(t.entity)}"
        if not keys:
            ungrounded.append(text)
            continue
        out.append(Constraint("triplet", text, t.confidence, i, t.relation, t.direction, keys))
    base = len(spec.triplets)
    for j, a in enumerate(spec.attributes):
        text = f"{target}.{a.property} {a.op} {a.value!r}"
        out.append(Constraint("attribute", text, a.confidence, base + j, property=a.property, op=a.op, value=a.value))
    return out, ungrounded


def satisfied_by_any(skb: SKB, keys: Sequence[str], constraint: Constraint) -> bool:
    """Whether one of ``keys`` is linked to the constraint's anchors as it requires (in-memory graph)."""
    anchors = set(constraint.anchors)

    def fits(other: str, rel: str) -> bool:
        return other in anchors and constraint.relation in (None, rel)

    for key in keys:
        if key not in skb.nodes:
            continue
        out = constraint.direction in ("out", "any") and any(fits(e.dst, e.rel) for e in skb.out_edges(key))
        if out or (constraint.direction in ("in", "any") and any(fits(e.src, e.rel) for e in skb.in_edges(key))):
            return True
    return False


def run_constraints(
    bundle: IndexBundle,
    target: str,
    constraints: Sequence[Constraint],
    k: int,
    *,
    timeout_ms: int,
    max_rows: int,
) -> ConstraintResult:
    """Join, then relax one constraint at a time while fewer than ``k`` candidates were found."""
    result = ConstraintResult(target=target, constraints=list(constraints))
    schema = bundle.schema()
    active = list(constraints)
    order = relaxation_order(constraints)
    seen: set[str] = set()
    dropped: Constraint | None = None
    level = 0
    while active:
        cypher, params = join_query(target, active, limit=max_rows)
        try:
            check_against_schema(cypher, schema)  # the guard model-written Cypher passes, for the same reasons
            rows = bundle.store.query(cypher, params, timeout_ms=timeout_ms, max_rows=max_rows).rows
        except SKBError as exc:  # a timeout or a rejected query: record it and widen the scope
            rows = []
            result.errors.append(f"level {level}: {type(exc).__name__}: {exc}")
        added = 0
        for row in rows:
            key = str(row[0])
            if key in seen or key not in bundle.skb.nodes:
                continue
            seen.add(key)
            result.candidates.append((key, level, int(row[1] or 0)))
            added += 1
        enough = len(result.candidates) >= k
        reason = (
            f"{len(result.candidates)} >= k={k} candidates: stop"
            if enough
            else f"{len(result.candidates)} < k={k} candidates: relax"
        )
        result.steps.append(
            RelaxationStep(
                level=level,
                active=[c.text for c in active],
                dropped=dropped.text if dropped else None,
                dropped_confidence=dropped.confidence if dropped else None,
                found=len(rows),
                added=added,
                reason=reason,
            )
        )
        if enough or len(active) == 1:
            break
        live = {id(c) for c in active}
        dropped = next(c for c in order if id(c) in live)
        active = [c for c in active if c is not dropped]
        level += 1
    return result
