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
from dataclasses import dataclass
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


class _LostShard(Exception):
    """A shard whose digests were read could not be read for its vectors (removed by a concurrent compaction,
    or damaged)."""

    def __init__(self, part: int) -> None:
        super().__init__(part)
        self.part = part


@dataclass
class _Part:
    """Rows [start, start + count) of the cache: a shard's (its digests, its file, its vectors once read) or
    vectors embedded in this process."""

    start: int
    count: int
    keys: list[bytes]
    path: Path | None
    vectors: np.ndarray | None = None


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

    In memory the index holds every shard's digests, and a shard's vectors are read when
    a text of it is first looked up: an update that looks up a few hundred changed
    texts, mostly new, reads the digests (a few MB) instead of every cached vector
    (hundreds of MB). New vectors are kept as parts of their own, so a lookup after a
    miss copies nothing.
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
        self._index: dict[bytes, int] | None = None  # digest -> row; a part holds rows [start, start + count)
        self._parts: list[_Part] = []
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

    @staticmethod
    def _read_keys(shard: Path) -> tuple[list[bytes], int] | None:
        """(digests, vector dimension) of one shard, read without its vectors; None when gone or damaged."""
        try:
            with np.load(shard, allow_pickle=False) as data:
                keys = data["keys"].tolist()
                with data.zip.open("vectors.npy") as fh:
                    version = np.lib.format.read_magic(fh)
                    header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                              else np.lib.format.read_array_header_2_0)
                    shape = header(fh)[0]
        except (OSError, ValueError, KeyError, EOFError):
            return None
        return (keys, int(shape[1])) if len(shape) == 2 and shape[0] == len(keys) else None

    def _load(self) -> None:
        if self._index is not None:
            return
        index: dict[bytes, int] = {}
        parts: list[_Part] = []
        rows = 0
        dim: int | None = None
        for shard in self._shards():
            read = self._read_keys(shard)
            if read is None or (dim is not None and read[1] != dim):
                continue
            keys, dim = read
            for i, key in enumerate(keys):
                if key not in index:
                    index[key] = rows + i
            parts.append(_Part(rows, len(keys), keys, shard))
            rows += len(keys)
        if dim is not None and dim != self.inner.dim:
            raise SKBError(f"embedding cache at {self.root} holds {dim}-dimensional vectors but "
                           f"{self.model_name!r} now gives {self.inner.dim} -- delete the cache directory")
        self._index, self._parts, self._rows = index, parts, rows

    def _append(self, vecs: np.ndarray) -> int:
        """Add rows as a part of their own (nothing copied); returns the first new row."""
        first = self._rows
        self._parts.append(_Part(first, len(vecs), [], None, vecs))
        self._rows += len(vecs)
        return first

    def _gather(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of ``rows``, reading the shards they are in; ``_LostShard`` where one cannot be read."""
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        if not len(rows):
            return out
        starts = np.fromiter((part.start for part in self._parts), dtype=np.int64, count=len(self._parts))
        which = np.searchsorted(starts, rows, side="right") - 1
        for p in np.unique(which).tolist():
            part = self._parts[p]
            if part.vectors is None:
                read = self._read_shard(part.path) if part.path is not None else None
                if read is None or read[1].shape != (part.count, self.dim):
                    raise _LostShard(p)
                part.vectors = read[1]
            at = which == p
            out[at] = part.vectors[rows[at] - part.start]
        return out

    def _forget(self, p: int) -> None:
        """Drop a shard that could not be read from the index: its texts are embedded again."""
        assert self._index is not None
        part = self._parts[p]
        for i, key in enumerate(part.keys):
            if self._index.get(key) == part.start + i:
                del self._index[key]

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
            digests = [self._digest(self.identity, t) for t in items]
            while True:
                found = [(i, self._index.get(d)) for i, d in enumerate(digests)]
                hits = [(i, row) for i, row in found if row is not None]
                rows = np.fromiter((row for _, row in hits), dtype=np.int64, count=len(hits))
                try:
                    vectors = self._gather(rows)
                    break
                except _LostShard as lost:
                    self._forget(lost.part)
            self.hits += len(hits)
        return [i for i, _ in hits], vectors

    def embed(self, texts: Sequence[str], *, progress: Progress | None = None) -> np.ndarray:
        items = _check_texts(texts)
        while True:
            try:
                return self._embed(items, progress)
            except _LostShard as lost:
                with self._lock:
                    self._forget(lost.part)

    def _embed(self, items: list[str], progress: Progress | None) -> np.ndarray:
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
            rows = np.fromiter((self._index[d] for d in digests), dtype=np.int64, count=len(digests))
            result = self._gather(rows)
            self.hits += done
        if sum(_size(p) < self.SMALL_SHARD_BYTES for p in self._shards()) > self.COMPACT_AT:
            self.compact()
        return np.ascontiguousarray(result, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        """Queries bypass the cache: they rarely repeat and must not grow it."""
        return self.inner.embed_query(text)
