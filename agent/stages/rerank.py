"""LLM reranking of the top candidates: pointwise, listwise or pairwise.

Why three modes: they spend the model differently. *Pointwise* asks for one relevance score per
candidate (n calls, short prompts, no comparison between candidates); *listwise* shows all n and
asks for an order (one call, the longest prompt, the model compares directly); *pairwise* asks
"which of these two?" for adjacent pairs in bottom-up passes, as in pairwise ranking prompting
(n - 1 calls per pass, each pass carries the best candidate to the top). Small models are often
better at the short pairwise question than at producing a long permutation.

Tolerance: a reply that cannot be read never loses candidates or invents order.
- pointwise: if any candidate's score is unusable, the original order is kept (a partial set of
  scores would rank scored and unscored candidates on different footings); the note names them;
- listwise: candidate numbers that are unknown or repeated are ignored; candidates the model left
  out keep their original relative order after the ones it ranked; no number at all keeps the
  original order;
- pairwise: an unreadable comparison means "no swap".
Each reply is read as the forced tool call first, then as near-JSON text, then by a lenient
pattern (numbers in order; a lone A/B). Every prompt has a token budget in real tokens
(``graphs.tokens``, as the constraint prompt): what is left of ``rerank_prompt_tokens`` after the
instructions, the question and the candidates' names is shared by their texts, each cut to its share
(characters / 4 undercounted JSON-dense and non-English text by up to 2x on the local model).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from agent.llm.structured import bind_structured, read_structured
from graphs.text_safety import quoted
from graphs.tokens import count_tokens
from prompts import render_prompt

RerankMode = Literal["pointwise", "listwise", "pairwise"]
#: Fewest tokens of a candidate's text shown, whatever the budget (a little context beside its name).
MIN_CANDIDATE_TOKENS = 20
#: Tokens a candidate's line costs beyond its header and text (numbering, quotes, newline).
LINE_TOKENS = 6


class PointScore(BaseModel):
    score: float = Field(ge=0, le=10, description="relevance of the candidate to the question, 0 (none) to 10")


class ListOrder(BaseModel):
    order: list[int] = Field(description="candidate numbers, most relevant first")


class PairChoice(BaseModel):
    better: Literal["A", "B"] = Field(description="the candidate that answers the question better")


TOOLS: dict[RerankMode, tuple[str, type[BaseModel], str]] = {
    "pointwise": ("score_candidate", PointScore, "Submit the relevance score."),
    "listwise": ("order_candidates", ListOrder, "Submit the candidate numbers, most relevant first."),
    "pairwise": ("choose_candidate", PairChoice, "Submit the better candidate."),
}


@dataclass
class Candidate:
    key: str
    label: str
    name: str
    text: str


@dataclass
class RerankOutcome:
    """The new order (indices into the input), and what happened on the way."""

    order: list[int]
    calls: int = 0
    valid_calls: int = 0
    """Calls whose reply was usable as it stood (a score; a list of known, distinct numbers; A or B):
    the measure of how well a model answers the mode's question."""
    notes: list[str] = field(default_factory=list)
    changed: bool = False

    def report(self, mode: str, keys: Sequence[str]) -> dict[str, Any]:
        return {
            "mode": mode,
            "candidates": len(keys),
            "calls": self.calls,
            "valid_calls": self.valid_calls,
            "changed": self.changed,
            "order": [keys[i] for i in self.order],
            "notes": list(self.notes),
        }


Invoke = Callable[[Sequence[BaseMessage]], AIMessage]


def _fit(text: str, tokens: int) -> str:
    """``text`` as quoted data (``quoted``: escapes cost tokens too), cut to its longest prefix (with an
    ellipsis) whose quoted form is at most ``tokens`` real tokens."""
    whole = quoted(text)
    if count_tokens(whole) <= tokens:
        return whole
    lo, hi = 1, len(text)  # bisection on the cut: counts grow with the prefix
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(quoted(text[:mid] + "\u2026")) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return quoted(text[:lo] + "\u2026")


def _header(candidate: Candidate) -> str:
    return f"{quoted(candidate.name)} ({candidate.label}): "


def _render(candidate: Candidate, tokens: int) -> str:
    return _header(candidate) + _fit(candidate.text, tokens)


