"""Each document's term counts, kept beside the BM25 index, and the BM25 score matrix computed from them.

Why: BM25's scores depend on corpus statistics (document frequencies, average length), so one changed
document changes every score of its terms; an update that re-tokenised every text to recompute them spent
seconds on a graph of tens of thousands of nodes. With each document's (term, count) rows stored, an update
tokenises only the documents whose text may have changed, takes the others' rows from the parent
generation, and recomputes the whole matrix with a few array operations: the statistics are the whole
corpus's, so the scores equal a fresh build's.

The matrix is bm25s's own (method "lucene", its defaults): ``score_matrix`` performs the same floating-point
operations in the same order as ``bm25s.BM25.index`` does per document, for all documents at once, so the
scores are bit for bit those bm25s computes (a test compares them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphs.errors import IndexCorruptError
from graphs.skb.compact_write import segments

__all__ = ["DocTerms", "extend_vocab", "score_matrix"]

#: Documents counted at once, and matrix entries scored at once: bounds the temporary arrays on large corpora.
CHUNK_DOCS = 65536
CHUNK_ENTRIES = 1 << 22

TERMS_FILE = "doc_terms.npy"
COUNTS_FILE = "doc_counts.npy"
PTR_FILE = "doc_ptr.npy"


@dataclass(frozen=True)
class DocTerms:
    """Rows of (vocabulary id, count), one row per document in index order, each row's ids distinct and sorted."""

    ptr: np.ndarray  # int64, documents + 1
    terms: np.ndarray  # int32
    counts: np.ndarray  # unsigned, the smallest type that holds the largest count

    def __len__(self) -> int:
        return len(self.ptr) - 1

    @classmethod
    def from_ids(cls, docs: Sequence[Sequence[int]]) -> DocTerms:
        """From each document's token ids (repeats and any order; a tokeniser's output); counted
        ``CHUNK_DOCS`` documents at a time, so the temporary arrays stay small on a large corpus."""
        if len(docs) > CHUNK_DOCS:
            return cls.concat(cls._from_ids(docs[start:start + CHUNK_DOCS])
                              for start in range(0, len(docs), CHUNK_DOCS))
        return cls._from_ids(docs)

    @classmethod
    def _from_ids(cls, docs: Sequence[Sequence[int]]) -> DocTerms:
        lengths = np.fromiter((len(doc) for doc in docs), dtype=np.int64, count=len(docs))
        flat = np.fromiter((t for doc in docs for t in doc), dtype=np.int64, count=int(lengths.sum()))
        doc_of = np.repeat(np.arange(len(docs), dtype=np.int64), lengths)
        width = int(flat.max()) + 1 if len(flat) else 1
        pairs, counts = np.unique(doc_of * width + flat, return_counts=True)  # sorted: by document, then term
        ptr = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum(np.bincount(pairs // width, minlength=len(docs)), out=ptr[1:])
        return cls(ptr, (pairs % width).astype(np.int32), _compact_counts(counts))

    @classmethod
    def concat(cls, parts: Iterable[DocTerms]) -> DocTerms:
        """The documents of ``parts`` in order (all over one vocabulary)."""
        parts = list(parts)
        ptrs = [np.zeros(1, dtype=np.int64)]
        base = 0
        for part in parts:
            ptrs.append(part.ptr[1:] + base)
            base += int(part.ptr[-1])
        counts = np.concatenate([p.counts.astype(np.int64) for p in parts]) if parts else np.zeros(0, np.int64)
        terms = np.concatenate([p.terms for p in parts]) if parts else np.zeros(0, np.int32)
        return cls(np.concatenate(ptrs), terms.astype(np.int32), _compact_counts(counts))

    def take(self, rows: np.ndarray) -> DocTerms:
        """The documents at ``rows``, in that order."""
        ptr, pick = segments(self.ptr, np.asarray(rows, dtype=np.int64))
        return DocTerms(ptr, self.terms[pick], self.counts[pick])

    def lengths(self) -> np.ndarray:
        """Tokens per document (stopwords removed), as bm25s counts a document's length."""
        doc_of = np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.ptr))
        return np.bincount(doc_of, weights=self.counts, minlength=len(self)).astype(np.int64)

    def save(self, directory: Path) -> list[Path]:
        written = []
        for name, array in ((PTR_FILE, self.ptr), (TERMS_FILE, self.terms), (COUNTS_FILE, self.counts)):
            path = Path(directory) / name
            np.save(path, array, allow_pickle=False)
            written.append(path)
        return written

    @classmethod
    def load(cls, directory: Path) -> DocTerms | None:
        """The stored rows, or None where the index has none (built before they were kept)."""
        directory = Path(directory)
        if not (directory / PTR_FILE).is_file():
            return None
        try:
            ptr, terms, counts = (np.load(directory / name, allow_pickle=False)
                                  for name in (PTR_FILE, TERMS_FILE, COUNTS_FILE))
        except (OSError, ValueError) as exc:
            raise IndexCorruptError(f"the BM25 term counts in {directory} cannot be read ({exc}); rebuild the index "
                                    "with `skb index`") from exc
        if ptr.ndim != 1 or len(ptr) < 1 or int(ptr[-1]) != len(terms) or len(terms) != len(counts):
            raise IndexCorruptError(f"the BM25 term counts in {directory} are inconsistent; rebuild the index with "
                                    "`skb index`")
        return cls(ptr.astype(np.int64), terms.astype(np.int32), counts)


