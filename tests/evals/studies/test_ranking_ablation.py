"""evals.studies.ranking_ablation: twins pair by case and target type; a sweep links each question once and ranks the
twins beside the questions (real linker and scoring on the catalog graph of tests/small_graphs.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.linking.entities import EntityLinker
from evals.studies.ranking_ablation import LinkCache, evaluate, twin_rows


def _row(query: str, case: str, style: str, target: str = "product", answer: str = "P_BREAKFAST") -> dict[str, str]:
    return {"query": query, "answer_ids": json.dumps([answer]), "target_type": target, "style": style, "case_id": case}


def test_twins_pair_by_case_and_target_type_and_keep_the_rows_order() -> None:
    rows = [_row("q1", "c1", "paraphrased"), _row("q2", "c2", "paraphrased"), _row("q3", "", "paraphrased"),
            _row("q4", "c1", "paraphrased", target="Category")]
    twins = [_row("t2", "c2", "names"), _row("t1-layperson", "c1", "layperson"), _row("t1", "c1", "names"),
             _row("t1-cat", "c1", "names", target="category")]
    paired = twin_rows(rows, twins, "names")
    assert [r["query"] for r in paired] == ["t1", "t2", "t1-cat"]  # no case id, no twin: skipped
    assert {r["style"] for r in paired} == {"twin:names"}
    assert [r["query"] for r in twin_rows(rows[:1], twins, None)] == ["t1-layperson"]  # any style: the first


@pytest.mark.integration
def test_a_sweep_links_once_and_reports_the_twins_beside_the_questions(
    catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [_row("Which product is for something that boils water and something that browns bread slices?",
                 "c1", "paraphrased")]
    twins = twin_rows(rows, [_row("Which product has a kettle and a toaster?", "c1", "names")], "names")
    calls: list[str] = []
    real_link = EntityLinker.link

    def counting(self: EntityLinker, question: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(question)
        return real_link(self, question, *args, **kwargs)

    monkeypatch.setattr(EntityLinker, "link", counting)
    links: LinkCache = {}
    first = evaluate(catalog, rows + twins, AgentConfig(), links=links)
    again = evaluate(catalog, rows + twins, AgentConfig(size_penalty=0.0, partial_credit_power=3.0), links=links)
    assert len(calls) == 2  # each question linked once: the second setting changes scoring only
    assert first["twin:names"]["product"]["hit@1"] == 1.0 == again["twin:names"]["product"]["hit@1"]
    assert first["paraphrased"]["product"]["n"] == 1
    evaluate(catalog, rows, AgentConfig(clause_candidates=1), links=links)
    assert len(calls) == 3  # another linking setting links again
