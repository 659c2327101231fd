"""The phrase index of an update keeps the rows of nodes whose own phrases did not change (their text changed with a
neighbour's name only), and replaces those of the nodes whose names or definitions did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphs.build import IndexConfig, build_index
from graphs.embedding.embedder import get_embedder
from graphs.index.phrases import PhraseIndex
from graphs.loaders.jsonl import load_jsonl
from graphs.update import parse_changes
from graphs.update.changes import apply_changes
from graphs.update.phrase_patch import patch_phrases
from tests.small_graphs import catalog_skb

pytestmark = pytest.mark.integration

EDIT = {"op": "upsert", "node": {"key": "C_TOASTER", "label": "Category",
                                 "props": {"name": "toaster oven", "gloss": "An oven that toasts and bakes."}}}


def test_only_the_nodes_whose_phrases_changed_get_new_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("graphs.update.phrase_patch.REBUILD_SHARE", 100.0)
    index_dir = tmp_path / "index"
    build_index(catalog_skb(), index_dir, IndexConfig(dataset="catalog", store="none", embedder="hash:64"))
    parent_skb = load_jsonl(index_dir / "skb")
    changed_skb, report = apply_changes(parent_skb, parse_changes(json.dumps(EDIT).encode()))
    changed = report.changed_nodes | {"C_APPL", "C_KETTLE"}  # as neighbours whose text names the edited node
    embedder = get_embedder("hash:64")
    parent = PhraseIndex.load(index_dir / "phrases", embedder.dim)
    rows = {key: [i for i, k in enumerate(parent.keys) if k == key] for key in ("C_TOASTER", "C_APPL", "C_KETTLE")}
    assert all(rows.values())

    kept = patch_phrases(index_dir / "phrases", changed_skb, changed, embedder, parent_skb=parent_skb)
    assert kept is not None
    for key in ("C_APPL", "C_KETTLE"):  # the same rows, still theirs
        assert [i for i, k in enumerate(kept.keys) if k == key] == rows[key]
    assert all(kept.keys[i] == "" for i in rows["C_TOASTER"])  # the edited node's old rows are blanked ...
    new_rows = [i for i, k in enumerate(kept.keys) if k == "C_TOASTER"]
    assert new_rows and min(new_rows) >= len(parent.keys)  # ... and its new phrases appended

    every = patch_phrases(index_dir / "phrases", changed_skb, changed, embedder)  # without the parent's graph
    assert every is not None
    assert all(every.keys[i] == "" for key in ("C_APPL", "C_KETTLE") for i in rows[key])
