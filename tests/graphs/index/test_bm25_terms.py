"""BM25 from stored term counts: the scores bm25s computes, and an index patched from its parent equal to a build."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import bm25s
import numpy as np
import pytest

from graphs.index.bm25 import STEMMER, STOPWORDS, BM25Index
from graphs.index.bm25_terms import DocTerms

WORDS = ["seizure", "episodes", "fever", "ataxia", "gait", "tremor", "weakness", "short", "stature", "growth", "delay", "running", "jumping", "cardiac", "rhythm", "kidney", "cyst", "liver", "enzyme", "vision", "loss", "hearing", "muscle", "tone", "the", "of", "and", "with"]


def corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30))) for _ in range(n)]
    texts[3] = ""  # an empty document and a stopword-only one score nothing
    texts[5] = "the of and"
    return texts


QUERIES = ["seizure with fever", "short stature growth", "kidney cyst", "vision hearing loss", "running", "tremor gait"]


def test_scores_are_bm25s_own_bit_for_bit() -> None:
    texts = corpus(400, 1)
    keys = [f"n{i}" for i in range(len(texts))]
    ours = BM25Index.build(keys, ["L"] * len(keys), texts)
    theirs = bm25s.BM25(k1=1.5, b=0.75)
    theirs.index(bm25s.tokenize(texts, stopwords=STOPWORDS, stemmer=BM25Index.make_stemmer(STEMMER),
                                show_progress=False, return_ids=True), show_progress=False)
    assert ours._retriever.vocab_dict == theirs.vocab_dict
    for name in ("data", "indices", "indptr"):
        assert np.array_equal(ours._retriever.scores[name], theirs.scores[name]), name
    for query in QUERIES:
        terms = ours.tokenize_query(query)
        assert np.array_equal(ours.scores(query), np.asarray(theirs.get_scores(terms), dtype=np.float32))


class OnlyAt(Sequence[str]):
    """Texts of which only some positions may be read: the patch must tokenise no other document."""

    def __init__(self, texts: list[str], allowed: set[int]) -> None:
        self.texts, self.allowed = texts, allowed

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        if i not in self.allowed:
            raise AssertionError(f"text {i} was read")
        return self.texts[i]


def test_patched_index_scores_as_a_fresh_build(tmp_path: Path) -> None:
    old_texts = corpus(300, 2)
    old_keys = [f"n{i}" for i in range(len(old_texts))]
    parent = BM25Index.build(old_keys, ["A" if i % 3 else "B" for i in range(300)], old_texts)
    parent.save(tmp_path / "bm25")
    rng = random.Random(3)
    texts = dict(zip(old_keys, old_texts, strict=True))
    for key in rng.sample(old_keys, 20):
        del texts[key]  # deleted documents
    edited = set(rng.sample(sorted(texts), 15))
    for key in edited:
        texts[key] = texts[key] + " brandnewterm kidney"  # a term the parent's vocabulary lacks
    for i in range(10):
        texts[f"new{i}"] = f"added document {i} with seizure and brandnewterm"
    keys = sorted(texts)  # another order than the parent's
    labels = ["A"] * len(keys)
    fresh = {i for i, key in enumerate(keys) if key in edited or key.startswith("new")}
    patched = BM25Index.patched(tmp_path / "bm25", keys, labels, OnlyAt([texts[k] for k in keys], fresh), edited)
    assert patched is not None
    built = BM25Index.build(keys, labels, [texts[k] for k in keys])
    for query in [*QUERIES, "brandnewterm", "added document"]:
        assert np.array_equal(patched.scores(query), built.scores(query)), query
        assert patched.search(query, 20) == built.search(query, 20)
    patched.save(tmp_path / "next")  # an update of an update reads the counts the patch wrote
    again = BM25Index.patched(tmp_path / "next", keys, labels, OnlyAt([texts[k] for k in keys], set()), set())
    assert again is not None and np.array_equal(again.scores("kidney cyst"), built.scores("kidney cyst"))


def test_index_without_counts_is_not_patched(tmp_path: Path) -> None:
    index = BM25Index.build(["a", "b"], ["L", "L"], ["seizure", "fever"])
    index.doc_terms = None
    index.save(tmp_path / "bm25")
    assert DocTerms.load(tmp_path / "bm25") is None
    assert BM25Index.patched(tmp_path / "bm25", ["a"], ["L"], ["seizure"], {"a"}) is None


def test_rows_taken_and_joined() -> None:
    docs = DocTerms.from_ids([[3, 1, 3], [], [2, 2, 2, 0]])
    assert docs.ptr.tolist() == [0, 2, 2, 4] and docs.terms.tolist() == [1, 3, 0, 2]
    assert docs.counts.tolist() == [1, 2, 1, 3] and docs.lengths().tolist() == [3, 0, 4]
    both = DocTerms.concat([docs, DocTerms.from_ids([[5]])])
    picked = both.take(np.array([3, 0, 1]))
    assert picked.ptr.tolist() == [0, 1, 3, 3] and picked.terms.tolist() == [5, 1, 3]
    assert picked.counts.tolist() == [1, 1, 2]


if __name__ == "__main__":
    pytest.main([__file__])


def test_counting_and_scoring_in_chunks_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphs.index import bm25_terms

    texts = corpus(300, 4)
    keys = [f"n{i}" for i in range(len(texts))]
    whole = BM25Index.build(keys, ["L"] * len(keys), texts)
    monkeypatch.setattr(bm25_terms, "CHUNK_DOCS", 7)
    monkeypatch.setattr(bm25_terms, "CHUNK_ENTRIES", 13)
    chunked = BM25Index.build(keys, ["L"] * len(keys), texts)
    assert whole.doc_terms is not None and chunked.doc_terms is not None
    for name in ("ptr", "terms", "counts"):
        assert np.array_equal(getattr(whole.doc_terms, name), getattr(chunked.doc_terms, name))
    for name in ("data", "indices", "indptr"):
        assert np.array_equal(whole._retriever.scores[name], chunked._retriever.scores[name])
