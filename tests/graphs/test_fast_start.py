"""Fast start (issue 12 item 2): index artifacts that open without parsing, checked cheaply, stored statistics.

Real components throughout: the hpo_mini SKB, a real build (MiniLM ONNX embeddings, hnswlib, bm25s),
the memory-mapped compact SKB and the agent's linker and scoring code.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from agent.linking.definitions import build_definition_table
from agent.linking.entities import EntityLinker
from agent.linking.lexicon import build_lexicon
from agent.linking.stored import lexicon_for, stored_definitions, stored_lexicon, stored_names
from agent.scoring.ontology import build_model, detect_hierarchy, find_annotation
from agent.scoring.stored import find_hierarchy, model_for, stored_model
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.errors import IndexCorruptError
from graphs.index.phrases import phrase_entries
from graphs.skb.compact import CompactSKB, open_compact, write_compact
from graphs.skb.model import SKB, relation_counts
from graphs.skb.state import precompute

runner = CliRunner()


@pytest.fixture(scope="module")
def fast_index(tmp_path_factory: pytest.TempPathFactory, hpo_mini_skb: SKB) -> Path:
    """An index of hpo_mini built by this code (no graph store: nothing here needs one)."""
    index_dir = tmp_path_factory.mktemp("fast") / "index"
    build_index(hpo_mini_skb, index_dir, IndexConfig(dataset="hpo", store="none"))
    return index_dir


def copy_index(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# -- the compact SKB ---------------------------------------------------------------------------
def test_compact_skb_is_memory_mapped_and_equal_to_the_parsed_one(hpo_mini_skb: SKB, tmp_path: Path) -> None:
    write_compact(hpo_mini_skb, tmp_path / "skb" / "compact")
    skb = open_compact(tmp_path / "skb")
    assert isinstance(skb, CompactSKB)
    _, rel_ids, src, dst = skb.edge_arrays()
    # views of read-only maps: nothing copied into memory, nothing writable
    arrays = (rel_ids, src, dst, skb.label_ids()[1])
    assert all(isinstance(a.base, np.memmap) and not a.flags.owndata and not a.flags.writeable for a in arrays)
    assert list(skb.nodes) == list(hpo_mini_skb.nodes)
    assert len(skb.nodes._cache) == 0  # type: ignore[attr-defined]  # nothing built until read
    for key, node in hpo_mini_skb.nodes.items():
        got = skb.nodes[key]
        assert (got.key, got.label, got.props, got.name) == (node.key, node.label, node.props, node.name)
        assert skb.nodes[key] is got  # built once
        assert list(skb.out_edges(key)) == list(hpo_mini_skb.out_edges(key))
        assert list(skb.in_edges(key)) == list(hpo_mini_skb.in_edges(key))
        assert skb.node_text(key) == hpo_mini_skb.node_text(key)
        # counted and listed from the arrays, without building edges; the same as the parsed SKB's
        assert skb.degree(key) == hpo_mini_skb.degree(key) == len(list(hpo_mini_skb.out_edges(key))) + len(
            list(hpo_mini_skb.in_edges(key))
        )
        expected_rels = list(dict.fromkeys([(e.rel, "out") for e in hpo_mini_skb.out_edges(key)]
                                           + [(e.rel, "in") for e in hpo_mini_skb.in_edges(key)]))
        assert skb.relations_at(key) == hpo_mini_skb.relations_at(key) == expected_rels
        for rel, direction, label in [("IS_A", "both", None), ("IS_A", "out", "Phenotype"), ("IS_A", "in", None),
                                      ("HAS_PHENOTYPE", "in", "Disease"), ("HAS_PHENOTYPE", "both", "Gene")]:
            sides = ([(e.dst, e) for e in hpo_mini_skb.out_edges(key)] if direction != "in" else []) + (
                [(e.src, e) for e in hpo_mini_skb.in_edges(key)] if direction != "out" else [])
            expected = [k for k, e in sides if e.rel == rel and (label is None or hpo_mini_skb.nodes[k].label == label)]
            assert skb.neighbor_keys(key, rel, direction, label) == expected
            assert hpo_mini_skb.neighbor_keys(key, rel, direction, label) == expected
    assert skb.degree("nope") == 0 and skb.relations_at("nope") == []
    assert skb.neighbor_keys("nope", "IS_A") == [] and skb.neighbor_keys("HP:0000244", "NO_SUCH_REL") == []
    assert list(skb.edges) == list(hpo_mini_skb.edges)
    assert skb.edges[3] == hpo_mini_skb.edges[3] and skb.edges[-1] == hpo_mini_skb.edges[-1]
    assert skb.stats() == hpo_mini_skb.stats()
    assert skb.schema() == hpo_mini_skb.schema()
    assert skb.labels() == hpo_mini_skb.labels()
    from collections import Counter

    expected = Counter((e.rel, hpo_mini_skb.nodes[e.src].label, hpo_mini_skb.nodes[e.dst].label)
                       for e in hpo_mini_skb.edges)
    assert list(skb.relation_patterns().items()) == list(expected.items())  # same counts, same order
    assert "nope" not in skb.nodes and skb.nodes.get("nope") is None and list(skb.out_edges("nope")) == []
    with pytest.raises(Exception, match="read-only"):
        skb.add_edge(hpo_mini_skb.edges[0])


def test_compact_skb_keeps_at_most_its_bound_of_built_nodes(
    hpo_mini_skb: SKB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphs.skb import compact

    write_compact(hpo_mini_skb, tmp_path / "skb" / "compact")
    skb = open_compact(tmp_path / "skb")
    bound = 7
    monkeypatch.setattr(compact, "NODE_CACHE_MAX", bound)
    keys = list(hpo_mini_skb.nodes)
    assert len(keys) > 3 * bound
    for _ in range(2):
        for key in keys:
            got, node = skb.nodes[key], hpo_mini_skb.nodes[key]
            assert (got.key, got.label, got.props, got.name) == (node.key, node.label, node.props, node.name)
            assert skb.nodes.get(key) is got  # kept while under the bound
            assert len(skb.nodes._cache) <= bound  # type: ignore[attr-defined]
    assert [n.key for n in skb.iter_nodes()] == keys


def test_code_digest_follows_the_computing_code_only() -> None:
    """Stored state is keyed by the source of the functions that computed it: a changed function retires it,
    code beside it (another SKB method) does not."""
    from graphs.skb.compact import code_digest, schema_digest

    def one(x: int) -> int:
        return x + 1

    def other(x: int) -> int:
        return x + 2

    assert code_digest(one) == code_digest(one) != code_digest(other)
    assert code_digest(one, 1) != code_digest(one, 2)  # values by repr
    assert schema_digest() == code_digest(SKB.schema, SKB.relation_patterns, relation_counts, *_schema_parts())
    assert schema_digest() != code_digest(SKB.neighbor_keys, SKB.relation_patterns, relation_counts, *_schema_parts())


def _schema_parts() -> tuple[object, ...]:
    from graphs.skb.model import (
        Edge,
        GraphSchema,
        LabelInfo,
        Node,
        NodeType,
        PropertyInfo,
        RelationInfo,
        value_type_name,
    )

    return (value_type_name, Node, Edge, NodeType, PropertyInfo, LabelInfo, RelationInfo, GraphSchema)


def test_stored_schema_is_ignored_when_computed_by_other_code(hpo_mini_skb: SKB, tmp_path: Path) -> None:
    write_compact(hpo_mini_skb, tmp_path / "skb" / "compact")
    meta_path = tmp_path / "skb" / "compact" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["schema"]["labels"][0]["count"] = 999_999  # what an older computation might have stored
    meta["schema_digest"] = "0" * 64
    meta_path.write_text(json.dumps(meta))
    assert open_compact(tmp_path / "skb").schema() == hpo_mini_skb.schema()


def test_a_computed_schema_of_the_arrays_equals_the_models(tmp_path: Path) -> None:
    """Without a stored schema the compact SKB computes one, its relation counts from the edge arrays: the
    same schema as the in-memory model's, edge by edge, on a graph of other labels and relations."""
    from tests.small_graphs import catalog_skb

    graph = catalog_skb()
    write_compact(graph, tmp_path / "skb" / "compact")
    meta_path = tmp_path / "skb" / "compact" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["schema_digest"] = "0" * 64
    meta_path.write_text(json.dumps(meta))
    skb = open_compact(tmp_path / "skb")
    assert list(skb.relation_patterns().items()) == list(SKB.relation_patterns(graph).items())
    assert skb.schema() == graph.schema() and graph.schema().relations


