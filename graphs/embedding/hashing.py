"""A fast deterministic embedder for scale runs: signed feature hashing of words, no model.

Why it exists: a scale run measures everything *but* the model -- loading, the graph store, BM25,
HNSW, the stored statistics, query latency -- at sizes (a million nodes) where a neural encoder on
two cores would take most of a day and hide every other cost. Feature hashing costs microseconds
per text, needs no download, and still puts texts that share words near each other, so HNSW graphs
and dense search behave like real ones (neighbours exist, recall can be measured).

It is never a default: only the explicit spec ``hash[:<dim>]`` (``skb index --embedder hash:64``)
selects it, its model name says what it is, and an index built with it records that in its manifest,
so queries are embedded the same way. Vectors are the same on every machine and run: tokens are
hashed with blake2b (Python's ``hash`` is salted per process).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from graphs.errors import ConfigError

HASH_NAME = "feature-hash"
DEFAULT_HASH_DIM = 64
_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    """Texts -> L2-normalised sums of signed one-hot word buckets (float32, ``dim`` columns)."""

    def __init__(self, dim: int = DEFAULT_HASH_DIM) -> None:
        if not 8 <= dim <= 4096:
            raise ConfigError(f"hash embedder dimension must be in [8, 4096], got {dim}")
        self._dim = int(dim)
        self.model_name = f"{HASH_NAME}-{self._dim}"
        self._slots: dict[str, tuple[int, float]] = {}  # word -> (bucket, sign); words repeat across texts

    @property
    def dim(self) -> int:
        return self._dim

    def _slot(self, word: str) -> tuple[int, float]:
        slot = self._slots.get(word)
        if slot is None:
            digest = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
            slot = (digest % self._dim, 1.0 if (digest >> 63) & 1 else -1.0)
            if len(self._slots) < 2_000_000:  # bounded: a corpus with more distinct words just rehashes
                self._slots[word] = slot
        return slot

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise ConfigError("embed() takes a sequence of texts, not a single string -- use embed_query() for one text")
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        for i, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                col, sign = self._slot(word)
                rows.append(i)
                cols.append(col)
                vals.append(sign)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        if rows:
            np.add.at(out, (np.asarray(rows), np.asarray(cols)), np.asarray(vals, dtype=np.float32))
        empty = ~out.any(axis=1)
        out[empty, 0] = 1.0  # a text with no word still gets a unit vector (the same for all of them)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.ascontiguousarray(out / norms, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


def hash_from_spec(spec: str, options: list[str]) -> HashEmbedder:
    """``hash`` or ``hash:<dim>``."""
    if not options:
        return HashEmbedder()
    if len(options) == 1 and options[0].strip().isdigit():
        return HashEmbedder(int(options[0]))
    raise ConfigError(f"bad embedder spec {spec!r} -- use 'hash' or 'hash:<dim>' (e.g. hash:64; scale runs only)")
