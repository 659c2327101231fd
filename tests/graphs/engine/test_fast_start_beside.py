"""An engine that asks for it (an update's) has the build write the fast-start files (the compact graph and
the stored tables) on a thread while it embeds the node texts: the files are those of the build that writes
them first, and a stage that fails on either side leaves no temp directory and the previous index serving."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import graphs.build
from graphs.build import IndexConfig, build_index
from graphs.engine import LocalEngine
from graphs.manifest import Manifest
from tests.store_fixtures import tiny_skb

CONFIG = IndexConfig(dataset="tiny", store="none")  # the real MiniLM encoder


class Beside(LocalEngine):
    beside_embedding = True


def _files(index: Path) -> dict[str, bytes]:
    return {p.relative_to(index).as_posix(): p.read_bytes() for p in sorted((index / "skb").rglob("*")) if p.is_file()}


def test_written_beside_the_embedding_the_files_are_those_written_before_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    write = graphs.build.write_fast_start

    def recorded(*args: Any) -> None:
        threads.append(threading.current_thread().name)
        write(*args)

    monkeypatch.setattr(graphs.build, "write_fast_start", recorded)
    beside = build_index(tiny_skb(), tmp_path / "beside", CONFIG, engine=Beside())
    build_index(tiny_skb(), tmp_path / "sequential", CONFIG)  # the default engine: one stage after the other
    assert threads[0].startswith("fast_start") and threads[1] == threading.main_thread().name
    assert _files(tmp_path / "beside") == _files(tmp_path / "sequential")
    assert any(name.startswith("skb/state/") for name in _files(tmp_path / "beside"))
    assert list(beside.timings_s)[:3] == ["write_skb", "fast_start", "texts"] and beside.timings_s["fast_start"] > 0


def test_beside_the_fast_start_files_the_encoder_runs_a_thread_fewer(tmp_path: Path) -> None:
    from graphs.embedding.onnx_runtime import _BATCH_THREADS

    seen: list[int | None] = []

    class Recording(LocalEngine):
        def embed(self, *args: Any, **kwargs: Any) -> Any:
            seen.append(_BATCH_THREADS.get())
            return super().embed(*args, **kwargs)

    class RecordingBeside(Recording):
        beside_embedding = True

    build_index(tiny_skb(), tmp_path / "beside", CONFIG, engine=RecordingBeside())
    build_index(tiny_skb(), tmp_path / "sequential", CONFIG, engine=Recording())
    assert seen == [max(1, len(os.sched_getaffinity(0)) - 1), None]


def test_an_embedding_that_fails_while_the_files_are_written_leaves_the_previous_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "index"
    build_index(tiny_skb(), index, CONFIG)
    before = Manifest.read(index).generation
    started, failed, finished = threading.Event(), threading.Event(), threading.Event()
    write = graphs.build.write_fast_start

    def slow(*args: Any) -> None:
        started.set()
        assert failed.wait(10)
        time.sleep(0.2)
        try:
            write(*args)  # still writing into the temp directory after the embedding raised
        finally:
            finished.set()

    class Failing(Beside):
        def embed(self, *args: Any, **kwargs: Any) -> Any:
            assert started.wait(10)
            failed.set()
            raise RuntimeError("encoder died")

    monkeypatch.setattr(graphs.build, "write_fast_start", slow)
    with pytest.raises(RuntimeError, match="encoder died"):
        build_index(tiny_skb(), index, CONFIG, engine=Failing())
    assert finished.is_set()  # the build waited for the writer before it removed the temp directory
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]  # gone after the writer stopped
    Manifest.read(index).verify(index)
    assert Manifest.read(index).generation == before


def test_a_failure_of_the_fast_start_files_is_the_builds_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(graphs.build, "write_fast_start", broken)
    with pytest.raises(OSError, match="disk full"):
        build_index(tiny_skb(), tmp_path / "index", CONFIG, engine=Beside())
    assert not [p.name for p in tmp_path.iterdir() if p.name != ".skb-cache"]