def test_the_schema_of_an_skb_with_fixed_arrays_counts_them(tmp_path: Path) -> None:
    """A build computes the schema with the compact arrays fixed: the relation counts come from the arrays (the
    records are not read), equal in counts and order to a pass over the edges; wrong arrays give other counts."""
    from graphs.skb.compact_write import compact_names, compact_parts
    from tests.small_graphs import catalog_skb

    graph = catalog_skb()
    expected = list(graph.relation_patterns().items())
    labels, rels = compact_names(graph)
    nodes, edges = compact_parts(graph, labels, rels)
    with graph.arrays_fixed(labels, nodes.label, rels, edges.rel, edges.src, edges.dst):
        assert list(graph.relation_patterns().items()) == expected
        assert graph.schema() == SKB.schema(catalog_skb())
    swapped = np.ascontiguousarray(edges.src[::-1])  # the same multiset of sources in another order
    with graph.arrays_fixed(labels, nodes.label, rels, edges.rel, swapped, edges.dst):
        assert list(graph.relation_patterns().items()) != expected


def test_relation_counts_in_slices_equal_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted a few edges at a time (as at tens of millions of edges), the patterns, their counts and their order
    of first occurrence are those of one pass over the edges."""
    from graphs.skb import model
    from graphs.skb.compact_write import compact_names, compact_parts
    from tests.small_graphs import catalog_skb

    graph = catalog_skb()
    expected = list(graph.relation_patterns().items())
    labels, rels = compact_names(graph)
    nodes, edges = compact_parts(graph, labels, rels)
    assert len(edges.rel) > 7 and len(expected) >= 2
    for chunk in (1, 3, 7, len(edges.rel)):
        monkeypatch.setattr(model, "PATTERN_CHUNK", chunk)
        got = relation_counts(labels, nodes.label, rels, edges.rel, edges.src, edges.dst)
        assert list(got.items()) == expected, chunk


def test_stored_lexicon_keeps_at_most_its_bound_of_built_rows(
    hpo_mini_skb: SKB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agent.linking.stored as stored_module

    write_compact(hpo_mini_skb, tmp_path / "skb" / "compact")
    precompute(hpo_mini_skb, tmp_path / "skb" / "state")
    stored = stored_lexicon(open_compact(tmp_path / "skb"))
    assert stored is not None
    monkeypatch.setattr(stored_module, "ENTRY_CACHE_MAX", 5)
    built = build_lexicon(hpo_mini_skb)
    assert len(built.table) > 15
    for _ in range(2):
        for toks, entries in built.table.items():
            assert stored.table[toks] == entries
            assert len(stored.table._cache) <= 5  # type: ignore[attr-defined]


# -- stored statistics ---------------------------------------------------------------------------
def test_stored_statistics_equal_the_computed_ones(hpo_mini_skb: SKB, tmp_path: Path) -> None:
    write_compact(hpo_mini_skb, tmp_path / "skb" / "compact")
    precompute(hpo_mini_skb, tmp_path / "skb" / "state")
    skb = open_compact(tmp_path / "skb")

    built, stored = build_lexicon(hpo_mini_skb), stored_lexicon(skb)
    assert stored is not None
    assert dict(stored.table) == built.table
    assert {t: stored.by_token[t] for t in stored.by_token} == built.by_token
    assert (stored.token_df, stored.vocab_by_prefix, stored.frame, stored.max_len) == (
        built.token_df, built.vocab_by_prefix, built.frame, built.max_len)
    assert lexicon_for(skb) is lexicon_for(skb)
    table = build_definition_table(phrase_entries(hpo_mini_skb), built.frame)
    stored_table = stored_definitions(skb)
    assert len(table) > 0 and stored_table is not None
    assert (list(stored_table.sentences), list(stored_table.keys)) == (list(table.sentences), list(table.keys))
    names = stored_names(skb)
    assert names is not None and names["Marfan syndrome"] == [
        n.key for n in hpo_mini_skb.nodes.values() if n.name == "Marfan syndrome"]

    schema = hpo_mini_skb.schema()
    pairs = 0
    for term in schema.label_names():
        assert find_hierarchy(skb, term) == detect_hierarchy(hpo_mini_skb, term)
        for target in schema.label_names():
            annotation = find_annotation(schema, target, term)
            hierarchy = detect_hierarchy(hpo_mini_skb, term)
            if target == term or annotation is None or hierarchy is None:
                continue
            want = build_model(hpo_mini_skb, annotation, hierarchy)
            got = stored_model(skb, target, term)
            assert got is not None
            pairs += 1
            assert (got.terms, got.targets, got.max_ic, got.hierarchy, got.annotation) == (
                want.terms, want.targets, want.max_ic, want.hierarchy, want.annotation)
            assert np.array_equal(got.ic, want.ic)
            for name in ("ancestors", "direct", "propagated"):
                a, b = getattr(got, name), getattr(want, name)
                assert a.format == b.format and a.shape == b.shape and (a != b).nnz == 0, name
                assert np.array_equal(a.indices, b.indices) and np.array_equal(a.indptr, b.indptr), name
            # the orderings a question derives are stored too, and read from the mapped files
            assert all(k in got.__dict__ for k in ("_size_order", "_by_size", "_by_target"))
            assert not got._by_size[0].data.flags.writeable and not got._by_target.indices.flags.writeable
            assert np.array_equal(got._size_order, want._size_order)
            assert np.array_equal(got._by_size[1], want._by_size[1])
            assert (got._by_size[0] != want._by_size[0]).nnz == 0 and (got._by_target != want._by_target).nnz == 0
            query = want.terms[: len(want.terms) : 5]
            assert np.array_equal(got.score(query), want.score(query))
            assert np.array_equal(got.target_to_query([got.term_index[t] for t in query]),
                                  want.target_to_query([want.term_index[t] for t in query]))
            assert model_for(skb, target, term) is not None
    assert pairs >= 1


def test_link_matrices_from_the_arrays_equal_the_scanned_ones(hpo_mini_skb: SKB, tmp_path: Path) -> None:
    from agent.scoring.stored import link_matrix

    write_compact(hpo_mini_skb, tmp_path / "skb" / "compact")
    skb = open_compact(tmp_path / "skb")
    checked = 0
    for relation in hpo_mini_skb.schema().relations:
        for row_label, col_label in ((relation.src_label, relation.dst_label), (relation.dst_label, relation.src_label)):
            for term in hpo_mini_skb.schema().label_names():
                want_model, got_model = model_for(hpo_mini_skb, col_label, term), model_for(skb, col_label, term)
                if want_model is None or got_model is None:
                    continue
                want = link_matrix(hpo_mini_skb, relation.rel, row_label, want_model)
                got = link_matrix(skb, relation.rel, row_label, got_model)
                assert got.row_index == want.row_index
                assert got.matrix.shape == want.matrix.shape and (got.matrix != want.matrix).nnz == 0
                checked += got.matrix.nnz
    assert checked > 0


def test_stored_statistics_of_other_code_are_not_used(hpo_mini_skb: SKB, tmp_path: Path) -> None:
    """A record whose digest differs (other code or profile computed it) is ignored, and the lexicon is built."""
    write_compact(hpo_mini_skb, tmp_path / "skb" / "compact")
    precompute(hpo_mini_skb, tmp_path / "skb" / "state")
    for name in ("lexicon", "scoring", "definitions"):
        path = tmp_path / "skb" / "state" / f"{name}.json"
        record = json.loads(path.read_text())
        record["digest"] = "f" * 64
        path.write_text(json.dumps(record))
    skb = open_compact(tmp_path / "skb")
    assert stored_lexicon(skb) is None
    assert dict(lexicon_for(skb).table) == build_lexicon(hpo_mini_skb).table
    assert stored_model(skb, "Disease", "Phenotype") is None
    assert stored_definitions(skb) is None


# -- the index ---------------------------------------------------------------------------------
@pytest.mark.integration
def test_index_opens_memory_mapped_and_bm25_search_loads_nothing_else(fast_index: Path) -> None:
    manifest = json.loads((fast_index / "manifest.json").read_text())
    listed = set(manifest["files"]) | set(manifest["data_files"])
    for rel in ("skb/compact/meta.json", "skb/compact/edge_src.npy", "skb/state/lexicon.json",
                "skb/state/scoring.json", "skb/state/definitions.json", "hnsw/vectors.npy"):
        assert rel in listed, rel
    with IndexBundle.open(fast_index) as bundle:
        assert isinstance(bundle.skb, CompactSKB)
        hits = bundle.search("Marfan syndrome", mode="bm25", k=3)
        assert "Marfan syndrome" in [hit.name for hit in hits]
        assert bundle.hnsw._opened == {}  # no HNSW graph read
        assert isinstance(bundle.hnsw._vectors, np.memmap)
        assert bundle._embedder is None and bundle._store is None
        assert len(bundle.skb.nodes._cache) <= 3  # type: ignore[attr-defined]
        # the vectors come from the map, the same as the HNSW graph holds
        key = hits[0].key
        assert np.allclose(bundle.hnsw.vector(key), bundle.hnsw._graph(None).get_items(
            [bundle.hnsw.keys.index(key)], return_type="numpy")[0], atol=1e-6)
        linker = EntityLinker(bundle, use_embedding=False)
        assert [e.name for e in linker.link("Which genes cause Marfan syndrome?")] == ["Marfan syndrome"]


@pytest.mark.integration
def test_tampered_artifact_is_refused_with_the_rebuild_command(fast_index: Path, tmp_path: Path) -> None:
    for rel in ("skb/compact/edge_src.npy", "skb/state/scoring.json", "hnsw/vectors.npy"):
        index = copy_index(fast_index, tmp_path / rel.replace("/", "_"))
        target = index / rel
        raw = bytearray(target.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        target.write_bytes(bytes(raw))
        with pytest.raises(IndexCorruptError) as err:
            IndexBundle.open(index)
        message = str(err.value)
        assert rel in message and f"skb index --force --index-dir {index}" in message


@pytest.mark.integration
def test_large_files_are_sampled_at_open_and_hashed_in_full_by_skb_verify(
    hpo_mini_skb: SKB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("graphs.build.LARGE_FILE_BYTES", 1 << 14)  # the fixture's files are small:
    monkeypatch.setattr("graphs.manifest.SAMPLE_BYTES", 1 << 12)  # scale the thresholds down with them
    index = tmp_path / "index"
    build_index(hpo_mini_skb, index, IndexConfig(dataset="hpo", store="none"))
    manifest = json.loads((index / "manifest.json").read_text())
    assert "hnsw/vectors.npy" in manifest["data_files"] and "hnsw/vectors.npy" not in manifest["files"]
    assert runner.invoke(app, ["verify", "--index-dir", str(index)]).exit_code == 0
    from graphs.index.phrases import phrase_index_for

    assert any(rel.startswith("phrases/") for rel in manifest["data_files"])
    with IndexBundle.open(index) as bundle:  # an artifact recorded among the large files is still found
        assert isinstance(bundle.skb, CompactSKB) and phrase_index_for(bundle) is not None

    target = index / "hnsw" / "vectors.npy"
    assert target.stat().st_size > 3 * (1 << 12)
    raw = bytearray(target.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # between the sampled ends: seen only by the full check
    target.write_bytes(bytes(raw))
    IndexBundle.open(index).close()
    result = runner.invoke(app, ["verify", "--index-dir", str(index)])
    out = " ".join((result.stdout + result.stderr).split())
    assert result.exit_code == 2 and "hnsw/vectors.npy" in out and f"skb index --force --index-dir {index}" in out

    raw[10] ^= 0x01  # inside the sampled head: refused at open
    target.write_bytes(bytes(raw))
    with pytest.raises(IndexCorruptError, match="skb index --force --index-dir"):
        IndexBundle.open(index)


@pytest.mark.integration
def test_index_without_the_new_artifacts_still_opens(
    fast_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An index built before the compact SKB, stored state and vectors.npy: parsed as before, same answers."""
    old = copy_index(fast_index, tmp_path / "old")
    manifest = json.loads((old / "manifest.json").read_text())
    for section in ("files", "data_files"):
        manifest[section] = {
            rel: v for rel, v in manifest[section].items()
            if not rel.startswith(("skb/compact/", "skb/state/")) and rel != "hnsw/vectors.npy"
        }
    shutil.rmtree(old / "skb" / "compact")
    shutil.rmtree(old / "skb" / "state")
    (old / "hnsw" / "vectors.npy").unlink()
    (old / "manifest.json").write_text(json.dumps(manifest))
    with (
        caplog.at_level(logging.WARNING, logger="graphs.bundle"),
        IndexBundle.open(old) as bundle,
        IndexBundle.open(fast_index) as fast,
    ):
        assert not isinstance(bundle.skb, CompactSKB) and bundle.hnsw._vectors is None
        assert bundle.skb.stats() == fast.skb.stats()
        for mode in ("bm25", "vss"):
            assert bundle.search("heart defect", mode=mode, k=5) == fast.search("heart defect", mode=mode, k=5)
        assert np.allclose(bundle.hnsw.vectors(bundle.hnsw.keys), fast.hnsw.vectors(fast.hnsw.keys), atol=1e-6)
        assert model_for(bundle.skb, "Disease", "Phenotype") is not None
    assert any(f"skb index --force --index-dir {old}" in r.getMessage() for r in caplog.records)


