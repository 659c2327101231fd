"""The encoder probe: paraphrased clauses aligned with their named twins, and ranked through clause linking."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from evals.studies.encoder_probe import align, linker_probe


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_align_pairs_each_clause_with_the_twin_name_in_order_and_skips_miscounted_cases(tmp_path: Path) -> None:
    names = _write(tmp_path / "names.csv", [
        {"case_id": "c1", "target_type": "item", "style": "names",
         "query": "Which item has toaster, ceiling fan and blender?"},
        {"case_id": "c2", "target_type": "item", "style": "names", "query": "Which item has kettle and desk lamp?"},
    ])
    para = _write(tmp_path / "para.csv", [
        {"case_id": "c1", "target_type": "item",
         "query": "Which item has a small appliance that browns bread; paddles that spin overhead; and a jug that purees food?"},
        {"case_id": "c2", "target_type": "item", "query": "Which item has a pot that boils water, quickly?"},
    ])
    assert align(para, names) == [
        ("c1", "a small appliance that browns bread", "toaster"),
        ("c1", "paddles that spin overhead", "ceiling fan"),
        ("c1", "a jug that purees food", "blender"),
    ]  # c2: one clause for two names, skipped


@pytest.mark.integration
def test_linker_probe_ranks_clauses_through_the_phrase_vectors(catalog: Any) -> None:
    items = [
        ("a small appliance that browns slices of bread with radiant heat", "C_TOASTER"),
        ("a device that removes dust from carpets by suction", "C_VACUUM"),
        ("a device that removes dust from carpets by suction", "C_LAMP"),  # the wrong term: a miss
    ]
    res = linker_probe(catalog, items)
    assert res["n"] == 3
    assert res["acc@1"] == pytest.approx(2 / 3, abs=1e-3)
    assert res["acc@5"] >= res["acc@1"] and res["shortlisted"] >= res["acc@5"]
    assert res["model"] == catalog.embedder.model_name
