"""The embedding cache as an update meets it: a large cache, a few hundred new texts scattered among its hits.

``embed_all`` takes the cached vectors first and embeds only the misses (one call, one shard), and compaction
merges the small shards without rewriting the large one. The embedder is the hash embedder (no model).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphs.embedding.base import embed_all
from graphs.embedding.cache import CachedEmbedder
from graphs.embedding.hashing import HashEmbedder
from tests.graphs.embedding.test_embedder import CountingEmbedder


def _counting() -> CountingEmbedder:
    return CountingEmbedder(HashEmbedder(32))


def _shards(root: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in root.rglob("shard-*.npz")}


def test_a_build_after_a_few_changes_embeds_only_them_in_one_call(tmp_path: Path) -> None:
    old = [f"term {i} with a longer tail of words {'x' * (i % 37)}" for i in range(3000)]
    embed_all(CachedEmbedder(_counting(), tmp_path), old, chunk=256)
    before = _shards(tmp_path)
    new = [f"changed {i}" for i in range(5)]
    texts = old[:1000] + [new[0]] + old[1000:2000] + new[1:3] + old[2000:] + new[3:]
    counting = _counting()
    cache = CachedEmbedder(counting, tmp_path)
    seen: list[tuple[int, int]] = []
    got = embed_all(cache, texts, chunk=256, progress=lambda d, t: seen.append((d, t)))
    assert counting.calls == [sorted(new, key=len)]  # one call, misses only: not one per chunk holding a miss
    assert len(_shards(tmp_path)) == len(before) + 1
    assert cache.hits == 3000 and cache.misses == 5
    np.testing.assert_allclose(got, embed_all(HashEmbedder(32), texts), atol=1e-6)
    assert seen[0] == (3000, 3005) and seen[-1] == (3005, 3005)


def test_compaction_merges_the_small_shards_and_leaves_the_large_one(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cache = CachedEmbedder(_counting(), tmp_path)
    cache.embed([f"base {i}" for i in range(2000)])  # one large shard
    (large,) = _shards(tmp_path).items()
    monkeypatch.setattr(CachedEmbedder, "SMALL_SHARD_BYTES", (tmp_path / cache.root.name / large[0]).stat().st_size)
    monkeypatch.setattr(CachedEmbedder, "COMPACT_AT", 3)
    singles = [f"single {i}" for i in range(4)]
    for text in singles:
        cache.embed([text])  # the fourth small shard passes COMPACT_AT: they are merged
    shards = _shards(tmp_path)
    assert len(shards) == 2 and shards[large[0]] == large[1]  # the large shard was not rewritten
    counting = _counting()
    again = CachedEmbedder(counting, tmp_path).embed([*singles, "base 7"])
    assert counting.calls == []
    np.testing.assert_allclose(again, HashEmbedder(32).embed([*singles, "base 7"]), atol=1e-6)


def test_a_lookup_reads_only_the_shards_it_hits_and_survives_a_lost_one(tmp_path: Path) -> None:
    first = [f"first {i}" for i in range(50)]
    second = [f"second {i}" for i in range(50)]
    CachedEmbedder(_counting(), tmp_path).embed(first)
    CachedEmbedder(_counting(), tmp_path).embed(second)
    cache = CachedEmbedder(_counting(), tmp_path)
    positions, vectors = cache.split_cached(["new text", first[3], first[7]])
    assert positions == [1, 2]
    np.testing.assert_allclose(vectors, HashEmbedder(32).embed([first[3], first[7]]), atol=1e-6)
    assert sum(part.vectors is not None for part in cache._parts) == 1  # the other shard's vectors stay on disk
    for shard in tmp_path.rglob("shard-*.npz"):  # the unread shard goes away (a concurrent compaction)
        keys = CachedEmbedder._read_keys(shard)
        if keys is not None and keys[0][0] == cache._digest(cache.identity, second[0]):
            shard.unlink()
    counting = cache.inner
    got = cache.embed([second[1], first[3]])  # the lost shard's text is embedded again, the other served
    assert counting.calls == [[second[1]]]  # type: ignore[attr-defined]
    np.testing.assert_allclose(got, HashEmbedder(32).embed([second[1], first[3]]), atol=1e-6)