def test_a_verified_onnx_model_is_opened_from_its_file_not_held_in_memory(tmp_path: Path) -> None:
    """No start keeps a 90 MB copy of the model bytes: the session opens the cached graph, whose weights file
    ONNX Runtime maps (just built or accepted by its recorded stat alike)."""
    from graphs.embedding.embedder import _minilm_path
    from graphs.embedding.onnx_runtime import _session, ensure_onnx_model

    first = ensure_onnx_model(_minilm_path(), "fp32", cache_dir=tmp_path)
    assert first.rebuilt and first.held is None
    again = ensure_onnx_model(_minilm_path(), "fp32", cache_dir=tmp_path)
    assert not again.rebuilt and again.held is None and again.sha256 == first.sha256
    session = _session(again, "fp32")
    ids = np.array([[101, 2023, 102]], dtype=np.int64)
    feeds = {i.name: (ids if "input_ids" in i.name else np.ones_like(ids) if "mask" in i.name else np.zeros_like(ids))
             for i in session.get_inputs()}
    assert session.run(None, feeds)[0].shape[0] == 1


def test_warm_up_opens_the_embedder_and_store_in_the_background(hpo_index_dir: Path, fast_index: Path) -> None:
    with IndexBundle.open(hpo_index_dir) as bundle:
        thread = bundle.warm_up()
        thread.join(timeout=120)
        assert not thread.is_alive()
        assert bundle._embedder is not None and bundle._store is not None
        assert bundle.store.count_nodes() == len(bundle.skb.nodes)
    with IndexBundle.open(fast_index) as bundle:  # --store none: nothing to start, and no error either
        bundle.warm_up().join(timeout=120)
        assert bundle._embedder is not None and bundle._store is None


