"""Clause linking swapped for a study: another encoder's phrase vectors, both fused, or gold links."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.linking.entities import EntityLinker
from evals.studies.clause_linking_swap import clause_encoder, gold_terms, main, oracle_links
from tests.paths import DATA

QUESTION = json.loads((DATA / "clause_cases.json").read_text(encoding="utf-8"))["link"][0]["question"]


def _links(bundle: Any, question: str = QUESTION) -> list[tuple[str, int | None]]:
    return [(e.key, e.group) for e in EntityLinker(bundle).link(question, 20, clauses=AgentConfig().clause_settings())]


@pytest.mark.integration
def test_swapping_in_the_same_encoder_and_phrases_changes_no_link(catalog: Any) -> None:
    before = _links(catalog)
    assert any(group is not None for _, group in before)  # the question has described clauses
    with clause_encoder(catalog.index_dir / "phrases", "minilm"):
        assert _links(catalog) == before
    with clause_encoder(catalog.index_dir / "phrases", "minilm", fuse=0.5):
        assert _links(catalog) == before  # an encoder fused with itself ranks as it does alone
    with clause_encoder(catalog.index_dir / "phrases", "minilm", fuse=0.5, combine="max"):
        assert _links(catalog) == before  # and so does the union of its shortlist with itself
    unknown: Any = "sum"
    with pytest.raises(ValueError, match="combine"), clause_encoder(catalog.index_dir / "phrases", "minilm", 0.5, combine=unknown):
        _links(catalog)
    assert _links(catalog) == before  # restored


def test_combine_without_fuse_is_refused_with_what_to_add(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--combine", "max", "--", "--bench", "b.csv"])
    assert exited.value.code == 2
    assert "give --fuse W with it" in capsys.readouterr().err


@pytest.mark.integration
def test_oracle_replaces_completes_or_cuts_the_vocabulary_links(catalog: Any) -> None:
    question = "Which product has a small appliance that browns slices of bread, and a desk lamp?"
    found = {k for k, _ in _links(catalog, question)}
    assert "C_LAMP" in found
    gold = {question: {"blender", "desk lamp"}}
    with oracle_links(gold, "Category", "gold"):
        assert {k for k, _ in _links(catalog, question)} == {"C_BLENDER", "C_LAMP"}
    with oracle_links(gold, "Category", "keep"):
        assert {k for k, _ in _links(catalog, question)} == {"C_LAMP"}
    with oracle_links(gold, "Category", "add"):
        assert {k for k, _ in _links(catalog, question)} == found | {"C_BLENDER"}
    with pytest.raises(ValueError, match="oracle mode"), oracle_links(gold, "Category", "all"):
        pass


def test_gold_terms_come_from_the_named_twin_of_each_case(tmp_path: Path) -> None:
    def write(name: str, rows: list[dict[str, str]]) -> Path:
        with (tmp_path / name).open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        return tmp_path / name

    twins = write("names.csv", [{"case_id": "a", "target_type": "item", "style": "names", "query": "Which has toaster and desk lamp?"}])
    bench = write("para.csv", [
        {"case_id": "a", "target_type": "item", "query": "Which has a device browning bread; and a table light?"},
        {"case_id": "b", "target_type": "item", "query": "Which has a fan?"},
    ])
    assert gold_terms(bench, twins) == {"Which has a device browning bread; and a table light?": {"toaster", "desk lamp"}}
