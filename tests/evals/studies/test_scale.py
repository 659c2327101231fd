"""Scale runs: the graph generator, the fast deterministic embedder, and the hierarchy bound that keeps
the stored scoring models linear in the graph's size."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from agent.scoring.hierarchy import MAX_ANCESTORS
from agent.scoring.ontology import MAX_MEAN_ANCESTORS, closure_within, detect_hierarchy
from evals.studies.scale.generate import RELATIONS, TYPES, generate
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.embedding.embedder import DEFAULT_EMBEDDER, get_embedder
from graphs.embedding.hashing import HashEmbedder
from graphs.errors import ConfigError
from graphs.loaders.jsonl import load_jsonl
from graphs.skb.model import SKB, Edge, Node


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_generator_is_deterministic_for_a_seed(tmp_path: Path) -> None:
    a, b, c = (generate(2000, tmp_path / name, seed=seed) for name, seed in (("a", 7), ("b", 7), ("c", 8)))
    assert a == b
    files_a, files_b, files_c = _files(tmp_path / "a"), _files(tmp_path / "b"), _files(tmp_path / "c")
    nodes = {name: gzip.decompress(files_a[name]) for name in ("nodes.jsonl.gz", "edges.jsonl.gz")}
    assert nodes == {name: gzip.decompress(files_b[name]) for name in nodes}
    assert files_a["schema.json"] == files_b["schema.json"]
    assert gzip.decompress(files_c["edges.jsonl.gz"]) != nodes["edges.jsonl.gz"]  # the seed matters
    assert c.nodes == a.nodes


def test_generated_graph_has_the_shape_of_a_semi_structured_kb(tmp_path: Path) -> None:
    summary = generate(5000, tmp_path, seed=0)
    skb = load_jsonl(tmp_path)
    assert len(skb.nodes) == summary.nodes == 5000
    assert len(skb.edges) == summary.edges
    assert 8.5 <= summary.edges / summary.nodes <= 11.0  # about ten edges per node
    assert set(summary.per_label) == {label for label, *_ in TYPES}
    assert set(summary.per_rel) == {rel for rel, *_ in RELATIONS}
    schema = skb.schema()
    assert {(r.rel, r.src_label, r.dst_label) for r in schema.relations} == {
        (rel, src, dst) for rel, src, dst, *_ in RELATIONS}
    in_degree = Counter(e.dst for e in skb.edges if e.rel == "CITES")
    degrees = np.asarray(sorted(in_degree.values(), reverse=True))
    assert degrees[0] > 20 * np.median(degrees)  # power law: hubs far above the typical node
    texts = [skb.node_text(k) for k in list(skb.nodes)[:50]]
    assert all(len(t.split()) >= 2 for t in texts)  # every node carries text
    assert len({(a.src, a.rel, a.dst) for a in skb.edges}) == len(skb.edges)  # no parallel duplicates


def test_generator_refuses_a_size_too_small(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="too small"):
        generate(5, tmp_path)


def test_hash_embedder_is_deterministic_unit_length_and_lexical() -> None:
    emb = HashEmbedder(64)
    texts = ["alpha beta gamma", "alpha beta delta", "omega psi chi", ""]
    a, b = emb.embed(texts), HashEmbedder(64).embed(texts)
    assert a.dtype == np.float32 and a.shape == (4, 64)
    assert np.array_equal(a, b)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert a[0] @ a[1] > a[0] @ a[2]  # shared words -> closer
    assert np.array_equal(emb.embed_query("alpha beta gamma"), a[0])
    assert emb.model_name == "feature-hash-64"


def test_hash_embedder_is_only_chosen_explicitly() -> None:
    assert not DEFAULT_EMBEDDER.startswith("hash")
    assert IndexConfig().embedder == DEFAULT_EMBEDDER
    emb = get_embedder("hash:32", cache_dir=Path("/nonexistent"))  # never cached: nothing is written
    assert isinstance(emb, HashEmbedder) and emb.dim == 32
    with pytest.raises(ConfigError, match="hash:<dim>"):
        get_embedder("hash:big")
    with pytest.raises(ConfigError, match=r"\[8, 4096\]"):
        get_embedder("hash:2")


def test_generated_graph_builds_and_answers_with_the_hash_embedder(tmp_path: Path) -> None:
    generate(400, tmp_path / "data", seed=1)
    skb = load_jsonl(tmp_path / "data")
    build_index(skb, tmp_path / "index", IndexConfig(dataset="jsonl", store="none", embedder="hash:32"))
    bundle = IndexBundle.open(tmp_path / "index")
    key, node = next((k, n) for k, n in skb.nodes.items() if n.label == "Document")
    hits = bundle.search(str(node.props["description"]), mode="vss", k=3)
    assert hits[0].key == key  # the same text embeds to the same vector
    assert bundle.manifest.embedder_model == "feature-hash-32"
    bundle.close()


def _graph(parents: dict[str, list[str]], label: str = "Item", rel: str = "LINKS_TO") -> SKB:
    keys = sorted(set(parents) | {p for ps in parents.values() for p in ps})
    skb = SKB("generated")
    for key in keys:
        skb.add_node(Node(key, label, {"name": key}))
    skb.edges = [Edge(c, rel, p) for c, ps in parents.items() for p in ps]
    return skb


def test_a_taxonomy_is_a_hierarchy_and_a_dense_network_is_not() -> None:
    tree = {f"t{i}": [f"t{(i - 1) // 2}"] for i in range(1, 200)}  # binary tree, child -> parent
    found = detect_hierarchy(_graph(tree), "Item")
    assert found is not None and (found.rel, found.narrow_to_broad) == ("LINKS_TO", "out")
    rng = np.random.default_rng(0)
    n = 400  # every node links to 8 random others: the closure reaches almost all of them
    network = {f"n{i}": [f"n{j}" for j in rng.choice(n, 8, replace=False) if j != i] for i in range(n)}
    assert detect_hierarchy(_graph(network, "Record", "REFERS_TO"), "Record") is None


def test_closure_budget_is_exact_and_tolerates_cycles() -> None:
    chain = [[i + 1] for i in range(9)] + [[]]  # 10 nodes in a line: closure sizes 10, 9, ..., 1 = 55
    assert closure_within(chain, 55) and not closure_within(chain, 54)
    cycle = [[1], [2], [0]]
    assert closure_within(cycle, 9)
    assert closure_within(chain, 55, cap=10) and not closure_within(chain, 55, cap=9)  # the first node's 10
    assert MAX_MEAN_ANCESTORS >= 64  # real taxonomies (HPO: 11.3 on average, 43 at most) stay hierarchies
    assert MAX_ANCESTORS >= 4 * MAX_MEAN_ANCESTORS


def test_one_node_with_too_many_broader_terms_makes_no_hierarchy() -> None:
    """A chain whose mean closure is within the budget but whose deepest node has more ancestors than any
    taxonomy's is not a hierarchy; the same chain cut below that bound is one."""
    n = MAX_ANCESTORS + 1  # closure sizes n, n - 1, ..., 1
    leaves = {f"leaf{i}": [f"root{i % 8}"] for i in range(8 * n)}  # closures of 2: the mean stays under the budget

    def chain(length: int) -> dict[str, list[str]]:
        return {f"c{i}": [f"c{i + 1}"] for i in range(length - 1)}

    assert detect_hierarchy(_graph({**chain(n), **leaves}, "Term", "NARROWER_THAN"), "Term") is None
    found = detect_hierarchy(_graph({**chain(n - 1), **leaves}, "Term", "NARROWER_THAN"), "Term")
    assert found is not None and found.rel == "NARROWER_THAN"