def _text_share(budget: int, fixed: str, shown: Sequence[Candidate]) -> int:
    """Tokens each shown candidate's text may take: the budget less the fixed text (instructions,
    question) and the candidates' headers, shared evenly."""
    spent = count_tokens(fixed) + sum(count_tokens(_header(c)) + LINE_TOKENS for c in shown)
    return max(MIN_CANDIDATE_TOKENS, (budget - spent) // max(1, len(shown)))


def _answer_line(mode: RerankMode, structured: str) -> str:
    tool, _, _ = TOOLS[mode]
    return f"Call `{tool}`." if structured == "tool" else "Answer with one JSON object only."


def _read(reply: AIMessage, mode: RerankMode) -> BaseModel | None:
    """The reply as the mode's schema: tool call, near-JSON text, or a lenient pattern."""
    tool, schema, _ = TOOLS[mode]
    value, _, _ = read_structured(reply, schema, tool)
    if value is not None:
        return value
    text = str(reply.text) or " ".join(str(c.get("args")) for c in reply.invalid_tool_calls)
    if mode == "listwise":  # "[3] > [1] > [2]", "3, 1, 2", a bare JSON list...
        numbers = [int(n) for n in re.findall(r"\d+", text)]
        return ListOrder(order=numbers) if numbers else None
    if mode == "pairwise":
        found = re.findall(r"\b([AB])\b", text)
        return PairChoice(better=found[0]) if len(set(found)) == 1 else None  # type: ignore[arg-type]
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(?:/\s*10)?\s*\.?\s*", text)
    if match and float(match.group(1)) <= 10:
        return PointScore(score=float(match.group(1)))
    return None


def rerank(
    mode: RerankMode,
    question: str,
    candidates: Sequence[Candidate],
    invoke_for: Callable[[RerankMode], Invoke],
    *,
    budget_tokens: int,
    structured: str = "tool",
    passes: int = 1,
) -> RerankOutcome:
    """Reorder ``candidates`` for ``question``; ``invoke_for(mode)`` gives the (bound, budgeted)
    model call. Call errors (PlannerError, BudgetSpentError) propagate to the caller, which keeps
    the original order; what the model said before stays in ``RerankOutcome`` only on success."""
    n = len(candidates)
    outcome = RerankOutcome(order=list(range(n)))
    if n < 2:
        return outcome
    invoke = invoke_for(mode)
    system = render_prompt(f"rerank_{mode}.md", answer=_answer_line(mode, structured))
    if mode == "pointwise":
        _pointwise(question, candidates, invoke, system, budget_tokens, outcome)
    elif mode == "listwise":
        _listwise(question, candidates, invoke, system, budget_tokens, outcome)
    else:
        _pairwise(question, candidates, invoke, system, budget_tokens, passes, outcome)
    outcome.changed = outcome.order != list(range(n))
    return outcome


def _pointwise(
    question: str, candidates: Sequence[Candidate], invoke: Invoke, system: str, budget: int, out: RerankOutcome
) -> None:
    scores: list[float | None] = []
    for candidate in candidates:
        share = _text_share(budget, f"{system}\nQuestion: {quoted(question)}\nCandidate: ", [candidate])
        human = f"Question: {quoted(question)}\nCandidate: {_render(candidate, share)}"
        reply = invoke([SystemMessage(system), HumanMessage(human)])
        out.calls += 1
        value = _read(reply, "pointwise")
        out.valid_calls += isinstance(value, PointScore)
        scores.append(value.score if isinstance(value, PointScore) else None)
    bad = [candidates[i].key for i, s in enumerate(scores) if s is None]
    if bad:
        out.notes.append(f"pointwise: no usable score for {bad}; kept the original order")
        return
    out.order = sorted(range(len(candidates)), key=lambda i: (-float(scores[i] or 0.0), i))


def _listwise(
    question: str, candidates: Sequence[Candidate], invoke: Invoke, system: str, budget: int, out: RerankOutcome
) -> None:
    n = len(candidates)
    share = _text_share(budget, f"{system}\nQuestion: {quoted(question)}\nCandidates:\n", candidates)
    lines = "\n".join(f"[{i}] {_render(c, share)}" for i, c in enumerate(candidates, 1))
    reply = invoke([SystemMessage(system), HumanMessage(f"Question: {quoted(question)}\nCandidates:\n{lines}")])
    out.calls += 1
    value = _read(reply, "listwise")
    if not isinstance(value, ListOrder):
        out.notes.append("listwise: the reply held no candidate numbers; kept the original order")
        return
    ranked: list[int] = []
    ignored: list[int] = []
    for number in value.order:
        if 1 <= number <= n and number - 1 not in ranked:
            ranked.append(number - 1)
        else:
            ignored.append(number)
    if not ranked:
        out.notes.append(f"listwise: no valid candidate number in {value.order[:20]}; kept the original order")
        return
    missing = [i for i in range(n) if i not in ranked]
    if ignored:
        out.notes.append(f"listwise: ignored unknown or repeated numbers {ignored[:20]}")
    out.valid_calls += not ignored
    if missing:
        out.notes.append(f"listwise: {len(missing)} candidate(s) not ranked by the model kept their order after the ranked")
    out.order = ranked + missing


def _pairwise(
    question: str,
    candidates: Sequence[Candidate],
    invoke: Invoke,
    system: str,
    budget: int,
    passes: int,
    out: RerankOutcome,
) -> None:
    fixed = f"{system}\nQuestion: {quoted(question)}\nA: \nB: "
    order = list(range(len(candidates)))
    unreadable = 0
    for _ in range(passes):
        swapped = False
        for i in range(len(order) - 2, -1, -1):  # bottom-up: the best climbs to the top in one pass
            a, b = candidates[order[i]], candidates[order[i + 1]]
            share = _text_share(budget, fixed, [a, b])
            human = f"Question: {quoted(question)}\nA: {_render(a, share)}\nB: {_render(b, share)}"
            reply = invoke([SystemMessage(system), HumanMessage(human)])
            out.calls += 1
            value = _read(reply, "pairwise")
            if not isinstance(value, PairChoice):
                unreadable += 1
                continue
            out.valid_calls += 1
            if value.better == "B":
                order[i], order[i + 1] = order[i + 1], order[i]
                swapped = True
        if not swapped:
            break
    if unreadable:
        out.notes.append(f"pairwise: {unreadable} comparison(s) unreadable; those pairs kept their order")
    out.order = order


def bind_for(model: Any, structured: str) -> Callable[[RerankMode], Any]:
    """The model bound to answer through the mode's tool (or unchanged in text mode)."""

    def bound(mode: RerankMode) -> Any:
        tool, schema, description = TOOLS[mode]
        return bind_structured(model, schema, tool, description, structured)  # type: ignore[arg-type]

    return bound
