"""``IndexBundle.pinned``: one build per question, checked once instead of on every access.

Without a pin each access to ``bundle.skb`` / ``hnsw`` / ``bm25`` / ``manifest`` stats the manifest
(~35,000 ``stat`` calls per 28 HPO questions). Inside a pin the build is checked on entry only, the
pin follows the question into LangChain's worker threads (context copy), and a rebuild followed by
another caller midway makes the pinned question fail clearly instead of mixing two builds.
"""

from __future__ import annotations

import contextvars
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import graphs.bundle as bundle_module
from graphs.bundle import IndexBundle
from graphs.errors import IndexMismatchError
from graphs.skb.model import SKB

pytestmark = pytest.mark.integration


def _count_stats(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = os.stat

    def counting(path: object, *args: object, **kwargs: object) -> os.stat_result:
        seen.append(str(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bundle_module.os, "stat", counting)
    return seen


def test_a_pinned_question_stats_the_manifest_once(hpo_index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with IndexBundle.open(hpo_index_dir) as bundle:
        stats = _count_stats(monkeypatch)
        for _ in range(50):
            assert bundle.skb.nodes and bundle.hnsw is not None and bundle.bm25 is not None
        unpinned = len(stats)
        stats.clear()
        with bundle.pinned():
            for _ in range(50):
                assert bundle.skb.nodes and bundle.hnsw is not None and bundle.bm25 is not None

            def in_worker() -> int:
                return len(bundle.skb.nodes)

            ctx = contextvars.copy_context()  # what LangChain's executor does for each tool call
            with ThreadPoolExecutor(2) as pool:
                assert pool.submit(ctx.run, in_worker).result() == len(bundle.skb.nodes)
        assert unpinned >= 150
        assert len(stats) == 1, stats  # the check on entry only
        stats.clear()
        _ = bundle.skb  # outside the pin, every access checks again
        assert len(stats) == 1


def test_a_rebuild_followed_midway_fails_the_pinned_question_rather_than_mixing(hpo_index_dir: Path) -> None:
    with IndexBundle.open(hpo_index_dir) as bundle, bundle.pinned():
        old = bundle.skb
        parts = bundle._parts
        # what `_reload` does when another caller follows a rebuild: all parts replaced together
        bundle._parts = bundle_module._Parts(parts.manifest, SKB("rebuilt"), parts.hnsw, parts.bm25, parts.stamp)
        try:
            with pytest.raises(IndexMismatchError, match="rebuilt while this question ran"):
                _ = bundle.hnsw
        finally:
            bundle._parts = parts
        assert bundle.skb is old
