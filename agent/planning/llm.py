"""The LLM plan: the plan's schema (target type, relation paths, for plan-once the tool arguments),
checking a plan against the graph schema, and asking the model for one with a bounded repair.

The model plumbing (client, retries, budgets, tool-call checks, structured output) is ``agent.llm``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from agent.config import AgentConfig
from agent.llm.budget import Budget, Usage
from agent.llm.client import prompt_text
from agent.llm.feedback import fed_back_all
from agent.llm.structured import bind_structured, compact_schema, compact_schema_text, structured_call, tool_spec
from graphs.errors import InvalidPlanError
from graphs.skb.model import GraphSchema
from graphs.text_safety import quoted
from graphs.tokens import count_tokens
from prompts import load_prompt, render_prompt

# -- plan stage ----------------------------------------------------------------------------
#: Name of the forced tool through which the model returns its plan.
PLAN_TOOL = "submit_plan"
PLAN_TOOL_DESCRIPTION = "Submit the retrieval plan."
#: Most relation paths a plan may carry (more are cut, not an error).
MAX_PLAN_PATHS = 5
#: Allowance (tokens) for the rejected reply and the quoted errors of a repair turn.
REPAIR_TOKENS = 400


class PlanStepSpec(BaseModel):
    """One hop of a relation path, as the model writes it."""

    rel: str = Field(description="relationship type from the schema")
    direction: Literal["out", "in"] = Field(
        default="out", description="out: follow the stored arrow from the current node; in: against it"
    )
    to_label: str = Field(description="node label reached by this hop")


class PlanSpec(BaseModel):
    """The plan the model returns (loop mode): the answer's node label and the relation paths to it.

    A path is either hop by hop or, when the tool schema offers them (``path_choices``), one of the
    graph's walks from the linked entities' labels written as text; ``validate_plan`` turns the text
    back into hops."""

    target_type: str | None = Field(default=None, description="node label of the answer, or null")
    relation_paths: list[list[PlanStepSpec] | str] = Field(
        default_factory=list, description="paths from a linked entity's label to target_type"
    )


class PlanOnceSpec(PlanSpec):
    """The plan-once (SPARK) reply: the plan plus the arguments of the tool calls the executor makes."""

    sources: list[str] = Field(
        default_factory=list, description="keys of the linked entities the paths start from (only relevant ones)"
    )
    search_text: str | None = Field(default=None, description="a few words describing the answer, for text search")


#: Most walks offered as choices in the plan tool's schema; a graph with more gets the hop-by-hop form.
MAX_PATH_CHOICES = 40


def walk_text(start: str, steps: Sequence[Any]) -> str:
    """A walk as the model reads and writes it: ``(Phenotype)<-[HAS_PHENOTYPE]-(Disease)``."""
    parts = [f"({start})"]
    for step in steps:
        rel, to = _field(step, "rel"), _field(step, "to_label")
        parts.append(f"-[{rel}]->({to})" if _field(step, "direction") == "out" else f"<-[{rel}]-({to})")
    return "".join(parts)


def _field(step: Any, name: str) -> str:
    return str(step.get(name) if isinstance(step, Mapping) else getattr(step, name))


#: A ranked walk offered to the planner: its start label and hops (``agent.planning.walks.ranked_walks``).
RankedWalk = tuple[str, Sequence[Mapping[str, str]]]


def _steps_of(hops: Sequence[Mapping[str, str]]) -> list[PlanStepSpec]:
    return [PlanStepSpec(rel=h["rel"], direction="in" if h["direction"] == "in" else "out", to_label=h["to_label"])
            for h in hops]


def path_choices(
    schema: GraphSchema, linked: Sequence[Mapping[str, Any]], max_hops: int, preferred: Sequence[RankedWalk] = ()
) -> dict[str, dict[str, list[PlanStepSpec]]]:
    """Every walk of at most ``max_hops`` hops from a linked entity's label, per label it ends at
    (``{target: {walk text: hops}}``); when there are more than MAX_PATH_CHOICES walks, only the
    ``preferred`` ones (the path planner's best, ranked for this question), else none.

    Why: a small model asked to write paths hop by hop writes the stored edge instead of the walk, or
    ends at the wrong label, and a repair rarely fixes it. Offered as enums per target label, a
    grammar-constrained server can only emit a plan whose paths exist and end at its target, and other
    servers see the valid walks spelled out."""
    from agent.planning.targets import relation_paths

    starts = list(dict.fromkeys(str(e.get("label")) for e in linked if e.get("label")))
    out: dict[str, dict[str, list[PlanStepSpec]]] = {}
    total = 0
    for target in schema.label_names():
        for start in starts:
            for path in relation_paths(schema, [start], target, max_hops):
                steps = [PlanStepSpec(rel=s.rel, direction=s.direction, to_label=s.to_label) for s in path]
                out.setdefault(target, {})[walk_text(start, steps)] = steps
                total += 1
    if total > MAX_PATH_CHOICES and preferred:
        ranked: dict[str, dict[str, list[PlanStepSpec]]] = {}
        for start, hops in preferred:
            steps = _steps_of(hops)
            if steps and len(steps) <= max_hops:
                ranked.setdefault(steps[-1].to_label, {})[walk_text(start, steps)] = steps
        return ranked
    return out if 0 < total <= MAX_PATH_CHOICES else {}


def _read_walks(
    plan: PlanSpec, schema: GraphSchema, max_hops: int, linked: Sequence[Mapping[str, Any]],
    preferred: Sequence[RankedWalk] = (),
) -> list[str]:
    """Paths written as walk text replaced by their hops in ``plan``; errors for text that is no walk."""
    if not any(isinstance(p, str) for p in plan.relation_paths):
        return []
    choices = path_choices(schema, linked, max_hops, preferred)
    walks = {text: steps for per in choices.values() for text, steps in per.items()}
    compact = {"".join(t.split()): t for t in walks}
    errors: list[str] = []
    paths: list[list[PlanStepSpec] | str] = []
    for i, path in enumerate(plan.relation_paths):
        if not isinstance(path, str):
            paths.append(path)
            continue
        text = compact.get("".join(path.split()))
        if text is None:
            offered = ", ".join(list(walks)[:12]) or "(none: write the paths hop by hop)"
            errors.append(f"relation_paths[{i}]: {path!r} is not a walk of this graph from the linked entities; "
                          f"choose from: {offered}")
            continue
        paths.append([step.model_copy() for step in walks[text]])
    plan.relation_paths = paths
    return errors


def _hops(steps: Sequence[Any]) -> list[tuple[str, str, str]]:
    return [(_field(h, "rel"), _field(h, "direction"), _field(h, "to_label")) for h in steps]


def _reconcile_walks(plan: PlanSpec, preferred: Sequence[RankedWalk], fixes: list[str] | None) -> None:
    """Make the chosen ranked walks and the target type agree (a small model often gets one of them right).

    A walk that stops short of the target is extended to the best-ranked walk that begins with it and ends
    at the target ("the writer of X" chosen for "release years of the movies written by the writer of X");
    when none does and every chosen walk ends at one label, that label is the target."""
    target = plan.target_type
    paths = [p for p in plan.relation_paths if isinstance(p, list) and p]
    if not paths or all(p[-1].to_label == target for p in paths):
        return
    ranked = [_steps_of(hops) for _, hops in preferred]
    extended: list[list[PlanStepSpec] | str] = []
    changed = False
    for path in plan.relation_paths:
        if isinstance(path, list) and path and path[-1].to_label != target:
            head = _hops(path)
            longer = next((w for w in ranked if len(w) > len(path) and _hops(w[: len(path)]) == head
                           and w[-1].to_label == target), None)
            if longer is not None:
                if fixes is not None:
                    fixes.append(f"walk {_hops(path)} extended to the ranked walk {_hops(longer)} that reaches "
                                 f"target_type {target!r}")
                extended.append(longer)
                changed = True
                continue
        extended.append(path)
    if changed:
        plan.relation_paths = extended
        return
    ends = {p[-1].to_label for p in paths}
    if len(ends) == 1:
        (end,) = ends
        if fixes is not None:
            fixes.append(f"target_type {target!r} read as {end!r}, where the chosen walks end")
        plan.target_type = end


def validate_plan(
    plan: PlanSpec,
    schema: GraphSchema,
    max_hops: int,
    linked: Sequence[Mapping[str, Any]] = (),
    fixes: list[str] | None = None,
    preferred: Sequence[RankedWalk] = (),
) -> list[str]:
    """Every way ``plan`` disagrees with the graph schema, as messages a model can act on.

    Checked: the target label exists; each hop's relationship type and label exist and the hop is a
    pattern of the schema from the label the path is at; paths are 1..max_hops hops and end at the
    target; a path starts at the label of a linked entity (when any is linked); plan-once sources
    are linked keys.

    With ``fixes`` (a list the caller reads back), unambiguous slips are corrected in ``plan`` instead of
    reported, like near-JSON: a hop whose direction is the wrong way round (only the other direction
    reaches its label from where the path is) is flipped, and invalid paths are dropped when at least one
    valid path remains. What was changed is appended to ``fixes``.
    """
    labels = schema.label_names()
    rels = schema.relation_names()
    label_set, rel_set = set(labels), set(rels)
    errors: list[str] = _read_walks(plan, schema, max_hops, linked, preferred)
    if preferred and not errors:
        _reconcile_walks(plan, preferred, fixes)
    target = plan.target_type
    if target is not None and target not in label_set:
        errors.append(f"target_type: unknown label {target!r}; valid labels: {', '.join(labels)}")
    # (rel, direction) -> {(from_label, to_label)}
    patterns: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for r in schema.relations:
        patterns.setdefault((r.rel, "out"), set()).add((r.src_label, r.dst_label))
        patterns.setdefault((r.rel, "in"), set()).add((r.dst_label, r.src_label))
    linked_labels = {str(e.get("label")) for e in linked if e.get("label")}
    linked_keys = [str(e.get("key")) for e in linked if e.get("key")]
    if isinstance(plan, PlanOnceSpec):
        unknown = [k for k in plan.sources if k not in set(linked_keys)]
        if unknown:
            errors.append(
                f"sources: {unknown} are not linked entity keys; use keys from: {', '.join(linked_keys) or '(none)'}"
            )
        source_labels = {str(e.get("label")) for e in linked if str(e.get("key")) in set(plan.sources)}
        linked_labels = source_labels or linked_labels

    def froms_of(rel: str, direction: str, to_label: str) -> set[str]:
        return {f for f, t in patterns.get((rel, direction), set()) if t == to_label}

    def path_errors(i: int, path: list[PlanStepSpec] | str) -> str | None:
        if isinstance(path, str):  # left only when _read_walks reported it
            return f"relation_paths[{i}]: not a walk of this graph"
        where = f"relation_paths[{i}]"
        if not path:
            return f"{where}: empty path; give at least one hop or leave the path out"
        if len(path) > max_hops:
            return f"{where}: {len(path)} hops; at most {max_hops} allowed"
        at: set[str] | None = linked_labels or None  # labels the path may be at before this hop
        for j, step in enumerate(path):
            here = f"{where}[{j}]"
            if step.rel not in rel_set:
                return f"{here}.rel: unknown relationship type {step.rel!r}; valid: {', '.join(rels)}"
            if step.to_label not in label_set:
                return f"{here}.to_label: unknown label {step.to_label!r}; valid labels: {', '.join(labels)}"
            froms = froms_of(step.rel, step.direction, step.to_label)
            if fixes is not None and (not froms or (at is not None and not froms & at)):
                other = "in" if step.direction == "out" else "out"
                flipped = froms_of(step.rel, other, step.to_label)
                if flipped and (at is None or flipped & at):
                    fixes.append(f"{here}: direction {step.direction!r} -> {other!r} ({step.rel} reaches {step.to_label} only that way)")
                    step.direction = other  # type: ignore[assignment]
                    froms = flipped
                elif at is not None and froms and not froms & at:
                    # the stored edge written instead of the walk ("HAS_PHENOTYPE -> Phenotype" from a Phenotype):
                    # walk the relation from where the path is, when that reaches exactly one label
                    walks = {t for f, t in patterns.get((step.rel, other), set()) if f in at}
                    if len(walks) == 1:
                        (end,) = walks
                        fixes.append(
                            f"{here}: read as the walk along {step.rel} from {', '.join(sorted(at))}: "
                            f"direction {other!r}, to_label {end!r} (was {step.direction!r}, {step.to_label!r})"
                        )
                        step.direction, step.to_label = other, end  # type: ignore[assignment]
                        froms = froms_of(step.rel, other, end)
            if not froms:
                ends = sorted({t for _, t in patterns.get((step.rel, step.direction), set())})
                return (
                    f"{here}: {step.rel} with direction {step.direction!r} never reaches {step.to_label!r}"
                    + (f" (it reaches {', '.join(ends)})" if ends else "; try the other direction")
                )
            if at is not None and not (froms & at):
                what = "the linked entities' labels" if j == 0 else "the previous hop's label"
                return (
                    f"{here}: {step.rel} ({step.direction}) starts at {', '.join(sorted(froms))}, "
                    f"not at {what} ({', '.join(sorted(at))})"
                )
            at = {step.to_label}
        if target is not None and path[-1].to_label != target:
            return f"{where}: ends at {path[-1].to_label!r}, but target_type is {target!r}"
        return None

    paths = plan.relation_paths[:MAX_PLAN_PATHS]
    found = [path_errors(i, path) for i, path in enumerate(paths)]
    bad = [e for e in found if e is not None]
    if fixes is not None and bad and len(bad) < len(paths):
        fixes.extend(f"dropped {e}" for e in bad)
        plan.relation_paths = [p for p, e in zip(paths, found, strict=True) if e is None]
    else:
        errors.extend(bad)
    return errors


#: Share of the plan prompt's token budget the walk choices may take (tool schema, chars / 4); above it the
#: hop-by-hop form is offered. Measured: HPO's 13 walks cost ~750 tokens, MetaQA's 36 walks from a person ~2,000
#: (a 3,016-token prompt with the 1.5B model, over the 3,000 budget).
CHOICES_BUDGET_SHARE = 1 / 3


def plan_parameters(
    spec: type[PlanSpec],
    schema: GraphSchema,
    max_hops: int,
    linked: Sequence[Mapping[str, Any]],
    budget_tokens: int | None = None,
    preferred: Sequence[RankedWalk] = (),
) -> dict[str, Any]:
    """The plan tool's JSON schema narrowed to this graph: labels, relationship types and linked keys as
    enums, path counts and lengths bounded. Servers that constrain tool arguments by grammar (llama.cpp,
    vLLM) then cannot emit an unknown name at all; the others see the valid names in the schema. Validation
    (chaining, directions, targets) still runs on the reply. With walk choices (``path_choices``) the schema is
    one alternative per answer label, when it fits ``CHOICES_BUDGET_SHARE`` of ``budget_tokens``."""
    params = compact_schema(spec)
    props = params["properties"]
    labels, rels = schema.label_names(), schema.relation_names()
    if labels:
        props["target_type"] = {**props["target_type"], "anyOf": [{"type": "string", "enum": labels}, {"type": "null"}]}
    paths = props["relation_paths"]
    paths["maxItems"] = MAX_PLAN_PATHS
    items = paths["items"]  # hop lists or walk text: the hop-by-hop form here, walks below when offered
    hops = next(alt for alt in items.get("anyOf", [items]) if alt.get("type") == "array")
    paths["items"] = hops
    hops.update({"minItems": 1, "maxItems": max_hops})
    hop = hops["items"]["properties"]
    if rels:
        hop["rel"] = {**hop["rel"], "enum": rels}
    if labels:
        hop["to_label"] = {**hop["to_label"], "enum": labels}
    keys = list(dict.fromkeys(str(e.get("key")) for e in linked if e.get("key")))
    if "sources" in props and keys:
        props["sources"] = {**props["sources"], "items": {"type": "string", "enum": keys}, "maxItems": len(keys)}
    if "search_text" in props:
        props["search_text"] = {**props["search_text"], "anyOf": [{"type": "string", "maxLength": 200}, {"type": "null"}]}
    choices = path_choices(schema, linked, max_hops, preferred)
    if not choices:
        return params
    required = sorted({*params.get("required", []), "target_type", "relation_paths"})
    if preferred and len(choices) > 1:
        # the path planner's ranked walks: one schema listing them (best first) and the labels they reach;
        # validation checks that the chosen paths end at the chosen target (alternatives per label would
        # repeat the whole schema for each and overrun the prompt budget)
        ranked = [w for per in choices.values() for w in per]
        order = {walk_text(start, _steps_of(hops)): i for i, (start, hops) in enumerate(preferred)}
        ranked.sort(key=lambda text: order.get(text, len(order)))
        one = {**props, "target_type": {"type": "string", "enum": list(choices)},
               "relation_paths": {"type": "array", "items": {"type": "string", "enum": ranked},
                                  "maxItems": min(MAX_PLAN_PATHS, len(ranked)),
                                  "description": "walks from a linked entity's label, best first; each must end at target_type"}}
        offered_one = {**params, "properties": one, "required": required}
        if budget_tokens is None or len(json.dumps(offered_one)) / 4 <= budget_tokens * CHOICES_BUDGET_SHARE:
            return offered_one
        return params
    # one alternative per answer label: its walks only, so the paths cannot end anywhere else
    alternatives = []
    for label in labels:
        walks = list(choices.get(label, {}))
        paths_prop: dict[str, Any] = {"type": "array", "description": "walks from a linked entity's label to target_type"}
        if walks:
            paths_prop.update({"items": {"type": "string", "enum": walks}, "maxItems": min(MAX_PLAN_PATHS, len(walks))})
        else:
            paths_prop["maxItems"] = 0
        alternatives.append({
            **params,
            "properties": {**props, "target_type": {"const": label}, "relation_paths": paths_prop},
            "required": required,
        })
    offered = {"anyOf": alternatives}
    # the share was tuned on characters / 4 of this JSON (HPO's walks: ~750 of the model's own tokens); the shipped
    # WordPiece tokenizer counts walk text like "(A)<-[REL_NAME]-(B)" ~1.5x denser than Qwen's BPE, so a real count
    # here would drop HPO's walk choices, which made every plan valid -- the whole prompt is still budgeted in real tokens
    if budget_tokens is not None and len(json.dumps(offered)) / 4 > budget_tokens * CHOICES_BUDGET_SHARE:
        return params  # too many walks to spell out within the prompt budget: the hop-by-hop form
    return offered


@dataclass
class PlanOutcome:
    """The plan stage's result and its report (AgentResult.plan)."""

    target_type: str | None
    relation_paths: list[list[dict[str, str]]]
    sources: list[str] = field(default_factory=list)
    search_text: str | None = None
    report: dict[str, Any] = field(default_factory=dict)


def _plan_messages(
    question: str,
    schema: GraphSchema,
    linked: Sequence[Mapping[str, Any]],
    config: AgentConfig,
    once: bool,
    parameters: dict[str, Any],
    schema_text: str | None = None,
) -> list[BaseMessage]:
    """System (schema, rules: the same for every question, so servers reuse its cache) + question, sized so
    that they and the plan tool (``parameters``, from ``plan_parameters``) fit ``plan_prompt_tokens``."""
    spec: type[PlanSpec] = PlanOnceSpec if once else PlanSpec
    tool = tool_spec(spec, PLAN_TOOL, PLAN_TOOL_DESCRIPTION, parameters)
    tool_tokens = count_tokens(json.dumps(tool), config.model) if config.structured_output == "tool" else 0
    answer = (
        f"Call `{PLAN_TOOL}` with these fields."
        if config.structured_output == "tool"
        else "Answer with one JSON object with these fields and nothing else."
    )
    budget = config.plan_prompt_tokens - tool_tokens

    def size(messages: Sequence[BaseMessage]) -> int:
        return count_tokens(prompt_text(messages), config.model)

    def render(schema_body: str, entities: Sequence[Mapping[str, Any]]) -> list[BaseMessage]:
        system = render_prompt(
            "plan_request.md",
            schema=schema_body,
            max_hops=config.max_hops,
            once_fields=load_prompt("plan_once_fields.md").strip() if once else "",
            answer=answer,
        )
        # node names are data: JSON-quoted so text inside them reads as a value, not as instructions
        lines = "\n".join(f"- {e.get('key')} ({e.get('label')}): {quoted(e.get('name'))}" for e in entities)
        return [SystemMessage(system), HumanMessage(f"Question: {question}\nLinked entities:\n{lines or '(none)'}")]

    entities = list(linked)
    body = schema_text if schema_text is not None else schema.render()
    messages = render(body, entities)
    if size(messages) > budget and size(render(body, entities[:1])) > budget:
        # the schema alone is too long: names only, so the entities keep their room
        body = compact_schema_text(schema)
        messages = render(body, entities)
    while size(messages) > budget and entities:
        entities = entities[: len(entities) // 2] if len(entities) > 4 else entities[:-1]
        messages = render(body, entities)
    return messages


def llm_plan(
    model: BaseChatModel,
    question: str,
    schema: GraphSchema,
    linked: Sequence[Mapping[str, Any]],
    config: AgentConfig,
    usage: Usage,
    budget: Budget | None = None,
    *,
    once: bool = False,
    preferred: Sequence[RankedWalk] = (),
) -> PlanOutcome:
    """Ask the model for the plan through structured output, validate it against the graph schema,
    repair up to ``plan_repairs`` times (quoting the errors, with a compact schema), and return it.

    Raises PlannerError (a bad plan after the repairs; the report is on ``.outcome``) or
    PlannerCallError / BudgetSpentError (no usable reply at all).
    """
    budget = budget or Budget()
    spec: type[PlanSpec] = PlanOnceSpec if once else PlanSpec
    parameters = plan_parameters(spec, schema, config.max_hops, linked, config.plan_prompt_tokens, preferred)
    messages = _plan_messages(question, schema, linked, config, once, parameters)
    bound = bind_structured(model, spec, PLAN_TOOL, PLAN_TOOL_DESCRIPTION, config.structured_output, parameters)

    def invoke(history: Sequence[BaseMessage]) -> AIMessage:
        return budget.call(bound, history, config, usage)

    first_tokens = count_tokens(prompt_text(messages) + json.dumps(parameters), config.model)

    def shorter(history: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The repair keeps the first prompt when both calls fit ``plan_prompt_tokens`` (servers reuse the
        cached prefix, so the repair costs only the new turn); else it carries the schema as names only."""
        # the first call's prompt size as the server reported it, else the estimate
        replies = [m for m in history if isinstance(m, AIMessage)]
        meta: Mapping[str, Any] = (replies[0].usage_metadata or {}) if replies else {}
        first = int(meta.get("input_tokens", 0) or 0) or first_tokens
        # the model's rejected replies (and errors quoting them) are cut to the repair's share of the budget
        tail = fed_back_all(history[2:], REPAIR_TOKENS, config.model)
        if 2 * first + REPAIR_TOKENS <= config.plan_prompt_tokens:
            return [*history[:2], *tail]
        compact = _plan_messages(
            question, schema, linked, config, once, parameters, schema_text=compact_schema_text(schema)
        )
        return [compact[0], history[1], *tail]

    def validate(plan: PlanSpec) -> list[str]:
        slips.clear()  # only the accepted attempt's corrections are reported
        return validate_plan(plan, schema, config.max_hops, linked, slips, preferred)

    slips: list[str] = []  # slips corrected in the accepted plan (directions flipped, bad paths dropped)
    outcome = structured_call(
        invoke,
        messages,
        spec,
        tool_name=PLAN_TOOL,
        mode=config.structured_output,
        validate=validate,
        max_repairs=config.plan_repairs,
        repair_context=shorter,
    )
    report = {"mode": config.planner_mode, **outcome.report()}
    if outcome.value is not None:
        report["fixes"] = [*report["fixes"], *slips]
    if outcome.value is None:
        raise InvalidPlanError(
            f"plan invalid after {outcome.attempts} attempt(s): {' | '.join(outcome.errors)}", report
        )
    plan = outcome.value
    paths = [[step.model_dump() for step in path] for path in plan.relation_paths[:MAX_PLAN_PATHS] if path and not isinstance(path, str)]
    result = PlanOutcome(target_type=plan.target_type, relation_paths=paths, report=report)
    if isinstance(plan, PlanOnceSpec):
        result.sources = list(dict.fromkeys(plan.sources))
        result.search_text = (plan.search_text or "").strip()[:300] or None
    return result
