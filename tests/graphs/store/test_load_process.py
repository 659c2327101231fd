"""The graph store loaded by a process of its own (``graphs.store.load_process``): what ``skb index`` does while
it makes the vectors. Its errors come back named, a process that dies is reported as such, and a stopped load
leaves nothing running."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from graphs.build import IndexConfig, build_index
from graphs.errors import StoreError
from graphs.skb.compact import COMPACT_DIR
from graphs.store.falkordb_store import FalkorDBStore
from graphs.store.load_process import StoreLoad
from tests.store_fixtures import tiny_skb


def test_a_load_from_compact_files_gives_the_graph_and_its_seconds(tmp_path: Path) -> None:
    build_index(tiny_skb(), tmp_path / "index", IndexConfig(dataset="tiny", embedder="hash:64", store="none"))
    assert (tmp_path / "index" / "skb" / COMPACT_DIR).is_dir()
    seconds = StoreLoad(tmp_path / "index" / "skb", tmp_path / "falkordb").result()
    assert list(seconds) == ["store_load"] and seconds["store_load"] > 0
    with FalkorDBStore(tmp_path / "falkordb") as store:
        rows = store.query("MATCH (n) RETURN n.key AS key ORDER BY key").rows
        edges = store.query("MATCH ()-[r]->() RETURN count(r) AS n").rows
    assert [row[0] for row in rows] == sorted(tiny_skb().nodes)
    assert edges[0][0] == len(tiny_skb().edges)


def test_its_error_comes_back_to_the_build(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="missing"):
        StoreLoad(tmp_path / "missing", tmp_path / "falkordb").result()


def test_a_process_killed_before_it_finished_is_named(tmp_path: Path) -> None:
    load = StoreLoad(tmp_path / "missing", tmp_path / "falkordb")
    os.kill(load._process.pid or 0, signal.SIGKILL)  # still importing: it cannot have answered
    with pytest.raises(StoreError, match=r"ended without finishing \(exit code -9\)"):
        load.result()


def test_a_stopped_load_leaves_no_process(tmp_path: Path) -> None:
    build_index(tiny_skb(), tmp_path / "index", IndexConfig(dataset="tiny", embedder="hash:64", store="none"))
    load = StoreLoad(tmp_path / "index" / "skb", tmp_path / "falkordb")
    load.stop()
    assert not load._process.is_alive() and load._process.exitcode is not None


def test_a_build_that_fails_while_the_store_loads_stops_the_load_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphs.engine.local import LocalEngine

    started: list[StoreLoad] = []
    start = StoreLoad.__init__

    def spawn(self: StoreLoad, skb_dir: Path, data_dir: Path, tables: bool = False) -> None:
        start(self, skb_dir, data_dir, tables)
        started.append(self)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the HNSW stage broke")

    monkeypatch.setattr(StoreLoad, "__init__", spawn)
    monkeypatch.setattr(LocalEngine, "hnsw", broken)
    with pytest.raises(RuntimeError, match="HNSW stage broke"):
        build_index(tiny_skb(), tmp_path / "index", IndexConfig(dataset="tiny", embedder="hash:64"), consume=True)
    assert len(started) == 1 and not started[0]._process.is_alive()
    assert list(tmp_path.iterdir()) == []  # neither the index nor its build directory


def test_the_planners_tables_made_beside_are_the_files_a_build_writes(tmp_path: Path) -> None:
    from graphs.skb.state import STATE_DIR

    build_index(tiny_skb(), tmp_path / "index", IndexConfig(dataset="tiny", embedder="hash:64", store="none"))
    skb_dir = tmp_path / "index" / "skb"
    written = {p.name: p.read_bytes() for p in (skb_dir / STATE_DIR).iterdir()}
    assert written
    for path in (skb_dir / STATE_DIR).iterdir():
        path.unlink()
    seconds = StoreLoad(skb_dir, tmp_path / "falkordb", tables=True).result()
    assert list(seconds) == ["tables", "store_load"]
    assert {p.name: p.read_bytes() for p in (skb_dir / STATE_DIR).iterdir()} == written
