"""Guided loop mode: a planner round a small model can drive.

Why: free loop mode hands the model every tool with free-form arguments and a message list that grows
each round; a 1.5B model then invents keys and relation names, and by round three its prompt no longer
fits the time a slow machine gives it. Here each round

* offers tool schemas whose arguments are enums of what exists now: keys seen so far (linked entities
  and the best candidates, capped), relation types valid from those keys' labels, the graph's labels,
  and ``finish`` keys drawn from the candidates -- a grammar-constrained server cannot emit anything
  else, and the others see the valid values spelled out;
* offers the offline planner's next actions as a numbered menu (``pick``), so choosing is enough;
* shows a bounded state block (plan, one line per earlier call, the candidates) instead of the message
  history, cut to ``guided_state_tokens`` with the real token count: every round's prompt is bounded.

The module builds the round's view, schemas and text, and turns the model's reply into the tool calls the
graph runs; ``agent.graph`` does the calling, budgeting and repairs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphs.errors import GuidedCallError
from graphs.skb.model import GraphSchema
from graphs.text_safety import clean_text, quoted
from graphs.tokens import count_tokens

#: The menu tool's name.
PICK_TOOL = "pick"
#: Tools a guided round offers (cypher stays with free loop mode: writing a query is what a small model fails at;
#: the offline planner's own queries still reach the model through the menu).
GUIDED_TOOLS = (PICK_TOOL, "search_nodes", "semantic_search", "finish")
#: Most keys offered to ``search_nodes`` (linked entities first, then the best candidates).
MAX_KEYS = 24
#: Most candidates offered to ``finish`` and listed in the state block.
MAX_FINISH = 20
#: Most menu options.
MAX_OPTIONS = 6
#: Most earlier calls the state block lists (the latest ones).
MAX_HISTORY = 8
#: Longest node name shown.
NAME_CHARS = 60


@dataclass
class RoundView:
    """What exists for this round's arguments: the enums of the round's schemas."""

    keys: list[str]
    labels_of: dict[str, str]
    relations: list[str]
    labels: list[str]
    finish_keys: list[str]
    menu: list[list[dict[str, Any]]] = field(default_factory=list)
    rels_of_label: dict[str, list[str]] = field(default_factory=dict)
    reach: list[str] = field(default_factory=list)
    """Labels one hop from the offered keys' labels: the ``search_nodes`` target labels that can match."""

    def relations_for(self, keys: Sequence[str]) -> list[str]:
        """The offered relations that start or end at the labels of ``keys``."""
        out: set[str] = set()
        for key in keys:
            out.update(self.rels_of_label.get(self.labels_of.get(key, ""), []))
        return sorted(out)

    def to_json(self) -> dict[str, Any]:
        return {"keys": len(self.keys), "relations": self.relations, "labels": self.labels,
                "finish_keys": len(self.finish_keys), "options": len(self.menu)}


def relations_from(schema: GraphSchema, labels: Sequence[str]) -> list[str]:
    """Relation types with an edge that starts or ends at one of ``labels`` (either direction walks it)."""
    wanted = set(labels)
    return sorted({r.rel for r in schema.relations if r.src_label in wanted or r.dst_label in wanted})


def labels_next_to(schema: GraphSchema, labels: Sequence[str]) -> list[str]:
    """Labels at the other end of an edge that starts or ends at one of ``labels``."""
    wanted = set(labels)
    out = {r.dst_label for r in schema.relations if r.src_label in wanted}
    out.update(r.src_label for r in schema.relations if r.dst_label in wanted)
    return sorted(out)


def ranked_candidates(candidates: Mapping[str, Mapping[str, Any]], target: str | None) -> list[str]:
    """Candidate keys best first, the answer label's first (the ones ``finish`` should name)."""
    def order(item: tuple[str, Mapping[str, Any]]) -> tuple[int, float, str]:
        key, c = item
        return (0 if target is None or c.get("label") == target else 1, -float(c.get("score", 0.0)), key)

    return [key for key, _ in sorted(candidates.items(), key=order)]


