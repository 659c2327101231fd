"""The offline planner's relation-path walks: one ``cypher`` call per predicted path, then ``finish``.

Why apart from ``paths``: the walk step needs both the path planner and the topic choice
(``topics``), which itself scores topics with the path planner; kept here, neither imports the other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent.planning.paths import Hop, RelPath, planner_for, walk_query
from agent.planning.topics import choose_topic_for_paths
from graphs.skb.model import SKB

#: Scored candidate paths reported per question (the best ``paths_walked`` of them are walked).
EXPLAINED_PATHS = 5

#: Tool-call id prefix of path walks, so the finishing round can find their results (the planner is stateless).
WALK_ID = "offline_path_"


def _rows_of(message: Any) -> list[list[Any]]:
    """Rows of a cypher tool result, whatever form the tool message carries them in."""
    data: Any = getattr(message, "artifact", None)
    if data is not None and not isinstance(data, Mapping):
        dump = getattr(data, "model_dump", None)
        data = dump() if callable(dump) else None
    if data is None:
        try:
            data = json.loads(str(message.content))
        except (TypeError, ValueError):
            return []
    rows = data.get("rows") if isinstance(data, Mapping) else None
    return [r for r in rows if isinstance(r, list) and r] if isinstance(rows, list) else []


def plan_paths_from(skb: SKB, label: str, paths: Sequence[Sequence[Mapping[str, Any]]]) -> list[RelPath]:
    """The plan's relation paths whose first hop leaves ``label`` (by the schema's label patterns)."""
    from agent.scoring.ontology import schema_for  # cached per SKB

    starts: dict[tuple[str, str], set[str]] = {}
    for r in schema_for(skb).relations:
        starts.setdefault((r.rel, "out"), set()).add(r.src_label)
        starts.setdefault((r.rel, "in"), set()).add(r.dst_label)
    out: list[RelPath] = []
    for raw in paths:
        hops = tuple(
            Hop(rel=str(s.get("rel")), direction="in" if s.get("direction") == "in" else "out",
                to_label=str(s.get("to_label")))
            for s in raw
        )
        if hops and label in starts.get((hops[0].rel, hops[0].direction), set()) and hops not in out:
            out.append(hops)
    return out


def path_walk_message(bundle: Any, plan: Mapping[str, Any], messages: Sequence[Any]) -> Any | None:
    """The offline planner's next message when relation-path planning applies, else None.

    Round 0: one ``cypher`` call per predicted path (the profile's ``paths_walked`` best), each
    walking its whole path server-side. Next round: ``finish`` with every end node of the best path
    that returned rows (ranked by the number of walks reaching it), then those of the next paths.
    """
    from langchain_core.messages import AIMessage, ToolMessage

    planner = planner_for(bundle)
    if planner is None:
        return None
    question = str(plan.get("question") or "")
    linked = [e for e in plan.get("linked_entities") or [] if isinstance(e, Mapping)]
    topic = choose_topic_for_paths(question, linked, planner)
    if topic is None or str(topic.get("key")) not in bundle.skb.nodes:
        return None
    start = _plan_start(messages)
    rounds = sum(1 for m in messages[start:] if isinstance(m, AIMessage) and m.tool_calls)
    limit = int(plan.get("per_call_k") or 20)
    if rounds == 0:
        key = str(topic["key"])
        label = bundle.skb.nodes[key].label
        walks: list[RelPath]
        explained: dict[str, Any] | None = None
        if plan.get("walk_plan_paths"):
            # plan-once: walk the model's paths (validated against the schema) that start at the topic
            walks = plan_paths_from(bundle.skb, label, plan.get("relation_paths") or [])
            if not walks:
                return None
        else:
            walked = planner.profile.planner.paths_walked
            scored = planner.predict(question, key, str(topic.get("mention") or "") or None,
                                     top=max(EXPLAINED_PATHS, walked))
            walks = [sp.path for sp in scored[:walked]]
            # why a path won: the scored candidates travel with the message (trace, AgentResult.path_scores)
            explained = {
                "topic": key,
                "walked": walked,
                "candidates": [
                    {"path": [h.spec() for h in sp.path], "score": sp.score,
                     "parts": {k: round(v, 4) for k, v in sp.parts.items()}}
                    for sp in scored
                ],
            }
        if not walks:
            return None
        calls = [
            {
                "name": "cypher",
                "args": {"query": walk_query(label, path, limit), "params": {"key": key}, "max_rows": limit},
                "id": f"{WALK_ID}{i}",
                "type": "tool_call",
            }
            for i, path in enumerate(walks)
        ]
        return AIMessage(content="", tool_calls=calls,
                         additional_kwargs={"path_scores": explained} if explained is not None else {})
    results: dict[int, list[list[Any]]] = {}
    for m in messages[start:]:
        if isinstance(m, ToolMessage) and str(m.tool_call_id).startswith(WALK_ID):
            suffix = str(m.tool_call_id)[len(WALK_ID):]
            if suffix.isdigit():
                results[int(suffix)] = _rows_of(m)
    if not results:
        return None  # not our conversation (e.g. the plan changed): let the general rules run
    keys: list[str] = []
    topic_key = str(topic["key"])
    skb: SKB = bundle.skb
    for rank in sorted(results):
        found = [
            (row[0], float(row[1]) if len(row) > 1 and isinstance(row[1], int | float) else 0.0)
            for row in results[rank]
            if isinstance(row[0], str) and row[0] != topic_key and row[0] in skb.nodes
        ]
        # more walks first; among equals the better-connected node (a prominence prior: with a
        # name shared by several entities, the answer is more often the commoner one)
        found.sort(key=lambda kw: (-kw[1], -_degree(skb, kw[0]), kw[0]))
        for key, _ in found:
            if key not in keys:
                keys.append(key)
    keys = keys[:FINISH_KEYS]
    scores = [round(1.0 - i / (len(keys) + 1), 6) for i in range(len(keys))]
    args = {"keys": keys, "scores": scores, "confidence": 0.9 if keys else None}
    return AIMessage(content="", tool_calls=[
        {"name": "finish", "args": args, "id": f"{WALK_ID}finish", "type": "tool_call"}
    ])


#: Keys ``finish`` returns after a path walk (more than k: metrics may look further).
FINISH_KEYS = 100


def _degree(skb: SKB, key: str) -> int:
    return skb.degree(key)


def _plan_start(messages: Sequence[Any]) -> int:
    from langchain_core.messages import HumanMessage

    start = 0
    for i, message in enumerate(messages):
        if isinstance(message, HumanMessage) and "<plan>" in str(message.content):
            start = i + 1
    return start


#: Walks the LLM planner is offered when a graph has more than its prompt can spell out.
RANKED_WALKS = 10


def ranked_walks(bundle: Any, question: str, linked: Sequence[Mapping[str, Any]],
                 top: int = RANKED_WALKS) -> list[tuple[str, list[dict[str, str]]]]:
    """The path planner's best walks from the question's topic entity, best first, as ``(start label,
    hops)``; empty when relation-path planning is off or no topic is linked.

    Why: a graph with more walks than fit a plan prompt (dozens from one entity) used to get the hop-by-hop
    form, which a small model fails; ranked by the same scorer the offline planner walks with, the best
    few become the choices, so the model chooses among existing walks instead of writing hops."""
    planner = planner_for(bundle)
    if planner is None or not linked:
        return []
    topic = choose_topic_for_paths(question, [e for e in linked if isinstance(e, Mapping)], planner)
    if topic is None or str(topic.get("key")) not in bundle.skb.nodes:
        return []
    key = str(topic.get("key"))
    label = bundle.skb.nodes[key].label
    scored = planner.predict(question, key, str(topic.get("mention") or "") or None, top=top)
    return [(label, sp.as_steps()) for sp in scored]
