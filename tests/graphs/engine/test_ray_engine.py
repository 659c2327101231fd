"""The Ray build engine on a local Ray (the session's ``ray_local``) against the in-process build of the same
graph: BM25 exactly equal, dense search and similarity edges the same up to HNSW's approximation; the
stages as plain functions give the same BM25 as the one-process index; a missing ray names the extra."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from agent.cli import app
from evals.studies.scale.generate import generate
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.engine.stages import bm25_terms, merged_terms, partitions
from graphs.errors import ConfigError
from graphs.index.bm25 import BM25Index
from graphs.loaders.jsonl import load_jsonl
from graphs.manifest import Manifest
from graphs.sage.edges import SimilarityConfig
from graphs.skb.model import SKB

runner = CliRunner()


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SKB]:
    root = tmp_path_factory.mktemp("ray-graph")
    generate(1500, root / "data", seed=5)
    return root, load_jsonl(root / "data")


def _questions(skb: SKB) -> list[str]:
    keys = list(skb.nodes)
    return [skb.node_text(k)[:80] for k in keys[::50]]


def test_bm25_from_partitions_scores_as_the_one_process_index(graph: tuple[Path, SKB]) -> None:
    _, skb = graph
    keys = list(skb.nodes)
    labels = [skb.nodes[k].label for k in keys]
    texts = [skb.node_text(k) for k in keys]
    one = BM25Index.build(keys, labels, texts)
    parts = [bm25_terms(texts[a:b], "english", "en") for a, b in partitions(len(texts), 5)]
    vocab, docs = merged_terms(parts)
    merged = BM25Index.from_terms(keys, labels, vocab, docs, stemmer="english", stopwords="en")
    for question in _questions(skb):
        assert np.array_equal(one.scores(question), merged.scores(question)), question
    # the same counts as the one-process index's, term for term (the two number the words differently)
    one_vocab = one._retriever.vocab_dict  # the words as the one-process index numbered them
    assert one.doc_terms is not None and sorted(vocab) == sorted(w for w in one_vocab if w)
    word_of = {i: w for w, i in vocab.items()}
    one_word = {i: w for w, i in one_vocab.items()}
    for row in range(0, len(keys), 7):
        a, b = slice(*one.doc_terms.ptr[row:row + 2]), slice(*docs.ptr[row:row + 2])
        assert sorted(zip([one_word[int(t)] for t in one.doc_terms.terms[a]], one.doc_terms.counts[a].tolist())) == \
            sorted(zip([word_of[int(t)] for t in docs.terms[b]], docs.counts[b].tolist()))
        assert list(docs.terms[b]) == sorted(docs.terms[b])


def _compact_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_sharded_similarity_knn_finds_the_one_graph_pairs(graph: tuple[Path, SKB]) -> None:
    from graphs.embedding.embedder import embed_all, get_embedder
    from graphs.engine.stages import knn_merge, knn_shard
    from graphs.sage.edges import knn_candidate_pairs

    _, skb = graph
    vectors = embed_all(get_embedder("hash:64"), [skb.node_text(k) for k in list(skb.nodes)[:900]])
    src, dst = knn_candidate_pairs(vectors, 10)
    parts = [knn_shard(vectors, a, b, 11) for a, b in partitions(len(vectors), 3)]
    s_src, s_dst = knn_merge(parts, 10)
    assert s_src.tolist() == src.tolist() and not (s_src == s_dst).any()
    # the k-th similarity of every row as good as the one graph's (ties make the keys themselves arbitrary)
    sims = np.einsum("ij,ij->i", vectors[src], vectors[dst]).reshape(-1, 10)
    s_sims = np.einsum("ij,ij->i", vectors[s_src], vectors[s_dst]).reshape(-1, 10)
    assert np.mean(s_sims.min(axis=1) >= sims.min(axis=1) - 1e-6) >= 0.99


@pytest.mark.integration
def test_ray_build_answers_as_the_in_process_build(graph: tuple[Path, SKB], ray_local: Any) -> None:
    from graphs.engine.ray_engine import RayEngine

    root, skb = graph
    config = IndexConfig(dataset="gen", embedder="hash:64", store="none",
                         similarity=SimilarityConfig(percentile=95))
    build_index(skb, root / "local", config)
    stages: list[str] = []
    engine = RayEngine(shards=2)
    try:
        build_index(skb, root / "ray", config, progress=lambda stage, d, t: stages.append(stage), engine=engine)
        assert engine.compact_parts(skb) is None  # the compact SKB is written here, as in-process
    finally:
        engine.close()
    assert ray_local.is_initialized()  # the engine leaves a Ray it did not start running
    assert {"embed", "hnsw", "bm25", "similarity"} <= set(stages)
    manifest = Manifest.read(root / "ray")
    assert len(manifest.extra["hnsw_shards"]) == 2
    manifest.verify(root / "ray", full=True)
    compact = [_compact_files(root / name / "skb" / "compact") for name in ("local", "ray")]
    assert compact[0].keys() == compact[1].keys() and [n for n in compact[0] if compact[0][n] != compact[1][n]] == []

    local, ray = IndexBundle.open(root / "local", store="none"), IndexBundle.open(root / "ray", store="none")
    try:
        assert ray.hnsw.sharded and not local.hnsw.sharded
        found = total = 0
        for question in _questions(skb):
            exact = [(h.key, h.score) for h in local.search(question, mode="bm25", k=20)]
            assert [(h.key, h.score) for h in ray.search(question, mode="bm25", k=20)] == exact
            one = local.hnsw.search(local.embedder.embed_query(question), 20)
            many = ray.hnsw.search(ray.embedder.embed_query(question), 20)
            found += sum(1 for _, sim in many if sim >= one[-1][1] - 1e-6)
            total += len(one)
        assert found / total >= 0.99
    finally:
        local.close()
        ray.close()
    edges = [{(e["src"], e["dst"]) for e in _similar(root / name)} for name in ("local", "ray")]
    assert edges[0] and len(edges[0] & edges[1]) / len(edges[0] | edges[1]) >= 0.9


def _similar(index: Path) -> list[dict[str, Any]]:
    import gzip

    with gzip.open(index / "sage" / "edges.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_the_ray_engine_without_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from graphs.engine import open_engine

    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'skb-agent\[ray\]'"):
        open_engine("ray")
    result = runner.invoke(app, ["index", "--dataset", "jsonl", "--data", str(tmp_path / "none"),
                                 "--index-dir", str(tmp_path / "index"), "--engine", "ray"])
    assert result.exit_code == 2, result.output


def test_ray_address_needs_the_ray_engine(tmp_path: Path) -> None:
    result = runner.invoke(app, ["index", "--dataset", "jsonl", "--data", str(tmp_path),
                                 "--index-dir", str(tmp_path / "index"), "--ray-address", "auto"])
    assert result.exit_code == 2 and "--engine ray" in result.stderr, result.output


@pytest.mark.integration
def test_a_ray_stage_that_fails_says_which_and_why(ray_local: Any, tmp_path: Path) -> None:
    from graphs.engine.ray_engine import RayEngine
    from graphs.errors import EngineError
    from graphs.manifest import HNSWParams

    out = tmp_path / "hnsw"
    out.mkdir()
    (out / "shard-001").write_text("a file where the second shard's directory goes\n")
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(400, 16)).astype(np.float32)
    keys = [f"k{i}" for i in range(400)]
    with pytest.raises(EngineError) as info:
        RayEngine(shards=2).hnsw(keys, ["A"] * 400, vectors, HNSWParams(), out)
    msg = str(info.value)
    assert "Ray HNSW stage failed" in msg and "FileExistsError" in msg and "unchanged" in msg, msg


def test_the_default_build_path_never_imports_ray() -> None:
    import subprocess

    code = ("import sys, graphs.build, graphs.engine, agent.cli.index; "
            "graphs.engine.open_engine('local'); print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
