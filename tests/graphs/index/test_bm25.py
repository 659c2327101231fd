"""BM25 (bm25s + PyStemmer) on a small crafted corpus whose scores and order are computed by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from graphs.errors import ConfigError, IndexCorruptError, IndexNotFoundError
from graphs.index.bm25 import BM25Index
from graphs.manifest import sha256_file

CORPUS: dict[str, tuple[str, str]] = {
    "p1": ("Phenotype", "Seizure"),
    "p2": ("Phenotype", "Seizure, seizure episodes"),
    "p3": ("Phenotype", "Recurrent seizure episodes"),
    "p4": ("Phenotype", "Short stature"),
    "p5": ("Phenotype", "Ataxia of the gait with tremor and weakness of the limbs"),
    "p6": ("Phenotype", "Ataxia"),
    "d1": ("Disease", "Dravet syndrome: seizures triggered by fever"),
    "d2": ("Disease", "Achondroplasia with short stature"),
    "d3": ("Disease", "Running and jumping difficulties"),
}

# What the English Snowball stemmer and the English stopword list leave of each text (by hand).
TOKENS: dict[str, list[str]] = {
    "p1": ["seizur"],
    "p2": ["seizur", "seizur", "episod"],
    "p3": ["recurr", "seizur", "episod"],
    "p4": ["short", "statur"],
    "p5": ["ataxia", "gait", "tremor", "weak", "limb"],
    "p6": ["ataxia"],
    "d1": ["dravet", "syndrom", "seizur", "trigger", "fever"],
    "d2": ["achondroplasia", "short", "statur"],
    "d3": ["run", "jump", "difficulti"],
}

K1, B = 1.5, 0.75


def reference_bm25(query_terms: list[str]) -> dict[str, float]:
    """Lucene BM25: idf = ln(1 + (N - df + .5) / (df + .5)); tf part = tf / (tf + k1 (1 - b + b dl / avgdl))."""
    n = len(TOKENS)
    avgdl = sum(len(t) for t in TOKENS.values()) / n
    scores: dict[str, float] = {}
    for key, toks in TOKENS.items():
        total = 0.0
        for term in query_terms:
            tf = toks.count(term)
            if tf == 0:
                continue
            df = sum(1 for t in TOKENS.values() if term in t)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            total += idf * tf / (tf + K1 * (1 - B + B * len(toks) / avgdl))
        if total > 0:
            scores[key] = total
    return scores


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.build(list(CORPUS), [lab for lab, _ in CORPUS.values()], [t for _, t in CORPUS.values()])


def test_tokenisation_stems_and_drops_stopwords(index: BM25Index) -> None:
    for key, (_, text) in CORPUS.items():
        assert index.tokenize_query(text) == TOKENS[key]


@pytest.mark.parametrize(
    ("query", "terms", "expected_order"),
    [
        # p1 (tf 1, length 1) edges out p2 (tf 2, length 3): 0.5668 vs 0.5645 times the same idf.
        ("seizure", ["seizur"], ["p1", "p2", "p3", "d1"]),
        ("Seizures!", ["seizur"], ["p1", "p2", "p3", "d1"]),
        ("short stature", ["short", "statur"], ["p4", "d2"]),
        ("ataxia", ["ataxia"], ["p6", "p5"]),  # the shorter document wins on equal tf
        ("ataxia tremor", ["ataxia", "tremor"], ["p5", "p6"]),  # a second matched term outweighs length
        ("seizures with fever", ["seizur", "fever"], ["d1", "p1", "p2", "p3"]),
        ("he was running", ["run"], ["d3"]),  # stemming: running -> run
    ],
)
def test_ranking_matches_hand_computed_bm25(
    index: BM25Index, query: str, terms: list[str], expected_order: list[str]
) -> None:
    assert index.tokenize_query(query) == terms
    hits = index.search(query, 10)
    assert [k for k, _ in hits] == expected_order
    reference = reference_bm25(terms)
    assert set(reference) == set(expected_order)
    for key, score in hits:
        assert score == pytest.approx(reference[key], rel=1e-5)


def test_k_limits_and_only_matching_documents(index: BM25Index) -> None:
    assert [k for k, _ in index.search("seizure", 2)] == ["p1", "p2"]
    assert index.search("seizure", 0) == []
    assert len(index.search("seizure", 1000)) == 4  # documents without a query term are not returned


@pytest.mark.parametrize("query", ["", "   ", "the of and with", "zzzz qqqq", "!!!", "a"])
def test_empty_stopword_only_or_unknown_queries_return_nothing(index: BM25Index, query: str) -> None:
    assert index.search(query, 5) == []
    assert index.search(query, 5, label="Disease") == []


def test_label_filter(index: BM25Index) -> None:
    assert [k for k, _ in index.search("seizure", 10, label="Disease")] == ["d1"]
    assert [k for k, _ in index.search("seizure", 10, label="Phenotype")] == ["p1", "p2", "p3"]
    assert index.search("short stature", 10, label="Disease") == [
        ("d2", pytest.approx(reference_bm25(["short", "statur"])["d2"], rel=1e-5))
    ]
    assert index.search("seizure", 10, label="Gene") == []
    # Filtering keeps corpus-wide statistics: a label's scores equal its scores in the unfiltered ranking.
    unfiltered = dict(index.search("seizures with fever", 10))
    for key, score in index.search("seizures with fever", 10, label="Phenotype"):
        assert score == unfiltered[key]
    assert index.label_names() == ["Disease", "Phenotype"]


def test_build_rejects_bad_input() -> None:
    with pytest.raises(ConfigError, match="aligned"):
        BM25Index.build(["a"], ["L", "L"], ["x"])
    with pytest.raises(ConfigError, match="duplicate"):
        BM25Index.build(["a", "a"], ["L", "L"], ["x", "y"])
    with pytest.raises(ConfigError, match="no documents"):
        BM25Index.build([], [], [])
    with pytest.raises(ConfigError, match="unknown stemmer language 'klingon'"):
        BM25Index.build(["a"], ["L"], ["x"], stemmer="klingon")


def test_no_stemmer_no_stopwords() -> None:
    index = BM25Index.build(["a", "b"], ["L", "L"], ["running the race", "run"], stemmer=None, stopwords=None)
    assert [k for k, _ in index.search("run", 5)] == ["b"]
    assert [k for k, _ in index.search("the", 5)] == ["a"]


def test_save_load_round_trip(index: BM25Index, tmp_path: Path) -> None:
    target = tmp_path / "bm25"
    files = index.save(target)
    assert "ids.json" in files and any(name.endswith(".npy") for name in files)
    for rel, digest in files.items():
        assert sha256_file(target / rel) == digest
    loaded = BM25Index.load(target, checksums=files)
    for query in ["seizure", "short stature", "ataxia tremor", "the", "running"]:
        for label in (None, "Disease", "Phenotype"):
            assert loaded.search(query, 10, label=label) == index.search(query, 10, label=label)
    # the score matrix is mapped from its files (pages the processes on one machine share), as plain arrays
    maps = Path("/proc/self/maps").read_text()
    for name in ("data", "indices", "indptr"):
        assert str(target / f"{name}.csc.index.npy") in maps
        assert type(loaded._retriever.scores[name]) is np.ndarray
    # Saving again replaces the directory wholesale and leaves no temp or old dirs behind.
    files_again = index.save(target)
    assert files_again == files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bm25"]


def test_load_refuses_missing_or_damaged(index: BM25Index, tmp_path: Path) -> None:
    with pytest.raises(IndexNotFoundError, match="skb index"):
        BM25Index.load(tmp_path / "absent")
    target = tmp_path / "bm25"
    files = index.save(target)
    vocab = target / "vocab.index.json"
    vocab.write_text(vocab.read_text().replace("seizur", "seizor"))
    with pytest.raises(IndexCorruptError, match="vocab.index.json"):
        BM25Index.load(target, checksums=files)
    (target / "ids.json").write_text(
        json.dumps({"keys": ["only-one"], "labels": ["L"], "stemmer": None, "stopwords": None})
    )
    with pytest.raises(IndexCorruptError, match="holds 9 documents"):
        BM25Index.load(target)
