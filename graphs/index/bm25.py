"""Lexical retrieval over node texts with bm25s (+ PyStemmer).

Label filtering: one global bm25s index, scored in full for each query, then
restricted to the rows of the requested label (the same effect as bm25s's
``weight_mask`` with 0/1 weights, but without ranking zero-weighted rows into the
top-k). Why not one index per label: statistics (IDF, average length) then stay
those of the whole corpus, so a filtered search ranks a label's nodes exactly as
the unfiltered search would, scores stay comparable across labels, and the index
is stored once. Scoring all rows costs one sparse pass (~ms at 40k documents).

Only documents sharing at least one query term are returned: a zero BM25 score
carries no evidence and would only add noise to hybrid fusion.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import Stemmer

from graphs.errors import ConfigError, IndexCorruptError
from graphs.heap import one_copy, table
from graphs.index.bm25_terms import DocTerms, extend_vocab, score_matrix
from graphs.index.meta import read_index_meta
from graphs.manifest import atomic_write_json, checksum_tree, fsync_dir, fsync_file

__all__ = ["BM25Index"]

# bm25s sets its own logger to DEBUG at import, so "Building index from IDs objects" reached the
# terminal whenever any handler was configured; our progress output says what is being built.
logging.getLogger("bm25s").setLevel(logging.WARNING)

IDS_FILE = "ids.json"
_FORMAT = 1
STEMMER = "english"
STOPWORDS = "en"
"""The tokenisation every node-text index uses (``build``'s defaults; ``graphs.engine`` tokenises the same)."""


#: Past ``4 * SAMPLE`` scored documents ``top_rows`` first keeps those at or above the k-th best of every
#: ``n // SAMPLE``-th score (at most the k-th best of all) instead of partitioning every score.
SAMPLE = 8192


def top_rows(rows: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of ``scores`` (one per row of ``rows``) with their rows, ties at the k-th score going to the
    lower rows: the first k in ``search``'s order (score descending, then row), whatever order they come in.

    Why a sample first: a question that shares a word with most documents scores most of them, and partitioning a
    million scores took about 5 ms of a 1M-node index's 8 ms search; the sample's bound keeps a few thousand."""
    if rows.size <= k:
        return rows, scores
    if rows.size > 4 * SAMPLE and k < SAMPLE // 4:
        sample = scores[:: rows.size // SAMPLE]
        bound = -np.partition(-sample, k - 1)[k - 1]
        keep = np.flatnonzero(scores >= bound)
        rows, scores = rows[keep], scores[keep]
    if rows.size > k:
        kth = -np.partition(-scores, k - 1)[k - 1]  # the k-th best (selecting near the end was 7x slower here)
        above = np.flatnonzero(scores > kth)
        tied = np.flatnonzero(scores == kth)
        if tied.size > k - above.size and np.any(np.diff(rows[tied]) < 0):  # search's rows come ascending
            tied = tied[np.argsort(rows[tied], kind="stable")]
        pick = np.concatenate([above, tied[: k - above.size]])
        rows, scores = rows[pick], scores[pick]
    return rows, scores


class BM25Index:
    """A bm25s index over node texts with per-label filtering."""

    def __init__(
        self,
        keys: list[str],
        labels: list[str],
        retriever: bm25s.BM25,
        *,
        stemmer: str | None,
        stopwords: str | list[str] | None,
    ) -> None:
        self.keys = table(keys)  # graphs.heap: untracked by the garbage collector
        self._positions: Mapping[str, int] | None = None
        self.labels = table(labels)
        self.stemmer_language = stemmer
        self.stopwords = stopwords
        self._retriever = retriever
        #: Each document's term counts (``graphs.index.bm25_terms``): saved with the index for updates; None for
        #: an index opened from disk (an update reads them from the files).
        self.doc_terms: DocTerms | None = None
        self._stemmer = Stemmer.Stemmer(stemmer) if stemmer else None
        # PyStemmer objects are not thread-safe; tokenisation is serialised, scoring is not.
        self._stem_lock = threading.Lock()
        # rows per label in one pass (a comparison of every row per label was quadratic with many labels)
        names = sorted(set(labels))
        code = {label: i for i, label in enumerate(names)}
        codes = np.fromiter((code[label] for label in labels), dtype=np.intp, count=len(labels))
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
        self._label_rows: dict[str, np.ndarray] = {
            label: order[bounds[i] : bounds[i + 1]] for i, label in enumerate(names)
        }

    # -- construction -------------------------------------------------------------
    @classmethod
    def build(
        cls,
        keys: list[str],
        labels: list[str],
        texts: Sequence[str],
        stemmer: str | None = STEMMER,
        stopwords: str | list[str] | None = STOPWORDS,
        *,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> BM25Index:
        if not (len(keys) == len(labels) == len(texts)):
            raise ConfigError(
                f"BM25 build got {len(keys)} keys, {len(labels)} labels and {len(texts)} texts -- they must be aligned"
            )
        if not keys:
            raise ConfigError("BM25 build got no documents -- the SKB has no nodes to index")
        if len(set(keys)) != len(keys):
            raise ConfigError("BM25 build got duplicate keys -- node keys must be unique")
        stem = cls.make_stemmer(stemmer)
        tokens = bm25s.tokenize(list(texts), stopwords=stopwords, stemmer=stem, show_progress=False, return_ids=True)
        return cls.from_terms(list(keys), list(labels), dict(tokens.vocab), DocTerms.from_ids(tokens.ids),
                              stemmer=stemmer, stopwords=stopwords, k1=k1, b=b)

    @classmethod
    def from_terms(
        cls,
        keys: list[str],
        labels: list[str],
        vocab: dict[str, int],
        docs: DocTerms,
        *,
        stemmer: str | None,
        stopwords: str | list[str] | None,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> BM25Index:
        """The index of documents given as term counts over ``vocab`` (term -> id, ids 0..n-1): bm25s's scores
        (``graphs.index.bm25_terms``), its retriever for queries, and the counts kept for updates."""
        retriever = bm25s.BM25(k1=k1, b=b)
        retriever.scores = score_matrix(docs, len(vocab), k1=k1, b=b)
        retriever.nonoccurrence_array = None  # "lucene" has none
        vocab = dict(vocab)
        if "" not in vocab:  # as bm25s's index(): an id for the empty token, past the matrix's columns
            vocab[""] = max(vocab.values(), default=-1) + 1
        retriever.vocab_dict = vocab
        retriever.unique_token_ids_set = set(vocab.values())
        index = cls(list(keys), list(labels), retriever, stemmer=stemmer, stopwords=stopwords)
        index.doc_terms = docs
        return index

    @classmethod
    def patched(cls, parent_dir: Path, keys: list[str], labels: list[str], texts: Sequence[str],
                retokenise: Collection[str]) -> BM25Index | None:
        """The index of ``keys`` built from the parent generation's at ``parent_dir``: the documents of
        ``retokenise`` and of keys the parent lacks are tokenised from ``texts`` (only those positions are
        read), every other document's term counts are the parent's. The scores equal a fresh build's. None
        where the parent keeps no term counts or used other settings: the caller builds it."""
        parent_dir = Path(parent_dir)
        docs = DocTerms.load(parent_dir)
        if docs is None:
            return None
        parent = cls.load(parent_dir)
        old = parent._retriever
        if (old.k1, old.b, old.method) != (1.5, 0.75, "lucene") or len(docs) != len(parent.keys):
            return None
        row_of = {key: i for i, key in enumerate(parent.keys)}
        fresh = [i for i, key in enumerate(keys) if key in retokenise or key not in row_of]
        stem = cls.make_stemmer(parent.stemmer_language)
        tokens = bm25s.tokenize([texts[i] for i in fresh], stopwords=parent.stopwords, stemmer=stem,
                                show_progress=False, return_ids=False) if fresh else []
        vocab, ids = extend_vocab(old.vocab_dict, [list(doc) for doc in tokens])
        both = DocTerms.concat([docs, DocTerms.from_ids(ids)])
        source = np.fromiter((row_of.get(key, -1) for key in keys), dtype=np.int64, count=len(keys))
        source[fresh] = len(docs) + np.arange(len(fresh), dtype=np.int64)
        return cls.from_terms(list(keys), list(labels), vocab, both.take(source), stemmer=parent.stemmer_language,
                              stopwords=parent.stopwords)

    @staticmethod
    def make_stemmer(language: str | None) -> Any:
        if not language:
            return None
        try:
            return Stemmer.Stemmer(language)
        except KeyError as exc:
            raise ConfigError(
                f"unknown stemmer language {language!r} -- use one of {', '.join(Stemmer.algorithms())} or None"
            ) from exc

    # -- queries --------------------------------------------------------------------
    def share_keys(self, keys: tuple[str, ...], positions: Mapping[str, int]) -> bool:
        """Hold ``keys`` and their ``positions`` instead of this index's own copies when they list the same keys in
        the same order (the SKB opened beside it); True when they do (``HNSWIndex.share_keys`` says why)."""
        if keys is not self.keys and keys != self.keys:
            return False
        self.keys, self._positions = keys, positions
        return True

    def key_positions(self) -> Mapping[str, int]:
        """Each key's row (the SKB's dictionary once shared, else made on first use). Read it, never change it."""
        if self._positions is None:
            self._positions = {key: i for i, key in enumerate(self.keys)}
        return self._positions

    def __len__(self) -> int:
        return len(self.keys)

    def label_names(self) -> list[str]:
        return list(self._label_rows)

    def tokenize_query(self, text: str) -> list[str]:
        """The query terms that can match (stemmed, stopwords removed, known to the index)."""
        with self._stem_lock:
            out = bm25s.tokenize(
                [text], stopwords=self.stopwords, stemmer=self._stemmer, show_progress=False, return_ids=False
            )
        terms = out[0] if out else []
        vocab = self._retriever.vocab_dict
        return [t for t in terms if t in vocab]

    def scores(self, text: str) -> np.ndarray:
        """BM25 score of every document for ``text`` (zeros when no query term is known)."""
        terms = self.tokenize_query(text)
        if not terms:
            return np.zeros(len(self.keys), dtype=np.float32)
        return np.asarray(self._retriever.get_scores(terms), dtype=np.float32)

    def search(self, text: str, k: int, label: str | None = None) -> list[tuple[str, float]]:
        """Top-k (key, BM25 score) with score > 0, best first; empty or stopword-only queries give []."""
        if k <= 0 or not isinstance(text, str) or not text.strip():
            return []
        terms = self.tokenize_query(text)
        if not terms:
            return []
        scores = np.asarray(self._retriever.get_scores(terms), dtype=np.float32)
        if label is None:
            rows = np.flatnonzero(scores > 0)
        else:
            members = self._label_rows.get(label)
            if members is None:
                return []
            rows = members[scores[members] > 0]
        if rows.size == 0:
            return []
        rows, sub = top_rows(rows, scores[rows], k)
        # Sort by score desc, then by row for a deterministic order among ties.
        order = np.lexsort((rows, -sub))
        return [(self.keys[int(rows[i])], float(sub[i])) for i in order]

    # -- persistence ----------------------------------------------------------------
    def save(self, dir: Path) -> dict[str, str]:
        """Write into a sibling temp dir, then swap it in; returns {path relative to ``dir``: sha256}."""
        dir = Path(dir)
        dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = dir.parent / f".{dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            self._retriever.save(str(tmp), show_progress=False)
            if self.doc_terms is not None:
                self.doc_terms.save(tmp)
            meta = {
                "format": _FORMAT,
                "stemmer": self.stemmer_language,
                "stopwords": self.stopwords,
                "keys": self.keys,
                "labels": self.labels,
            }
            atomic_write_json(tmp / IDS_FILE, meta, indent=None)
            for path in tmp.iterdir():
                if path.is_file():
                    fsync_file(path)
            fsync_dir(tmp)
            files = checksum_tree(tmp)
            old: Path | None = None
            if dir.exists():
                old = dir.parent / f".{dir.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
                os.replace(dir, old)
            os.replace(tmp, dir)
            fsync_dir(dir.parent)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return files

    @classmethod
    def load(cls, dir: Path, *, checksums: dict[str, str] | None = None) -> BM25Index:
        """Open a saved index; pass ``checksums`` (from the manifest) to verify files first."""
        dir = Path(dir)

        def parse(meta: dict[str, Any]) -> tuple[list[str], list[str], Any, Any]:
            labels = list(one_copy(str(lab) for lab in meta["labels"]))
            return [str(k) for k in meta["keys"]], labels, meta["stemmer"], meta["stopwords"]

        keys, labels, stemmer, stopwords = read_index_meta(dir, IDS_FILE, "BM25 index", checksums, parse)
        try:
            # mapped: the score matrix is file pages that the processes answering on one machine share
            retriever = bm25s.BM25.load(str(dir), show_progress=False, mmap=True)
            for name in ("data", "indices", "indptr"):  # plain views: slicing a np.memmap makes a memmap per slice
                retriever.scores[name] = np.asarray(retriever.scores[name])
        except (OSError, ValueError, KeyError) as exc:
            raise IndexCorruptError(f"BM25 files in {dir} cannot be read ({exc}) -- rebuild with `skb index`") from exc
        num_docs = int(retriever.scores["num_docs"])
        if num_docs != len(keys) or len(labels) != len(keys):
            raise IndexCorruptError(
                f"BM25 index in {dir} holds {num_docs} documents but its id table has {len(keys)} keys and "
                f"{len(labels)} labels -- rebuild with `skb index`"
            )
        return cls(keys, labels, retriever, stemmer=stemmer, stopwords=stopwords)
