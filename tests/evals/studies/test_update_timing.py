"""The update timing study draws its change set from any graph (here: an orchard's labels and relations) and
times a real update on a copy, leaving the index it was given untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.studies import update_timing
from graphs.build import IndexConfig, build_index
from graphs.manifest import Manifest
from tests import small_graphs


def test_the_change_set_comes_from_the_graph_and_the_copy_is_updated(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    index = tmp_path / "index"
    skb = small_graphs.orchard_skb()
    build_index(skb, index, IndexConfig(dataset="orchard", store="none", embedder="hash:32"))
    generation = Manifest.read(index).generation
    lines = update_timing.change_lines(index, nodes=5, seed=3)
    ops = [(line["op"], "node" if "node" in line else "edge") for line in lines]
    assert ops.count(("upsert", "node")) == 4 and ops.count(("delete", "node")) == 1  # 3 edited, 1 added
    for line in lines:
        if line["op"] == "upsert" and "edge" in line:
            assert line["edge"]["rel"] in {e.rel for e in skb.edges}
    assert update_timing.main(["--index", str(index), "--copy", str(tmp_path / "work"), "--nodes", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "applied" and out["deleted_nodes"] == 1 and out["wall_s"] > 0
    assert set(out["build_timings_s"]) >= {"embed", "hnsw", "bm25"}
    assert Manifest.read(index).generation == generation  # the given index was not written