def test_skb_ask_freezes_the_startup_heap_and_leaves_the_gc_on(hpo_index_dir: Path, tmp_path: Path) -> None:
    import gc

    gc.unfreeze()
    try:
        result = runner.invoke(app, ["ask", "Which genes are associated with Marfan syndrome?", "--no-trace",
                                     "--index-dir", str(hpo_index_dir)])
        assert result.exit_code == 0, result.stdout + result.stderr
        assert gc.isenabled() and gc.get_freeze_count() > 0
        gc.unfreeze()
        failed = runner.invoke(app, ["ask", "anything", "--no-trace", "--index-dir", str(tmp_path / "none")])
        assert failed.exit_code == 2 and gc.isenabled()  # an index that cannot open still re-enables it
    finally:
        gc.unfreeze()
        gc.enable()


@pytest.mark.integration
def test_a_question_without_a_described_clause_does_not_load_the_phrase_index(fast_index: Path) -> None:
    """The phrase graph is large; naming an entity must not pull it into memory."""
    from agent.linking.settings import ClauseSettings
    from graphs.index import phrases as phrase_index

    with IndexBundle.open(fast_index) as bundle:
        assert phrase_index.has_phrase_index(bundle)
        linker = EntityLinker(bundle)
        found = linker.link("Which genes are associated with Marfan syndrome?", clauses=ClauseSettings())
        assert "Marfan syndrome" in [e.name for e in found]
        assert bundle.skb not in phrase_index._LOADED
        # a clause quoting a definition (cut short) is linked from the stored table: still no phrase graph
        quoted = linker.link("a patient with an eye that is protruding anterior to the plane of the face",
                             clauses=ClauseSettings())
        assert [(e.name, e.method, e.group) for e in quoted] == [("Proptosis", "exact", 0)]
        assert bundle.skb not in phrase_index._LOADED
        linker.link("a patient whose long bones of the arms and legs are unusually long and thin",
                    clauses=ClauseSettings())
        assert bundle.skb in phrase_index._LOADED  # loaded when a described clause needs it


