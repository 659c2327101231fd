"""A model's own reply, resent in later prompts, is cut to the prompt's token budget.

In loop mode each reply joins the history every later call resends; a plan repair resends the rejected
reply. Only the number of calls was bounded: one 5 MB reply made each later request 5 MB larger.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent import AgentConfig, ask
from agent.llm.feedback import cut_text
from graphs.tokens import count_tokens
from tests.openai_stub import Stub, completion

pytestmark = pytest.mark.integration

HUGE = "All work and no play makes Jack a dull boy. " * 120_000  # ~5 MB


def _config(stub: Stub, **overrides: Any) -> AgentConfig:
    base = {"planner": "openai", "model": "stub-model", "base_url": stub.url, "policy": "never", "llm_backoff_initial_s": 0.01}
    return AgentConfig.model_validate({**base, **overrides})


def _size(request: dict[str, Any]) -> int:
    return len(json.dumps(request["body"]))


def test_cut_text_fits_the_budget_by_the_real_tokenizer() -> None:
    cut = cut_text(HUGE, 300)
    assert cut.endswith("\u2026") and HUGE.startswith(cut[:-1])
    assert 250 <= count_tokens(cut) <= 300
    assert cut_text("short", 300) == "short"


def test_loop_mode_resends_a_huge_reply_cut(openai_stub: Stub, hpo_bundle: Any) -> None:
    search = json.dumps({"text": "Marfan syndrome", "label": "Disease", "k": 2})
    openai_stub.replies = [
        completion(content=HUGE, calls=[("semantic_search", search)]),
        completion(content=HUGE, calls=[("semantic_search", json.dumps({"text": HUGE[:400_000], "k": 2}))]),
        completion(calls=[("finish", json.dumps({"keys": ["OMIM:154700"]}))]),
    ]
    cfg = _config(openai_stub, planner_mode="loop", tool_output_tokens=500)
    ask("Which disease has arachnodactyly, like Marfan syndrome?", bundle=hpo_bundle, config=cfg)
    sizes = [_size(r) for r in openai_stub.requests]
    assert len(sizes) >= 3
    assert max(sizes[1:]) < 100_000, f"request sizes {sizes}: the model's 5 MB reply was resent"


def test_plan_repair_resends_a_huge_rejected_plan_cut(openai_stub: Stub, hpo_bundle: Any) -> None:
    bad = json.dumps({"target_type": "Illness " + HUGE, "relation_paths": []})
    openai_stub.replies = [
        completion(content=HUGE, calls=[("submit_plan", bad)]),
        completion(calls=[("submit_plan", bad)]),
        completion(calls=[("finish", json.dumps({"keys": ["OMIM:154700"]}))]),
    ]
    ask("Marfan syndrome", bundle=hpo_bundle, config=_config(openai_stub, plan_prompt_tokens=3000))
    repair = openai_stub.requests[1]
    assert _size(repair) < 100_000, f"the repair request is {_size(repair):,} bytes"
