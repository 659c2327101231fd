"""An index's HNSW parameters follow its size where the config leaves them unset (``sized_params``): a large index
builds its graphs with fewer candidates and searches them with more; the manifest, the saved index and an update
keep what the build used; a config that sets them keeps its values at any size."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphs.build import IndexConfig, build_index
from graphs.index import hnsw_params
from graphs.index.hnsw import HNSWIndex
from graphs.index.hnsw_params import LARGE_EF, LARGE_EF_CONSTRUCTION, LARGE_INDEX, sized_params
from graphs.manifest import Manifest
from tests.store_fixtures import tiny_skb


def test_the_defaults_follow_the_size_and_given_values_are_kept() -> None:
    small = sized_params(LARGE_INDEX, M=32, ef_construction=None, ef=None)
    assert (small.ef_construction, small.ef) == (200, 128)
    large = sized_params(LARGE_INDEX + 1, M=32, ef_construction=None, ef=None, global_graph=False)
    assert (large.M, large.ef_construction, large.ef, large.global_graph) == (32, LARGE_EF_CONSTRUCTION, LARGE_EF, False)
    assert LARGE_EF_CONSTRUCTION < 200 and LARGE_EF > 128  # fewer candidates inserting, more searching
    given = sized_params(5_000_000, M=16, ef_construction=300, ef=64)
    assert (given.M, given.ef_construction, given.ef) == (16, 300, 64)


def test_a_large_build_records_and_searches_with_the_large_parameters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = IndexConfig(dataset="tiny", embedder="hash:64", store="none")
    build_index(tiny_skb(), tmp_path / "small", config)
    small = Manifest.read(tmp_path / "small").hnsw
    assert (small.ef_construction, small.ef) == (200, 128)
    monkeypatch.setattr(hnsw_params, "LARGE_INDEX", 4)  # the 8-node graph counts as large
    build_index(tiny_skb(), tmp_path / "large", config)
    manifest = Manifest.read(tmp_path / "large")
    assert (manifest.hnsw.ef_construction, manifest.hnsw.ef) == (LARGE_EF_CONSTRUCTION, LARGE_EF)
    assert manifest.extra["config"]["hnsw_ef"] is None  # the config keeps "by size", the manifest what was used
    loaded = HNSWIndex.load(tmp_path / "large" / "hnsw")
    assert (loaded.params.ef_construction, loaded.params.ef) == (LARGE_EF_CONSTRUCTION, LARGE_EF)
    assert all(graph.ef == LARGE_EF for graph in (loaded.graph(label) for label in loaded.label_names()))
    build_index(tiny_skb(), tmp_path / "given", config.model_copy(update={"hnsw_ef_construction": 50, "hnsw_ef": 40}))
    given = Manifest.read(tmp_path / "given").hnsw
    assert (given.ef_construction, given.ef) == (50, 40)