def test_per_skb_values_prefer_the_stored_record_and_are_computed_once(hpo_mini_skb: SKB) -> None:
    from graphs.skb.state import PerSKB

    calls: list[str] = []

    def build(skb: SKB) -> str:
        calls.append(skb.name)
        return "built"

    computed = PerSKB(lambda skb: None, build)
    assert computed(hpo_mini_skb) == "built" and computed(hpo_mini_skb) == "built"
    assert calls == [hpo_mini_skb.name] and hpo_mini_skb in computed
    assert PerSKB(lambda skb: "stored", build)(hpo_mini_skb) == "stored" and calls == [hpo_mini_skb.name]


def test_the_stored_statistics_do_not_change_with_the_hash_seed(tmp_path: Path) -> None:
    """Two builds of one graph write the same bytes, whatever the interpreter's string-hash seed: an order taken
    from a set would make two builds of the same data tie-break differently."""
    import os
    import subprocess
    import sys

    script = ("import sys; from pathlib import Path; from graphs.build import write_fast_start; "
              "from tests.small_graphs import catalog_skb; out = Path(sys.argv[1]); out.mkdir(); "
              "write_fast_start(catalog_skb(), out)")
    root = Path(__file__).resolve().parents[2]
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", script, str(tmp_path / seed)], check=True, cwd=root, env=env)
    written = sorted(p.relative_to(tmp_path / "1") for p in (tmp_path / "1").rglob("*") if p.is_file())
    assert any(p.name.startswith("lexicon") for p in written)
    assert written == sorted(p.relative_to(tmp_path / "2") for p in (tmp_path / "2").rglob("*") if p.is_file())
    assert [p for p in written if (tmp_path / "1" / p).read_bytes() != (tmp_path / "2" / p).read_bytes()] == []


