"""A content-hash cache of embeddings on disk, in front of any embedder.

Why: a rebuild should re-embed only the texts that changed; vectors are keyed by sha256(model name,
text), so a changed model never serves another model's vectors.
"""

from __future__ import annotations

import hashlib
import io
import re
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from graphs.embedding.base import Embedder, Progress, _check_texts, l2_normalise
from graphs.errors import SKBError
from graphs.manifest import atomic_write_bytes


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:80] or "model"


class CachedEmbedder:
    """Wraps an embedder with an on-disk cache keyed by sha256(model identity, text); the identity is the
    hash of the model's files where the embedder knows it (``content_sha256``: a tuned encoder), so a model
    swapped under the same name never serves another's vectors, else its name.

    Why shards: a rebuild of a 40k-node SKB should re-embed only the texts that
    changed, and writing one file per text would mean 40k files. Each call that
    misses appends one ``.npz`` shard (hex digests + vectors) written atomically;
    concurrent writers never touch the same file. When small shards pile up they
    are merged into one; the large ones are never rewritten (an update that
    embeds a few hundred texts would otherwise rewrite the whole cache).

    In memory the vectors sit in one matrix grown in place (``_append``): a lookup
    after each miss must not copy every cached vector again.
    """

    SHARD_ROWS = 4096
    COMPACT_AT = 32
    #: Shards smaller than this (bytes) are merged by ``compact``; larger ones are left as they are.
    SMALL_SHARD_BYTES = 4 << 20

    def __init__(self, inner: Embedder, cache_dir: Path) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        content = getattr(inner, "content_sha256", None)
        #: The key the vectors are cached under: the content hash when the embedder has one, else its name.
        self.identity = f"{inner.model_name}#{content}" if content else inner.model_name
        self.root = Path(cache_dir) / (_slug(inner.model_name) + (f"-{content[:16]}" if content else ""))
        self._lock = threading.Lock()
        self._index: dict[bytes, int] | None = None
        self._matrix: np.ndarray | None = None  # rows [0, _rows) hold vectors; the rest is room to grow
        self._rows = 0
        self.hits = 0
        self.misses = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    @staticmethod
    def _digest(model_name: str, text: str) -> bytes:
        return hashlib.sha256(model_name.encode("utf-8") + b"\x00" + text.encode("utf-8")).hexdigest().encode("ascii")

    def _shards(self) -> list[Path]:
        return sorted(self.root.glob("shard-*.npz")) if self.root.is_dir() else []

    @staticmethod
    def _read_shard(shard: Path) -> tuple[list[bytes], np.ndarray] | None:
        """(digests, vectors) of one shard; None when it is gone (a concurrent compaction) or damaged: it is only
        a cache."""
        try:
            with np.load(shard, allow_pickle=False) as data:
                keys, vecs = data["keys"].tolist(), np.asarray(data["vectors"], dtype=np.float32)
        except (OSError, ValueError, KeyError, EOFError):
            return None
        return (keys, vecs) if vecs.ndim == 2 and len(keys) == len(vecs) else None

    def _load(self) -> None:
        if self._index is not None:
            return
        index: dict[bytes, int] = {}
        vectors: list[np.ndarray] = []
        rows = 0
        for shard in self._shards():
            read = self._read_shard(shard)
            if read is None or (vectors and read[1].shape[1] != vectors[0].shape[1]):
                continue
            keys, vecs = read
            for i, key in enumerate(keys):
                if key not in index:
                    index[key] = rows + i
            vectors.append(vecs)
            rows += len(vecs)
        self._index = index
        self._matrix = np.concatenate(vectors, axis=0) if vectors else None
        self._rows = rows
        if self._matrix is not None and self._matrix.shape[1] != self.inner.dim:
            self._index = None
            raise SKBError(f"embedding cache at {self.root} holds {self._matrix.shape[1]}-dimensional vectors but "
                           f"{self.model_name!r} now gives {self.inner.dim} -- delete the cache directory")

    def _append(self, vecs: np.ndarray) -> int:
        """Add rows to the in-memory matrix (growing it by a quarter when full); returns the first new row."""
        first, end = self._rows, self._rows + len(vecs)
        if self._matrix is None or end > len(self._matrix):
            kept = self._matrix[:first] if self._matrix is not None and first else None
            grown = np.empty((max(end, first + first // 4, 1024), vecs.shape[1]), dtype=np.float32)
            if kept is not None:
                grown[:first] = kept
            self._matrix = grown
        self._matrix[first:end] = vecs
        self._rows = end
        return first

    def _all(self) -> np.ndarray:
        if self._matrix is None:
            return np.zeros((0, 0), dtype=np.float32)
        return self._matrix[: self._rows]

    def _write_shard(self, keys: list[bytes], vectors: np.ndarray) -> None:
        buf = io.BytesIO()
        np.savez(buf, keys=np.asarray(keys, dtype="S64"), vectors=np.asarray(vectors, dtype=np.float32))
        atomic_write_bytes(self.root / f"shard-{uuid.uuid4().hex}.npz", buf.getvalue())

    def compact(self) -> None:
        """Merge the small shards into one (the large ones stay as they are; every vector is kept)."""
        with self._lock:
            small = [p for p in self._shards() if _size(p) < self.SMALL_SHARD_BYTES]
            if len(small) <= 1:
                return
            merged: dict[bytes, np.ndarray] = {}
            for shard in small:
                read = self._read_shard(shard)
                if read is not None:
                    merged.update(zip(*read))
            if merged:
                self._write_shard(list(merged), np.stack(list(merged.values())))
            for shard in small:
                shard.unlink(missing_ok=True)

    def split_cached(self, texts: Sequence[str]) -> tuple[list[int], np.ndarray]:
        """(positions of ``texts`` whose vectors are cached, those vectors): ``embed_all`` embeds only the rest,
        in few calls, instead of one call (and one shard) per chunk that holds a single miss."""
        items = _check_texts(texts)
        with self._lock:
            self._load()
            assert self._index is not None
            found = [(i, self._index.get(self._digest(self.identity, t))) for i, t in enumerate(items)]
            hits = [(i, row) for i, row in found if row is not None]
            self.hits += len(hits)
            rows = np.fromiter((row for _, row in hits), dtype=np.int64, count=len(hits))
            vectors = self._all()[rows] if len(hits) else np.zeros((0, self.dim), dtype=np.float32)
        return [i for i, _ in hits], np.asarray(vectors, dtype=np.float32)

    def embed(self, texts: Sequence[str], *, progress: Progress | None = None) -> np.ndarray:
        items = _check_texts(texts)
        with self._lock:
            self._load()
            assert self._index is not None
            model = self.model_name
            digests = [self._digest(self.identity, t) for t in items]
            missing: dict[bytes, str] = {}
            for digest, text in zip(digests, items, strict=True):
                if digest not in self._index and digest not in missing:
                    missing[digest] = text
            todo = list(missing.items())
            done = len(items) - len(todo)
            self.hits += len(items) - len(todo)
            self.misses += len(todo)
            if progress is not None and done:
                progress(done, len(items))
            for start in range(0, len(todo), self.SHARD_ROWS):
                batch = todo[start : start + self.SHARD_ROWS]
                vecs = l2_normalise(self.inner.embed([text for _, text in batch]))
                if vecs.shape != (len(batch), self.inner.dim):
                    raise SKBError(
                        f"embedder {model!r} returned shape {vecs.shape} for {len(batch)} texts, "
                        f"expected ({len(batch)}, {self.inner.dim})"
                    )
                self._write_shard([d for d, _ in batch], vecs)
                base = self._append(vecs)
                for i, (digest, _) in enumerate(batch):
                    self._index[digest] = base + i
                if progress is not None:
                    progress(done + min(start + len(batch), len(todo)), len(items))
            if not items:
                return np.zeros((0, self.dim), dtype=np.float32)
            matrix = self._all()
            rows = np.fromiter((self._index[d] for d in digests), dtype=np.int64, count=len(digests))
            result = matrix[rows]
        if sum(_size(p) < self.SMALL_SHARD_BYTES for p in self._shards()) > self.COMPACT_AT:
            self.compact()
        return np.ascontiguousarray(result, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        """Queries bypass the cache: they rarely repeat and must not grow it."""
        return self.inner.embed_query(text)
