"""Dice-Sorensen overlap fusion (issue 14 item 6): hand-computed cases for ``dice_fuse``, the real
index path (``IndexBundle.search(fusion="dice")``), ``skb search --fusion`` and the agent fallback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from graphs.errors import ConfigError
from graphs.index.hybrid import content_words, dice, dice_fuse
from tests.paths import DATA

CASES: list[dict[str, Any]] = json.loads((DATA / "dice_cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_hand_computed_cases(case: dict[str, Any]) -> None:
    triples = [(key, text) for key, text in case["triples"]]
    got = dice_fuse(case["question"], case["passages"], triples, case["dense"], weight=case["weight"], k=case.get("k"))
    assert [k for k, _ in got] == [k for k, _ in case["expected"]]
    for (_, score), (_, want) in zip(got, case["expected"], strict=True):
        assert score == pytest.approx(want, abs=1e-12)


def test_content_words_and_dice() -> None:
    assert content_words("The HAS_PHENOTYPE of X-linked genes") == {"phenotype", "x", "linked", "genes"}
    assert dice(frozenset({"a", "b"}), frozenset({"b", "c", "d"})) == pytest.approx(2 * 1 / 5)
    assert dice(frozenset(), frozenset()) == 0.0


def test_precomputed_words_equal_text() -> None:
    text = dice_fuse("red eyes", {"a": "red eyes here"}, [("b", "red")])
    words = dice_fuse("red eyes", {"a": content_words("red eyes here")}, [("b", frozenset({"red"}))])
    assert text == words


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"weight": 1.5}, "weight must be in"), ({"k": -1}, "k must be"), ({"triples": [("a",)]}, "triple #0")],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"passages": {"a": "x"}, "triples": [], **kwargs}
    with pytest.raises(ConfigError, match=message):
        dice_fuse("x", **args)


def test_bundle_dice_search_credits_triples(hpo_bundle: Any) -> None:
    """On the fixture: "Marfan syndrome" with weight 0 ranks by overlap alone. The best hybrid hit is
    the disease Marfan syndrome; its edge FBN1 -ASSOCIATED_WITH-> Marfan syndrome verbalises to
    {fbn1, associated, marfan, syndrome}: T(FBN1) = 2*2/(2+4) = 2/3, above FBN1's own long text."""
    hits = hpo_bundle.search("Marfan syndrome", mode="hybrid", k=5, label="Gene", weight=0.0, fusion="dice")
    assert hits[0].key == "FBN1"
    assert hits[0].score == pytest.approx(2 / 3)
    assert all(h.label == "Gene" for h in hits)
    # weight 1: dense alone, so the top score is FBN1's cosine to the query
    dense = hpo_bundle.search("Marfan syndrome", mode="hybrid", k=3, label="Gene", weight=1.0, fusion="dice")
    cosine = float(hpo_bundle.hnsw.vector(dense[0].key) @ hpo_bundle.embedder.embed_query("Marfan syndrome"))
    assert dense[0].score == pytest.approx(cosine, abs=1e-5)


def test_bundle_rejects_unknown_fusion(hpo_bundle: Any) -> None:
    with pytest.raises(ConfigError, match="unknown fusion 'borda'"):
        hpo_bundle.search("Marfan", fusion="borda")


def test_skb_search_fusion_option(hpo_index_dir: Path) -> None:
    from agent.cli.main import app

    runner = CliRunner()
    out = runner.invoke(app, ["search", "Marfan syndrome", "--index-dir", str(hpo_index_dir), "--type", "Gene",
                              "--fusion", "dice", "--weight", "0", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["fusion"] == "dice" and data["hits"][0]["key"] == "FBN1"
    rrf = runner.invoke(app, ["search", "Marfan syndrome", "--index-dir", str(hpo_index_dir), "--fusion", "rrf",
                              "--json"])
    assert rrf.exit_code == 0, rrf.output
    assert json.loads(rrf.stdout)["fusion"] == "rrf"
    bad = runner.invoke(app, ["search", "Marfan", "--index-dir", str(hpo_index_dir), "--fusion", "borda"])
    assert bad.exit_code != 0 and "unknown --fusion 'borda'" in bad.output
    wrong_mode = runner.invoke(app, ["search", "Marfan", "--index-dir", str(hpo_index_dir), "--mode", "bm25",
                                     "--fusion", "dice"])
    assert wrong_mode.exit_code != 0 and "--mode hybrid" in wrong_mode.output


def test_agent_fallback_uses_the_configured_fusion(hpo_bundle: Any) -> None:
    """The fallback's search follows ``fallback_fusion`` (set per call through ``configurable``)."""
    from langchain_core.messages import AIMessage

    from agent.api import build_agent
    from agent.config import AgentConfig
    from agent.fake_llm import ScriptedChatModel

    def empty_finish() -> AIMessage:
        return AIMessage("", tool_calls=[{"name": "finish", "args": {"keys": []}, "id": "f1", "type": "tool_call"}])

    question = "Marfan syndrome"
    cfg = AgentConfig(policy="never", k=4, max_entities=0)
    runs = {}
    for fusion in ("minmax", "dice"):
        agent = build_agent(cfg, bundle=hpo_bundle, chat_model=ScriptedChatModel([empty_finish()]))
        state = agent.invoke({"question": question}, {"configurable": {"fallback_fusion": fusion}})
        runs[fusion] = state["result"]
    label = runs["dice"].target_type
    want = [h.key for h in hpo_bundle.search(question, k=4, label=label, fusion="dice")]
    assert [i.key for i in runs["dice"].context] == want
    assert runs["dice"].context[0].provenance[0].tool == "hybrid_search:dice"
    assert runs["minmax"].context[0].provenance[0].tool == "hybrid_search"
    assert [i.key for i in runs["dice"].context] != [i.key for i in runs["minmax"].context]