def test_a_class_source_for_digests_is_what_inspect_gives() -> None:
    """Digests read class sources from one parse per module; the text must stay ``inspect.getsource``'s, or
    every stored table of every built index would be refused as computed by other code."""
    import dataclasses
    import inspect

    from graphs.skb import model
    from graphs.skb.digest import class_source

    @dataclasses.dataclass
    class Decorated:  # a class in a function, with a decorator
        x: int = 1

        class Inner:
            pass

    classes = [c for c in vars(model).values() if inspect.isclass(c) and c.__module__ == model.__name__]
    for cls in [*classes, Decorated, Decorated.Inner]:
        assert class_source(cls) == inspect.getsource(cls), cls


def test_stored_state_is_the_same_from_the_compact_arrays(tmp_path: Path) -> None:
    """The build computes the stored state with the label and edge id arrays of the compact files it has just
    written (``SKB.arrays_fixed``) instead of arrays built from the records: every file must come out equal."""
    import numpy as np

    from graphs.build import write_fast_start
    from graphs.skb.compact import COMPACT_DIR, compact_arrays, open_compact
    from graphs.skb.state import STATE_DIR, precompute
    from tests.small_graphs import catalog_skb

    skb = catalog_skb()
    write_fast_start(skb, tmp_path / "fixed")
    precompute(skb, tmp_path / "plain")
    fixed = sorted((tmp_path / "fixed" / STATE_DIR).iterdir())
    assert fixed and [p.name for p in fixed] == sorted(p.name for p in (tmp_path / "plain").iterdir())
    for path in fixed:
        other = tmp_path / "plain" / path.name
        if path.suffix == ".npy":
            assert np.array_equal(np.load(path), np.load(other)), path.name
        else:
            assert path.read_bytes() == other.read_bytes(), path.name
    arrays = compact_arrays(tmp_path / "fixed" / COMPACT_DIR)
    assert open_compact(tmp_path / "fixed").arrays_are_fixed  # a compact SKB's arrays are its files'
    with skb.arrays_fixed(*arrays):
        assert skb.arrays_are_fixed and skb.edge_arrays()[1] is arrays[3]
    assert not skb.arrays_are_fixed and skb.edge_arrays()[1] is not arrays[3]
    with pytest.raises(ValueError, match="arrays of"), skb.arrays_fixed(*arrays[:5], arrays[5][:-1]):
        pass
