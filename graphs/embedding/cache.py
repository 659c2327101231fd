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


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:80] or "model"


class CachedEmbedder:
    """Wraps an embedder with an on-disk cache keyed by sha256(model identity, text); the identity is the
    hash of the model's files where the embedder knows it (``content_sha256``: a tuned encoder), so a model
    swapped under the same name never serves another's vectors, else its name.

    Why shards: a rebuild of a 40k-node SKB should re-embed only the texts that
    changed, and writing one file per text would mean 40k files. Each call that
    misses appends one ``.npz`` shard (hex digests + vectors) written atomically;
    concurrent writers never touch the same file. When shards pile up they are
    merged into one.
    """

    SHARD_ROWS = 4096
    COMPACT_AT = 32

    def __init__(self, inner: Embedder, cache_dir: Path) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        content = getattr(inner, "content_sha256", None)
        #: The key the vectors are cached under: the content hash when the embedder has one, else its name.
        self.identity = f"{inner.model_name}#{content}" if content else inner.model_name
        self.root = Path(cache_dir) / (_slug(inner.model_name) + (f"-{content[:16]}" if content else ""))
        self._lock = threading.Lock()
        self._index: dict[bytes, int] | None = None
        self._vectors: list[np.ndarray] = []
        self._matrix: np.ndarray | None = None
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

    def _load(self) -> None:
        if self._index is not None:
            return
        index: dict[bytes, int] = {}
        vectors: list[np.ndarray] = []
        rows = 0
        for shard in self._shards():
            try:
                with np.load(shard, allow_pickle=False) as data:
                    keys = data["keys"]
                    vecs = np.asarray(data["vectors"], dtype=np.float32)
            except (OSError, ValueError, KeyError, EOFError):
                continue  # removed by a concurrent compaction, or damaged: it is only a cache
            if vecs.ndim != 2 or len(keys) != len(vecs):
                continue
            for i, key in enumerate(keys.tolist()):
                if key not in index:
                    index[key] = rows + i
            vectors.append(vecs)
            rows += len(vecs)
        self._index = index
        self._vectors = vectors
        self._matrix = None

    def _all(self) -> np.ndarray:
        if self._matrix is None:
            self._matrix = (
                np.concatenate(self._vectors, axis=0) if self._vectors else np.zeros((0, 0), dtype=np.float32)
            )
            self._vectors = [self._matrix] if self._vectors else []
        return self._matrix

    def _write_shard(self, keys: list[bytes], vectors: np.ndarray) -> None:
        buf = io.BytesIO()
        np.savez(buf, keys=np.asarray(keys, dtype="S64"), vectors=np.asarray(vectors, dtype=np.float32))
        atomic_write_bytes(self.root / f"shard-{uuid.uuid4().hex}.npz", buf.getvalue())

    def compact(self) -> None:
        """Merge all shards into one (keeps the newest vector per text)."""
        with self._lock:
            shards = self._shards()
            if len(shards) <= 1:
                return
            self._index = None
            self._load()
            assert self._index is not None
            matrix = self._all()
            keys = list(self._index)
            rows = np.fromiter(self._index.values(), dtype=np.int64, count=len(keys))
            self._write_shard(keys, matrix[rows])
            for shard in shards:
                shard.unlink(missing_ok=True)
            self._index = None

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
                base = sum(len(v) for v in self._vectors)
                self._vectors.append(vecs)
                self._matrix = None
                for i, (digest, _) in enumerate(batch):
                    self._index[digest] = base + i
                if progress is not None:
                    progress(done + min(start + len(batch), len(todo)), len(items))
            if not items:
                return np.zeros((0, self.dim), dtype=np.float32)
            matrix = self._all()
            if matrix.shape[1] != self.inner.dim:
                raise SKBError(
                    f"embedding cache at {self.root} holds {matrix.shape[1]}-dimensional vectors but "
                    f"{model!r} now gives {self.inner.dim} -- delete the cache directory"
                )
            rows = np.fromiter((self._index[d] for d in digests), dtype=np.int64, count=len(digests))
            result = matrix[rows]
        if len(self._shards()) > self.COMPACT_AT:
            self.compact()
        return np.ascontiguousarray(result, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        """Queries bypass the cache: they rarely repeat and must not grow it."""
        return self.inner.embed_query(text)