def _compact_counts(counts: np.ndarray) -> np.ndarray:
    top = int(counts.max()) if len(counts) else 0
    return counts.astype(np.min_scalar_type(max(top, 1)))


def extend_vocab(vocab: Mapping[str, int], docs: Iterable[Sequence[str]]) -> tuple[dict[str, int], list[list[int]]]:
    """``vocab`` (term -> id, without bm25s's empty-token entry) extended by the new terms of ``docs``, and the
    documents as ids."""
    out = {term: i for term, i in vocab.items() if term != ""}
    ids = [[out.setdefault(token, len(out)) for token in doc] for doc in docs]
    return out, ids


def idf_lucene(df: int, n_docs: int) -> float:
    """bm25s's "lucene" inverse document frequency (the same expression, evaluated the same way)."""
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


def score_matrix(docs: DocTerms, n_vocab: int, *, k1: float, b: float) -> dict[str, Any]:
    """bm25s's score matrix (``BM25.scores``: CSC data, indices, indptr, num_docs) of ``docs`` over ``n_vocab``
    terms, "lucene" method."""
    import scipy.sparse as sp

    n_docs = len(docs)
    lengths = docs.lengths()
    avg_doc_len = lengths.mean() if n_docs else np.float64(0)
    df = np.bincount(docs.terms, minlength=n_vocab)
    values, which = np.unique(df, return_inverse=True)  # one logarithm per distinct frequency
    idf = np.asarray([idf_lucene(int(v), n_docs) if v else 0.0 for v in values], dtype=np.float64)[which]
    idf = idf.astype(np.float32)
    # per document, as bm25s: k1 * ((1 - b) + b * l_d / l_avg), then tf / (that + tf), then idf * tfc
    with np.errstate(divide="ignore", invalid="ignore"):  # every document empty: no entries to score
        norm = k1 * ((1 - b) + (b * lengths.astype(np.float64)) / avg_doc_len)
    doc_of = np.repeat(np.arange(n_docs, dtype=np.int32), np.diff(docs.ptr))
    scores = np.empty(len(docs.terms), dtype=np.float32)
    for start in range(0, len(scores), CHUNK_ENTRIES):  # float64 temporaries of one chunk at a time
        end = start + CHUNK_ENTRIES
        tf = docs.counts[start:end].astype(np.float32)
        scores[start:end] = idf[docs.terms[start:end]] * (tf / (norm[doc_of[start:end]] + tf))
    matrix = sp.csc_matrix((scores, (doc_of, docs.terms)), shape=(n_docs, n_vocab), dtype=np.float32)
    return {"data": matrix.data, "indices": matrix.indices.astype(np.int32), "indptr": matrix.indptr,
            "num_docs": n_docs}
