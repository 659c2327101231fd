"""The `ask` tool's model-facing result: the top answers first, compact, within a token budget.

Why not the whole `AgentResult`: measured with a 1.5B model behind a ReAct agent, the full result
(every context item with its provenance queries) costs thousands of tokens per call, and a small
model reading it loses the answer among the keys. Another agent needs the best answers' names (to
answer), their keys (to follow up with `search_nodes` or `cypher`) and one line saying why each was
ranked there; the rest of the ranking is one call away (``detail="full"``). The typed, lossless result
still travels beside the text as the tool message's artifact (and as MCP's structured content).

Evidence is computed from the graph, not from the agent's trace: the entities the question mentions
(the agent's linked entities) that are one edge away from the answer, with the relation types that
join them. An answer reached over a longer path, or by the text fallback, says how it was found.
Names and relation types come from the graph (untrusted data): they are cleaned, cut and emitted as
JSON strings, never as free text.

Every count goes through ``tools.results.estimate_tokens``, the one token counter the tools' budgets
use, so the ask result is measured exactly as the other tools' results are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from graphs.text_safety import clean_text
from tools.results import estimate_tokens

if TYPE_CHECKING:
    from agent.results import AgentResult, ContextItem
    from graphs.skb.model import SKB

#: Answers the compact result lists at most (a caller's `k` can lower it).
TOP_ANSWERS = 5
#: Default token budget of the compact result.
ASK_OUTPUT_TOKENS = 400
#: Linked entities named in one evidence line (the rest are counted).
EVIDENCE_NAMES = 3
#: Longest name a line shows (characters).
NAME_CHARS = 80
#: Neighbours looked at per answer and relation when evidence is computed (a hub has thousands).
MAX_NEIGHBOURS = 20_000

NOTE = (
    "These answer the question, best first. Reply to the user now with top_answer (and the next answers if "
    "the question asks for several). Call another tool only for a follow-up the user asks for: "
    "search_nodes with these keys, or ask with detail=full for the whole ranked list."
)


def _cut(text: object, limit: int = NAME_CHARS) -> str:
    flat = " ".join(clean_text(str(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def evidence_line(skb: SKB, item: ContextItem, linked: Mapping[str, str]) -> str:
    """One line saying why ``item`` is an answer: the question's entities one edge away from it (by
    relation type), else how the agent found it."""
    by_rel: dict[str, list[str]] = {}
    if item.key in skb.nodes:
        for rel, direction in skb.relations_at(item.key):
            near = skb.neighbor_keys(item.key, rel, direction)[:MAX_NEIGHBOURS]
            names = [linked[k] for k in dict.fromkeys(near) if k in linked]
            if names:
                by_rel.setdefault(rel, []).extend(n for n in names if n not in by_rel.get(rel, []))
    if by_rel:
        rel, names = max(by_rel.items(), key=lambda kv: len(kv[1]))
        shown = ", ".join(_cut(n, 40) for n in names[:EVIDENCE_NAMES])
        more = f" and {len(names) - EVIDENCE_NAMES} more" if len(names) > EVIDENCE_NAMES else ""
        others = f" (also {len(by_rel) - 1} other relation type(s))" if len(by_rel) > 1 else ""
        return f"{_cut(rel, 40)}: {shown}{more}{others}"
    tools = list(dict.fromkeys(p.tool for p in item.provenance))
    found = {"seed": "ranked by the agent", "sage": "a neighbour of a top answer", "fallback": "text search"}
    return f"{found.get(item.origin, item.origin)}" + (f" via {', '.join(tools)}" if tools else "")


def compact_answers(
    result: AgentResult,
    skb: SKB,
    linked_entities: Sequence[Mapping[str, Any]],
    *,
    top: int = TOP_ANSWERS,
    budget_tokens: int = ASK_OUTPUT_TOKENS,
) -> str:
    """Compact JSON: ``top_answer`` (the best answer's name, the one thing a model must copy),
    ``answers`` (rank, name, key, label, evidence; best first) as many as fit in ``budget_tokens`` (at
    least the first), ``more`` (how many ranked nodes are not shown) and ``note`` (what to do with them:
    reply; how to get the rest)."""
    linked = {str(e["key"]): _cut(e.get("name") or e["key"], 40) for e in linked_entities if e.get("key")}
    total = len(result.context)
    if total == 0:
        return _dump(
            {
                "answers": [],
                "note": "nothing found; rephrase the question with the names used in the graph, or use "
                "semantic_search on one entity at a time",
            }
        )
    kept: list[dict[str, Any]] = []
    top_name = _cut(result.context[0].name)
    used = estimate_tokens(_dump({"top_answer": top_name, "answers": [], "more": total, "note": NOTE}))
    for item in result.context[: max(1, top)]:
        row = {
            "rank": item.rank,
            "name": _cut(item.name),
            "key": _cut(item.key),
            "label": _cut(item.label, 40),
            "evidence": evidence_line(skb, item, linked),
        }
        cost = estimate_tokens(_dump(row)) + 1
        if kept and used + cost > budget_tokens:
            break
        kept.append(row)
        used += cost
    text = _dump({"top_answer": top_name, "answers": kept, "more": total - len(kept), "note": NOTE})
    while len(kept) > 1 and estimate_tokens(text) > budget_tokens:  # a real tokenizer's count is not a sum of parts
        kept.pop()
        text = _dump({"top_answer": top_name, "answers": kept, "more": total - len(kept), "note": NOTE})
    return text


def full_context(result: AgentResult, *, budget_tokens: int) -> str:
    """Compact JSON of the whole ranking (key, label, name, score, rank, origin, tools), as many items as
    fit in ``budget_tokens``, with ``omitted`` counting the rest."""
    head: dict[str, Any] = {
        "target_type": result.target_type,
        "relation_paths": [[_cut(step, 60) for step in path] for path in result.relation_paths[:5]],
    }
    total = len(result.context)
    kept: list[dict[str, Any]] = []
    hint = f"token budget {budget_tokens}: ask with a smaller k, or follow up on these keys with search_nodes"
    used = estimate_tokens(_dump({**head, "context": [], "omitted": total, "note": hint}))
    for item in result.context:
        row = {
            "rank": item.rank,
            "key": _cut(item.key),
            "label": _cut(item.label, 40),
            "name": _cut(item.name),
            "score": round(item.score, 4),
            "origin": item.origin,
            "tools": list(dict.fromkeys(p.tool for p in item.provenance)),
        }
        cost = estimate_tokens(_dump(row)) + 1
        if kept and used + cost > budget_tokens:
            break
        kept.append(row)
        used += cost
    def render(rows: list[dict[str, Any]]) -> str:
        out: dict[str, Any] = {**head, "context": rows}
        if len(rows) < total:
            out["omitted"] = total - len(rows)
            out["note"] = hint
        return _dump(out)

    text = render(kept)
    while len(kept) > 1 and estimate_tokens(text) > budget_tokens:  # a real tokenizer's count is not a sum of parts
        kept.pop()
        text = render(kept)
    return text


__all__ = ["ASK_OUTPUT_TOKENS", "TOP_ANSWERS", "compact_answers", "evidence_line", "full_context"]