def test_scale_report_marks_growth_faster_than_linear(tmp_path: Path) -> None:
    from evals.studies.scale.report import load_rows, plots, table

    def row(nodes: int, hnsw_s: float) -> dict[str, object]:
        lat = {"p50_ms": 1.0, "p95_ms": 2.0, "n": 5}
        return {"graph": {"nodes": nodes, "edges": nodes * 10},
                "build": {"timings_s": {"load": nodes / 1e4, "hnsw": hnsw_s}, "wall_s": 1.0 + nodes / 1e4,
                          "peak_rss_mib": {"load": 100.0}, "peak_rss_mib_max": 100.0, "size_bytes": nodes * 3000,
                          "parts_mib": {"skb": 1.0}, "cpu_s": {"load": 1.0}, "cpu_s_total": 1.0},
                "latency": {"open_ms": 1.0, "search_bm25": lat, "search_vss": lat, "search_hybrid": lat,
                            "agent_first_ms": 5.0, "agent": lat, "agent_hit1": 0.5}}

    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(json.dumps(r) for r in (row(10_000, 1.0), row(100_000, 100.0), row(10_000, 2.0)))
                       + "\n")
    rows = load_rows(results)
    assert [r["graph"]["nodes"] for r in rows] == [10_000, 100_000]  # the last row per size wins
    text = table(rows)
    assert "| build load (s) | 1.0 | 10.0 | 1.00 |" in text  # linear
    assert "| build hnsw (s) | 2.0 | 100.0 | 1.70 |" in text  # n^1.7: faster than the graph grows
    assert set(plots(rows)) == {"build_time.png", "peak_rss.png", "index_size.png", "latency.png"}


def test_dense_recall_study_scores_a_built_index_against_exact_search(tmp_path: Path) -> None:
    from evals.studies.scale.dense_recall import exact_top, run

    generate(3000, tmp_path / "data", seed=2)
    build_index(load_jsonl(tmp_path / "data"), tmp_path / "index",
                IndexConfig(dataset="jsonl", store="none", embedder="hash:32", hnsw_m=16))
    out = run(tmp_path / "index", tmp_path / "data", 200, [20, 3000], seed=0)
    assert out["built_with"]["M"] == 16 and out["node_queries"] == 200 and out["questions"] > 0
    by_ef = {(r["queries"], r["search"], r["ef"]): r["recall@20"] for r in out["rows"]}
    assert len(by_ef) == 6 and all(0.0 < v <= 1.0 for v in by_ef.values())
    # the shortest candidate list misses some of a question's neighbours; a list as long as the graph finds them all
    assert by_ef[("questions", "no label", 20)] < by_ef[("questions", "no label", 3000)]
    assert min(v for (_, _, ef), v in by_ef.items() if ef == 3000) >= 0.99
    vectors = np.random.default_rng(0).normal(size=(500, 8)).astype(np.float32)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    kth = exact_top(vectors[:3], vectors)  # the 20th best similarity, over blocks or not
    assert np.allclose(kth, np.sort(unit[:3] @ unit.T, axis=1)[:, -20], atol=1e-6)