def round_view(
    schema: GraphSchema,
    linked: Sequence[Mapping[str, Any]],
    candidates: Mapping[str, Mapping[str, Any]],
    target: str | None,
    proposal: Sequence[Mapping[str, Any]],
) -> RoundView:
    """The round's enums from the state: linked keys, then candidates; relations valid from their labels."""
    labels_of: dict[str, str] = {}
    for e in linked:
        if e.get("key") and e.get("label"):
            labels_of.setdefault(str(e["key"]), str(e["label"]))
    ranked = ranked_candidates(candidates, target)
    for key in ranked:
        if len(labels_of) >= MAX_KEYS:
            break
        labels_of.setdefault(key, str(candidates[key].get("label", "")))
    keys = list(labels_of)
    # the planner's own finish first (a path walk ranks the ends of its walks; the pool's scores tie them)
    proposed = [str(k) for c in proposal if c.get("name") == "finish" for k in (c.get("args") or {}).get("keys") or []]
    typed = [k for k in ranked if target is None or candidates[k].get("label") == target]
    finish_keys = list(dict.fromkeys(k for k in [*proposed, *typed] if k in candidates))[:MAX_FINISH]
    menu = menu_options(proposal, finish_keys)
    key_labels = sorted(set(labels_of.values()))
    return RoundView(
        keys=keys,
        labels_of=labels_of,
        relations=relations_from(schema, key_labels),
        labels=schema.label_names(),
        finish_keys=finish_keys,
        menu=menu,
        rels_of_label={label: relations_from(schema, [label]) for label in key_labels},
        reach=labels_next_to(schema, key_labels),
    )


def menu_options(proposal: Sequence[Mapping[str, Any]], finish_keys: Sequence[str]) -> list[list[dict[str, Any]]]:
    """The offline planner's turn as options: the whole turn first, then each of its calls alone, then
    ``finish`` with the candidates (when the turn does not already finish). The calls keep the planner's
    ids: its next turn reads their results by id (a path walk finishes with the ends of its walks; run
    under other ids, the walk's results went unread and the planner searched again instead)."""
    calls = [{"name": str(c["name"]), "args": dict(c.get("args") or {}), **({"id": str(c["id"])} if c.get("id") else {})}
             for c in proposal]
    options: list[list[dict[str, Any]]] = []
    if calls:
        options.append(calls)
    if len(calls) > 1:
        options.extend([c] for c in calls)
    if finish_keys and not any(c["name"] == "finish" for c in calls):
        options.append([{"name": "finish", "args": {"keys": list(finish_keys[:10])}}])
    return options[:MAX_OPTIONS]


def _enum_list(values: Sequence[str], description: str, max_items: int | None = None) -> dict[str, Any]:
    prop: dict[str, Any] = {"type": "array", "items": {"type": "string", "enum": list(values)},
                            "description": description, "minItems": 1}
    if max_items is not None:
        prop["maxItems"] = max_items
    return prop


def _function(name: str, description: str, properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": list(required), "additionalProperties": False}}}


def round_tools(view: RoundView, per_call_k: int, menu_only: bool = False) -> list[dict[str, Any]]:
    """The round's tool schemas (OpenAI function specs): only what exists in ``view``; a tool with nothing
    to choose from is left out (no keys: no ``search_nodes``; no candidates: no ``finish``). ``menu_only``
    (with a menu): ``pick`` and ``finish`` alone."""
    menu_only = menu_only and bool(view.menu)
    # the schemas that change least come first: a server that caches prompt prefixes reuses them across rounds
    tools: list[dict[str, Any]] = [] if menu_only else [_function("semantic_search", "Find nodes whose text matches a description.", {
        "text": {"type": "string", "minLength": 1, "maxLength": 200},
        "label": {"type": "string", "enum": view.labels},
        "k": {"type": "integer", "minimum": 1, "maximum": per_call_k},
    }, ["text"])]
    if view.keys and view.relations and not menu_only:
        tools.append(_function("search_nodes", "Expand keys one hop along relation types.", {
            "keys": _enum_list(view.keys, "keys to expand", MAX_KEYS),
            "rel_types": _enum_list(view.relations, "relation types to follow"),
            "direction": {"type": "string", "enum": ["out", "in", "both"]},
            "target_label": {"type": "string", "enum": view.reach or view.labels, "description": "label of the nodes wanted"},
        }, ["keys", "rel_types"]))
    if view.finish_keys:
        tools.append(_function("finish", "End with answer keys, best first.", {
            "keys": _enum_list(view.finish_keys, "answer keys, best first", MAX_FINISH),
        }, ["keys"]))
    if view.menu:
        tools.append(_function(PICK_TOOL, "Run one option of the menu.", {
            "option": {"type": "integer", "enum": list(range(1, len(view.menu) + 1)), "description": "option number"}
        }, ["option"]))
    return tools



def read_call(
    call: Mapping[str, Any], view: RoundView, per_call_k: int, menu_only: bool = False
) -> list[dict[str, Any]]:
    """The tool calls to run for the model's ``call`` (a menu option expands to its calls), checked against
    the round's enums and tools. Raises GuidedCallError naming the bad value and the valid ones."""
    name = str(call.get("name") or "")
    args = dict(call.get("args") or {})
    if menu_only and view.menu and name not in {PICK_TOOL, "finish"}:
        raise GuidedCallError(f"tool {name!r} is not offered this round; call {PICK_TOOL} with an option number or finish")
    if name == PICK_TOOL:
        option = args.get("option")
        if not isinstance(option, int) or not 1 <= option <= len(view.menu):
            raise GuidedCallError(f"pick: option {option!r} is not on the menu; choose 1..{len(view.menu)}")
        return [dict(c) for c in view.menu[option - 1]]
    if name == "search_nodes":
        keys = [str(k) for k in args.get("keys") or []]
        bad = [k for k in keys if k not in view.labels_of]
        if not keys or bad:
            raise GuidedCallError(f"search_nodes: keys {bad or '[]'} not offered; use keys from: {', '.join(view.keys[:12])}")
        rels = [str(r) for r in args.get("rel_types") or []]
        valid = set(view.relations_for(keys))
        unknown = [r for r in rels if r not in set(view.relations)]
        if unknown or not rels:
            raise GuidedCallError(f"search_nodes: rel_types {unknown or '[]'} not offered; valid: {', '.join(view.relations)}")
        kept = [r for r in rels if r in valid]
        if not kept:
            raise GuidedCallError(
                f"search_nodes: none of {rels} starts or ends at the labels of {keys}; valid for them: {', '.join(sorted(valid))}"
            )
        out: dict[str, Any] = {"keys": keys, "rel_types": kept, "direction": args.get("direction") or "both"}
        if out["direction"] not in ("out", "in", "both"):
            raise GuidedCallError(f"search_nodes: direction {out['direction']!r}; use out, in or both")
        label = args.get("target_label")
        if label is not None:
            reach = view.reach or view.labels
            if label not in set(reach):
                raise GuidedCallError(f"search_nodes: target_label {label!r} is not one hop from these keys; valid: {', '.join(reach)}")
            out["target_label"] = label
        return [{"name": name, "args": out}]
    if name == "semantic_search":
        text = " ".join(str(args.get("text") or "").split())[:200]
        if not text:
            raise GuidedCallError("semantic_search: text is empty; describe the nodes wanted in a few words")
        out = {"text": text, "k": max(1, min(per_call_k, int(args.get("k") or per_call_k)))}
        label = args.get("label")
        if label is not None:
            if label not in set(view.labels):
                raise GuidedCallError(f"semantic_search: label {label!r} unknown; valid: {', '.join(view.labels)}")
            out["label"] = label
        return [{"name": name, "args": out}]
    if name == "finish":
        keys = [str(k) for k in args.get("keys") or []]
        bad = [k for k in keys if k not in set(view.finish_keys)]
        if not keys or bad:
            raise GuidedCallError(f"finish: keys {bad or '[]'} are not candidates; use keys from: {', '.join(view.finish_keys[:12])}")
        return [{"name": name, "args": {"keys": list(dict.fromkeys(keys))}}]
    offered = [t for t in GUIDED_TOOLS if t != "finish" or view.finish_keys]
    raise GuidedCallError(f"unknown tool {name!r}; call one of: {', '.join(offered)}")


#: Arguments a call line leaves out: injected ones, and numbers that only tune a call (the model does not choose them).
_QUIET_ARGS = frozenset({"question", "step", "scores", "confidence", "rank", "include_triples", "limit", "max_rows"})


def describe_call(call: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """One call as a short line: ``search_nodes(keys=[K1 "name", +2], rel_types=[R], direction=in)``."""
    parts: list[str] = []
    for arg, value in (call.get("args") or {}).items():
        if arg in _QUIET_ARGS:
            continue
        if arg == "keys" and isinstance(value, list):
            shown = [f"{k} {quoted(_short(names.get(str(k), '')))}" if names.get(str(k)) else str(k) for k in value[:3]]
            more = f", +{len(value) - 3}" if len(value) > 3 else ""
            parts.append(f"keys=[{', '.join(shown)}{more}]")
        elif isinstance(value, list):
            more = f", +{len(value) - 6}" if len(value) > 6 else ""  # a membership list holds up to 1,000 keys
            parts.append(f"{arg}=[{', '.join(str(v) for v in value[:6])}{more}]")
        elif isinstance(value, str):
            parts.append(f"{arg}={quoted(_short(value, 120))}")
        else:
            parts.append(f"{arg}={json.dumps(value)}")
    return f"{call.get('name')}({', '.join(parts)})"


def _short(text: str, limit: int = NAME_CHARS) -> str:
    text = " ".join(clean_text(str(text)).split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def state_block(
    *,
    question: str,
    target: str | None,
    paths: Sequence[str],
    linked: Sequence[Mapping[str, Any]],
    history: Sequence[Mapping[str, Any]],
    candidates: Sequence[tuple[str, str, str, float]],
    view: RoundView,
    names: Mapping[str, str],
    round_no: int,
    max_rounds: int,
    budget_tokens: int,
    model: str | None = None,
    error: str | None = None,
) -> tuple[str, int]:
    """The round's user message: question, plan, earlier calls, candidates, menu -- cut to ``budget_tokens``
    (real tokens for ``model``) by listing fewer candidates, entities and earlier calls, never by cutting a line.

    ``candidates`` are (key, label, name, score), best first; ``history`` rows are the graph's observations
    (tool, args, nodes, error). Returns the text and how many menu options it shows (the ``pick`` enum
    must offer those only)."""

    def render(n_cand: int, n_linked: int, n_hist: int, n_menu: int) -> str:
        lines = [f"Question: {quoted(question)}", f"Answer label: {target or '(unknown)'}"]
        if paths:
            lines.append("Plan: " + "; ".join(paths[:3]))
        if linked:
            lines.append("Linked entities:")
            lines.extend(f"- {e.get('key')} ({e.get('label')}) {quoted(_short(str(e.get('name', ''))))}"
                         for e in linked[:n_linked])
            if len(linked) > n_linked:
                lines.append(f"- ... {len(linked) - n_linked} more")
        lines.append(f"Round {round_no} of {max_rounds}. Earlier steps:" if history else f"Round {round_no} of {max_rounds}.")
        for row in list(history)[-n_hist:] if n_hist else []:
            found = f"error {row['error'].get('type')}" if row.get("error") else f"{row.get('nodes', 0)} new nodes"
            lines.append(f"- {describe_call({'name': row.get('tool'), 'args': row.get('args')}, names)} -> {found}")
        if candidates:
            lines.append(f"Candidates ({len(candidates)}, best first):")
            lines.extend(f"- {k} ({label}) {quoted(_short(name))} {score:.2f}" for k, label, name, score in candidates[:n_cand])
        else:
            lines.append("Candidates: none yet.")
        if view.menu:
            lines.append("Menu:")
            for i, option in enumerate(view.menu[:n_menu], 1):
                lines.append(f"{i}. " + " + ".join(describe_call(c, names) for c in option))
        if error:
            lines.append(f"Your last call was rejected: {error}")
        lines.append("Call one tool now.")
        return clean_text("\n".join(lines))

    n_cand, n_linked = min(len(candidates), 10), min(len(linked), 8)
    n_hist, n_menu = min(len(history), MAX_HISTORY), len(view.menu)
    text = render(n_cand, n_linked, n_hist, n_menu)
    # the core (question, plan, the first menu option) is always kept; the rest shrinks until it fits
    while count_tokens(text, model) > budget_tokens and (n_cand or n_linked > 1 or n_hist or n_menu > 1):
        if n_cand > 3:
            n_cand -= 2
        elif n_hist > 1:
            n_hist -= 1
        elif n_menu > 2:
            n_menu -= 1
        elif n_linked > 1:
            n_linked = max(1, n_linked // 2)
        elif n_cand:
            n_cand -= 1
        elif n_hist:
            n_hist = 0
        else:
            n_menu = 1
        text = render(n_cand, n_linked, n_hist, n_menu)
    return text, n_menu
